"""Two α that one scoring name would file alike (QA re-verification, new problem 1): 0.3
and 0.3000001 are both ``alpha_0.3``, so their figures would be merged into one scoring,
reported and gated under one name; they are refused, naming both, wherever α is set, and
the ``Next:`` line repeats each setting exactly, never one option twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.alpha import alpha_scoring, name_clash
from auditor.batch.manifest import _check_value
from auditor.cli import cli
from auditor.cli._next import check_command
from auditor.config import AuditConfig
from auditor.errors import InputError


@pytest.mark.parametrize(("alphas", "clash"), [
    ((0.3, 0.3000001), (0.3, 0.3000001)),             # both alpha_0.3
    ((0.5, 0.1234567, 0.12345671), (0.1234567, 0.12345671)),  # both alpha_0.123457
    ((0.00001, 0.000010000001), (0.00001, 0.000010000001)),   # both alpha_0.00001
    ((0.9999999, 1.0), (0.9999999, 1.0)),             # both alpha_1
    ((0.3, 0.300001), None),                          # alpha_0.3 and alpha_0.300001: told apart
    ((0.3, 0.3), None),                               # one value twice: one scoring, nothing lost
    ((), None),
])  # fmt: skip
def test_two_alphas_one_name_is_a_clash_naming_both(alphas, clash):
    said = name_clash(alphas)
    if clash is None:
        assert said is None
        return
    assert said is not None and said.startswith(f"{clash[0]!r} and {clash[1]!r} both name the scoring "
                                                f"{alpha_scoring(clash[0])} ")
    assert alpha_scoring(clash[0]) == alpha_scoring(clash[1])


def test_a_library_caller_and_a_manifest_cell_are_refused_too():
    with pytest.raises(InputError, match=r"^alphas 0\.3 and 0\.3000001 both name the scoring alpha_0\.3 "):
        AuditConfig(model=Path("m.npy"), alphas=(0.3, 0.3000001))
    with pytest.raises(ValueError, match=r"^0\.3 and 0\.3000001 both name the scoring alpha_0\.3 "):
        _check_value("alphas", (0.3, 0.3000001))
    _check_value("alphas", (0.3, 0.300001))  # distinct names: no clash


@pytest.mark.parametrize("command", ["check", "batch"])
def test_the_option_twice_with_one_name_is_a_usage_error(tmp_path: Path, command: str, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.csv").write_text("model\nm.npy\n")
    args = ["m.npy", "--interactions", "log.parquet"] if command == "check" else ["m.csv", "-o", "r.parquet"]
    result = CliRunner().invoke(cli, [command, *args, "--alpha", "0.3", "--alpha", "0.3000001"])
    assert result.exit_code == 2, result.output
    assert "Error: --alpha 0.3 and 0.3000001 both name the scoring alpha_0.3 (a scoring's α is named to six " \
           "significant digits): give one of them" in result.output
    assert not (tmp_path / "r.parquet").exists()


def test_next_repeats_each_setting_exactly_and_once():
    settings = {"alphas": (0.1234567, 0.3, 0.00001), "lr": None, "accuracy_tolerance": 0.9046, "head_mass": 0.25}
    line = check_command(Path("m.pt"), settings)
    # 0.1234567 as g writes it (0.123457) would audit another α; 0.3 and 1e-05 read as before
    assert line == ("popaudit check m.pt --alpha 0.1234567 --alpha 0.3 --alpha 1e-05 --accuracy-tolerance 0.9046 "
                    "--head-mass 0.25")

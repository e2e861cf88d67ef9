"""check of a `popaudit mitigate` output knows it is one (plugins QA F8): the sidecar
beside it describes the file, so the report says which α it carries, and the advice
rescales the original once (α multiplied) instead of chaining a second rescaling whose
accuracy tolerance would be measured against an already rescaled baseline."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
from click.testing import CliRunner

from auditor.alpha import scoring_alpha
from auditor.cli import cli
from auditor.config import DEFAULT_ALPHAS
from auditor.loading.mitigated import read_rescaled, sidecar_path
from test_mitigate_auto import _history_model


def _run(*args: Any) -> None:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 0, result.output


def test_check_of_a_mitigate_output_says_so_and_advises_the_original(tmp_path: Path, monkeypatch: Any) -> None:
    _history_model(tmp_path)
    monkeypatch.chdir(tmp_path)
    _run("mitigate", "items.npy", "--alpha", "0.5", "-o", "out.npy", "-q")
    found = read_rescaled(Path("out.npy"))
    assert found is not None and found.alpha == 0.5 and found.original == "items.npy"
    assert read_rescaled(Path("items.npy")) is None  # no sidecar beside the original
    _run("check", "out.npy", "--interactions", "train.parquet", "--holdout", "test.parquet", "--accuracy-tolerance",
         "0.01", "--no-probes", "-q", "--json", "r.json")
    report = json.loads(Path("r.json").read_text())
    assert report["inputs"]["rescaled_alpha"] == 0.5 and report["inputs"]["rescaled_from"] == "items.npy"
    assert any("out.npy is a popaudit mitigate output" in w and "carries alpha 0.5" in w for w in report["warnings"])
    assert report["accuracy"]["recommended"] is None  # a mitigate output's audit recommends nothing (QA9 F1)
    recommended = report["accuracy"]["picked_on_output"]
    advice = " ".join(report["verdict"]["recommendations"])
    assert "`popaudit mitigate" not in advice  # no second rescaling of the output quoted
    if recommended not in (None, "dot"):
        combined = 0.5 * (scoring_alpha(recommended) or 0.0)
        said = re.search(r"audit the original table \(items.npy\) with ((?:--alpha \S+ )+)", advice)
        if combined == 0 or combined in DEFAULT_ALPHAS:  # the default grid holds it: the audit auto repeats
            assert said is None and "audit the original table (items.npy) with the default α grid" in advice
        else:  # the combined alpha beside auto's grid, all passed (--alpha replaces the grid: QA accuracy F3)
            assert said is not None and said.group(1).split()[1::2] == [f"{a:g}" for a in (combined, *DEFAULT_ALPHAS)]
        # the combined alpha is audited, never recommended (plugins QA verify, F8 nit): the
        # original's audit decides, and mitigate --alpha auto keeps the tolerance asked
        assert re.search(r"mitigate the original with --alpha [0-9]", advice) is None, advice
        assert "that audit decides what to serve" in advice
        assert f"serve with {recommended}" not in advice  # the output's own pick is no recommendation
        assert f"the trade-off picks {recommended}, which is no recommendation" in advice
        assert "--alpha auto, the same holdout and --accuracy-tolerance 0.01" in advice


def test_a_file_the_sidecar_does_not_describe_is_not_an_output(tmp_path: Path) -> None:
    np.save(tmp_path / "items.npy", np.eye(3, dtype=np.float32) * [[1.0], [4.0], [9.0]])
    _run("mitigate", tmp_path / "items.npy", "--alpha", "0.5", "-o", tmp_path / "out.npy", "-q")
    assert read_rescaled(tmp_path / "out.npy") is not None
    np.save(tmp_path / "out.npy", np.eye(3, dtype=np.float32))  # replaced since: the sidecar is stale
    assert read_rescaled(tmp_path / "out.npy") is None
    sidecar_path(tmp_path / "other.npy").write_text("{not json")
    np.save(tmp_path / "other.npy", np.eye(2, dtype=np.float32))
    assert read_rescaled(tmp_path / "other.npy") is None

"""Figures at the edges of `popaudit diff` (docs/diff.md), read alike in the console,
Markdown, HTML and JSON:

* a +∞ dot/cosine ratio shows as ∞ (its change as +∞) where it used to show "n/a"
  (which reads as not measured), and the JSON names the infinite fields beside the nulls
  it writes for them; the gates read the same +∞;
* ΔGAP is a popularity lift: a higher one is more bias, on either side of 0 and across it
  (QA harms F5: its distance from 0 is no fit, since excluding training items alone lowers
  it most for head-heavy profiles under any scoring)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.diff.directions import direction
from auditor.flat import flat_entries
from diff_samples import biased_table_report

RATIO = "head_share_1pct_ratio@10"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The JSON report of a small biased table (popular items longer), as written and read back."""
    return biased_table_report(tmp_path_factory.mktemp("inf"))


def _diff(tmp_path: Path, base: dict[str, Any], new: dict[str, Any], *gates: str) -> tuple[int, dict[str, str], Any]:
    """Exit code, the console, Markdown and HTML text, and the JSON of ``diff base new``."""
    for name, data in (("base", base), ("new", new)):
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    run = CliRunner().invoke(cli, [
        "diff", str(tmp_path / "base.json"), str(tmp_path / "new.json"), "--markdown", str(tmp_path / "d.md"),
        "--html", str(tmp_path / "d.html"), "--json", str(tmp_path / "d.json"), *(f"--fail-on={g}" for g in gates),
    ], catch_exceptions=False)
    texts = {"console": run.stdout, "markdown": (tmp_path / "d.md").read_text(), "html": (tmp_path / "d.html").read_text()}
    return run.exit_code, texts, json.loads((tmp_path / "d.json").read_text())


def _row(text: str, name: str) -> list[str]:
    """The cells of the first table row naming ``name``, in any of the three formats."""
    line = next(line for line in text.replace("\\_", "_").splitlines()
                if re.search(rf"(\| |│ |<td>){re.escape(name)}\b", line))
    return [cell.strip() for cell in re.split(r"\||│|<[^>]*>", line) if cell.strip()]


def test_a_ratio_that_becomes_infinite_reads_infinite_in_every_format(tmp_path: Path, report: dict[str, Any]) -> None:
    base, new = copy.deepcopy(report), copy.deepcopy(report)
    dot = report["retrieval"]["at"]["10"]["dot"]["head_share_1pct"]
    assert dot > 0
    base["retrieval"]["at"]["10"]["cosine"]["head_share_1pct"] = dot / 4  # a ratio of 4
    new["retrieval"]["at"]["10"]["cosine"]["head_share_1pct"] = 0.0  # cosine serves the head nothing: dot/0
    base_ratio = 4.0
    code, texts, data = _diff(tmp_path, base, new, f"{RATIO}.delta>0", f"{RATIO}.rel>0", f"{RATIO}>1000")
    assert code == 3  # every gate reads +inf
    metric = next(m for m in data["metrics"] if m["name"] == RATIO)
    assert metric["base"] == pytest.approx(base_ratio) and metric["new"] is None and metric["delta"] is None
    assert metric["infinite"] == {"new": "+inf", "delta": "+inf", "relative": "+inf"}
    assert metric["status"] == "compared" and metric["direction"] == "more bias"
    for fmt, text in texts.items():
        assert _row(text, RATIO)[1:5] == [f"{base_ratio:.4f}", "∞", "+∞", "+∞"], fmt
    finite = next(m for m in data["metrics"] if m["name"] == "head_share_1pct_dot@10")
    assert "infinite" not in finite  # only infinite figures carry the key


def test_an_infinite_ratio_on_both_sides_reads_infinite_and_unchanged(tmp_path: Path, report: dict[str, Any]) -> None:
    base, new = copy.deepcopy(report), copy.deepcopy(report)
    for side in (base, new):
        side["retrieval"]["at"]["10"]["cosine"]["head_share_1pct"] = 0.0
    code, texts, data = _diff(tmp_path, base, new)
    assert code == 0
    metric = next(m for m in data["metrics"] if m["name"] == RATIO)
    assert (metric["base"], metric["new"], metric["delta"], metric["relative"]) == (None, None, 0.0, 0.0)
    assert metric["infinite"] == {"base": "+inf", "new": "+inf"} and metric["direction"] == "unchanged"
    for fmt, text in texts.items():
        assert _row(text, RATIO)[1:3] == ["∞", "∞"], fmt


GAP = "gap_delta_niche_dot@10"


def test_gap_delta_directions_by_lift(report: dict[str, Any]) -> None:
    entry = flat_entries(report)[GAP]
    assert direction(entry, 0.3) == "more bias"  # -0.6 -> -0.3: lists more popular over their profiles
    assert direction(entry, -0.3) == "less bias"  # -0.3 -> -0.6
    assert direction(entry, 1.1) == "more bias"  # -0.6 -> 0.5: across 0, scored as any other lift
    assert direction(entry, -1.3) == "less bias"  # 0.6 -> -0.7


def test_a_gap_delta_across_zero_is_ranked_as_more_bias_in_every_format(tmp_path: Path, report: dict[str, Any]) -> None:
    base, new = copy.deepcopy(report), copy.deepcopy(report)
    base["retrieval"]["at"]["10"]["dot"]["gap_delta_niche"] = -0.6
    new["retrieval"]["at"]["10"]["dot"]["gap_delta_niche"] = 0.5
    code, texts, data = _diff(tmp_path, base, new)
    assert code == 0
    metric = next(m for m in data["metrics"] if m["name"] == GAP)
    assert metric["direction"] == "more bias" and metric["delta"] == pytest.approx(1.1)
    assert not any(m["direction"] == "changed sign" for m in data["metrics"])
    for fmt, text in texts.items():
        flat = " ".join(text.split())
        assert "changed sign" not in flat, fmt
        assert _row(text, GAP)[1:6] == ["-0.6000", "0.5000", "+1.1000", "+183.3%", "more bias"], fmt
        assert "Worse (1 figure)" in flat and "Better (0 figures)" in flat, fmt  # nothing else moved


def test_a_verdict_graded_on_another_popularity_definition_is_not_comparable(
    tmp_path: Path, report: dict[str, Any],
) -> None:
    """The same report with `--popularity users`: every figure the severity is graded on is
    flagged, so the verdict's change is "not comparable" too, not "unchanged"."""
    new = copy.deepcopy(report)
    new["retrieval"]["popularity"] = "users"
    code, texts, data = _diff(tmp_path, report, new)
    assert code == 0 and report["verdict"]["quoted_k"] == 10
    verdict = data["verdict"]
    assert verdict["direction"] == "not comparable" and verdict["base_severity"] == verdict["new_severity"]
    reason = ("the severity is graded on head_share_1pct_dot@10, which is not compared: retrieval.popularity differs "
              '("interactions" vs "users")')
    assert verdict["reason"] == reason
    for fmt, text in texts.items():
        flat = " ".join(text.replace("&quot;", '"').replace("&#34;", '"').split())
        assert f"(not comparable: {reason})" in flat, fmt
    # Two reports of one definition still compare their verdicts.
    _code, _texts, same = _diff(tmp_path, report, copy.deepcopy(report))
    assert same["verdict"]["direction"] == "unchanged" and same["verdict"]["reason"] is None

"""The terminal's per-K retrieval tables name every measure whole: the names are the flat
names gates use, and three measures cut short to ``miscalibration…`` read alike. At the
report's default width (100 columns: a pipe, a CI log) each name fits on its line; in
an 80-column terminal names fold onto more lines while every number stays whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.cli import check as check_command

ROOT = Path(__file__).resolve().parents[1]


def _top10(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, width: int) -> tuple[list[list[str]], dict]:
    """The Top-10 table's rows (cells per line) of ``check`` on the sample, and its JSON."""
    monkeypatch.setattr(check_command, "_width", lambda: width)
    out = tmp_path / f"report{width}.json"
    ran = CliRunner().invoke(cli, ["check", str(ROOT / "sample_data/biased.pt"), "--interactions",
                                   str(ROOT / "sample_data/interactions.parquet"), "--bootstrap", "0",
                                   "--json", str(out)])  # fmt: skip
    assert ran.exit_code == 0, ran.output
    lines = ran.stdout.splitlines()
    start = lines.index("Top-10")
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("└"))
    table = lines[start + 1 : end]
    assert all(len(line) <= width for line in table)
    return [[cell.strip() for cell in line.split("│")[1:-1]] for line in table if line.startswith("│")], json.loads(
        out.read_text()
    )


def _names(rows: list[list[str]]) -> list[str]:
    """Each row's measure name, a folded name's lines joined (a line with no numbers
    continues the name above it)."""
    names: list[str] = []
    for cells in rows:
        if any(cells[1:]) or not names:
            names.append(cells[0])
        else:
            names[-1] += cells[0]
    return names


@pytest.mark.parametrize("width", [100, 80])
def test_every_measure_name_and_number_is_shown_whole(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, width: int
) -> None:
    rows, report = _top10(monkeypatch, tmp_path, width)
    measured = report["retrieval"]["at"]["10"]["dot"]
    names = _names(rows)
    assert [n for n in names if n in measured] == [n for n in measured if n in names]
    for name in ("miscalibration_niche", "miscalibration_diverse", "miscalibration_blockbuster",
                 "head_share_10pct", "gap_delta_blockbuster"):  # fmt: skip
        assert name in names
    assert not any("…" in cell for cells in rows for cell in cells)
    if width == 100:
        assert all(any(cells[1:]) for cells in rows)  # one line a measure
    gini = next(cells for cells in rows if cells[0] == "gini")
    assert gini[1] == f"{measured['gini']:.3f}"


def test_the_retrieval_table_shows_dgap_as_who_pays_does(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """ΔGAP is a relative change: a percentage in the retrieval table as in Who pays (the
    table showed -0.742 where Who pays showed -74.2% for the same figure)."""
    rows, report = _top10(monkeypatch, tmp_path, 100)
    row = next(cells for cells in rows if cells[0] == "gap_delta_niche")
    assert row[1] == f"{100 * report['retrieval']['at']['10']['dot']['gap_delta_niche']:.1f}%"

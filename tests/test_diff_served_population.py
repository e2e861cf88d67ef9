"""``popaudit diff`` compares the served lists' figures only between reports whose served figures cover
the same lists (QA "Served F3"; auditor/protocol.py ``served_lists_measured``, applied by
diff/comparability.py and so by the batch summary): the same file alone (every list) and beside a model
(the queried users' lists only) moved ``head_share_1pct_served@5`` 13.3% → 10.0% as "less bias" with no
list changed, and a ``.delta`` gate acted on it. Where the model queries every listed user, the figures
are over the same lists and stay compared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli import cli
from served_head_lists import K, N_USERS, write_head_lists

ABSENT = 20
NAMES = (f"head_share_1pct_served@{K}", f"arp_served@{K}", f"gini_served@{K}", f"coverage_served@{K}")


def _reports(folder: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, object]]:
    monkeypatch.chdir(folder)
    for name, model in (("alone", []), ("with", ["model.pt"])):
        result = CliRunner().invoke(cli, ["check", *model, "--recommendations", "recs.csv", "--interactions",
                                          "train.csv", "-k", str(K), "--no-probes", "--bootstrap", "0", "-q",
                                          "--json", f"{name}.json"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli, ["diff", "alone.json", "with.json", "--json", "d.json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(Path("d.json").read_text())["metrics"]
    rows = rows if isinstance(rows, list) else [dict(name=k, **v) for k, v in rows.items()]
    return {row["name"]: row for row in rows}


def test_served_figures_over_other_lists_are_not_compared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, served, _ = write_head_lists(tmp_path, absent_users=True)
    rows = _reports(tmp_path, monkeypatch)
    head = rows[f"head_share_1pct_served@{K}"]
    every = (N_USERS * K * served + ABSENT) / ((N_USERS + ABSENT) * K)  # item 0 in 40 of the 300 slots
    assert (head["base"], head["new"]) == (pytest.approx(every), pytest.approx(served))  # 13.3% vs 10.0%
    for name in NAMES:  # old: "compared", "less bias"
        assert rows[name]["status"] == "incomparable", rows[name]
        assert rows[name]["reason"] == ('served.n_graded_apart differs ("every list of the file" vs "20 of the 60 lists '
                                        'left out (users not queried)")'), rows[name]
    result = CliRunner().invoke(cli, ["diff", "alone.json", "with.json", "--fail-on",
                                      f"head_share_1pct_served@{K}.delta<0"])
    assert result.exit_code == 1 and "not comparable: served.n_graded_apart differs" in result.output, result.output


def test_served_figures_over_the_same_lists_are_compared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, served, _ = write_head_lists(tmp_path)  # every listed user is queried: the same 40 lists either way
    rows = _reports(tmp_path, monkeypatch)
    for name in NAMES:
        assert rows[name]["status"] != "incomparable", rows[name]
    head = rows[f"head_share_1pct_served@{K}"]
    assert (head["base"], head["new"], head["delta"]) == (pytest.approx(served), pytest.approx(served), 0.0)

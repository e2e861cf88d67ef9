"""The batch summary's "Noted, as in popaudit diff" caption repeats only the notes that bear
on a change the row-by-row table states, each note once with the pairs it concerns (QA12
scale N4): an ordinary 10-row batch printed 2,068 characters of notes, five times "cut-offs
differ (...): figures at a K only one report measured are listed, not compared" (the table
shows no such figure) and five times "another number of queries", and the "another training
log" note was the 4th of 7 entries. The JSON keeps every note of every pair (diff's own)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from summary_pages import summary_pages

from auditor.summaries import STATUS_OK

HEAD = "head_share_1pct_ratio@10"
LOG_NOTE = "another training log: popularity, the reference of most figures, may differ"


@pytest.fixture(scope="module")
def four_rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One audit's report, varied: row 1 measured another K too and 38 queries; row 2 read
    another log (600 interactions) and 40 queries again; row 3 the first log, 38 queries, an
    IVF index (so its head share does not compare with row 2's)."""
    from diff_samples import biased_table_report

    base = biased_table_report(tmp_path_factory.mktemp("caption_notes"))
    log, n_log = base["inputs"]["interactions"], base["inputs"]["n_interactions"]
    reports = [copy.deepcopy(base) for _ in range(4)]
    reports[1]["retrieval"]["at"]["100"] = copy.deepcopy(base["retrieval"]["at"]["10"])
    reports[1]["retrieval"]["n_queries"] = 38
    reports[2]["inputs"].update(interactions="other.parquet", n_interactions=600)
    reports[3]["retrieval"].update(n_queries=38, index="ivf")
    spearman, heads = [0.90, 0.80, 0.50, 0.70], [3.0, 2.5, 2.0, 4.0]
    table = pa.table({
        "row": [0, 1, 2, 3], "status": [STATUS_OK] * 4, "model": ["items.npy"] * 4, "error": [None] * 4,
        "spearman": spearman, HEAD: heads, "report_json": [json.dumps(r) for r in reports],
    })  # fmt: skip
    return {"table": table, "reports": reports, "log": log, "n_log": n_log, "spearman": spearman, "heads": heads}


def _caption(four_rows: dict[str, Any]) -> str:
    log, n_log = four_rows["log"], four_rows["n_log"]
    return ("Noted, as in popaudit diff: "
            f"inputs.interactions differs in row 1 vs row 2 ({log} vs other.parquet), row 2 vs row 3 (other.parquet vs "
            f"{log}): {LOG_NOTE}. "
            f"inputs.n_interactions differs in row 1 vs row 2 ({n_log} vs 600), row 2 vs row 3 (600 vs {n_log}): "
            "another training log size. "
            "retrieval.n_queries differs in row 0 vs row 1 (40 vs 38), row 1 vs row 2 (38 vs 40): another number of "
            "queries.")  # fmt: skip


def test_the_caption_repeats_each_note_on_a_stated_change_once(four_rows: dict[str, Any]) -> None:
    from auditor.batch.summary import summarise
    from auditor.report.batch_summary import _notes_caption

    summary = summarise(four_rows["table"])
    rows = summary.order
    spearman, heads = four_rows["spearman"], four_rows["heads"]
    assert [r.delta_spearman for r in rows[1:]] == pytest.approx([b - a for a, b in zip(spearman, spearman[1:])])
    assert [r.delta_head_share for r in rows[1:]] == pytest.approx([heads[1] - heads[0], heads[2] - heads[1], None])
    assert rows[3].head_share_apart == 'retrieval.index differs ("exact" vs "ivf")'
    # Before: "row 0 vs row 1: cut-offs differ (base K = 10, new K = 10, 100): figures at a K only one report measured
    # are listed, not compared; retrieval.n_queries differs (40 vs 38): another number of queries. row 1 vs row 2: ..."
    # with the cut-offs twice, and the queries' note for row 2 vs row 3, whose head share is not compared.
    assert _notes_caption(summary) == _caption(four_rows)
    assert [[c.changes for c in r.caption_notes] for r in rows] == [
        [], [(HEAD,)], [("spearman", HEAD), ("spearman", HEAD), (HEAD,)], [("spearman",), ("spearman",)]]


def test_the_json_keeps_every_note_of_every_pair(four_rows: dict[str, Any]) -> None:
    from auditor.batch.summary import summarise
    from auditor.diff import diff_reports
    from auditor.report.batch_summary import batch_document

    reports = four_rows["reports"]
    payload = batch_document(summarise(four_rows["table"])).payload()  # type: ignore[misc]
    said = [row["pair_notes"] for row in payload["order"]]
    assert said[1:] == [list(diff_reports(a, b).notes) for a, b in zip(reports, reports[1:])]
    assert said[0] == [] and sum(n.startswith("cut-offs differ (") for pair in said for n in pair) == 2
    assert payload["order"][1]["caption_notes"] == [{
        "subject": "retrieval.n_queries differs", "values": "40 vs 38", "effect": "another number of queries",
        "changes": [HEAD]}]


def test_every_format_says_the_shorter_caption(four_rows: dict[str, Any]) -> None:
    from auditor.batch.summary import summarise

    summary = summarise(four_rows["table"])
    pages = summary_pages(summary)
    for where, text in pages.items():
        flat = " ".join(text.split())
        assert flat.count(_caption(four_rows)) == 1, where
        assert "cut-offs differ" not in flat, where

"""The batch summary's accuracy columns (dot's NDCG and recall at the summary's K, the
trade-off's recommended scoring from each row's report) and its ranking rule (rank_by
descending, ties by the head-share ratio, then manifest row; missing values last)."""

from __future__ import annotations

import json

import pyarrow as pa

from auditor.batch.summary import summarise
from auditor.report.batch_summary import batch_document


def table() -> pa.Table:
    def report(recommended: str | None) -> str | None:
        return json.dumps({"schema_version": 1, "accuracy": {"recommended": recommended}})

    rows = [  # row, model, spearman, head ratio @10, ndcg_dot@10, recall_dot@10, report_json
        (0, "a.pt", 0.5, 2.0, 0.30, 0.40, report("alpha_0.5")),
        (1, "b.pt", 0.5, 3.0, 0.20, 0.25, report(None)),
        (2, "c.pt", 0.9, None, None, None, None),
        (3, "d.pt", None, 9.0, 0.10, 0.15, "not json {"),
        (4, "e.pt", 0.5, 3.0, None, None, json.dumps({"accuracy": None})),
    ]
    names = ("row", "model", "spearman", "head_share_1pct_ratio@10", "ndcg_dot@10", "recall_dot@10", "report_json")
    columns = {name: [r[i] for r in rows] for i, name in enumerate(names)}
    columns["status"] = ["ok"] * len(rows)
    columns["label"] = pa.array([None] * len(rows), pa.string())
    return pa.table(columns)


def test_ranking_rule_and_accuracy_columns() -> None:
    summary = summarise(table())
    # spearman descending; the tie at 0.5 by head-share ratio (3.0 before 2.0), the tie of
    # b and e (0.5, 3.0) by row; d has no spearman: last.
    assert [s.model for s in summary.ranking] == ["c.pt", "b.pt", "e.pt", "a.pt", "d.pt"]
    by_model = {s.model: s for s in summary.ranking}
    assert (by_model["a.pt"].ndcg, by_model["a.pt"].recall, by_model["a.pt"].recommended) == (0.30, 0.40, "alpha_0.5")
    assert by_model["b.pt"].recommended is None and by_model["d.pt"].recommended is None  # a broken report: none
    ranking = batch_document(summary).sections[0].blocks[0]
    assert ranking.headers[-3:] == ("NDCG@10 dot", "recall@10 dot", "recommended")  # type: ignore[union-attr]
    assert ranking.rows[3][-3:] == ("0.300", "0.400", "alpha_0.5")  # type: ignore[union-attr]

"""The accuracy section of a lists-only audit says what it measured (QA batchlists F5, F8):
the served lists' and the most-popular list's head share and Gini from the section "Served
lists" (not "—"), what was excluded from which list, the served slots that are the user's
own training items (the served lists are not filtered), no tolerance of a dot the audit lacks,
and the most-popular list described as it is: per user, training items excluded.

Known answers: 4 users, items 0..9; every user trained on item 0 (the most popular), and is
served [0, 5]: 4 of the 8 served slots are the user's own training item."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from auditor.audit import run_audit
from auditor.config import AuditConfig
from auditor.report import accuracy as accuracy_view
from auditor.report.served_lists import SERVED_NOTE


def test_lists_only_accuracy_tables_show_what_was_measured(tmp_path: Path) -> None:
    users = [u for u in range(4) for _ in range(3)]
    items = [0, 1, 2, 0, 1, 3, 0, 2, 4, 0, 3, 6]  # item 0 three times as often as any other
    log, lists, holdout = tmp_path / "log.parquet", tmp_path / "lists.parquet", tmp_path / "holdout.parquet"
    pq.write_table(pa.table({"user_id": users, "item_id": items}), log)
    pq.write_table(pa.table({"user_id": [0, 0, 1, 1, 2, 2, 3, 3], "item_id": [0, 5] * 4, "rank": [1, 2] * 4}), lists)
    pq.write_table(pa.table({"user_id": [0, 1, 2, 3], "item_id": [5, 7, 8, 9]}), holdout)
    result = run_audit(AuditConfig(model=None, interactions=log, recommendations=lists, holdout=holdout, ks=(2,),
                                   probes=False, bootstrap=0))
    assert result.served is not None and result.accuracy is not None
    assert (result.served.n_training_slots, result.served.n_slots) == (4, 8)
    settings = dict(accuracy_view.summary_table(result.accuracy, result).rows)
    assert settings["training items excluded"] == ("from the most-popular list; the served lists as served: 4 of "
                                                   "their 8 slots are the user's own training items")
    assert not any("tolerance" in name or "candidates" in name for name in settings)
    table = accuracy_view.tradeoff_table(result, 2)
    shown = {row[0]: row for row in table.rows}
    cut = result.served.at[2]
    # Head share and Gini are the "Served lists" figures, never "—".
    assert shown["served"][5] == f"{100 * cut.served['head_share_1pct']:.1f}%" != "—"
    assert shown["most popular"][6] == f"{cut.popular['gini']:.3f}"
    assert table.caption.startswith("Top-2 lists: the served lists as served, the most-popular list without each "
                                    "user's training items")
    assert "for each user, the K most popular items of the training log that the user did not train on" in SERVED_NOTE

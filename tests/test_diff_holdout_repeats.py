"""One held-out set given as two files, one of them with repeated rows of its pairs (QA11
diffapi N4): one fingerprint, and the evaluation keeps each user's distinct held-out items,
so every accuracy figure is the same and the diff compares them (it made all 56 "not
comparable" on ``accuracy.n_holdout_interactions`` alone, and a gate exited 1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from auditor import AuditConfig, run_audit
from auditor.diff import diff_reports, evaluate_diff_gates, parse_diff_gates
from auditor.errors import UnmeasuredGateError
from diff_samples import biased_table_report


def _audit(folder: Path, holdout: str, keep_seen: bool = False) -> dict[str, Any]:
    config = AuditConfig(model=folder / "items.npy", interactions=folder / "log.parquet", ks=(10,), probes=False,
                         bootstrap=0, holdout=folder / holdout, keep_seen=keep_seen)
    report: dict[str, Any] = json.loads(json.dumps(run_audit(config).to_dict()))
    return report


def _write(folder: Path, name: str, users: np.ndarray, items: np.ndarray) -> None:
    pq.write_table(pa.table({"user_id": users, "item_id": items}), folder / name)


def test_repeated_rows_of_one_held_out_set_compare_their_accuracy(tmp_path: Path) -> None:
    biased_table_report(tmp_path)
    rng = np.random.default_rng(3)
    codes = np.unique(rng.integers(0, 40 * 200, 150))  # distinct (user, item) pairs, user * 200 + item
    users, items = codes // 200, codes % 200
    _write(tmp_path, "holdout.parquet", users, items)
    again = rng.choice(codes.size, 40, replace=False)  # 40 of them written twice, in another row order
    order = rng.permutation(codes.size + again.size)
    _write(tmp_path, "repeats.parquet", np.concatenate([users, users[again]])[order],
           np.concatenate([items, items[again]])[order])
    base, new = _audit(tmp_path, "holdout.parquet"), _audit(tmp_path, "repeats.parquet")
    ab, an = base["accuracy"], new["accuracy"]
    assert (ab["n_holdout_interactions"], an["n_holdout_interactions"]) == (codes.size, codes.size + 40)
    assert ab["n_pairs_evaluated"] == an["n_pairs_evaluated"] == codes.size  # each distinct pair once
    assert ab["holdout_fingerprint"] == an["holdout_fingerprint"]
    assert ab["at"] == an["at"]  # every figure equal, as the evaluation counts a repeated pair once
    diff = diff_reports(base, new)
    assert not diff.settings
    for name in ("ndcg_dot@10", "recall_dot@10", "hit_rate_cosine@10", "ndcg_niche_dot@10"):
        change = diff.metric(name)
        assert (change.status, change.delta) == ("compared", 0.0), name
    assert any(f"accuracy.n_holdout_interactions differs ({codes.size} vs {codes.size + 40})" in n for n in diff.notes)
    (outcome,) = evaluate_diff_gates(parse_diff_gates(["ndcg_dot@10.rel<-0.02"], ["ndcg_dot@10"]), diff)
    assert (outcome.value, outcome.tripped) == (0.0, False)  # was not evaluated: exit 1
    # Another repeats rule (--keep-seen) on the same files is still another protocol: not compared.
    kept = diff_reports(base, _audit(tmp_path, "repeats.parquet", keep_seen=True))
    assert kept.metric("ndcg_dot@10").status == "incomparable"
    # Other pairs (one left out) are another held-out set: not compared.
    _write(tmp_path, "fewer.parquet", users[1:], items[1:])
    fewer = diff_reports(base, _audit(tmp_path, "fewer.parquet"))
    with pytest.raises(UnmeasuredGateError, match="accuracy.holdout_fingerprint differs"):
        evaluate_diff_gates(parse_diff_gates(["ndcg_dot@10.rel<-0.02"], ["ndcg_dot@10"]), fewer)

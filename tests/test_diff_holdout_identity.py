"""The held-out set's identity is its content (QA9 diff N2): ``accuracy.holdout_fingerprint``,
SHA-256 over the distinct (raw user id, raw item id) pairs in a canonical order. The same
pairs by another path, format or row order are one held-out set and their accuracy is
compared; a holdout regenerated in place under the same path, or another split seed of
``retrain``, is another set whose accuracy is not compared. Known answers: each fingerprint
is recomputed here from the pairs with hashlib alone."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor import AuditConfig, run_audit
from auditor.cli import cli
from auditor.diff import diff_reports, evaluate_diff_gates, parse_diff_gates
from auditor.errors import UnmeasuredGateError

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data"


def _expected(pairs: set[tuple[str, str]]) -> str:
    """The documented fingerprint, from scratch: pairs sorted by their ids' UTF-8 bytes; the
    users' byte lengths (int64 little-endian) and bytes, then the items' likewise."""
    ordered = sorted(pairs, key=lambda p: (p[0].encode(), p[1].encode()))
    digest = hashlib.sha256()
    for column in (0, 1):
        texts = [p[column].encode() for p in ordered]
        digest.update(np.array([len(t) for t in texts], dtype="<i8").tobytes())
        digest.update(b"".join(texts))
    return "sha256:" + digest.hexdigest()


def _audit(holdout: Path | None = None, model: Path = SAMPLE / "biased.pt", **more: Any) -> dict[str, Any]:
    config = AuditConfig(model=model, ks=(10,), probes=False, bootstrap=0, holdout=holdout, **more)
    return json.loads(json.dumps(run_audit(config).to_dict()))  # as written and read back


def _sample_holdout(seed: int) -> pa.Table:
    log = pq.read_table(SAMPLE / "interactions.parquet")
    users, items = log.column("user_id").to_numpy(), log.column("item_id").to_numpy()
    rng = np.random.default_rng(seed)
    return pa.table({"user_id": rng.choice(np.unique(users), 300), "item_id": rng.choice(np.unique(items), 300)})


def _pairs(table: pa.Table) -> set[tuple[str, str]]:
    return {(str(u), str(i)) for u, i in zip(table.column("user_id").to_pylist(), table.column("item_id").to_pylist())}


def test_the_same_holdout_by_another_path_format_and_row_order_is_compared(tmp_path: Path) -> None:
    table = _sample_holdout(1)
    pq.write_table(table, tmp_path / "holdout.parquet")
    shuffled = table.take(np.random.default_rng(5).permutation(table.num_rows))
    (tmp_path / "copy").mkdir()
    pacsv.write_csv(shuffled, tmp_path / "copy" / "held.csv")
    interactions = SAMPLE / "interactions.parquet"
    base = _audit(tmp_path / "holdout.parquet", interactions=interactions)
    new = _audit(tmp_path / "copy" / "held.csv", interactions=interactions)
    fingerprint = _expected(_pairs(table))  # every sampled item and user is the model's: no pair dropped
    assert base["accuracy"]["holdout_fingerprint"] == new["accuracy"]["holdout_fingerprint"] == fingerprint
    diff = diff_reports(base, new)
    ndcg = diff.metric("ndcg_dot@10")
    assert (ndcg.status, ndcg.delta) == ("compared", 0.0)
    assert not any(s.setting.startswith("accuracy.") for s in diff.settings)


def test_a_holdout_regenerated_in_place_is_another_held_out_set(tmp_path: Path) -> None:
    path, interactions = tmp_path / "holdout.parquet", SAMPLE / "interactions.parquet"
    pq.write_table(_sample_holdout(1), path)
    base = _audit(path, interactions=interactions)
    pq.write_table(_sample_holdout(2), path)  # the nightly job's holdout, rewritten at the same path
    new = _audit(path, interactions=interactions)
    assert base["accuracy"]["holdout"] == new["accuracy"]["holdout"]
    assert base["accuracy"]["n_holdout_interactions"] == new["accuracy"]["n_holdout_interactions"] == 300
    assert new["accuracy"]["holdout_fingerprint"] == _expected(_pairs(_sample_holdout(2)))
    diff = diff_reports(base, new)
    ndcg = diff.metric("ndcg_dot@10")
    assert ndcg.status == "incomparable" and ndcg.delta is None  # the old diff compared it, "settings agree"
    assert (ndcg.reason or "").startswith("accuracy.holdout_fingerprint differs (")
    with pytest.raises(UnmeasuredGateError, match="not comparable"):
        evaluate_diff_gates(parse_diff_gates(["ndcg_dot@10.rel<-0.02"], diff.flat()), diff, (base, new))
    old = [{**r, "accuracy": {k: v for k, v in r["accuracy"].items() if k != "holdout_fingerprint"}} for r in (base, new)]
    assert diff_reports(*old).metric("ndcg_dot@10").status == "compared"  # older reports: the path rule, as before


def _retrain(log: Path, out: Path, seed: int) -> Path:
    got = CliRunner().invoke(cli, ["retrain", "--data", str(log), "--holdout-fraction", "0.3", "--split", "random",
                                   "--epochs", "1", "--dim", "4", "--threads", "1", "--seed", str(seed), "-o", str(out)])
    assert got.exit_code == 0, got.output
    return out


def test_retrain_checkpoints_compare_accuracy_only_on_the_same_split(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    log = tmp_path / "log.csv"
    rows = {(u, int(i)) for u in range(40) for i in rng.choice(30, size=8, replace=False)}
    log.write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in sorted(rows)))
    r0, r1, r0_again = (_retrain(log, tmp_path / name, seed) for name, seed in (("r0.pt", 0), ("r1.pt", 1), ("r0b.pt", 0)))
    reports = {path.stem: _audit(model=path) for path in (r0, r1, r0_again)}
    for path in (r0, r1):
        ck = torch.load(path, weights_only=False)
        ids = [str(x) for x in np.asarray(ck["item_ids"]).tolist()] if "item_ids" in ck else None
        recorded = {(str(u), ids[r] if ids else str(r)) for u, r in ck["holdout_pairs"].tolist()}
        assert reports[path.stem]["accuracy"]["holdout_fingerprint"] == _expected(recorded)
    assert reports["r0"]["accuracy"]["holdout_fingerprint"] != reports["r1"]["accuracy"]["holdout_fingerprint"]
    other = diff_reports(reports["r0"], reports["r1"]).metric("recall_dot@10")
    assert other.status == "incomparable" and (other.reason or "").startswith("accuracy.holdout_fingerprint differs")
    same = diff_reports(reports["r0"], reports["r0b"]).metric("recall_dot@10")
    assert same.status == "compared"

"""A checkpoint's recorded split and the same split written to a file are one held-out set
(QA11 diffapi F5): the same fingerprint and the same accuracy, though the recorded split
counts the rows it took out of training (repeats of a training pair included, which it
dropped) and the file its own rows, and the two routes name other repeat rules. The diff
compares their accuracy, and says why, where it made all of it "not comparable"."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from click.testing import CliRunner

from auditor import AuditConfig, run_audit
from auditor.cli import cli
from auditor.diff import diff_reports, evaluate_diff_gates, parse_diff_gates


def test_the_recorded_split_written_to_a_file_compares_its_accuracy(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    pairs = sorted({(u, int(i)) for u in range(40) for i in rng.choice(30, size=8, replace=False)})
    rows = pairs + pairs[::3]  # repeated interactions: a split drops a held-out repeat of a training pair
    (tmp_path / "log.csv").write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in rows))
    got = CliRunner().invoke(cli, ["retrain", "--data", str(tmp_path / "log.csv"), "--holdout-fraction", "0.3",
                                   "--split", "random", "--epochs", "1", "--dim", "4", "--threads", "1", "--seed", "0",
                                   "-o", str(tmp_path / "r.pt")])
    assert got.exit_code == 0, got.output
    ck = torch.load(tmp_path / "r.pt", weights_only=False)
    held = ck["holdout_pairs"].numpy()
    users, items = np.asarray(ck["user_ids"])[held[:, 0]], np.asarray(ck["item_ids"])[held[:, 1]]
    pq.write_table(pa.table({"user_id": users.astype(np.int64), "item_id": items.astype(np.int64)}), tmp_path / "s.parquet")
    reports = [json.loads(json.dumps(run_audit(AuditConfig(model=tmp_path / "r.pt", ks=(10,), probes=False, bootstrap=0,
                                                           holdout=holdout)).to_dict()))
               for holdout in (None, tmp_path / "s.parquet")]
    recorded, written = (r["accuracy"] for r in reports)
    assert recorded["holdout_fingerprint"] == written["holdout_fingerprint"]
    assert written["n_holdout_interactions"] == len(held) < recorded["n_holdout_interactions"]
    assert recorded["n_repeats_dropped"] > 0 and recorded["repeats"] != written["repeats"]
    assert recorded["at"]["10"]["dot"] == written["at"]["10"]["dot"]  # one held-out set: the same figures
    diff = diff_reports(*reports)
    ndcg = diff.metric("ndcg_dot@10")
    assert (ndcg.status, ndcg.delta) == ("compared", 0.0)  # was incomparable: n_holdout_interactions, repeats, protocol
    assert not diff.settings
    assert [n for n in diff.notes if n.startswith("accuracy.holdout differs")] == [
        f"accuracy.holdout differs ({tmp_path / 'r.pt'} (recorded holdout) vs {tmp_path / 's.parquet'}): one held-out set by its fingerprint, read "
        f"by another route ({recorded['n_holdout_interactions']} vs {len(held)} held-out rows); its pairs hold no repeat "
        "of a training pair, so the accuracy figures are compared"]
    names = [m.name for m in diff.metrics]
    assert evaluate_diff_gates(parse_diff_gates(["ndcg_dot@10.rel<-0.02"], names), diff)[0].value == 0.0
    # Another held-out set by the same two routes is still another set.
    other = copy.deepcopy(reports[1])
    other["accuracy"]["holdout_fingerprint"] = "sha256:" + "0" * 64
    assert diff_reports(reports[0], other).metric("ndcg_dot@10").status == "incomparable"

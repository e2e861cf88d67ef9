"""The monitor's head share is ``check --keep-seen``'s, not ``check``'s (QA F6): its lists keep
each query's training items. On a retrained model with the log's users as queries the two
agree exactly; ``check``, which leaves each user's training items out as served, differs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from click.testing import CliRunner

from auditor.cli import cli
from auditor.flat import flat_metrics_from_report
from auditor.monitor import TrainingMonitor


def test_the_monitors_head_share_is_check_keep_seens(tmp_path: Path) -> None:
    model = tmp_path / "m.pt"
    done = CliRunner().invoke(cli, ["retrain", "--n-users", "100", "--n-items", "150", "--n-interactions", "3000",
                                    "--epochs", "3", "-o", str(model), "-q", "--threads", "1"])
    assert done.exit_code == 0, done.output
    ckpt = torch.load(model, weights_only=True)
    users = torch.from_numpy(np.unique(ckpt["train_pairs"][:, 0].numpy()))  # check's population: the log's users
    monitor = TrainingMonitor(ckpt["item_embeddings"].clone(), counts=ckpt["item_frequencies"].numpy(),
                              queries=ckpt["user_embeddings"][users].clone(), interval=1)
    monitor.before_step(None)
    record = monitor.after_step()
    assert record is not None

    def shares(*extra: str) -> tuple[float, float]:
        done = CliRunner().invoke(cli, ["check", str(model), "--bootstrap", "0", "--no-probes", "-q", "--format",
                                        "json", *extra])
        assert done.exit_code == 0, done.output
        flat = flat_metrics_from_report(json.loads(done.stdout))
        return flat["head_share_1pct_dot@10"], flat["head_share_1pct_cosine@10"]

    kept = shares("--keep-seen")
    assert (record.head_share_dot, record.head_share_cosine) == kept
    assert kept[0] == 31 / 970  # 31 of 97 users x 10 slots
    served = shares()  # each user's training items left out: the head is served less
    assert served[0] < kept[0] / 3 and served[1] < kept[1]

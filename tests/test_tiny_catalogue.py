"""A catalogue of one or two items is audited, not refused (Measures F3): retrieval and
accuracy are defined, and the frequency-norm correlations are null with the reason
docs/measures.md gives ("fewer than 3 items").

Known answer (the QA's model): 4 users, 2 items; user 0 trained both, users 1 and 3
item 0, user 2 item 1, so item 0 (3 interactions) is the top-1% head. At K=1 users 1 and
3 can only be served item 1 and user 2 item 0 (user 0 has nothing left), whatever the
scores: the head holds 1 of 3 filled slots under every scoring."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner


@pytest.mark.slow  # one audit, about 4 s
def test_two_item_catalogue_is_audited_with_null_correlations(tmp_path: Path) -> None:
    import torch

    from auditor.cli import cli

    rng = np.random.default_rng(0)
    model, log, out = tmp_path / "m.pt", tmp_path / "log.parquet", tmp_path / "r.json"
    torch.save({"user_embedding.weight": torch.tensor(rng.normal(size=(4, 3)), dtype=torch.float32),
                "item_embedding.weight": torch.tensor(rng.normal(size=(2, 3)), dtype=torch.float32)}, model)
    users, items = np.array([0, 1, 2, 3, 0]), np.array([0, 0, 1, 0, 1])
    pq.write_table(pa.table({"user_id": users, "item_id": items}), log)
    run = CliRunner().invoke(cli, ["check", str(model), "--interactions", str(log), "-k", "1", "--no-probes", "-q",
                                   "--format", "json", "-o", str(out)])
    assert run.exit_code == 0, run.output  # before: exit 1, "has only 2 items"
    report = json.loads(out.read_text())
    section = report["frequency_norm"]
    assert section["spearman"] is None and section["pearson_log"] is None
    assert section["undefined_reason"].startswith("the table has only 2 items; a rank correlation needs at least 3")
    seen = {(u, i) for u, i in zip(users.tolist(), items.tolist())}
    served = [[i for i in range(2) if (u, i) not in seen][:1] for u in range(4)]
    head = int(np.argmax(np.bincount(items)))
    expected = sum(head in s for s in served) / sum(len(s) for s in served)
    assert expected == pytest.approx(1 / 3)
    for scoring in ("dot", "cosine"):
        assert report["retrieval"]["at"]["1"][scoring]["head_share_1pct"] == pytest.approx(expected)

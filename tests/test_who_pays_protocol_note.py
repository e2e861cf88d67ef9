"""The Who-pays note follows the run's protocol (QA harms F2): "training items are never
served, so ΔGAP sits below 0" holds when they are excluded; under ``--keep-seen`` they stay
among the candidates, lists re-serve them and a ΔGAP may be positive, and the note says so
in the Markdown and HTML reports instead of telling the reader to discount a negative ΔGAP."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from click.testing import CliRunner

from auditor.cli import cli

NEVER = "Training items are never served"
KEPT = "Training items stay among the candidates here (--keep-seen)"


def _files(root: Path) -> None:
    """12 users, 30 items with norms growing with popularity; 3–7 training items each."""
    rng = np.random.default_rng(0)
    items = rng.normal(size=(30, 4)) * (1 + np.linspace(2, 0, 30))[:, None]
    users = rng.normal(size=(12, 4))
    weight = np.linspace(3, 0.2, 30) ** 2
    train = []
    for u in range(12):
        p = weight ** (1 if u % 3 else 0.2)
        train += [(u, int(i)) for i in rng.choice(30, size=rng.integers(3, 8), replace=False, p=p / p.sum())]
    torch.save({"user_embedding.weight": torch.tensor(users, dtype=torch.float32),
                "item_embedding.weight": torch.tensor(items, dtype=torch.float32)}, root / "m.pt")
    pq.write_table(pa.table({"user_id": [u for u, _ in train], "item_id": [i for _, i in train]}),
                   root / "train.parquet")


def test_the_note_follows_keep_seen(tmp_path: Path) -> None:
    _files(tmp_path)
    for extra, said, unsaid in (((), NEVER, KEPT), (("--keep-seen",), KEPT, NEVER)):
        out = tmp_path / f"r{len(extra)}"
        ran = CliRunner().invoke(cli, ["check", str(tmp_path / "m.pt"), "--interactions", str(tmp_path / "train.parquet"),
                                       "-k", "5", "--no-probes", "--bootstrap", "0", "--json", f"{out}.json",
                                       "--markdown", f"{out}.md", "--html", f"{out}.html", *extra])
        assert ran.exit_code in (0, 3), ran.output
        report = json.loads(Path(f"{out}.json").read_text())
        assert report["retrieval"]["population"]["seen_items"] == ("kept" if extra else "excluded")
        for text in (Path(f"{out}.md").read_text(), Path(f"{out}.html").read_text()):
            assert said in text and unsaid not in text, extra
        if extra:  # the case the old note misread: a positive niche ΔGAP under dot (+10.3%)
            niche = next(r for r in report["retrieval"]["user_groups"]["5"]["dot"] if r["group"] == "niche")
            assert niche["gap_delta"] > 0

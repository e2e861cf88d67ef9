"""Regenerate the bundled sample data (seeded; run from the repository root).

    python sample_data/make_sample.py [OUT_DIR]

Writes, next to this script (or into OUT_DIR):
  interactions.parquet  synthetic log, Zipf item popularity (user_id, item_id)
  biased.pt             all conditions hold: id embeddings, plain SGD, cosine InfoNCE,
                        high learning rate -> norms follow popularity
  control.pt            the same model and data at a low learning rate (C5 violated):
                        norms barely move, the correlation stays weak
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from auditor.io import atomic_path
from auditor.train.data import synthetic_interactions
from auditor.train.loop import TrainConfig, save_checkpoint, train

HERE = Path(__file__).resolve().parent
SIZES = dict(n_users=600, n_items=800, n_interactions=30_000, zipf=1.0)
SETTINGS = dict(dim=32, epochs=8, batch_size=256, seed=0)


def main(out: Path = HERE) -> None:
    out.mkdir(parents=True, exist_ok=True)
    data = synthetic_interactions(**SIZES, seed=0)
    log = pa.table(
        {
            "user_id": pa.array(np.asarray(data.user_ids)[data.users], pa.int64()),
            "item_id": pa.array(np.asarray(data.item_ids)[data.items], pa.int64()),
        }
    )
    with atomic_path(out / "interactions.parquet") as tmp:
        pq.write_table(log, tmp)
    for name, lr in (("biased", 10.0), ("control", 0.02)):
        result = train(data, TrainConfig(optimizer="sgd", lr=lr, loss="infonce-cos", **SETTINGS))
        save_checkpoint(result, out / f"{name}.pt")
        last = result.trace[-1]
        print(f"{name}.pt: lr {lr}, final spearman {last.get('spearman', float('nan')):+.3f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)

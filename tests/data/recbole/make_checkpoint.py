"""Make the RecBole fixtures of tests/test_framework_recbole.py with RecBole itself.

Run with a virtual environment that has RecBole (see README.md here):

    /tmp/venv-recbole/bin/python tests/data/recbole/make_checkpoint.py

It writes, next to this script:

- ``tiny.inter``: a RecBole atomic file, 60 users x 80 items with Zipf-like item
  popularity, rows in random order (so RecBole's ids differ from the raw ids' order);
- ``BPR-tiny.pth``: BPR trained on it by RecBole with the default (non-filtering) data
  settings, saved by RecBole's trainer (``saved=True``);
- ``BPR-tiny-filtered.pth``: the same, trained with ``user_inter_num_interval`` and
  ``item_inter_num_interval`` filters that remove users and items;
- ``*.tokens.json``: RecBole's own ``dataset.field2id_token`` for the user and item
  fields of each run (row r of an embedding table is token r; row 0 is ``[PAD]``), the
  reference the tests compare popaudit's id rule with.

Nothing here is imported by the tests; the tests never need RecBole.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
N_USERS, N_ITEMS = 60, 80
DATASET = "tiny"


def write_inter(path: Path, seed: int = 13) -> None:
    """Zipf-like item popularity (weight 1/rank^1.1), 4-30 distinct items per user,
    raw item ids 101..180 assigned to popularity ranks in a shuffled order."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, N_ITEMS + 1) ** 1.1
    weights /= weights.sum()
    item_tokens = rng.permutation(np.arange(101, 101 + N_ITEMS))  # rank -> raw id
    rows = []
    for user in range(1, N_USERS + 1):
        n = int(rng.integers(4, 31))
        ranks = rng.choice(N_ITEMS, size=n, replace=False, p=weights)
        for rank in ranks:
            rows.append((user, int(item_tokens[rank]), int(rng.integers(1, 6)), int(rng.integers(8.8e8, 8.9e8))))
    order = rng.permutation(len(rows))
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write("user_id:token\titem_id:token\trating:float\ttimestamp:float\n")
        for i in order:
            fh.write("\t".join(map(str, rows[i])) + "\n")


def train(data_root: Path, work: Path, extra: dict[str, object]) -> tuple[Path, dict[str, list[str]]]:
    """Train BPR with RecBole; the saved checkpoint and RecBole's token lists."""
    from recbole.config import Config
    from recbole.data import create_dataset, data_preparation
    from recbole.model.general_recommender import BPR
    from recbole.trainer import Trainer
    from recbole.utils import init_seed

    settings: dict[str, object] = {
        "data_path": str(data_root),
        "checkpoint_dir": str(work),
        "use_gpu": False,
        "device": "cpu",
        "seed": 2020,
        "reproducibility": True,
        "show_progress": False,
        "state": "WARNING",
        "embedding_size": 16,
        "epochs": 8,
        "train_batch_size": 256,
        "eval_step": 4,
        "learner": "adam",
        "learning_rate": 0.01,
        "weight_decay": 0.0,
        "load_col": {"inter": ["user_id", "item_id", "rating", "timestamp"]},
        **extra,
    }
    config = Config(model="BPR", dataset=DATASET, config_dict=settings)
    init_seed(config["seed"], config["reproducibility"])
    dataset = create_dataset(config)
    train_data, valid_data, _test = data_preparation(config, dataset)
    model = BPR(config, train_data.dataset).to(config["device"])
    trainer = Trainer(config, model)
    trainer.fit(train_data, valid_data, saved=True, show_progress=False)
    tokens = {
        "user_id": [str(t) for t in dataset.field2id_token["user_id"]],
        "item_id": [str(t) for t in dataset.field2id_token["item_id"]],
    }
    return Path(trainer.saved_model_file), tokens


def main() -> int:
    import recbole
    import torch

    inter = HERE / f"{DATASET}.inter"
    write_inter(inter)
    runs = {
        "BPR-tiny": {},
        "BPR-tiny-filtered": {"user_inter_num_interval": "[8,inf)", "item_inter_num_interval": "[5,inf)"},
    }
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # RecBole's trainer writes log_tensorboard/ into the working directory
        data_root = Path(tmp) / "dataset"
        (data_root / DATASET).mkdir(parents=True)
        shutil.copyfile(inter, data_root / DATASET / f"{DATASET}.inter")
        for name, extra in runs.items():
            work = Path(tmp) / name
            work.mkdir()
            saved, tokens = train(data_root, work, extra)
            shutil.copyfile(saved, HERE / f"{name}.pth")
            (HERE / f"{name}.tokens.json").write_text(json.dumps(tokens, indent=0) + "\n", encoding="utf-8")
            print(f"{name}.pth: {saved.stat().st_size} bytes, {len(tokens['user_id'])} user rows, "
                  f"{len(tokens['item_id'])} item rows (recbole {recbole.__version__}, torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

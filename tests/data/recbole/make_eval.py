"""Make the RecBole evaluation fixtures (issue #21) with RecBole 1.2.1 itself.

Run from the repository root with the RecBole virtual environment of README.md here
(popaudit importable: it writes the mitigated checkpoints RecBole then evaluates):

    PYTHONPATH=. /work/venvs/recbole/bin/python tests/data/recbole/make_eval.py

It writes, next to this script:

- ``eval.inter``: a RecBole atomic file, 160 users x 120 items with Zipf-like item
  popularity and timestamps (numpy seed 21). Rows in random order; timestamps with
  exact ties and gaps below float32's resolution (RecBole sorts its float32 copy of
  them, stably); re-interactions (a user-item pair twice, at two times, one row
  repeated exactly); two rows without a timestamp (RecBole fills the mean) and one
  without an item id (RecBole drops it).
- ``BPR-eval.pth``, ``LightGCN-eval.pth``, ``SimpleX-eval.pth``: each trained by
  RecBole's own ``Trainer`` on it with ``eval_args`` RS 0.8/0.1/0.1, order TO,
  group_by user, mode full (the one split of ``eval.json``'s ``splits.RS-TO-user``).
- ``LightGCN-eval.forward.npz``: ``user``/``item``, what RecBole's ``LightGCN.forward()``
  returns for the saved weights (padding row 0 included).
- ``SimpleX-eval.served.npz``: ``user``, RecBole's ``get_UI_aggregation`` of every user
  (the served user vector before normalisation), and ``history_len``, the length of
  each user's history in the matrix RecBole's SimpleX keeps.
- ``eval.json``: RecBole's own test metrics of each run (as printed, 4 decimals, and
  unrounded), the split RecBole made under several ``eval_args`` (``labels``: the part,
  0 train, 1 valid, 2 test, of each data row of the file, ``-`` dropped; for the trained
  split also each part's data rows in RecBole's order), what the full-sort test
  evaluation masks and holds out per user, the token lists (row r of a table is token r), and the test metrics
  RecBole gives for BPR checkpoints written by ``popaudit mitigate`` (their sha256: the
  tests rewrite them and compare bytes).

The evaluation runs RecBole's own code path: ``Trainer.evaluate(load_best_model=True)``,
whose ``torch.load`` call needs ``weights_only=False`` under torch >= 2.6 (RecBole 1.2.1
predates that default): ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` restores it.
Nothing here is imported by the tests; the tests never need RecBole.
"""

from __future__ import annotations

import os

os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"  # before torch is imported

import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
DATASET = "eval"
N_USERS, N_ITEMS = 160, 120
ALPHAS = (0.5, 0.0)
SPLITS: dict[str, dict[str, Any]] = {
    "RS-TO-user": {"eval_args": {"split": {"RS": [0.8, 0.1, 0.1]}, "order": "TO", "group_by": "user", "mode": "full"}},
    "RS-TO-none": {"eval_args": {"split": {"RS": [0.7, 0.2, 0.1]}, "order": "TO", "group_by": "none", "mode": "full"}},
    "LS-TO-valid_and_test": {"eval_args": {"split": {"LS": "valid_and_test"}, "order": "TO", "mode": "full"}},
    "LS-TO-test_only": {"eval_args": {"split": {"LS": "test_only"}, "order": "TO", "mode": "full"}},
    "TS-TO": {"eval_args": {"split": {"TS": [0.8, 0.1, 0.1]}, "order": "TO", "group_by": "user", "mode": "full"}},
    "RS-TO-user-normalized": {
        "eval_args": {"split": {"RS": [0.8, 0.1, 0.1]}, "order": "TO", "group_by": "user", "mode": "full"},
        "normalize_all": True,
    },
}
TRAINED = "RS-TO-user"
MODELS: dict[str, dict[str, Any]] = {
    "BPR": {"epochs": 30},
    "LightGCN": {"epochs": 30, "n_layers": 2},
    "SimpleX": {"epochs": 20, "history_len": 50, "train_neg_sample_args": {"distribution": "uniform", "sample_num": 10}},
}


def write_inter(path: Path, seed: int = 21) -> None:
    """The synthetic log (module docstring)."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, N_ITEMS + 1) ** 1.0
    weights /= weights.sum()
    item_tokens = rng.permutation(np.arange(1001, 1001 + N_ITEMS))  # popularity rank -> raw id
    rows: list[list[str]] = []
    for user in range(1, N_USERS + 1):
        n = int(rng.integers(5, 31))
        ranks = rng.choice(N_ITEMS, size=n, replace=False, p=weights)
        gaps = rng.choice([0, 1, 30, 3600, 86400], size=n, p=[0.15, 0.15, 0.2, 0.3, 0.2])
        times = int(rng.integers(880_000_000, 890_000_000)) + np.cumsum(gaps)
        for rank, t in zip(ranks, times):
            rows.append([str(user), str(item_tokens[rank]), str(int(rng.integers(1, 6))), str(int(t))])
        if rng.random() < 0.15:  # a re-interaction, later than the user's last
            again = rows[-int(rng.integers(1, n + 1))]
            rows.append([again[0], again[1], str(int(rng.integers(1, 6))), str(int(times[-1]) + 7200)])
    rows.append(list(rows[5]))  # one row repeated exactly
    for i in (17, 300):  # no timestamp: RecBole fills the mean of the others
        rows[i][3] = ""
    rows[40][1] = ""  # no item id: RecBole drops the row
    order = rng.permutation(len(rows))
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write("user_id:token\titem_id:token\trating:float\ttimestamp:float\n")
        for i in order:
            fh.write("\t".join(rows[i]) + "\n")


def settings(data_root: Path, work: Path, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "data_path": str(data_root),
        "checkpoint_dir": str(work),
        "use_gpu": False,
        "device": "cpu",
        "seed": 2020,
        "reproducibility": True,
        "show_progress": False,
        "state": "WARNING",
        "embedding_size": 16,
        "train_batch_size": 256,
        "eval_step": 5,
        "learner": "adam",
        "learning_rate": 0.01,
        "topk": [10, 20],
        "metrics": ["Recall", "NDCG", "Hit", "MRR"],
        "valid_metric": "NDCG@10",
        "load_col": {"inter": ["user_id", "item_id", "rating", "timestamp"]},
        **SPLITS[TRAINED],
        **extra,
    }


def record_split(data_root: Path, work: Path, name: str) -> dict[str, Any]:
    """RecBole's split under ``SPLITS[name]``: the data-row number of every interaction of
    each part, in RecBole's order (read through an extra token column ``row``)."""
    from recbole.config import Config
    from recbole.data import create_dataset
    from recbole.utils import init_seed

    rowed = data_root / "rowed"
    rowed.mkdir(exist_ok=True)
    lines = (HERE / f"{DATASET}.inter").read_text(encoding="utf-8").splitlines()
    with open(rowed / "rowed.inter", "w", encoding="utf-8", newline="\n") as fh:
        fh.write(lines[0] + "\trow:token\n")
        for i, line in enumerate(lines[1:]):
            fh.write(f"{line}\t{i}\n")
    extra = {**SPLITS[name], "load_col": {"inter": ["user_id", "item_id", "rating", "timestamp", "row"]}}
    config = Config(model="BPR", dataset="rowed", config_dict=settings(data_root, work, extra))
    init_seed(config["seed"], config["reproducibility"])
    dataset = create_dataset(config)
    parts = dataset.build()
    tokens = dataset.field2id_token["row"]
    out: dict[str, Any] = {"settings": {k: v for k, v in SPLITS[name].items()}}
    n_rows = len(lines) - 1
    labels = ["-"] * n_rows  # "-": a row RecBole dropped
    for label, built in enumerate(parts):
        order = [int(tokens[i]) for i in built.inter_feat["row"].numpy()]
        for row in order:
            labels[row] = str(label)
        if name == TRAINED:  # RecBole's order of each part, data rows space-separated
            out[("train", "valid", "test")[label]] = " ".join(map(str, order))
    out["labels"] = "".join(labels)
    # RecBole's ids of each part, to check the extra column changed nothing (dropped after)
    out["ids"] = {part: [built.inter_feat["user_id"].numpy().tolist(), built.inter_feat["item_id"].numpy().tolist()]
                  for part, built in zip(("train", "valid", "test"), parts)}
    return out


def train(data_root: Path, work: Path, model_name: str) -> dict[str, Any]:
    """Train one model with RecBole's Trainer; its test metrics and evaluation facts."""
    import torch
    from recbole.config import Config
    from recbole.data import create_dataset, data_preparation
    from recbole.trainer import Trainer
    from recbole.utils import get_model, init_seed

    config = Config(model=model_name, dataset=DATASET, config_dict=settings(data_root, work, MODELS[model_name]))
    init_seed(config["seed"], config["reproducibility"])
    dataset = create_dataset(config)
    train_data, valid_data, test_data = data_preparation(config, dataset)
    model = get_model(model_name)(config, train_data.dataset).to(config["device"])
    trainer = Trainer(config, model)
    trainer.fit(train_data, valid_data, saved=True, show_progress=False)
    saved = Path(trainer.saved_model_file)
    shutil.copyfile(saved, HERE / f"{model_name}-eval.pth")
    printed = trainer.evaluate(test_data, load_best_model=True, model_file=str(saved))
    exact = evaluate_exact(config, trainer, test_data, saved)
    run: dict[str, Any] = {"test": dict(printed), "test_exact": exact, "tokens": {
        "user_id": [str(t) for t in dataset.field2id_token["user_id"]],
        "item_id": [str(t) for t in dataset.field2id_token["item_id"]],
    }}
    parts = {"train": train_data.dataset, "valid": valid_data.dataset, "test": test_data.dataset}
    run["parts"] = {k: [d.inter_feat["user_id"].numpy().tolist(), d.inter_feat["item_id"].numpy().tolist()]
                    for k, d in parts.items()}
    run["masking"] = {  # per test user (RecBole id): masked and held-out item ids, space-separated
        str(int(u)): {"history": " ".join(str(i) for i in sorted(int(i) for i in test_data.uid2history_item[u])),
                      "positive": " ".join(str(i) for i in sorted(int(i) for i in test_data.uid2positive_item[u]))}
        for u in test_data.uid_list.tolist()
    }
    model.eval()
    with torch.no_grad():
        if model_name == "LightGCN":
            cached = (model.restore_user_e, model.restore_item_e)  # from the checkpoint's other_parameter
            user, item = model.forward()
            np.savez(HERE / "LightGCN-eval.forward.npz", user=user.numpy(), item=item.numpy())
            run["cache_minus_forward_max_abs"] = max(float((c - f).abs().max()) for c, f in zip(cached, (user, item)))
        if model_name == "SimpleX":
            served = model.get_UI_aggregation(model.user_emb.weight, model.item_emb(model.history_item_id),
                                              model.history_item_len)
            np.savez(HERE / "SimpleX-eval.served.npz", user=served.numpy(),
                     history_len=model.history_item_len.numpy().astype(np.int16))
    return run


def evaluate_exact(config: Any, trainer: Any, test_data: Any, model_file: Path) -> dict[str, float]:
    """RecBole's test metrics unrounded (12 decimals instead of the printed 4)."""
    from recbole.evaluator import Evaluator

    places = config["metric_decimal_place"]
    config["metric_decimal_place"] = 12
    trainer.evaluator = Evaluator(config)
    try:
        return dict(trainer.evaluate(test_data, load_best_model=True, model_file=str(model_file)))
    finally:
        config["metric_decimal_place"] = places
        trainer.evaluator = Evaluator(config)


def mitigated(data_root: Path, work: Path) -> dict[str, Any]:
    """BPR checkpoints written by popaudit's RecBole writer, evaluated by RecBole."""
    from recbole.config import Config
    from recbole.data import create_dataset, data_preparation
    from recbole.trainer import Trainer
    from recbole.utils import get_model, init_seed

    from auditor.mitigation.recbole_file import write_recbole

    config = Config(model="BPR", dataset=DATASET, config_dict=settings(data_root, work, MODELS["BPR"]))
    init_seed(config["seed"], config["reproducibility"])
    dataset = create_dataset(config)
    train_data, _valid, test_data = data_preparation(config, dataset)
    out: dict[str, Any] = {}
    work.mkdir()
    for alpha in ALPHAS:
        target = work / f"BPR-eval-alpha{alpha:g}.pth"
        written = write_recbole(HERE / "BPR-eval.pth", target, "item_embedding.weight", alpha)
        model = get_model("BPR")(config, train_data.dataset).to(config["device"])
        trainer = Trainer(config, model)
        printed = trainer.evaluate(test_data, load_best_model=True, model_file=str(target))
        exact = evaluate_exact(config, trainer, test_data, target)
        out[f"{alpha:g}"] = {"test": dict(printed), "test_exact": exact, "notes": written.notes,
                             "sha256": hashlib.sha256(target.read_bytes()).hexdigest()}
    return out


def main() -> int:
    import recbole
    import torch

    write_inter(HERE / f"{DATASET}.inter")
    record: dict[str, Any] = {"recbole": recbole.__version__, "torch": torch.__version__, "numpy": np.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # RecBole's trainer writes log_tensorboard/ into the working directory
        data_root = Path(tmp) / "dataset"
        (data_root / DATASET).mkdir(parents=True)
        shutil.copyfile(HERE / f"{DATASET}.inter", data_root / DATASET / f"{DATASET}.inter")
        record["splits"] = {name: record_split(data_root, Path(tmp) / "splits", name) for name in SPLITS}
        record["runs"] = {}
        for name in MODELS:
            work = Path(tmp) / name
            work.mkdir()
            record["runs"][name] = train(data_root, work, name)
            print(f"{name}: {record['runs'][name]['test']}")
        first = record["runs"]["BPR"]
        for name, run in record["runs"].items():  # one split and one numbering for every run
            assert run["parts"] == first["parts"] and run["tokens"] == first["tokens"], name
        # the evaluation loaders sort valid and test by user in place: compare the pairs of each part
        pairs = {k: sorted(zip(*v)) for k, v in record["splits"][TRAINED]["ids"].items()}
        assert pairs == {k: sorted(zip(*v)) for k, v in first["parts"].items()}, "the row column changed the split"
        if "--skip-mitigated" not in sys.argv:  # development only: the fixtures need both
            record["mitigated"] = mitigated(data_root, Path(tmp) / "mitigated")
    for split in record["splits"].values():
        split.pop("ids")
    runs = record["runs"]
    record["tokens"] = runs["BPR"]["tokens"]
    record["masking"] = runs["BPR"]["masking"]
    for run in runs.values():
        for key in ("tokens", "masking", "parts"):
            run.pop(key)
    (HERE / f"{DATASET}.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(json.dumps({k: v["test"] for k, v in record.get("mitigated", {}).items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

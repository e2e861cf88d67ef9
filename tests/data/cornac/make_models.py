"""Make the cornac fixture: BPR trained on string ids and saved with Recommender.save.

Run with cornac installed (see README.md for the versions):  python make_models.py
Writes interactions.csv, BPR.pkl (the file model.save wrote, renamed from its
timestamped name) and expected.json into this folder.
"""

import json
import shutil
import tempfile
from pathlib import Path

import cornac
import numpy as np
from cornac.data import Dataset
from cornac.models import BPR
from scipy.stats import spearmanr

HERE = Path(__file__).resolve().parent
N_USERS, N_ITEMS = 60, 80


def make_log() -> tuple[list[str], list[str]]:
    """Item i drawn with probability ~ 1/(i+1) (Zipf); raw ids are text (u7, i1007)."""
    rng = np.random.default_rng(7)
    p = 1.0 / np.arange(1, N_ITEMS + 1)
    items = np.concatenate([np.arange(N_ITEMS), rng.choice(N_ITEMS, 1400, p=p / p.sum())])
    users = rng.integers(0, N_USERS, items.size)
    order = rng.permutation(items.size)  # cornac numbers ids in order of first appearance
    return [f"u{u}" for u in users[order]], [f"i{1000 + i}" for i in items[order]]


def main() -> None:
    users, items = make_log()
    (HERE / "interactions.csv").write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in zip(users, items)))
    data = Dataset.from_uir([(u, i, 1.0) for u, i in zip(users, items)], seed=0)
    model = BPR(k=8, max_iter=60, learning_rate=0.05, lambda_reg=0.001, seed=0, verbose=False)
    model.fit(data)
    with tempfile.TemporaryDirectory() as tmp:
        saved = Path(model.save(tmp))
        shutil.copyfile(saved, HERE / "BPR.pkl")
    ids = sorted(model.iid_map, key=model.iid_map.__getitem__)  # raw id of each row
    counts = {i: 0 for i in ids}
    for i in items:
        counts[i] += 1
    freq = np.array([counts[i] for i in ids])
    table = np.asarray(model.i_factors)
    expected = {
        "cornac": cornac.__version__,
        "shape": list(table.shape),
        "first_ids": ids[:5],
        "row0": table[0].tolist(),
        "bias0": float(model.i_biases[0]),
        "spearman": float(spearmanr(freq, np.linalg.norm(table.astype(np.float64), axis=1)).statistic),
    }
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()

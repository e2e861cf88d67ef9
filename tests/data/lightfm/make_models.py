"""Make the LightFM fixture: a WARP model fit without item features, pickled.

Run with LightFM installed (see README.md for the versions):  python make_models.py
Writes interactions.csv, lightfm_warp.pkl and expected.json into this folder.
"""

import json
import pickle
from pathlib import Path

import lightfm
import numpy as np
import scipy.sparse as sp
from lightfm import LightFM
from scipy.stats import spearmanr

HERE = Path(__file__).resolve().parent
N_USERS, N_ITEMS = 60, 80


def make_log() -> tuple[np.ndarray, np.ndarray]:
    """Item i drawn with probability ~ 1/(i+1) (Zipf); every item at least once."""
    rng = np.random.default_rng(7)
    p = 1.0 / np.arange(1, N_ITEMS + 1)
    items = np.concatenate([np.arange(N_ITEMS), rng.choice(N_ITEMS, 1400, p=p / p.sum())])
    users = rng.integers(0, N_USERS, items.size)
    return users, items


def main() -> None:
    users, items = make_log()
    (HERE / "interactions.csv").write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in zip(users, items)))
    matrix = sp.coo_matrix((np.ones(items.size, np.float32), (users, items)), shape=(N_USERS, N_ITEMS)).tocsr()
    matrix.data[:] = 1.0
    model = LightFM(no_components=8, loss="warp", learning_rate=0.05, random_state=0)
    model.fit(matrix.tocoo(), epochs=30, num_threads=1)
    with open(HERE / "lightfm_warp.pkl", "wb") as fh:
        pickle.dump(model, fh, protocol=pickle.HIGHEST_PROTOCOL)
    freq = np.bincount(items, minlength=N_ITEMS)
    table = model.item_embeddings
    expected = {
        "lightfm": lightfm.__version__,
        "shape": list(table.shape),
        "row0": table[0].tolist(),
        "bias0": float(model.item_biases[0]),
        "spearman": float(spearmanr(freq, np.linalg.norm(table.astype(np.float64), axis=1)).statistic),
        "bias_spearman": float(spearmanr(freq, model.item_biases).statistic),
    }
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()

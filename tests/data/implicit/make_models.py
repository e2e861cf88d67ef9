"""Make the implicit fixtures: BPR saved with model.save (.npz) and ALS pickled (.pkl).

Run with implicit installed (see README.md for the versions):
    OPENBLAS_NUM_THREADS=1 python make_models.py
Writes interactions.csv, bpr.npz, als.pkl and expected.json into this folder.
"""

import json
import pickle
from pathlib import Path

import implicit
import numpy as np
import scipy.sparse as sp
from implicit.als import AlternatingLeastSquares
from implicit.bpr import BayesianPersonalizedRanking
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
    lines = "".join(f"{u},{i}\n" for u, i in zip(users, items))
    (HERE / "interactions.csv").write_text("user_id,item_id\n" + lines)
    matrix = sp.csr_matrix((np.ones(items.size, np.float32), (users, items)), shape=(N_USERS, N_ITEMS))
    matrix.sum_duplicates()
    freq = np.bincount(items, minlength=N_ITEMS)
    expected = {"implicit": implicit.__version__}
    bpr = BayesianPersonalizedRanking(factors=8, iterations=40, learning_rate=0.05, random_state=0)
    bpr.fit(matrix, show_progress=False)
    bpr.save(str(HERE / "bpr.npz"))
    als = AlternatingLeastSquares(factors=8, iterations=5, random_state=0)
    als.fit(matrix, show_progress=False)
    with open(HERE / "als.pkl", "wb") as fh:
        pickle.dump(als, fh, protocol=pickle.HIGHEST_PROTOCOL)
    for name, model in (("bpr", bpr), ("als", als)):
        table = np.asarray(model.item_factors)[:, :8]  # BPR appends its item bias as column 8
        norms = np.linalg.norm(table.astype(np.float64), axis=1)
        expected[name] = {
            "shape": list(table.shape),
            "row0": table[0].tolist(),
            "spearman": float(spearmanr(freq, norms).statistic),
        }
    expected["bpr"]["bias0"] = float(np.asarray(bpr.item_factors)[0, 8])
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()

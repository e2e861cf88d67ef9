"""Make ``expected.json``: the reference values of tests/test_group_measures.py, computed by
the published code of Elliot and of the reproducibility study of Abdollahpouri et al.'s
"The unfairness of popularity bias in recommendation" (Daniil et al.), on one shared input.

Run with a scratch virtual environment that has numpy, scipy and pandas (never the
project's): the two references are read from checkouts given on the command line.

    python3 -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install numpy scipy pandas
    git -C ELLIOT archive fc27efedaddf4a57294db14b4bcaa5553a0015d2 \\
        elliot/evaluation/metrics/base_metric.py elliot/evaluation/metrics/bias \\
        elliot/evaluation/popularity_utils | tar -x -C /tmp/ref
    git -C DANIIL show "600fe9c4f3c5a4be0744044a77330da02940f657:2. Movie_Recommendation.ipynb" \\
        > /tmp/ref/movie_recommendation.ipynb
    /tmp/refvenv/bin/python tests/data/popularity_groups/make_expected.py /tmp/ref

(ELLIOT: github.com/sisinflab/elliot; DANIIL: github.com/SavvinaDaniil/UnfairnessOfPopularityBias.)

* Elliot's ``PopRSP``, ``PopREO`` and ``ACLT`` classes and its ``Popularity`` (short head
  = 80% of the training transactions) run unmodified: their modules are loaded from the
  checkout without the package ``__init__`` files, which import every Elliot metric.
* Daniil et al.'s notebook cells that define the popular items (top 20%), the users'
  popular ratio, the niche/diverse/blockbuster split and the GAP of profiles and
  recommendations (``calculate_popularity``, ``sort_user_dist``, ``split``,
  ``calculate_group_characteristics`` and the "GAP" cell) run unmodified on the same data.

The input is drawn until no tie sits at any cut (the short head's last item, the 20%
popular items, the 20%/80% user splits), where the references order ties by row and
popaudit keeps tied items and users on one side. Nothing here is imported by the tests.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import types
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
N_USERS, N_ITEMS, CUTOFFS = 50, 30, (5, 10)


def draw(seed: int) -> dict[str, object]:
    """Users with 3-12 training items drawn by a Zipf-like weight, 1-4 held-out items
    they did not train on, and top-10 lists (no training item) of scores biased to
    popular items."""
    rng = np.random.default_rng(seed)
    weight = 1.0 / np.arange(1, N_ITEMS + 1) ** 1.1
    weight = weight[rng.permutation(N_ITEMS)]
    train, test, lists = [], [], []
    for user in range(N_USERS):
        size = int(rng.integers(3, 13))
        items = rng.choice(N_ITEMS, size=size, replace=False, p=weight / weight.sum())
        rest = np.setdiff1d(np.arange(N_ITEMS), items)
        held = rng.choice(rest, size=int(rng.integers(1, 5)), replace=False)
        score = rng.random(N_ITEMS) + 3.0 * weight
        score[items] = -np.inf
        ranked = np.argsort(-score, kind="stable")[: max(CUTOFFS)]
        train += [[user, int(i)] for i in items]
        test += [[user, int(i)] for i in held]
        lists.append([int(i) for i in ranked])
    return {"seed": seed, "n_users": N_USERS, "n_items": N_ITEMS, "train": train, "test": test, "lists": lists}


def no_ties_at_cuts(data: dict[str, object]) -> bool:
    train = np.asarray(data["train"])
    pop = np.bincount(train[:, 1], minlength=N_ITEMS)
    order = np.sort(pop)[::-1]
    last = int(np.searchsorted(np.cumsum(order), 0.8 * pop.sum() - 1e-9))  # Elliot's last short-head item
    n_top = int(0.2 * N_ITEMS)
    if order[last] == order[last + 1] or order[n_top - 1] == order[n_top] or order.min() == 0:
        return False
    popular = np.isin(np.arange(N_ITEMS), np.argsort(-pop, kind="stable")[:n_top])
    ratio = np.bincount(train[:, 0], weights=popular[train[:, 1]], minlength=N_USERS) / np.bincount(train[:, 0])
    ratios = np.sort(ratio)
    low, high = int(0.2 * N_USERS), int(0.8 * N_USERS)
    return bool(ratios[low - 1] != ratios[low] and ratios[high - 1] != ratios[high])


def load_elliot(root: Path) -> dict[str, type]:
    """Elliot's metric classes, loaded from their files (the package __init__s are skipped)."""
    for name in ("elliot", "elliot.evaluation", "elliot.evaluation.metrics"):
        package = types.ModuleType(name)
        package.__path__ = [str(root.joinpath(*name.split(".")))]
        sys.modules[name] = package

    def load(dotted: str) -> types.ModuleType:
        spec = importlib.util.spec_from_file_location(dotted, root.joinpath(*dotted.split(".")).with_suffix(".py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[dotted] = module
        spec.loader.exec_module(module)
        return module

    load("elliot.evaluation.metrics.base_metric")
    popularity = load("elliot.evaluation.popularity_utils.popularity")
    return {
        "Popularity": popularity.Popularity,
        "PopRSP": load("elliot.evaluation.metrics.bias.pop_rsp.pop_rsp").PopRSP,
        "PopREO": load("elliot.evaluation.metrics.bias.pop_reo.pop_reo").PopREO,
        "ACLT": load("elliot.evaluation.metrics.bias.aclt.aclt").ACLT,
    }


def elliot_values(root: Path, data: dict[str, object]) -> dict[str, dict[str, float]]:
    import scipy.sparse as sp

    classes = load_elliot(root)
    train = np.asarray(data["train"])
    train_dict: dict[int, dict[int, float]] = {}
    for user, item in train.tolist():
        train_dict.setdefault(user, {})[item] = 1.0
    matrix = sp.csr_matrix((np.ones(len(train)), (train[:, 0], train[:, 1])), shape=(N_USERS, N_ITEMS))
    dataset = types.SimpleNamespace(private_items={i: i for i in range(N_ITEMS)}, sp_i_train=matrix,
                                    transactions=sum(len(v) for v in train_dict.values()), train_dict=train_dict)
    relevant: dict[int, list[int]] = {}
    for user, item in data["test"]:
        relevant.setdefault(user, []).append(item)
    binary = types.SimpleNamespace(get_user_rel=lambda u: relevant.get(u, []))
    out: dict[str, dict[str, float]] = {}
    for k in CUTOFFS:
        objects = types.SimpleNamespace(cutoff=k, pop=classes["Popularity"](dataset), data=dataset,
                                        relevance=types.SimpleNamespace(binary_relevance=binary))
        recs = {u: [(i, float(-r)) for r, i in enumerate(row)] for u, row in enumerate(data["lists"])}
        out[str(k)] = {
            "pop_rsp": float(classes["PopRSP"](recs, None, None, objects).eval()),
            "pop_reo": float(classes["PopREO"](recs, None, None, objects).eval()),
            "aclt": float(classes["ACLT"](recs, None, None, objects).eval()),
            "short_head": sorted(int(i) for i in objects.pop.get_short_head()),
        }
    return out


def daniil_values(notebook: Path, data: dict[str, object]) -> dict[str, dict[str, float]]:
    """Run the notebook's own cells on the training pairs (as ``df_events``) and lists."""
    import pandas as pd
    from scipy import stats

    cells = ["".join(c["source"]) for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]

    def cell(marker: str) -> str:
        (found,) = [c for c in cells if marker in c]
        return found

    train = pd.DataFrame(data["train"], columns=["user", "movie"])
    train["rating"] = 1.0
    out: dict[str, dict[str, float]] = {}
    for k in CUTOFFS:
        scope = {"np": np, "pd": pd, "stats": stats, "time": time, "tqdm": lambda x: x, "df_events": train,
                 "user_col": "user", "item_col": "movie", "top_fraction": 0.2, "pop_notion": "pop_one"}
        for marker in ("def users_and_items", "user_dist, num_users = user_distribution",
                       "df_item_dist = pd.DataFrame(item_dist)", "num_top = int(top_fraction * num_items)",
                       "def calculate_popularity", "pop_count,user_hist,pop_fraq, pop_item_fraq = calculate_popularity",
                       "def sort_user_dist", "popularity_function = {", "user_dist_sorted = sort_user_dist("):
            exec(cell(marker), scope)  # noqa: S102 - the reference's own code, on our data
        scope["df_item_dist_cornac"] = scope["df_item_dist"]
        scope["algo_names"] = ["model"]
        scope["algo_dict"] = {"model": [(u, [(i, 0.0) for i in row[:k]]) for u, row in enumerate(data["lists"])]}
        exec(cell("low_rec_gap_list = [] # one entry per algorithm"), scope)  # noqa: S102
        exec(cell("low_gap_vals.append((low_rec_gap_list[i] - low_GAP)"), scope)  # noqa: S102
        out[str(k)] = {
            "gap_delta_niche": scope["low_gap_vals"][0] / 100.0,  # the notebook reports percent
            "gap_delta_diverse": scope["medium_gap_vals"][0] / 100.0,
            "gap_delta_blockbuster": scope["high_gap_vals"][0] / 100.0,
            "gap_profile": [scope["low_GAP"], scope["med_GAP"], scope["high_GAP"]],
            "group_sizes": [len(scope["low"]), len(scope["med"]), len(scope["high"])],
            "niche_users": sorted(int(u) for u in scope["low"].index),
            "blockbuster_users": sorted(int(u) for u in scope["high"].index),
        }
    return out


def main(ref: Path) -> None:
    seed = next(s for s in range(1000) if no_ties_at_cuts(draw(s)))
    data = draw(seed)
    (HERE / "inputs.json").write_text(json.dumps(data) + "\n")
    expected = {
        "elliot": {"commit": "fc27efedaddf4a57294db14b4bcaa5553a0015d2", "values": elliot_values(ref, data)},
        "daniil": {"commit": "600fe9c4f3c5a4be0744044a77330da02940f657",
                   "notebook": "2. Movie_Recommendation.ipynb",
                   "values": daniil_values(ref / "movie_recommendation.ipynb", data)},
    }
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"seed {seed}: wrote inputs.json and expected.json")


if __name__ == "__main__":
    main(Path(sys.argv[1]))

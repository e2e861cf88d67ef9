"""Write the served-lists agreement fixture: a training log, served lists (ranks, and the
same lists as scores), a second set of lists, and what Evidently and RecTools measure on
them at K = 1, 3, 5 (expected.json). Run in a scratch venv (README.md beside this file);
popaudit is not imported here, and the libraries are never imported by the tests.
"""

from __future__ import annotations

import json
import platform
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
KS = (1, 3, 5)


def make_data() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(train, lists by rank, the same lists by score with rows shuffled, other lists by rank)."""
    rng = np.random.default_rng(2104)
    # Training log: 40 users, items 101..130 with Zipf-like weights; some interactions
    # repeat (user, item), so interactions and distinct users per item differ.
    items = np.arange(101, 131)
    weights = 1.0 / np.arange(1, items.size + 1) ** 1.1
    train_items = rng.choice(items, size=400, p=weights / weights.sum())
    train_users = rng.integers(1, 41, size=400)
    train = pd.DataFrame({"user_id": train_users, "item_id": train_items})
    # Served lists: users 1..14 of the log and user 99 it lacks; items 131..133 never
    # trained (cold); two lists shorter than 5 (3 and 4 items).
    candidates = np.arange(101, 134)
    lengths = {3: 3, 7: 4}
    rows, other = [], []
    for user in [*range(1, 15), 99]:
        pool = rng.permutation(candidates)
        for rank, item in enumerate(pool[: lengths.get(user, 5)], start=1):
            rows.append((user, int(item), rank))
        for rank, item in enumerate(rng.permutation(candidates)[:5], start=1):
            other.append((user, int(item), rank))
    ranked = pd.DataFrame(rows, columns=["user_id", "item_id", "rank"])
    scored = ranked.copy()
    # Scores falling with the rank (consecutive ranks differ by more than the noise), on
    # another scale for each user, rounded to 4 decimals: no ties.
    scale = scored["user_id"].map(dict(zip(scored["user_id"].unique(), rng.uniform(0.5, 2.0, 15))))
    scored["score"] = (scale * (10.0 - scored["rank"] + rng.uniform(0, 0.5, len(scored)))).round(4)
    scored = scored.drop(columns="rank").sample(frac=1.0, random_state=7).reset_index(drop=True)
    return train, ranked, scored, pd.DataFrame(other, columns=["user_id", "item_id", "rank"])


def rectools_figures(train: pd.DataFrame, ranked: pd.DataFrame, other: pd.DataFrame) -> dict[str, dict[str, float]]:
    from rectools.metrics import AvgRecPopularity, CatalogCoverage, Intersection, MeanInvUserFreq

    catalog = np.union1d(train["item_id"].unique(), ranked["item_id"].unique())
    out: dict[str, dict[str, float]] = {}
    for k in KS:
        out[str(k)] = {
            "AvgRecPopularity": float(AvgRecPopularity(k=k).calc(ranked, train)),
            "MeanInvUserFreq": float(MeanInvUserFreq(k=k).calc(ranked, train)),
            "CatalogCoverage_normalized": float(CatalogCoverage(k=k, normalize=True).calc(ranked, catalog)),
            "Intersection_other_in_lists": float(Intersection(k=k).calc(other, ranked)),
        }
    return out


def evidently_figures(train: pd.DataFrame, lists: pd.DataFrame, kind: str) -> dict[str, dict[str, float]]:
    from evidently.legacy.metrics import NoveltyMetric, PopularityBias
    from evidently.legacy.pipeline.column_mapping import ColumnMapping
    from evidently.legacy.report import Report

    mapping = ColumnMapping(user_id="user_id", item_id="item_id", prediction=kind, recommendations_type=kind,
                            target=None)
    out: dict[str, dict[str, float]] = {}
    for k in KS:
        report = Report(metrics=[PopularityBias(k=k), NoveltyMetric(k=k)])
        report.run(reference_data=None, current_data=lists, column_mapping=mapping,
                   additional_data={"current_train_data": train})
        bias, novelty = (m["result"] for m in report.as_dict()["metrics"])
        out[str(k)] = {
            "PopularityBias_apr": float(bias["current_apr"]),
            "PopularityBias_coverage": float(bias["current_coverage"]),
            "PopularityBias_gini": float(bias["current_gini"]),
            "NoveltyMetric": float(novelty["current_value"]),
        }
    return out


def main() -> None:
    train, ranked, scored, other = make_data()
    train.to_csv(HERE / "train.csv", index=False)
    ranked.to_csv(HERE / "recs.csv", index=False)
    scored.to_csv(HERE / "recs_scores.csv", index=False)
    other.to_csv(HERE / "recs_other.csv", index=False)
    expected = {
        "made_by": "tests/data/served_lists/make_expected.py",
        "versions": {name: version(name) for name in ("evidently", "rectools", "pandas", "numpy")}
        | {"python": platform.python_version()},
        "ks": list(KS),
        "rectools": rectools_figures(train, ranked, other),
        "evidently_rank": evidently_figures(train, ranked, "rank"),
        "evidently_score": evidently_figures(train, scored, "score"),
    }
    (HERE / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")


if __name__ == "__main__":
    main()

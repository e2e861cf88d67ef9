"""Accuracy QA9 N1: the evaluated users are measured, and the trade-off's NDCG-change
interval resamples them, in raw-user-id order (:func:`auditor.evaluation.evaluate`, by the
helper the head-share interval's order comes from), so one model, log, held-out pairs and
seed give one interval whatever order the holdout file stores its rows in (the old code
took the holdout's order of first appearance: a shuffled or re-sorted export moved the
quoted CI, and ``diff`` saw a change)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.evaluation import evaluate
from auditor.model import HeldOutQueries
from auditor.tradeoff import Point, UserValues, paired_changes
from qa_norm_model import write_norm_model


def _independent_interval(delta: np.ndarray, n: int, seed: int) -> list[float]:
    """The paired percentile bootstrap of mean(delta), in numpy: each resample draws n users
    uniformly, in the order given (the users sorted by raw id)."""
    draws = np.random.default_rng(seed).integers(0, delta.size, size=(n, delta.size))
    return [float(x) for x in np.percentile(delta[draws].mean(axis=1), [2.5, 97.5])]


def _ndcg(lists: np.ndarray, held: list[np.ndarray], k: int) -> np.ndarray:
    """NDCG@k of each user's list against their held-out set, by its definition."""
    gains = 1.0 / np.log2(np.arange(2, k + 2))
    return np.array([gains[np.isin(row[:k], h)].sum() / gains[: min(len(h), k)].sum() for row, h in zip(lists, held)])


def test_the_evaluated_users_are_measured_in_raw_id_order_whatever_the_stored_order() -> None:
    rng = np.random.default_rng(3)
    n, k = 40, 5
    ids = np.array([f"u{i:02d}" for i in range(n)])  # user at population position i has id u<i>
    lists = {"dot": rng.permutation(np.tile(np.arange(30), (n, 1)), axis=1)[:, :k],
             "alpha_0.5": rng.permutation(np.tile(np.arange(30), (n, 1)), axis=1)[:, :k]}
    held = [np.sort(rng.choice(8, size=rng.integers(1, 4), replace=False)) for _ in range(n)]
    dot, alpha = _ndcg(lists["dot"], held, k), _ndcg(lists["alpha_0.5"], held, k)
    expected = _independent_interval(alpha - dot, 500, 7)
    points = [Point("dot", float(dot.mean()), 0.5, 0.5), Point("alpha_0.5", float(alpha.mean()), 0.4, 0.5)]
    means = set()
    for perm in (np.arange(n), np.arange(n)[::-1], rng.permutation(n)):  # holdout as built, reversed, shuffled
        indptr = np.concatenate([[0], np.cumsum([held[u].size for u in perm])])
        heldout = HeldOutQueries(positions=perm, indptr=indptr, items=np.concatenate([held[u] for u in perm]),
                                 source="h", user_ids=ids[perm])
        evaluation = evaluate(heldout, lists, [k], tolerance=0.9, keep_seen=False, seen_excluded=True)
        assert evaluation.user_ids.tolist() == ids.tolist()
        assert evaluation.ndcg[k]["dot"] == pytest.approx(dot, abs=1e-12)  # users u00..u39
        means.add(evaluation.accuracy.at[k]["dot"].ndcg)  # bit-identical, not a summation order apart
        values = UserValues(evaluation.ndcg[k], {name: (np.zeros(n), np.full(n, k)) for name in lists})
        ci = paired_changes(points, values, 500, seed=7)["alpha_0.5"].ndcg_delta_ci
        assert ci == pytest.approx(expected, abs=1e-12)
    assert len(means) == 1
    mixed = HeldOutQueries(positions=np.array([2, 0, 1]), indptr=np.arange(4), items=np.array([lists["dot"][2, 0],
                           lists["dot"][0, 0], 29]), source="h", user_ids=np.array([2, "a", 1], dtype=object))
    as_read = evaluate(mixed, {"dot": lists["dot"][:3]}, [k], tolerance=0.9, keep_seen=False, seen_excluded=True)
    assert as_read.ndcg[k]["dot"][:2].tolist() == [1.0, 1.0]  # ids that do not sort: measured as read


def _accuracy(*args: str) -> dict[str, object]:
    out = Path(f"r{len(list(Path('.').glob('r*.json')))}.json")
    result = CliRunner().invoke(cli, ["check", *args, "--interactions", "train.parquet", "--no-probes", "-q",
                                      "--json", str(out)])
    assert result.exit_code == 0, result.output
    accuracy: dict[str, object] = json.loads(out.read_text())["accuracy"]
    return accuracy


@pytest.mark.filterwarnings("ignore")
def test_the_ndcg_interval_does_not_depend_on_holdout_row_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA9 N1's repro. Old code, alpha_0.75's NDCG-change CI for model.pt: [-0.00874, +0.00470]
    as built (users ascending), [-0.00882, +0.00386] shuffled, [-0.00878, +0.00416] sorted by
    user descending; for items.npy [-0.01165, -0.00254] / [-0.01209, -0.00222] / [-0.01213, -0.00241]."""
    monkeypatch.chdir(tmp_path)
    write_norm_model(tmp_path)
    hold = pq.read_table("hold.parquet")
    pq.write_table(hold.take(pa.array(np.random.default_rng(2).permutation(hold.num_rows))), "hold_shuf.parquet")
    pq.write_table(hold.sort_by([("user_id", "descending"), ("item_id", "ascending")]), "hold_desc.parquet")
    for model, known in (("model.pt", [-0.00874, 0.00470]), ("items.npy", [-0.01165, -0.00254])):
        built, *others = [_accuracy(model, "--holdout", f"{h}.parquet") for h in ("hold", "hold_shuf", "hold_desc")]
        for other in others:
            assert other["changes"] == built["changes"] and other["recommendation"] == built["recommendation"]
        ci = built["changes"]["alpha_0.75"]["ndcg_delta_ci"]  # type: ignore[index]
        assert [round(end, 5) for end in ci] == known  # the as-built holdout lists users in raw-id order

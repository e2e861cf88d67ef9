"""The trade-off with one user to resample (Measures F2): every resample of one user is
that user, so no interval can be measured. The intervals are null (never NaN, never
printed as "+nan"), the point estimates decide as with ``--bootstrap 0``, and the
sentence and ``accuracy.ci_undefined_reason`` say why.

Known answers: one user whose held-out items are cosine's top two; dot's list puts the
popular item 0 (norm 50, cosine 0.3 with the query) first and the two held-out items at
ranks 2 and 3, so NDCG@10 is (1/log2 3 + 1/log2 4) / (1 + 1/log2 3) = 0.6934 for dot and
1 for cosine; the top-1% head (item 0) holds 1 of dot's 10 slots and none of cosine's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from auditor.tradeoff import Point, UserValues, paired_changes, unresampled


def _values(n_queried: int, n_evaluated: int) -> tuple[list[Point], UserValues]:
    """dot and cosine: cosine better on NDCG and head share for every user."""
    filled = np.full(n_queried, 10)
    values = UserValues(
        ndcg={"dot": np.full(n_evaluated, 0.6), "cosine": np.full(n_evaluated, 0.9)},
        head_slots={"dot": (np.full(n_queried, 1), filled), "cosine": (np.zeros(n_queried, dtype=np.int64), filled)},
    )
    return [Point("dot", 0.6, 0.1, 0.5), Point("cosine", 0.9, 0.0, 0.5)], values


def test_one_user_gives_null_intervals_not_nan() -> None:
    points, values = _values(1, 1)
    change = paired_changes(points, values, 1000, seed=0)["cosine"]
    assert change.ndcg_delta_ci is None and change.head_share_delta_ci is None
    assert change.ndcg_delta == pytest.approx(0.3) and change.head_share_delta == pytest.approx(-0.1)
    assert change.clearly_less_head  # the point estimate decides
    assert unresampled(values, 1000) == (
        "one queried user: a bootstrap over users cannot measure the uncertainty, so the point estimates decide")
    assert unresampled(values, 0) is None


def test_one_evaluated_user_among_many_queried_keeps_the_head_share_interval() -> None:
    points, values = _values(30, 1)
    change = paired_changes(points, values, 200, seed=0)["cosine"]
    assert change.ndcg_delta_ci is None
    assert change.head_share_delta_ci == pytest.approx((-0.1, -0.1))  # every user: -1 of 10 slots
    assert unresampled(values, 200) == "one evaluated user: the NDCG changes have no bootstrap interval"
    assert unresampled(*_values(2, 2)[1:], 200) is None


def _write(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The QA's model: one real user, 20 zero-vector users who trained item 0 only."""
    import torch

    rng = np.random.default_rng(0)
    items = rng.normal(size=(100, 4))
    items /= np.linalg.norm(items, axis=1, keepdims=True)
    items[0] *= 50.0
    users = np.zeros((21, 4))
    v0 = items[0] / np.linalg.norm(items[0])
    w = rng.normal(size=4)
    w -= (w @ v0) * v0
    w /= np.linalg.norm(w)
    users[0] = 0.3 * v0 + np.sqrt(1 - 0.09) * w
    model = tmp_path / "m.pt"
    torch.save({"user_embedding.weight": torch.tensor(users, dtype=torch.float32),
                "item_embedding.weight": torch.tensor(items, dtype=torch.float32)}, model)
    train, hold = tmp_path / "train.parquet", tmp_path / "hold.parquet"
    pq.write_table(pa.table({"user_id": [0, 0, 0] + list(range(1, 21)),
                             "item_id": [5, 6, 7] + [0] * 20}), train)
    cosines = (items / np.linalg.norm(items, axis=1, keepdims=True)) @ users[0]
    cosines[[5, 6, 7]] = -np.inf
    pq.write_table(pa.table({"user_id": [0, 0], "item_id": np.argsort(-cosines, kind="stable")[:2]}), hold)
    return model, train, hold


@pytest.mark.slow  # two audits, about 8 s
def test_one_evaluated_user_recommends_on_the_point_estimates(tmp_path: Path) -> None:
    from auditor.cli import cli

    model, train, hold = _write(tmp_path)
    reports = {}
    for bootstrap in ("1000", "0"):
        out = tmp_path / f"r{bootstrap}.json"
        run = CliRunner().invoke(cli, ["check", str(model), "--interactions", str(train), "--holdout", str(hold),
                                       "-k", "10", "--no-probes", "-q", "--bootstrap", bootstrap,
                                       "--format", "json", "-o", str(out)])
        assert run.exit_code == 0, run.output
        reports[bootstrap] = json.loads(out.read_text())["accuracy"]
    accuracy = reports["1000"]
    expected_dot = (1 / np.log2(3) + 1 / np.log2(4)) / (1 + 1 / np.log2(3))
    assert accuracy["n_users_evaluated"] == 1
    assert accuracy["at"]["10"]["dot"]["ndcg"] == pytest.approx(expected_dot)
    assert accuracy["at"]["10"]["cosine"]["ndcg"] == pytest.approx(1.0)
    assert accuracy["changes"]["cosine"] == pytest.approx({"ndcg_delta": 1 - expected_dot, "head_share_delta": -0.1,
                                                           "ndcg_delta_ci": None, "head_share_delta_ci": None})
    # Before: NaN intervals counted as "not clearly lower", so dot stayed, "does not lower the head share".
    assert accuracy["recommended"] == reports["0"]["recommended"] == "cosine"
    assert "nan" not in accuracy["recommendation"].lower()
    assert accuracy["recommendation"].endswith(
        "(one queried user: a bootstrap over users cannot measure the uncertainty, so the point estimates decide).")
    assert accuracy["ci_undefined_reason"].startswith("one queried user") and accuracy["n_bootstrap"] == 0
    assert reports["0"]["ci_undefined_reason"] is None

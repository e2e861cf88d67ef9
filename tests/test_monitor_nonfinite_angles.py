"""A NaN or infinite item row has no update angle (QA round 7, monitor F2): the step's angle
figures are the finite moved rows' only (``angle_n`` counts those), the row is counted in
``n_nonfinite`` as every other NaN row is, an angle alert is not tripped by it, no numpy
RuntimeWarning leaks, and ``check --trace``'s pooled angles (C1/C4 evidence) follow."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch

from auditor.monitor import TrainingMonitor, read_trace
from auditor.monitor.settings import TrainingDivergedWarning
from auditor.probes.update import step_geometry


def orthogonal_step(weight: torch.Tensor, rng: np.random.Generator, moved: int) -> np.ndarray:
    """A gradient orthogonal to each of the first ``moved`` rows (every angle 90°), 0 elsewhere."""
    w = weight.detach().numpy()
    g = rng.standard_normal(w.shape)
    g -= (np.einsum("ij,ij->i", g, w) / np.einsum("ij,ij->i", w, w))[:, None] * w
    g[moved:] = 0.0
    return g


def test_non_finite_rows_are_left_out_of_every_angle_figure(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    table = torch.nn.Parameter(torch.from_numpy(rng.standard_normal((50, 8))))  # float64: exact 90° angles
    opt = torch.optim.SGD([table], lr=0.1)
    grad = orthogonal_step(table, rng, 40)
    grad[2, 0] = -np.inf  # row 2 becomes infinite
    grad[7, 3] = np.nan  # row 7 becomes NaN
    before = table.detach().numpy().copy()
    expected_growth = np.median([np.sum((0.1 * grad[i]) ** 2) / np.sum(before[i] ** 2)
                                 for i in range(40) if i not in (2, 7)])
    path = tmp_path / "trace.jsonl"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        monitor = TrainingMonitor(table, optimizer=opt, counts=np.arange(50) + 1, interval=1, trace=path,
                                  alerts=["angle_share_90_1<0.99", "angle_median<89"])
        table.grad = torch.from_numpy(grad)
        with monitor.step(torch.arange(40), loss=1.0):
            opt.step()
        epoch = monitor.end_epoch()
        monitor.close()
    assert [type(w.message) for w in caught] == [TrainingDivergedWarning]  # no RuntimeWarning, no alert
    step = monitor.records[0]
    assert step.angle_n == 38 and step.angle_share_90_1 == 1.0 and step.angle_share_90_10 == 1.0
    assert abs(step.angle_median - 90.0) < 1e-9  # type: ignore[operator]
    assert np.isclose(step.growth_per_update, expected_growth, rtol=1e-12)  # type: ignore[arg-type]
    assert step.n_nonfinite == 2 and monitor.fired == []
    assert (epoch.angle_n, epoch.angle_share_90_1, epoch.n_nonfinite) == (38, 1.0, 2)
    angles = read_trace(path).angles()
    assert angles is not None and (angles.n, angles.share_90_1, angles.share_90_10) == (38, 1.0, 1.0)


def test_step_geometry_keeps_a_row_only_when_finite_before_and_after() -> None:
    q = torch.tensor([[1.0, 0.0], [np.nan, 1.0], [0.0, 1.0], [2.0, 0.0]], dtype=torch.float64)
    after = q + torch.tensor([[0.0, 1.0], [1.0, 0.0], [np.inf, 0.0], [2.0, 2.0]], dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning fails the test
        angles, residual, growth, change, moved = step_geometry(q, after, 1e-9)
    assert moved.tolist() == [True, False, False, True]
    assert np.allclose(angles, [90.0, 45.0]) and np.allclose(growth, [1.0, 2.0])
    assert np.allclose(change, [1.0, (16 + 4 - 4) / 4]) and np.allclose(residual, [0.0, 2 * 4 / 8])

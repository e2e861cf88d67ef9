"""Above ``max_exact_items`` (QA round 4, F2 and F3): only ρ and the slope are sampled; a
NaN row anywhere in the table is found, ``mean_norm`` is the table's, and the head shares
are the whole table's exact top-K (400 items, max_exact_items 300 and sample_items 200
stand for the defaults 200,000 and 100,000)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from auditor.monitor import TrainingMonitor
from auditor.monitor.settings import TrainingDivergedWarning

N = 400


def table_and_counts() -> tuple[torch.Tensor, np.ndarray]:
    rng = np.random.default_rng(0)
    p = 1.0 / np.arange(1, N + 1) ** 1.1
    counts = np.bincount(rng.permutation(N)[rng.choice(N, 20_000, p=p / p.sum())], minlength=N)
    rows = rng.normal(size=(N, 16))
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    rows *= (1 + 0.3 * np.log1p(counts) + rng.normal(0, 0.3, N))[:, None]
    return torch.tensor(rows, dtype=torch.float32), counts


def head_share(queries: np.ndarray, table: np.ndarray, counts: np.ndarray, cosine: bool) -> float:
    """Exact top-10 over the whole table, head = the top 1% of the counts (4 items, ties at the cut kept)."""
    if cosine:
        queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
        table = table / np.linalg.norm(table, axis=1, keepdims=True)
    top = np.argsort(-(queries @ table.T), axis=1, kind="stable")[:, :10]
    cut = np.sort(counts)[::-1][max(1, int(0.01 * N)) - 1]
    return float(np.isin(top, np.flatnonzero(counts >= cut)).mean())


def test_sampled_rho_but_whole_table_norms_and_head_shares() -> None:
    table, counts = table_and_counts()
    monitor = TrainingMonitor(table, counts=counts, interval=1, max_exact_items=300, sample_items=200)
    monitor.before_step(None)
    record = monitor.after_step()
    assert record is not None
    sample = monitor._sample.numpy()
    norms = np.linalg.norm(table.double().numpy(), axis=1)
    assert record.spearman_method == "sample" and record.spearman_n == 200
    assert record.spearman == pytest.approx(spearmanr(counts[sample], norms[sample]).statistic, abs=1e-12)
    assert record.mean_norm == pytest.approx(norms.mean(), rel=1e-12) and norms.mean() != pytest.approx(norms[sample].mean())
    queries = table.double().numpy()[monitor.queries._rows.numpy()]
    dot, cos = (head_share(queries, table.double().numpy(), counts, c) for c in (False, True))
    assert (record.head_share_dot, record.head_share_cosine) == (pytest.approx(dot), pytest.approx(cos))
    assert (dot, cos) == (0.0515625, 0.01171875)


def test_a_nan_row_outside_the_rho_sample_is_found() -> None:
    table, counts = table_and_counts()
    monitor = TrainingMonitor(table, counts=counts, interval=1, max_exact_items=300, sample_items=200)
    outside = np.setdiff1d(np.arange(N), monitor._sample.numpy())[:5]
    with torch.no_grad():
        table[torch.from_numpy(outside)] = float("nan")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        monitor.before_step(None)
        record = monitor.after_step()
    assert record is not None and record.n_nonfinite == 5 and np.isnan(record.mean_norm)
    assert record.spearman is None and record.head_share_dot is None
    assert [str(w.message)[:48] for w in caught if w.category is TrainingDivergedWarning] == [
        "5 of 400 item rows are NaN or infinite at step 1"]
    monitor.close()
    assert monitor.diverged == (1, 5)

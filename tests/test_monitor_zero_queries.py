"""The monitor's head shares leave zero query vectors out, by ``check``'s one rule
(:func:`auditor.loading.zero_queries.queried_rows`; QA 11 monitor F1): a zero query scores every
item 0, so the tie rule would serve it rows 0..K-1 under dot and cosine alike, a list that says
nothing of the model. The record counts them (``n_zero_queries``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from auditor.loading.zero_queries import queried_rows
from auditor.monitor import TrainingMonitor, read_trace
from auditor.monitor.settings import MonitorInputWarning

DATA = Path(__file__).parent / "data" / "monitor" / "zero_queries.npz"
"""The QA's table after one epoch (300 users, 30 of them kept at zero; 400 Zipf items; dim 16)
and its counts: ``check --keep-seen`` on it gives dot 0.3596, cosine 0.0011, ratio 323.67."""


def _head_share(counts: np.ndarray, queries: np.ndarray, table: np.ndarray, k: int, cosine: bool) -> float:
    """Independent: float64 scores, top-K by score then lower row, the top 1% of items by count
    (ties at the cut in) as the head, over the non-zero queries."""
    q, t = queries.astype(np.float64), table.astype(np.float64)
    q = q[np.abs(q).sum(axis=1) > 0]
    if cosine:
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
        norms = np.linalg.norm(t, axis=1, keepdims=True)
        t = np.where(norms > 0, t / np.where(norms > 0, norms, 1.0), 0.0)
    scores = q @ t.T
    if cosine:
        scores[:, np.abs(table).sum(axis=1) == 0] = -np.inf  # a zero row has no direction: never served
    top = np.array([np.lexsort((np.arange(len(s)), -s))[:k] for s in scores])
    cut = np.sort(counts)[::-1][max(1, int(len(counts) // 100)) - 1]
    head = (counts >= cut) & (counts > 0)
    return float(head[top].mean())


def test_the_qas_table_gives_checks_shares_over_the_270_non_zero_queries() -> None:
    data = np.load(DATA)
    users, items, counts = data["users"], data["items"], data["counts"]
    assert int((~queried_rows(users)).sum()) == 30
    monitor = TrainingMonitor(torch.from_numpy(items), counts=counts, interval=0, queries=torch.from_numpy(users))
    with pytest.warns(MonitorInputWarning, match=r"30 of 300 query vectors are zero \(they score every item 0\): left "
                                                 r"out of the head shares, as check leaves them out"):
        record = monitor.end_epoch()
    dot, cosine = _head_share(counts, users, items, 10, False), _head_share(counts, users, items, 10, True)
    assert (dot, cosine) == (971 / 2700, 3 / 2700)  # 270 queries x 10 slots
    assert record.head_share_dot == pytest.approx(dot, abs=1e-15)  # was 0.3637 with the 30 zero queries
    assert record.head_share_cosine == pytest.approx(cosine, abs=1e-15)  # was 0.0410
    assert record.head_share_ratio == pytest.approx(971 / 3, abs=1e-12)  # 323.67, check --keep-seen's; was 8.87
    assert record.n_zero_queries == 30


def test_a_constructed_case_has_its_hand_computed_shares(tmp_path) -> None:
    # Item 0 is the head (1 item of 6). q=(0,1) is served row 1 (dot 2; cosine ties 1 and 2:
    # lower row); q=(1,0.1) row 0. Two zero queries would be served row 0, the head, by the tie
    # rule under both scorings: 3/4 each. Left out: 1/2 each.
    table = torch.tensor([[1.0, 0.0], [0.0, 2.0], [0.0, 1.0], [0.5, 0.5], [0.1, 0.1], [0.2, 0.0]])
    queries = torch.tensor([[0.0, 1.0], [0.0, 0.0], [1.0, 0.1], [0.0, 0.0]])
    path = tmp_path / "t.jsonl"
    with pytest.warns(MonitorInputWarning, match="2 of 4 query vectors are zero"):
        monitor = TrainingMonitor(table, counts=[10, 1, 1, 1, 1, 1], interval=0, queries=queries, k=1, trace=path)
        record = monitor.end_epoch()
    assert (record.head_share_dot, record.head_share_cosine, record.head_share_ratio) == (0.5, 0.5, 1.0)
    assert record.n_zero_queries == 2
    monitor.close()
    assert read_trace(path).epochs[0].n_zero_queries == 2  # in the trace, read back
    assert json.loads(path.read_text().splitlines()[1])["n_zero_queries"] == 2


def test_all_zero_queries_leave_the_shares_unmeasured() -> None:
    monitor = TrainingMonitor(torch.eye(3), counts=[5, 1, 1], interval=0, queries=torch.zeros(2, 3))
    with pytest.warns(MonitorInputWarning, match=r"2 of 2 query vectors are zero .*: so the head shares are unmeasured"):
        record = monitor.end_epoch()
    assert (record.head_share_dot, record.head_share_cosine, record.head_share_ratio) == (None, None, None)
    assert record.n_zero_queries == 2


def test_a_zero_item_row_sampled_as_a_query_is_left_out() -> None:
    # The default queries are item rows: a padding row (zero) among them is no query.
    rng = np.random.default_rng(4)
    table = rng.normal(size=(30, 4))
    table[0] = 0.0
    counts = rng.integers(1, 50, 30)
    monitor = TrainingMonitor(torch.from_numpy(table), counts=counts, interval=0, n_queries=30)
    with pytest.warns(MonitorInputWarning, match="1 of 30 query vectors are zero"):
        record = monitor.end_epoch()
    assert record.n_zero_queries == 1
    # the 29 non-zero rows as queries over the whole table (cosine never serves the zero row)
    assert record.head_share_dot == pytest.approx(_head_share(counts, table, table, 10, False), abs=1e-15)
    assert record.head_share_cosine == pytest.approx(_head_share(counts, table, table, 10, True), abs=1e-15)


def test_a_monitor_without_zero_queries_records_none_and_says_nothing() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        record = TrainingMonitor(torch.eye(4) + 0.1, counts=[3, 1, 1, 1], interval=0, k=1).end_epoch()
    assert record.n_zero_queries == 0 and record.head_share_dot is not None


def test_a_half_precision_table_judges_and_scores_its_queries_in_its_own_dtype() -> None:
    # QA 11 monitor N1: float32 queries of 1e-9 are 0 in float16, the dtype the table serves in,
    # so they are no queries there (they were ranked: the table was widened to float32 first);
    # the other queries are rounded to float16 as served. The same queries against the float32
    # table are kept: 1e-9 is no zero there.
    data = np.load(DATA)
    users, items, counts = data["users"], data["items"], data["counts"]
    queries = users.astype(np.float32).copy()
    queries[~queried_rows(users)] = 1e-9  # the 30 zero users, now tiny: zero in float16 only
    served = queries.astype(np.float16).astype(np.float64)
    assert int((~queried_rows(served)).sum()) == 30
    table16 = items.astype(np.float16)
    monitor = TrainingMonitor(torch.from_numpy(table16), counts=counts, interval=0, queries=torch.from_numpy(queries))
    with pytest.warns(MonitorInputWarning, match="30 of 300 query vectors are zero"):
        record = monitor.end_epoch()
    assert record.n_zero_queries == 30  # was 0
    wide = table16.astype(np.float64)
    assert record.head_share_dot == pytest.approx(_head_share(counts, served, wide, 10, False), abs=1e-15)
    assert record.head_share_cosine == pytest.approx(_head_share(counts, served, wide, 10, True), abs=1e-15)
    kept = TrainingMonitor(torch.from_numpy(items.astype(np.float32)), counts=counts, interval=0,
                           queries=torch.from_numpy(queries)).end_epoch()
    assert kept.n_zero_queries == 0

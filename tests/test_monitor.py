"""The training monitor's figures against known answers (auditor/monitor, docs/monitor.md)."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats as sps

from auditor.errors import AlertTripped, GateError, TrainingError
from auditor.metrics.exposure import HeadShare
from auditor.metrics.frequency_norm import frequency_norm_stats, item_norms
from auditor.monitor import TrainingAlertWarning, TrainingMonitor, read_trace
from auditor.monitor.figures import sample_interval, topk_rows
from auditor.retrieval import sharded_topk
from auditor.retrieval.search import l2_normalise, select_topk


def _line_table(n: int, dim: int = 4) -> torch.Tensor:
    """Row i is (i + 1) e_1: norms 1..n, every row along e_1."""
    table = torch.zeros(n, dim, dtype=torch.float64)
    table[:, 0] = torch.arange(1, n + 1, dtype=torch.float64)
    return table


def test_rho_is_spearmans_formula_on_a_constructed_table() -> None:
    # norms 1..6; counts a permutation of ranks: rho = 1 - 6 sum d^2 / (n (n^2 - 1)).
    counts = np.array([2, 1, 4, 3, 6, 5], dtype=float)
    d = np.arange(1, 7) - counts
    expected = 1 - 6 * (d**2).sum() / (6 * 35)
    monitor = TrainingMonitor(_line_table(6), counts=counts, interval=0, n_queries=2)
    record = monitor.end_epoch()
    assert record.spearman == pytest.approx(expected, abs=1e-15)  # 1 - 36/210 = 0.8286
    assert record.spearman_method == "exact" and record.spearman_ci is None and record.spearman_n == 6
    # norms = counts^0.5 exactly on a line: the log-log slope is 0.5
    monitor = TrainingMonitor(_line_table(9) ** 0.5 * torch.tensor([1.0, 0, 0, 0]), counts=np.arange(1.0, 10.0), interval=0)
    assert monitor.end_epoch().loglog_slope == pytest.approx(0.5, abs=1e-12)


def test_rho_and_slope_equal_the_audits_bit_for_bit() -> None:
    rng = np.random.default_rng(3)
    table = torch.from_numpy(rng.normal(size=(500, 16)).astype(np.float32))
    counts = rng.zipf(1.5, 500).astype(float)
    counts[:40] = 0  # cold items, ties
    record = TrainingMonitor(table, counts=counts, interval=0).end_epoch()
    section, _ = frequency_norm_stats(item_norms(table.numpy()), counts, n_bootstrap=0)
    assert record.spearman == section.spearman
    assert record.loglog_slope == section.loglog_slope
    assert record.mean_norm == pytest.approx(float(item_norms(table.numpy()).mean()))


def test_above_the_size_rho_is_sampled_with_its_fisher_interval() -> None:
    rng = np.random.default_rng(5)
    n = 5000
    counts = rng.zipf(1.3, n).astype(float)
    table = torch.from_numpy((rng.normal(size=(n, 8)) * np.log1p(counts)[:, None] ** 0.5).astype(np.float32))
    monitor = TrainingMonitor(table, counts=counts, interval=0, max_exact_items=4000, sample_items=1000, seed=2)
    record = monitor.end_epoch()
    assert record.spearman_method == "sample" and record.spearman_n == 1000
    rows = monitor._sample.numpy()  # the fixed seeded sample: rho is scipy's on those rows
    norms = item_norms(table.numpy()[rows])
    assert record.spearman == pytest.approx(sps.spearmanr(counts[rows], norms).statistic, abs=1e-12)
    rho = record.spearman
    se = math.sqrt((1 + rho**2 / 2) / 997) * math.sqrt((n - 1000) / (n - 1))
    z = math.atanh(rho)
    assert record.spearman_ci == pytest.approx((math.tanh(z - 1.959964 * se), math.tanh(z + 1.959964 * se)), abs=1e-6)
    full = sps.spearmanr(counts, item_norms(table.numpy())).statistic
    assert record.spearman_ci[0] <= full <= record.spearman_ci[1]
    assert sample_interval(1.0, 50, 100) == (1.0, 1.0) and sample_interval(None, 50, 100) is None


@pytest.mark.parametrize(
    ("update", "angle"),
    [
        (lambda t, r: t[r, 1].add_(0.5), 90.0),  # orthogonal to q = (i+1) e_1
        (lambda t, r: t[r].mul_(1.5), 0.0),  # along q
        (lambda t, r: t[r].mul_(0.5), 180.0),  # against q
    ],
)
def test_update_angles_have_their_hand_computed_values(update, angle) -> None:
    table = _line_table(10)
    monitor = TrainingMonitor(table, counts=np.arange(10.0), interval=1, n_queries=3)
    items = torch.tensor([2, 5, 5, 7])
    with monitor.step(items):
        rows = torch.unique(items)
        view = table[rows]
        update(view, slice(None))
        table[rows] = view
    record = monitor.records[-1]
    assert record.kind == "step" and record.step == 1 and record.angle_n == 3
    assert record.angle_median == pytest.approx(angle, abs=1e-9)
    assert record.angle_share_90_1 == (1.0 if angle == 90.0 else 0.0)
    if angle == 90.0:  # c/s^2 = |dq|^2/|q|^2 = 0.25/(i+1)^2, per appearance (item 5 twice)
        growth = [0.25 / 9, 0.25 / 36 / 2, 0.25 / 64]
        assert record.growth_per_update == pytest.approx(np.median(growth), rel=1e-12)


def test_without_batch_items_the_whole_table_is_compared_and_only_moved_rows_count() -> None:
    table = _line_table(8)
    monitor = TrainingMonitor(table, counts=np.arange(8.0), interval=2, n_queries=2)
    monitor.before_step()  # step 1: not due, nothing kept
    monitor.after_step()
    assert monitor.records == []
    monitor.before_step()
    table[[1, 4], 2] += 3.0
    record = monitor.after_step()
    assert record is not None and record.step == 2 and record.angle_n == 2 and record.angle_share_90_1 == 1.0


def test_running_counts_are_the_batches_bincount_and_bad_rows_are_named() -> None:
    monitor = TrainingMonitor(torch.nn.Embedding(6, 3), interval=0)
    for batch in ([0, 1, 1], np.array([5, 5, 5]), torch.tensor([[2], [1]])):
        monitor.before_step(batch)
        monitor.after_step()
    assert monitor.counts.tolist() == [1, 3, 1, 0, 0, 3]
    assert monitor.end_epoch().n_counted == 8
    monitor.observe([9])
    with pytest.raises(TrainingError, match=r"batch item row 9 is outside the item table \(rows 0\.\.5\)"):
        monitor.end_epoch()


def test_counts_by_raw_id_and_bad_settings() -> None:
    monitor = TrainingMonitor(torch.zeros(3, 2) + 1, item_ids=["a", "b", "c"], counts={"c": 4, "a": 1}, interval=0)
    assert monitor.counts.tolist() == [1.0, 0.0, 4.0]
    with pytest.raises(TrainingError, match="counts has 2 entries but the item table has 3 rows"):
        TrainingMonitor(torch.ones(3, 2), counts=[1, 2])
    with pytest.raises(TrainingError, match="needs n_items"):
        TrainingMonitor(lambda rows: torch.ones(len(rows), 2))
    with pytest.raises(TrainingError, match="interval must be 0"):
        TrainingMonitor(torch.ones(3, 2), interval=-1)


def test_topk_keeps_the_retrieval_contract_with_ties_and_zero_rows() -> None:
    rng = np.random.default_rng(11)
    table = rng.integers(-2, 3, size=(300, 4)).astype(np.float32)  # many exact ties
    table[:7] = 0.0  # zero rows: never served by cosine
    queries = rng.integers(-2, 3, size=(40, 4)).astype(np.float32)
    every = np.broadcast_to(np.arange(300), (40, 300))
    mine = topk_rows(torch.from_numpy(queries), torch.from_numpy(table), 10, cosine=False)
    assert np.array_equal(mine, select_topk(queries @ table.T, every, 10)[1])  # score, then lower row
    directions, _ = l2_normalise(table)
    cosine = np.where(np.linalg.norm(table, axis=1) > 0, l2_normalise(queries)[0] @ directions.T, -np.inf)
    mine = topk_rows(torch.from_numpy(queries), torch.from_numpy(table), 10, cosine=True)
    expected = select_topk(cosine.astype(np.float32), every, 10)[1]
    assert np.array_equal(mine, expected) and not np.isin(mine, np.arange(7)).any()


def test_head_share_known_answer() -> None:
    # Item 0 is the head (1% of 100 items) with a huge norm off the queries' direction:
    # dot serves it first to every query, cosine never.
    table = torch.zeros(100, 3)
    table[0] = torch.tensor([100.0, 100.0, 0.0])
    table[1:, 0] = 1.0
    table[1:, 2] = torch.linspace(0.0, 0.1, 99)
    counts = np.ones(100)
    counts[0] = 50
    monitor = TrainingMonitor(table, counts=counts, interval=0, queries=torch.tensor([[1.0, 0.0, 0.0]] * 4), k=5)
    record = monitor.end_epoch()
    assert record.head_share_dot == pytest.approx(1 / 5) and record.head_share_cosine == 0.0
    assert record.head_share_ratio == math.inf  # dot / 0: the most skew (sections.share_ratio)
    lists = sharded_topk(np.array([[1.0, 0, 0]] * 4, np.float32), [table.numpy()], 5, normalise=False)[1]
    assert HeadShare(counts, 1.0).measure(lists) == record.head_share_dot


def test_alerts_fire_once_warn_stop_and_raise(tmp_path) -> None:
    table = _line_table(5)
    counts = np.arange(5.0)  # rho = 1
    monitor = TrainingMonitor(table, counts=counts, interval=1, alerts=["spearman>0.5", "mean_norm>100"], n_queries=2)
    with pytest.warns(TrainingAlertWarning, match=r"alert spearman>0\.5 fired at step 1 \(epoch 1\): spearman = 1"):
        monitor.before_step(), monitor.after_step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second record: the alert does not fire again
        monitor.before_step(), monitor.after_step()
    assert [e.step for e in monitor.fired] == [1] and not monitor.should_stop

    stopping = TrainingMonitor(table, counts=counts, interval=0, alerts=["spearman>0.99"], on_alert="stop")
    with pytest.warns(TrainingAlertWarning, match="asking the trainer to stop"):
        stopping.end_epoch()
    assert stopping.should_stop

    path = tmp_path / "t.jsonl"
    raising = TrainingMonitor(table, counts=counts, interval=0, alerts=["spearman>0.9"], on_alert="raise", trace=path)
    with pytest.raises(AlertTripped, match="alert spearman>0.9 fired at step 0"):
        raising.end_epoch()
    trace = read_trace(path)
    assert [a.alert for a in trace.alerts] == ["spearman>0.9"] and trace.end is not None
    assert trace.end.reason == "raised by alert spearman>0.9 at step 0"
    with pytest.raises(GateError, match=r"invalid (alerts|--alert): 'sperman>1': unknown metric 'sperman'.*angle_share_90_1"):
        TrainingMonitor(table, alerts=["sperman>1"])
    with pytest.raises(TrainingError, match="alert action 'explode'"):
        TrainingMonitor(table, on_alert="explode")


def test_a_plain_loop_that_breaks_on_should_stop_ends_with_the_alerts_reason(tmp_path) -> None:
    # docs/monitor.md's loop: break on should_stop, end the epoch, close() with no reason.
    table = _line_table(5)
    path = tmp_path / "loop.jsonl"
    monitor = TrainingMonitor(table, counts=np.arange(5.0), interval=1, alerts=["spearman>0.6"], on_alert="stop",
                              trace=path, n_queries=2)
    for _ in range(3):
        with pytest.warns(TrainingAlertWarning) if monitor.global_step == 0 else warnings.catch_warnings():
            monitor.before_step(), monitor.after_step()
        if monitor.should_stop:
            break
    monitor.end_epoch()
    monitor.close()
    end = read_trace(path).end
    assert end is not None and end.step == 1 and end.reason == "stopped by alert spearman>0.6 at step 1"
    quiet = tmp_path / "quiet.jsonl"
    unstopped = TrainingMonitor(table, counts=np.arange(5.0), interval=1, trace=quiet, n_queries=2)
    unstopped.close()
    assert read_trace(quiet).end.reason == "completed"  # type: ignore[union-attr]


@pytest.mark.parametrize("figure", ["angle_share_90_1", "angle_share_90_10", "angle_median", "growth_per_update"])
def test_an_alert_on_a_step_figure_without_step_records_is_refused(tmp_path, figure) -> None:
    table = _line_table(5)
    path = tmp_path / "t.jsonl"
    with pytest.raises(GateError, match=rf"invalid alerts: {figure} is measured around optimizer steps only, "
                                        r"and interval 0 records none, so the alert could never fire"):
        TrainingMonitor(table, interval=0, alerts=[f"{figure}>0", "spearman>0.5"], trace=path)
    assert not path.exists()  # refused before the trace is written
    assert TrainingMonitor(table, interval=1, alerts=[f"{figure}>0"]).should_stop is False  # measured at interval 1
    assert TrainingMonitor(table, interval=0, alerts=["spearman>0.5", "loss<1"]).interval == 0


def test_unknown_alert_names_list_the_monitors_figures_without_the_fail_on_ratio_rule() -> None:
    with pytest.raises(GateError) as caught:
        TrainingMonitor(_line_table(3), alerts=["head_share_1pct_ratio@10>1"])
    message = str(caught.value)
    assert "unknown metric 'head_share_1pct_ratio@10'" in message
    assert message.endswith("Valid metrics: spearman, loglog_slope, mean_norm, angle_share_90_1, angle_share_90_10, "
                            "angle_median, growth_per_update, head_share_dot, head_share_cosine, head_share_ratio, "
                            "loss, lr, n_nonfinite")  # 13 figures: a short list is shown whole
    assert "_ratio@K" not in message


def test_the_monitor_leaves_training_randomness_and_gradients_alone() -> None:
    torch.manual_seed(0)
    emb = torch.nn.Embedding(50, 4)
    dropout = torch.nn.Dropout(0.5)  # towers and queries with dropout consume the RNG when called
    tower = lambda rows: dropout(emb(rows))  # noqa: E731
    state = torch.random.get_rng_state()
    monitor = TrainingMonitor(tower, n_items=50, interval=1, queries=lambda: dropout(emb.weight[:8]))
    monitor.before_step([1, 2])
    monitor.after_step()
    monitor.end_epoch()
    assert len(monitor.records) == 2 and torch.equal(torch.random.get_rng_state(), state)
    assert emb.weight.grad is None


def test_importing_popaudit_never_imports_a_training_framework() -> None:
    import subprocess
    import sys

    code = ("import sys, auditor, auditor.monitor, auditor.train.loop, auditor.cli, auditor.tracking\n"
            "print(sorted(m for m in ('lightning', 'pytorch_lightning', 'keras', 'mlflow', 'tensorboard', 'recbole')"
            " if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_an_oblique_update_angle_is_the_true_angle_the_docs_define() -> None:
    """QA round 7 (monitor F3): q = (2, 0) moved by Δq = (1, 1) is at 45° (the true angle,
    arccos(q·Δq/(‖q‖‖Δq‖))); the docs' formula, read literally, must give the same (the old
    atan2(‖Δq⊥‖, q·Δq) gave atan2(1, 2) = 26.57°)."""
    table = torch.zeros(4, 2, dtype=torch.float64)
    table[:, 0] = 2.0
    monitor = TrainingMonitor(table, counts=np.arange(4.0), interval=1, n_queries=2)
    with monitor.step(torch.tensor([1])):
        table[1] += torch.tensor([1.0, 1.0], dtype=torch.float64)
    q, dq = np.array([2.0, 0.0]), np.array([1.0, 1.0])
    unit = q / np.linalg.norm(q)
    documented = math.degrees(math.atan2(np.linalg.norm(dq - (unit @ dq) * unit), unit @ dq))
    assert monitor.records[-1].angle_median == pytest.approx(45.0, abs=1e-12) == documented
    docs = (Path(__file__).parents[1] / "docs" / "monitor.md").read_text(encoding="utf-8")
    assert "θ = atan2(‖Δq⊥‖, q̂·Δq), q̂ = q/‖q‖" in docs and "atan2(‖Δq⊥‖, q·Δq)" not in docs

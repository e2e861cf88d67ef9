"""An alert that could never fire is refused as ``check --fail-on``'s gate is (QA 11 monitor F2):
each figure of a trace record has a range kind of the one table
(:data:`auditor.trace_schema.FIGURE_RANGE_KINDS` into :data:`auditor.gate_names.FIGURE_RANGES`),
and a threshold outside it, or on its edge where it could never fire, is a GateError (``retrain``:
exit 2) before anything is written."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from auditor.errors import GateError
from auditor.gate_names import FIGURE_RANGES, out_of_range
from auditor.monitor import TrainingMonitor, parse_alerts
from auditor.trace_schema import FIGURE_RANGE_KINDS, FIGURES, UNBOUNDED


def test_every_monitor_figure_has_a_range_kind_of_the_one_table_or_is_unbounded() -> None:
    assert list(FIGURE_RANGE_KINDS) == list(FIGURES)  # every figure, none more, in the documented order
    for figure, kind in FIGURE_RANGE_KINDS.items():
        assert kind == UNBOUNDED or kind in FIGURE_RANGES, (figure, kind)
    assert {f for f, k in FIGURE_RANGE_KINDS.items() if k == UNBOUNDED} == {"loglog_slope", "loss"}
    assert FIGURE_RANGES[FIGURE_RANGE_KINDS["angle_median"]][:2] == (0.0, 180.0)
    for figure in ("head_share_dot", "head_share_cosine", "angle_share_90_1", "angle_share_90_10"):
        assert FIGURE_RANGES[FIGURE_RANGE_KINDS[figure]][:2] == (0.0, 1.0)
    for figure in ("mean_norm", "lr", "growth_per_update", "n_nonfinite", "head_share_ratio"):
        assert FIGURE_RANGES[FIGURE_RANGE_KINDS[figure]][:2] == (0.0, math.inf)


@pytest.mark.parametrize(("alert", "message"), [
    ("head_share_dot>5", r"head_share_dot is a fraction 0–1: 5% is 0\.05; the threshold 5 is outside that range"),
    ("head_share_dot>1", r"head_share_dot is a fraction 0–1: 1% is 0\.01; it is never > 1, so the gate could never trip"),
    ("head_share_cosine<0", r"head_share_cosine is a fraction 0–1; it is never < 0"),
    ("angle_share_90_1>90", r"angle_share_90_1 is a fraction 0–1: 90% is 0\.9; the threshold 90 is outside"),
    ("angle_share_90_10>1", r"angle_share_90_10 is a fraction 0–1: 1% is 0\.01; it is never > 1"),
    ("spearman>1.5", r"spearman is a correlation from -1 to 1; the threshold 1\.5 is outside that range"),
    ("spearman>1", r"spearman is a correlation from -1 to 1; it is never > 1"),
    ("spearman<-1", r"spearman is a correlation from -1 to 1; it is never < -1"),
    ("angle_median>180", r"angle_median is an angle in degrees, 0–180; it is never > 180"),
    ("angle_median<0", r"angle_median is an angle in degrees, 0–180; it is never < 0"),
    ("angle_median>=200", r"angle_median is an angle in degrees, 0–180; the threshold 200 is outside that range"),
    ("n_nonfinite<0", r"n_nonfinite is a non-negative figure, never below 0; it is never < 0"),
    ("mean_norm<0", r"mean_norm is a non-negative figure, never below 0; it is never < 0"),
    ("lr<0", r"lr is a non-negative figure, never below 0; it is never < 0"),
    ("lr<=-0.1", r"lr is a non-negative figure, never below 0; the threshold -0\.1 is outside that range"),
    ("growth_per_update<0", r"growth_per_update is a non-negative figure, never below 0; it is never < 0"),
    ("head_share_ratio<0", r"head_share_ratio is a dot / cosine ratio, never below 0; it is never < 0"),
])
def test_an_alert_that_could_never_fire_is_refused_naming_the_range(alert, message) -> None:
    with pytest.raises(GateError, match=rf"^invalid alerts: '{alert}': {message}") as caught:
        parse_alerts([alert])
    # the words are --fail-on's, from the same function over the same table: one range policy
    name, op, threshold = next((alert.partition(o)[0], o, float(alert.partition(o)[2]))
                               for o in (">=", "<=", ">", "<") if o in alert)
    assert out_of_range(name, op, threshold, kind=FIGURE_RANGE_KINDS[name]) in str(caught.value)


@pytest.mark.parametrize("alert", [
    "head_share_dot>0.05", "angle_share_90_1>0.9", "spearman>=1", "spearman<=-1", "spearman>0.5", "n_nonfinite>0",
    "n_nonfinite>=0", "n_nonfinite>400", "growth_per_update>0", "lr<0.01", "mean_norm>10", "head_share_ratio>10",
    "angle_median<90", "angle_median>=180", "loss<-3", "loss>1e6", "loglog_slope<-5", "loglog_slope>0.1",
])
def test_an_alert_that_can_fire_is_taken(alert) -> None:
    assert [str(g) for g in parse_alerts([alert])] == [alert]


def test_the_monitor_refuses_every_unreachable_alert_together_before_writing_the_trace(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    table = torch.zeros(4, 2)
    with pytest.raises(GateError) as caught:
        TrainingMonitor(table, counts=np.ones(4), alerts=["head_share_dot>5", "spearman>0.5", "angle_share_90_1>90"],
                        trace=path)
    message = str(caught.value)
    assert message.startswith("invalid alerts: 'head_share_dot>5': head_share_dot is a fraction 0–1: 5% is 0.05")
    assert "'angle_share_90_1>90': angle_share_90_1 is a fraction 0–1: 90% is 0.9" in message
    assert "spearman>0.5" not in message and "Valid metrics" not in message  # names known: no list needed
    assert message.endswith("(shares, rates and overlaps gate as fractions, as the JSON report and a training trace "
                            "hold them)")
    assert not path.exists()


def test_a_record_s_figures_lie_in_their_declared_ranges() -> None:
    # The ranges are true of what the monitor measures: a step that moves rows, shares, an lr.
    rng = np.random.default_rng(0)
    table = torch.nn.Parameter(torch.from_numpy(rng.normal(size=(40, 4))))
    optimizer = torch.optim.SGD([table], lr=0.5)
    monitor = TrainingMonitor(table, counts=rng.integers(0, 9, 40).astype(float), interval=1, optimizer=optimizer,
                              n_queries=10, k=5)
    for _ in range(3):
        items = torch.from_numpy(rng.integers(0, 40, 8))
        with monitor.step(items, loss=-2.5):
            loss = -(table[items] ** 2).sum() * 0.01
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    record = monitor.end_epoch(loss=-2.5)
    for figure, kind in FIGURE_RANGE_KINDS.items():
        value = record.figure(figure)
        assert value is not None, figure
        if kind != UNBOUNDED:
            low, high, _ = FIGURE_RANGES[kind]
            assert low <= value <= high, (figure, value)
    assert record.loss == -2.5  # a loss below 0 is measured: it has no range


def test_an_alert_on_more_non_finite_rows_than_the_table_holds_is_refused_when_the_monitor_is_made(tmp_path) -> None:
    # QA 11 monitor N3: n_nonfinite counts the watched table's rows, so with 400 items it is
    # never above 400; the table is known when the monitor is made (an adapter's: when fit starts).
    path = tmp_path / "t.jsonl"
    table = torch.zeros(400, 2)
    with pytest.raises(GateError) as caught:  # both were taken
        TrainingMonitor(table, counts=np.ones(400), alerts=["n_nonfinite>400", "n_nonfinite>=401"], trace=path)
    rows = "n_nonfinite is a number of item rows, 0–400 (the watched table's)"
    assert str(caught.value).startswith(f"invalid alerts: 'n_nonfinite>400': {rows}; it is never > 400, so the gate "
                                        f"could never trip; 'n_nonfinite>=401': {rows}; the threshold 401 is outside")
    assert not path.exists()
    monitor = TrainingMonitor(table, counts=np.ones(400), alerts=["n_nonfinite>=400", "n_nonfinite>399"])
    assert [str(g) for g in monitor._alerts.gates] == ["n_nonfinite>=400", "n_nonfinite>399"]  # every row NaN: fires
    assert [str(g) for g in parse_alerts(["n_nonfinite>400"])] == ["n_nonfinite>400"]  # no table yet: unbounded

"""The monitor's inputs and a run that goes wrong (QA findings F2, F5, F7, F8, F9): a diverged
table is alertable, warned, exported and said at the end; counts keyed by ids that miss
``item_ids`` are refused or warned with the numbers; the first stop alert names the stop;
bad arguments are TrainingErrors naming the argument; a tracker failure never ends training."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from auditor.errors import TrainingError
from auditor.monitor import TrainingAlertWarning, TrainingMonitor, read_trace
from auditor.monitor.settings import MonitorInputWarning, TrainingDivergedWarning
from auditor.monitor.sinks import TrackerWarning

N = 10


def _table() -> torch.Tensor:
    """Row i is (1 + i, 0, 0): norms 1..10, rising with the row."""
    table = torch.zeros(N, 3, dtype=torch.float64)
    table[:, 0] = 1.0 + torch.arange(N, dtype=torch.float64)
    return table


def _record(monitor: TrainingMonitor) -> Any:
    monitor.before_step(None)
    return monitor.after_step()


def test_a_diverged_table_fires_n_nonfinite_and_an_infinite_mean_norm(tmp_path: Path) -> None:
    """Row 3 set to +inf and row 5 to NaN between two records (QA F2): the alerts on ρ, the
    slope and the head share cannot fire (unmeasured); n_nonfinite>0 fires at 2 rows, a
    warning says the run diverged, the tracker gets n_nonfinite, the end reason says so.
    With only the inf row the mean norm is +inf, and mean_norm>10 fires on it."""
    table, logged = _table(), []

    class Writer:
        def add_scalar(self, name: str, value: float, step: int, walltime: float) -> None:
            logged.append((name, value, step))

    path = tmp_path / "t.jsonl"
    alerts = ["spearman>0.5", "n_nonfinite>0", "mean_norm>10"]
    monitor = TrainingMonitor(table, counts=np.arange(1, N + 1), interval=1, trace=path, alerts=alerts,
                              tensorboard=Writer(), fsync=False)
    with pytest.warns(TrainingAlertWarning, match="spearman>0.5"):
        first = _record(monitor)
    assert first.spearman == pytest.approx(1.0, abs=1e-12) and first.n_nonfinite == 0 and ("popaudit/n_nonfinite", 0.0, 1) in logged
    table[3, 0] = math.inf
    with pytest.warns(TrainingDivergedWarning, match=r"1 of 10 item rows are NaN or infinite at step 2"):
        with pytest.warns(TrainingAlertWarning) as fired:
            second = _record(monitor)
    assert second.mean_norm == math.inf and second.figure("mean_norm") == math.inf
    alerted = sorted(str(w.message).split(" fired")[0] for w in fired if w.category is TrainingAlertWarning)
    assert alerted == ["alert mean_norm>10", "alert n_nonfinite>0"]
    table[5, 0] = math.nan
    third = _record(monitor)
    assert third.n_nonfinite == 2 and third.figure("mean_norm") is None and third.spearman is None
    assert ("popaudit/n_nonfinite", 2.0, 3) in logged
    monitor.close()
    trace = read_trace(path)
    assert [(a.step, a.alert) for a in trace.alerts] == [(1, "spearman>0.5"), (2, "n_nonfinite>0"), (2, "mean_norm>10")]
    assert trace.end is not None
    # the count at the last record (2 rows at step 3), not the first record's 1 (QA 11 monitor F4)
    assert trace.end.reason == ("completed; training diverged: 2 of 10 item rows NaN or infinite at the last record "
                                "(step 3); first at step 2 (1 row)")


def test_counts_by_ids_that_are_not_item_ids(tmp_path: Path) -> None:
    """QA F5: int keys against text ids match nothing: refused. Half the keys wrong: ρ over
    the ids that match, and a warning with the numbers."""
    ids = [f"i{r}" for r in range(N)]
    with pytest.raises(TrainingError, match=r"none of the 10 ids of counts is one of item_ids \(counts' ids are "
                                            r"int, item_ids' str\)"):
        TrainingMonitor(_table(), counts={r: r + 1 for r in range(N)}, item_ids=ids)
    counts = {f"i{r}" if r % 2 == 0 else f"x{r}": r + 1 for r in range(N)}  # odd rows under wrong ids
    with pytest.warns(MonitorInputWarning, match=r"5 of the 10 ids of counts are not item ids \(30 of 55 interactions\)"):
        monitor = TrainingMonitor(_table(), counts=counts, item_ids=ids, interval=1)
    given = np.array([r + 1 if r % 2 == 0 else 0 for r in range(N)], dtype=float)
    assert (monitor.counts == given).all()
    record = _record(monitor)
    assert record.spearman == pytest.approx(spearmanr(given, np.arange(1, N + 1)).statistic, abs=1e-12)


def test_no_count_yet_means_no_head_share() -> None:
    """Running counts before any batch: no item is popular, so no head share (it read 0.0)."""
    record = _record(TrainingMonitor(_table(), interval=1))
    assert record.n_counted == 0 and record.spearman is None
    assert record.head_share_dot is None and record.head_share_cosine is None and record.head_share_ratio is None


def test_the_first_stop_alert_names_the_stop(tmp_path: Path) -> None:
    """QA F7: two stop alerts fire at one record, in the order given; the end names the first."""
    path = tmp_path / "t.jsonl"
    monitor = TrainingMonitor(_table(), counts=np.arange(1, N + 1), interval=1, trace=path, on_alert="stop",
                              alerts=["spearman>0.5", "loglog_slope>0.1"], fsync=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainingAlertWarning)
        _record(monitor)
    monitor.close()
    assert [e.alert for e in monitor.fired] == ["spearman>0.5", "loglog_slope>0.1"]
    assert read_trace(path).end.reason == "stopped by alert spearman>0.5 at step 1"  # type: ignore[union-attr]


@pytest.mark.parametrize(("options", "message"), [
    ({"counts": np.ones((5, 2))}, r"counts must be one number per item row \(1-D\), got shape \(5, 2\)"),
    ({"counts": ["a"] * N}, r"counts must be numbers \(interactions per item row\)"),
    ({"counts": {1: 3}, "item_ids": list(range(N - 1))}, r"item_ids has 9 entries but the item table has 10 rows"),
    ({"counts": {"a": "x"}, "item_ids": ["a"] * N}, r"counts must map item ids to numbers"),
])
def test_bad_counts_name_the_argument(options: dict[str, Any], message: str) -> None:
    """QA F8: a 2-D array was flattened, text a bare ValueError, a short item_ids blamed on counts."""
    with pytest.raises(TrainingError, match=message):
        TrainingMonitor(_table(), **options)


@pytest.mark.parametrize("rows", [torch.tensor([1.7, 2.9]), np.array([0.5]), torch.tensor([True, False])])
def test_rows_that_are_not_whole_numbers_are_refused(rows: Any) -> None:
    """QA F8: rows 1.7 and 2.9 were truncated to 1 and 2."""
    monitor = TrainingMonitor(_table(), interval=1)
    with pytest.raises(TrainingError, match="batch item rows must be"):
        monitor.before_step(rows)
    monitor.before_step(torch.tensor([1.0, 2.0]))  # whole numbers stored as floats are rows
    assert monitor.after_step() is not None and (monitor.counts[[1, 2]] == 1).all()


def test_a_tracker_failure_warns_and_training_goes_on(tmp_path: Path) -> None:
    """QA F9: a tracker that fails at a record (a server gone mid-run) is a warning once; every
    record is still in the trace and later records still reach the tracker."""
    calls = []

    class Flaky:
        def add_scalar(self, name: str, value: float, step: int, walltime: float) -> None:
            calls.append(step)
            if step == 1:
                raise ConnectionError("server unreachable")

    path = tmp_path / "t.jsonl"
    monitor = TrainingMonitor(_table(), counts=np.arange(1, N + 1), interval=1, trace=path, tensorboard=Flaky(),
                              fsync=False)
    with pytest.warns(TrackerWarning, match=r"could not log the record at step 1: ConnectionError: server unreachable"):
        _record(monitor)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrackerWarning)
        _record(monitor)
    monitor.close()
    assert [r.step for r in read_trace(path).records] == [1, 2] and calls[-1] == 2


def test_an_mlflow_run_that_does_not_exist_is_refused_at_construction(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    mlflow = pytest.importorskip("mlflow")
    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    with pytest.raises(TrainingError, match=r"mlflow: cannot log to run '0123456789abcdef0123456789abcdef'"):
        TrainingMonitor(_table(), mlflow="0123456789abcdef0123456789abcdef")
    assert mlflow.active_run() is None


def test_a_monitor_that_fails_to_start_keeps_the_earlier_trace(tmp_path: Path) -> None:
    """QA F15: a bad tensorboard= was found after the writer had replaced the earlier trace."""
    path = tmp_path / "t.jsonl"
    with TrainingMonitor(_table(), counts=np.arange(1, N + 1), interval=1, trace=path, fsync=False) as monitor:
        _record(monitor)
    before = path.read_bytes()
    with pytest.raises(TrainingError, match="tensorboard must be a log folder or a SummaryWriter"):
        TrainingMonitor(_table(), counts=np.ones(N), trace=path, tensorboard=42)
    assert path.read_bytes() == before

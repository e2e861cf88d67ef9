"""A resumed run under other optimizer settings than the trace's first run (QA monitor F3):
the header keeps the first run's and lists the change (config ``resumed_runs``), the resume
warns, and ``check --trace`` judges C1 by every run's settings (violated if any run breaks it,
the evidence naming that run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from auditor.monitor import TrainingMonitor, read_trace
from auditor.monitor.settings import MonitorInputWarning
from tests.test_monitor_resume import Run, check


def _two_runs(tmp_path: Path, first: dict[str, float], second: dict[str, float]) -> tuple[Run, Path]:
    """One epoch under SGD(**first), then one resumed (resume=True) under SGD(**second)."""
    path, run = tmp_path / "trace.jsonl", Run()
    run.opt = torch.optim.SGD([*run.users_t.parameters(), *run.items_t.parameters()], lr=5.0, **first)
    with run.monitor(path) as monitor:
        run.epoch(monitor)
    run.opt = torch.optim.SGD([*run.users_t.parameters(), *run.items_t.parameters()], lr=5.0, **second)
    with run.monitor(path, resume=True) as monitor:
        run.epoch(monitor)
    return run, path


def test_a_resume_under_momentum_is_recorded_warned_and_breaks_c1(tmp_path: Path) -> None:
    with pytest.warns(MonitorInputWarning, match=r"resume: this run's item optimizer \(optimizer SGD, momentum 0\.9, "
                      r"weight_decay 0\.0\) differs from the trace's .* in momentum: the trace records it from step 16"):
        run, path = _two_runs(tmp_path, {}, {"momentum": 0.9})
    header = read_trace(path).header
    assert header.optimizer == "SGD" and header.config["momentum"] == 0.0  # the first run's, as before
    assert header.config["resumed_runs"] == [{"step": 16, "optimizer": "SGD", "momentum": 0.9, "weight_decay": 0.0}]
    c1 = check(tmp_path, run.items_t.weight.detach().numpy(), run.counts, path)["conditions"]["C1"]
    assert c1["status"] == "violated" and c1["details"]["momentum"] == 0.9  # it said holds, momentum 0
    assert c1["details"]["sources"]["momentum"] == "trace (config.resumed_runs: momentum of the run resumed at step 16)"


def test_a_first_run_that_breaks_c1_is_judged_though_the_resumed_one_holds(tmp_path: Path) -> None:
    with pytest.warns(MonitorInputWarning, match="in momentum"):
        run, path = _two_runs(tmp_path, {"momentum": 0.9}, {})
    c1 = check(tmp_path, run.items_t.weight.detach().numpy(), run.counts, path)["conditions"]["C1"]
    assert c1["status"] == "violated" and c1["details"]["sources"]["momentum"] == "trace (config.momentum)"


def test_a_resume_under_the_same_settings_changes_nothing(tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    run, path = _two_runs(tmp_path, {}, {})
    assert not [w for w in recwarn if issubclass(w.category, MonitorInputWarning)]
    assert "resumed_runs" not in read_trace(path).header.config
    c1 = check(tmp_path, run.items_t.weight.detach().numpy(), run.counts, path)["conditions"]["C1"]
    assert c1["status"] == "holds" and c1["details"]["sources"]["momentum"] == "trace (config.momentum)"


def test_a_resume_without_an_optimizer_records_no_phantom_run(tmp_path: Path) -> None:
    """resume=True with no optimizer= knows nothing of the run's settings: a note that they
    are not recorded, no resumed_runs entry of Nones (which counted as a second run)."""
    path, run = tmp_path / "trace.jsonl", Run()
    run.opt = torch.optim.SGD([*run.users_t.parameters(), *run.items_t.parameters()], lr=5.0)
    with run.monitor(path) as monitor:
        run.epoch(monitor)
    with pytest.warns(MonitorInputWarning, match="no optimizer was given, so the item optimizer settings of the run "
                                                 "resumed at step 16 are not recorded"):
        with TrainingMonitor(run.items_t, counts=run.counts, interval=10, trace=path, resume=True) as monitor:
            monitor.end_epoch()
    assert "resumed_runs" not in read_trace(path).header.config


def test_an_old_trace_without_resumed_runs_reads_as_before(tmp_path: Path) -> None:
    """A trace written before this change (no resumed_runs) is judged by its header, as it was."""
    run, path = _two_runs(tmp_path, {"momentum": 0.9}, {"momentum": 0.9})
    lines = path.read_text().splitlines()
    head = json.loads(lines[0])
    assert "resumed_runs" not in head["config"]
    c1 = check(tmp_path, run.items_t.weight.detach().numpy(), run.counts, path)["conditions"]["C1"]
    assert c1["status"] == "violated" and c1["details"]["sources"]["momentum"] == "trace (config.momentum)"


def test_a_checkpoint_of_the_resumed_run_matches_its_trace(tmp_path: Path) -> None:
    """Adam, then resumed under SGD: the checkpoint's optimizer state (SGD) is the last run's,
    compared with the last run's optimizer (it was called another model's: 'used Adam'), and
    C1 is violated by the first run's Adam though the checkpoint records SGD."""
    from click.testing import CliRunner

    from auditor.cli import cli

    path, run = tmp_path / "trace.jsonl", Run()
    run.opt = torch.optim.Adam([*run.users_t.parameters(), *run.items_t.parameters()], lr=0.05)
    with run.monitor(path) as monitor:
        run.epoch(monitor)
    run.opt = torch.optim.SGD([*run.users_t.parameters(), *run.items_t.parameters()], lr=5.0)
    with pytest.warns(MonitorInputWarning, match="in optimizer, momentum"), run.monitor(path, resume=True) as monitor:
        run.epoch(monitor)
    torch.save({"state_dict": {"user_embedding.weight": run.users_t.weight.detach(),
                               "item_embedding.weight": run.items_t.weight.detach()},
                "optimizer": run.opt.state_dict()}, tmp_path / "m.pt")
    (tmp_path / "counts.csv").write_text("item_id,count\n" + "".join(f"{i},{c}\n" for i, c in enumerate(run.counts)))
    done = CliRunner().invoke(cli, ["check", str(tmp_path / "m.pt"), "--frequencies", str(tmp_path / "counts.csv"),
                                    "--trace", str(path), "--bootstrap", "0", "--format", "json"])
    report = json.loads(done.stdout)
    training, c1 = report["training"], report["conditions"]["C1"]
    assert done.exit_code == 0 and training["mismatch"] is None and training["matches_model"] is True
    assert training["settings_run"] is None and training["recorded_optimizer"] == "Adam" and training["runs"] == 2
    # the checkpoint's SGD state is the last run's; the first trained under Adam (C1 said holds)
    assert c1["status"] == "violated" and c1["evidence"].startswith(
        "trace (header.optimizer): Adam rescales each coordinate by its gradient history on the item parameters in "
        "the first run of the trace's 2 runs (the checkpoint's settings are the last run's: optimizer state")


def test_a_declared_optimizer_of_the_last_run_is_no_other_run(tmp_path: Path) -> None:
    """A bare table declared --optimizer sgd (its last run's) beside a trace of an Adam run then
    an SGD one: the trace is this model's (it was 'the trace's run used Adam'), C1 violated by Adam."""
    from click.testing import CliRunner

    from auditor.cli import cli

    path, run = tmp_path / "trace.jsonl", Run()
    run.opt = torch.optim.Adam([*run.users_t.parameters(), *run.items_t.parameters()], lr=0.05)
    with run.monitor(path) as monitor:
        run.epoch(monitor)
    run.opt = torch.optim.SGD([*run.users_t.parameters(), *run.items_t.parameters()], lr=5.0)
    with pytest.warns(MonitorInputWarning), run.monitor(path, resume=True) as monitor:
        run.epoch(monitor)
    import numpy as np

    np.save(tmp_path / "items.npy", run.items_t.weight.detach().numpy())
    (tmp_path / "counts.csv").write_text("item_id,count\n" + "".join(f"{i},{c}\n" for i, c in enumerate(run.counts)))
    done = CliRunner().invoke(cli, ["check", str(tmp_path / "items.npy"), "--frequencies", str(tmp_path / "counts.csv"),
                                    "--trace", str(path), "--bootstrap", "0", "--format", "json", "--optimizer", "sgd",
                                    "--momentum", "0", "--weight-decay", "0"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["training"]["mismatch"] is None and report["conditions"]["C1"]["status"] == "violated"
    assert "Adam rescales each coordinate" in report["conditions"]["C1"]["evidence"]


@pytest.mark.parametrize(("declared", "mismatch"), [
    ("adam", "the trace's last run (of 2) used SGD, --optimizer declares Adam"),
    ("sgd", None),
])
def test_a_declared_optimizer_is_compared_with_the_last_run_of_a_resumed_trace(
        tmp_path: Path, declared: str, mismatch: str | None) -> None:
    """A bare table records no optimizer, so --optimizer describes the model: the trace's last
    run (QA monitor N3: a resumed trace was never compared, so "--optimizer adam" against an
    SGD trace passed as this model's and its angles were quoted for Adam)."""
    from click.testing import CliRunner

    from auditor.cli import cli

    with pytest.warns(MonitorInputWarning, match="in momentum"):
        run, path = _two_runs(tmp_path, {}, {"momentum": 0.9})
    np_table = run.items_t.weight.detach().numpy()
    check(tmp_path, np_table, run.counts, path)  # writes items.npy and counts.csv
    done = CliRunner().invoke(cli, ["check", str(tmp_path / "items.npy"), "--frequencies", str(tmp_path / "counts.csv"),
                                    "--trace", str(path), "--optimizer", declared, "--bootstrap", "0", "--format", "json"])
    assert done.exit_code == 0, done.output
    training = json.loads(done.stdout)["training"]
    assert training["last_optimizer"] == "SGD" and training["runs"] == 2
    assert training["mismatch"] == mismatch and training["matches_model"] is (mismatch is None)

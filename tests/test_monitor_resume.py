"""Resumed training (QA round 4, F5 and F11): a monitor continues an existing trace
(``resume=True``) at the resumed step and epoch, a new trace of a resumed run records where
it begins, the Lightning and Keras callbacks start at the framework's step and epoch, and
``check --trace`` warns of a trace that begins after step 0 or has no end record (C5 then
projects over what the trace records, said as a lower bound)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli
from auditor.errors import TrainingError
from auditor.monitor import TrainingMonitor, read_trace

N_USERS, N_ITEMS, BATCH, PER_EPOCH = 40, 60, 64, 16


def data() -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    rng = np.random.default_rng(0)
    items = np.minimum(rng.zipf(1.3, BATCH * PER_EPOCH) - 1, N_ITEMS - 1)
    return torch.from_numpy(rng.integers(0, N_USERS, items.size)), torch.from_numpy(items), np.bincount(items, minlength=N_ITEMS)


class Run:
    """A two-tower run on the same data that monitors can watch in turns (as a checkpoint resumed)."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.users_t, self.items_t = torch.nn.Embedding(N_USERS, 8), torch.nn.Embedding(N_ITEMS, 8)
        self.opt = torch.optim.SGD([*self.users_t.parameters(), *self.items_t.parameters()], lr=5.0)
        self.users, self.items, self.counts = data()

    def monitor(self, path: Path, **options: object) -> TrainingMonitor:
        return TrainingMonitor(self.items_t, optimizer=self.opt, counts=self.counts, interval=10, trace=path,
                               config={"steps_per_epoch": PER_EPOCH}, **options)  # type: ignore[arg-type]

    def epoch(self, monitor: TrainingMonitor) -> None:
        for start in range(0, BATCH * PER_EPOCH, BATCH):
            u = torch.nn.functional.normalize(self.users_t(self.users[start:start + BATCH]), dim=1)
            q = torch.nn.functional.normalize(self.items_t(self.items[start:start + BATCH]), dim=1)
            loss = torch.nn.functional.cross_entropy(u @ q.T / 0.1, torch.arange(len(u)))
            self.opt.zero_grad()
            loss.backward()
            with monitor.step(self.items[start:start + BATCH]):
                self.opt.step()
        monitor.end_epoch()


def lines(path: Path) -> list[str]:
    return [json.loads(line)["record"] for line in path.read_text().splitlines()]


def test_resume_continues_the_trace_where_it_ended(tmp_path: Path) -> None:
    path, run = tmp_path / "trace.jsonl", Run()
    with run.monitor(path) as first:
        run.epoch(first)
        run.epoch(first)
    with run.monitor(path, resume=True) as second:  # the checkpoint of the end of epoch 2, resumed
        assert (second.global_step, second.epoch) == (32, 3)
        run.epoch(second)
    trace = read_trace(path)
    assert [(r.kind, r.step, r.epoch) for r in trace.records] == [
        ("step", 10, 1), ("epoch", 16, 1), ("step", 20, 2), ("step", 30, 2), ("epoch", 32, 2),
        ("step", 40, 3), ("epoch", 48, 3)]
    assert lines(path).count("header") == 1 and lines(path).count("end") == 1 and lines(path)[-1] == "end"
    assert trace.end is not None and (trace.end.step, trace.end.epoch, trace.end.reason) == (48, 3, "completed")
    assert "start_step" not in trace.header.config  # the trace covers the whole run from step 0


def test_resuming_a_trace_that_died_needs_the_step(tmp_path: Path) -> None:
    path, run = tmp_path / "trace.jsonl", Run()
    died = run.monitor(path)
    run.epoch(died)  # records at steps 10 and 16, then the process dies (no close, no end record)
    died._writer.close()  # type: ignore[union-attr]  (the file as a killed process leaves it)
    before = path.read_bytes()
    with pytest.raises(TrainingError, match=r"has no end record .* give start_step, .* \(its last record is at step 16\)"):
        run.monitor(path, resume=True)
    with pytest.raises(TrainingError, match="start_step 12 is before the trace's last record \\(step 16\\)"):
        run.monitor(path, resume=True, start_step=12)
    with pytest.raises(TrainingError, match="is a trace of 60 items of dimension 8 .* this monitor watches 10"):
        TrainingMonitor(torch.nn.Embedding(10, 8), counts=np.ones(10), trace=path, resume=True, start_step=20)
    with pytest.raises(TrainingError, match="there is no trace at"):
        run.monitor(tmp_path / "none.jsonl", resume=True)
    assert path.read_bytes() == before
    with run.monitor(path, resume=True, start_step=16) as second:
        assert (second.global_step, second.epoch) == (16, 2)  # after epoch 1's record
        run.epoch(second)
    assert [(r.step, r.epoch) for r in read_trace(path).records] == [(10, 1), (16, 1), (20, 2), (30, 2), (32, 2)]


def test_resume_drops_a_line_cut_mid_write(tmp_path: Path) -> None:
    path, run = tmp_path / "trace.jsonl", Run()
    died = run.monitor(path)
    run.epoch(died)
    died._writer.close()  # type: ignore[union-attr]
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('{"record":"step","step":20,"ep')  # the process died while writing this line
    assert read_trace(path).truncated
    with run.monitor(path, resume=True, start_step=16) as second:
        run.epoch(second)
    trace = read_trace(path)
    assert not trace.truncated and trace.complete and [r.step for r in trace.records] == [10, 16, 20, 30, 32]


def check(tmp_path: Path, table: np.ndarray, counts: np.ndarray, trace: Path) -> dict:
    np.save(tmp_path / "items.npy", table)
    (tmp_path / "counts.csv").write_text("item_id,count\n" + "".join(f"{i},{c}\n" for i, c in enumerate(counts)))
    done = CliRunner().invoke(cli, ["check", str(tmp_path / "items.npy"), "--frequencies", str(tmp_path / "counts.csv"),
                                    "--trace", str(trace), "--bootstrap", "0", "--format", "json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def test_check_says_a_trace_without_an_end_is_a_lower_bound(tmp_path: Path) -> None:
    path, run = tmp_path / "trace.jsonl", Run()
    died = run.monitor(path)
    run.epoch(died)
    run.epoch(died)  # 32 steps recorded; the model went on (say) and the trace has no end record
    died._writer.close()  # type: ignore[union-attr]
    report = check(tmp_path, run.items_t.weight.detach().numpy(), run.counts, path)
    assert any("has no end record (its training died, or is still running): its last record is at step 32" in w
               for w in report["warnings"])
    evidence = report["conditions"]["C5"]["evidence"]
    assert "over frequency × 2 epochs (at least: trace (32 steps recorded ÷ 16 steps per epoch; the trace has no end " \
           "record, so the run took at least these))" in evidence


def test_a_new_trace_of_a_resumed_run_says_where_it_begins(tmp_path: Path) -> None:
    path, run = tmp_path / "trace.jsonl", Run()
    run.epoch(TrainingMonitor(run.items_t, counts=run.counts, interval=0))  # epoch 1, watched by no trace
    with run.monitor(path, start_step=16, start_epoch=2) as monitor:
        run.epoch(monitor)
    trace = read_trace(path)
    assert trace.header.config["start_step"] == 16 and [(r.step, r.epoch) for r in trace.records] == [
        (20, 2), (30, 2), (32, 2)]
    report = check(tmp_path, run.items_t.weight.detach().numpy(), run.counts, path)
    assert report["training"]["start_step"] == 16 and report["training"]["steps"] == 32
    assert any("begins at step 16 (a run resumed from a checkpoint)" in w for w in report["warnings"])
    assert "over frequency × 2 epochs (the updates actually taken" not in report["conditions"]["C5"]["evidence"]
    assert "over frequency × 2 epochs" in report["conditions"]["C5"]["evidence"]


pl = pytest.importorskip("lightning.pytorch")


class Module(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.user_embedding, self.item_embedding = torch.nn.Embedding(N_USERS, 8), torch.nn.Embedding(N_ITEMS, 8)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        u = torch.nn.functional.normalize(self.user_embedding(batch[0]), dim=1)
        q = torch.nn.functional.normalize(self.item_embedding(batch[1]), dim=1)
        return torch.nn.functional.cross_entropy(u @ q.T / 0.1, torch.arange(len(u)))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=5.0)


def test_lightning_resumed_from_a_checkpoint_counts_from_its_step(tmp_path: Path) -> None:
    from auditor.monitor.lightning import PopauditCallback

    users, items, counts = data()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(users, items), batch_size=BATCH)
    options = dict(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                   default_root_dir=str(tmp_path))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(num_workers|does not have many workers).*")
        first = PopauditCallback("item_embedding", batch_items=lambda b: b[1], counts=counts, interval=10,
                                 trace=tmp_path / "one.jsonl")
        pl.Trainer(max_epochs=1, callbacks=[first], **options).fit(Module(), loader)
        ckpt = next(tmp_path.glob("**/*.ckpt"))
        second = PopauditCallback("item_embedding", batch_items=lambda b: b[1], counts=counts, interval=10,
                                  trace=tmp_path / "two.jsonl")
        trainer = pl.Trainer(max_epochs=2, callbacks=[second], **options)
        trainer.fit(Module(), loader, ckpt_path=ckpt)
    trace = read_trace(tmp_path / "two.jsonl")
    assert trainer.global_step == 32 and trace.header.config["start_step"] == 16
    assert [(r.kind, r.step, r.epoch) for r in trace.records] == [("step", 20, 2), ("step", 30, 2), ("epoch", 32, 2)]
    assert trace.end is not None and (trace.end.step, trace.end.epoch) == (32, 2)


def test_replacing_the_trace_of_a_run_that_did_not_end_warns(tmp_path: Path) -> None:
    """QA round 4, F5: a new monitor on the trace of a run that died would silently drop its
    records and count from 0; it warns, naming the way to continue. A finished trace is
    replaced quietly (a rerun)."""
    from auditor.monitor.settings import MonitorInputWarning

    path, run = tmp_path / "trace.jsonl", Run()
    died = run.monitor(path)
    run.epoch(died)
    died._writer.close()  # type: ignore[union-attr]
    with pytest.warns(MonitorInputWarning, match=r"did not end \(last record at step 16\); .* pass resume=True"):
        run.monitor(path).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run.monitor(path).close()  # the trace just written ended


def test_a_resumed_run_remembers_the_alerts_that_fired_and_records_those_it_adds(tmp_path: Path) -> None:
    """QA round 7 (monitor F1): each alert fires once over the whole trace, a resumed run's too;
    the header lists every alert watched, with the step a resumed run added (or dropped) it."""
    path, run = tmp_path / "trace.jsonl", Run()  # lr 5.0 at every record: lr>1 meets its first one
    with run.monitor(path, alerts=["lr>1", "lr<1"], on_alert="stop") as first, pytest.warns(UserWarning):
        run.epoch(first)  # lr>1 fires (and asks to stop) at step 10
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with run.monitor(path, resume=True, alerts=["lr>1", "lr>2"], on_alert="warn") as second:
            assert not second.should_stop
            run.epoch(second)
            assert not second.should_stop and second.stop_reason is None
    assert [str(w.message).split(" fired")[0] for w in caught] == ["alert lr>2"]  # lr>1 fired before: not again
    trace = read_trace(path)
    assert [(a.alert, a.step, a.action) for a in trace.alerts] == [("lr>1", 10, "stop"), ("lr>2", 20, "warn")]
    assert trace.header.alerts == ("lr>1", "lr<1", "lr>2") and trace.header.alert_action == "warn"
    assert dict(trace.header.alerts_added) == {"lr>2": 16} and dict(trace.header.alerts_dropped) == {"lr<1": 16}
    assert lines(path).count("header") == 1 and trace.end is not None and trace.end.reason == "completed"
    with run.monitor(path, resume=True, alerts=["lr<1"]) as third:  # given again: watched from its new step
        run.epoch(third)
    header = read_trace(path).header
    assert dict(header.alerts_added) == {"lr>2": 16, "lr<1": 32} and dict(header.alerts_dropped) == {"lr>1": 32, "lr>2": 32}


def test_a_resumed_run_continues_the_trace_a_symlink_names_at_its_target_and_mode(tmp_path: Path) -> None:
    """QA round 7 (monitor N1): the resumed header rewrite replaced a symlinked trace by a regular
    file (mode from the umask), so the link's target (an artifact folder) missed the resumed
    records; now the target is rewritten and continued, the link stays and the mode is kept."""
    (tmp_path / "artifacts").mkdir()
    target, link, run = tmp_path / "artifacts" / "trace.jsonl", tmp_path / "trace.jsonl", Run()
    with run.monitor(target) as first:
        run.epoch(first)
    link.symlink_to(Path("artifacts") / "trace.jsonl")
    target.chmod(0o640)
    with run.monitor(link, resume=True, alerts=["lr>1"]) as second:
        run.epoch(second)
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert target.stat().st_mode & 0o777 == 0o640
    trace = read_trace(target)
    assert [r.step for r in trace.records] == [10, 16, 20, 30, 32] and trace.header.alerts == ("lr>1",)
    assert [a.step for a in trace.alerts] == [20] and lines(target).count("header") == 1
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["artifacts", "trace.jsonl", "trace.jsonl"]  # no temp file


def test_a_resume_with_the_same_alerts_continues_every_hard_link_of_the_trace(tmp_path: Path) -> None:
    """QA round 7 (monitor N4): the header rewrite gave the trace a new inode even when the
    header did not change, so a second hard link kept the old records; with the same alerts
    the trace is only cut in place and continued, under every name."""
    path, other, run = tmp_path / "trace.jsonl", tmp_path / "copy.jsonl", Run()
    with run.monitor(path) as first:
        run.epoch(first)
    other.hardlink_to(path)
    with run.monitor(path, resume=True) as second:
        run.epoch(second)
    assert path.stat().st_ino == other.stat().st_ino
    assert [r.step for r in read_trace(other).records] == [10, 16, 20, 30, 32]


def test_a_resumed_run_compares_alerts_by_figure_operator_and_number(tmp_path: Path) -> None:
    """QA round 7 (monitor N3): alerts were compared as text, so ``lr>1.0`` on resume fired again
    after ``lr>1`` had fired, and the header listed both; the same figure, operator and threshold
    (a number) are one alert, under the trace's spelling, in the header and in alert records."""
    path, run = tmp_path / "trace.jsonl", Run()  # lr 5.0: lr>1 fires at step 10, lr>10 does not
    with run.monitor(path, alerts=["lr>1", "lr>10"]) as first, pytest.warns(UserWarning):
        run.epoch(first)
    for group in run.opt.param_groups:
        group["lr"] = 50.0  # the resumed run's lr meets lr>10 at its first record (step 20)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with run.monitor(path, resume=True, alerts=["lr > 1.0", "lr>1e1", "lr>2.50"]) as second:
            run.epoch(second)
    assert sorted(str(w.message).split(" fired")[0] for w in caught) == ["alert lr>10", "alert lr>2.50"]
    trace = read_trace(path)
    assert [(a.alert, a.step) for a in trace.alerts] == [("lr>1", 10), ("lr>10", 20), ("lr>2.50", 20)]
    assert trace.header.alerts == ("lr>1", "lr>10", "lr>2.50")
    assert dict(trace.header.alerts_added) == {"lr>2.50": 16} and dict(trace.header.alerts_dropped) == {}


def test_alert_identity_is_the_parsed_gate() -> None:
    from auditor.monitor.alerts import alert_identity

    assert alert_identity("spearman>0.60") == alert_identity(" spearman > 6e-1") == alert_identity("spearman>0.6")
    assert alert_identity("spearman>=0.6") != alert_identity("spearman>0.6") != alert_identity("loss>0.6")
    assert alert_identity("retired_figure > 1") == "retired_figure>1"  # a trace of another version: its text
    from auditor.monitor.alerts import Alerts

    assert [str(g) for g in Alerts(["lr>1", "lr > 1.0", "lr>=1"], "warn").gates] == ["lr>1", "lr>=1"]

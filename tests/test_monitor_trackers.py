"""Experiment trackers: the monitor's figures as MLflow metrics and TensorBoard scalars, and
an audit logged to an MLflow run, read back from a real local MLflow file store with
MLflow's own client (auditor/monitor/sinks.py, auditor/tracking.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from auditor.audit import run_audit
from auditor.config import AuditConfig
from auditor.monitor import TrainingMonitor
from auditor.tracking import log_audit

mlflow = pytest.importorskip("mlflow")
SAMPLE = Path(__file__).resolve().parents[1] / "sample_data"


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A local MLflow file store in tmp_path (never ./mlruns of the repository), allowed
    as a user of MLflow 3 allows it (tests of popaudit's own runs remove that)."""
    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri(uri)
    yield uri
    mlflow.set_tracking_uri(None)


def _train(monitor: TrainingMonitor, emb: torch.nn.Embedding, steps: int) -> None:
    opt = torch.optim.SGD(emb.parameters(), lr=1.0)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        items = torch.randint(0, emb.num_embeddings, (16,), generator=gen)
        loss = (1 - torch.nn.functional.normalize(emb(items), dim=1)[:, 0]).mean()
        opt.zero_grad()
        loss.backward()
        with monitor.step(items):
            opt.step()
    monitor.end_epoch(loss=float(loss.detach()))


def test_the_monitor_logs_to_the_active_mlflow_run(store: str) -> None:
    torch.manual_seed(0)
    emb = torch.nn.Embedding(30, 4)
    with mlflow.start_run() as run:
        monitor = TrainingMonitor(emb, interval=2)  # MLflow imported and a run active: logged
        _train(monitor, emb, 6)
        monitor.close()
    client = mlflow.MlflowClient(store)
    history = client.get_metric_history(run.info.run_id, "popaudit/spearman")
    steps = [r for r in monitor.records if r.kind == "step"]
    assert [(m.step, m.value) for m in history] == [(r.step, r.spearman) for r in steps]
    angles = client.get_metric_history(run.info.run_id, "popaudit/angle_share_90_1")
    assert [m.value for m in angles] == [1.0, 1.0, 1.0]
    epoch = client.get_metric_history(run.info.run_id, "popaudit/epoch/loss")
    assert [(m.step, m.value) for m in epoch] == [(1, pytest.approx(monitor.records[-1].loss))]
    assert client.get_run(run.info.run_id).info.status == "FINISHED"


def test_without_a_run_the_monitor_starts_and_ends_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: str) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")  # popaudit allows its default local store itself
    monkeypatch.chdir(tmp_path)  # the default store: ./mlruns
    emb = torch.nn.Embedding(20, 4)
    monitor = TrainingMonitor(emb, interval=1, mlflow=True)
    _train(monitor, emb, 2)
    monitor.close()
    client = mlflow.MlflowClient((tmp_path / "mlruns").as_uri())
    (experiment,) = [e for e in client.search_experiments() if e.name == "popaudit"]
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and run.data.metrics["popaudit/spearman"] == monitor.records[1].spearman


def test_an_audit_is_logged_with_metrics_verdict_and_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: str) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")
    result = run_audit(AuditConfig(model=SAMPLE / "biased.pt", probes=False, bootstrap=0, max_queries=200))
    report = tmp_path / "report.json"
    report.write_text(json.dumps(result.to_dict()))
    run_id = log_audit(result, reports={"json": report})
    client = mlflow.MlflowClient(store)
    run = client.get_run(run_id)
    flat = {k: v for k, v in result.flat_metrics().items() if v is not None and np.isfinite(v)}
    assert run.data.metrics["spearman"] == flat["spearman"] > 0.9
    assert run.data.metrics["head_share_1pct_dot_at_10"] == flat["head_share_1pct_dot@10"]
    assert len(run.data.metrics) == len(flat)
    assert run.data.tags["popaudit.severity"] == result.verdict.severity != "none"
    assert run.data.tags["popaudit.bias_detected"] == "true" and run.info.status == "FINISHED"
    assert sorted(a.path for a in client.list_artifacts(run_id, "popaudit")) == ["popaudit/report.json", "popaudit/verdict.json"]
    verdict = json.loads(Path(client.download_artifacts(run_id, "popaudit/verdict.json", str(tmp_path))).read_text())
    assert verdict["summary"] == result.verdict.summary


def test_tensorboard_scalars(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    emb = torch.nn.Embedding(20, 4)
    monitor = TrainingMonitor(emb, interval=1, tensorboard=tmp_path / "tb")
    _train(monitor, emb, 3)
    monitor.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    spearman = events.Scalars("popaudit/spearman")
    assert [e.step for e in spearman] == [1, 2, 3]
    assert [e.value for e in spearman] == pytest.approx([r.spearman for r in monitor.records[:3]], rel=1e-6)


def test_any_writer_with_add_scalar_gets_the_figures() -> None:
    class Recorder:
        def __init__(self) -> None:
            self.scalars: list[tuple[str, float, int]] = []

        def add_scalar(self, name: str, value: float, step: int, walltime: float | None = None) -> None:
            self.scalars.append((name, value, step))

    writer = Recorder()
    emb = torch.nn.Embedding(20, 4)
    monitor = TrainingMonitor(emb, interval=2, tensorboard=writer)
    _train(monitor, emb, 2)
    by_name = {(name, step): value for name, value, step in writer.scalars}
    assert by_name[("popaudit/spearman", 2)] == monitor.records[0].spearman
    assert by_name[("popaudit/epoch/angle_share_90_1", 1)] == 1.0


def test_lightning_logs_to_its_own_mlflow_logger_run(store: str, tmp_path: Path) -> None:
    """QA round 4, F7: with Lightning's MLFlowLogger (its own store, no fluent run active)
    the callback logs each record to the logger's run, as the trace holds them."""
    import warnings

    pl = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.loggers import MLFlowLogger

    from auditor.monitor import read_trace
    from auditor.monitor.lightning import PopauditCallback

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.item_embedding = torch.nn.Embedding(30, 4)

        def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
            return (1 - torch.nn.functional.normalize(self.item_embedding(batch[0]), dim=1)[:, 0]).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=1.0)

    torch.manual_seed(0)
    items = torch.randint(0, 30, (160,))
    own = (tmp_path / "lightning_runs").as_uri()  # not the store MLFLOW_TRACKING_URI names
    logger = MLFlowLogger(experiment_name="lightning", tracking_uri=own)
    path = tmp_path / "trace.jsonl"
    callback = PopauditCallback("item_embedding", batch_items=lambda b: b[0], interval=2, trace=path)
    trainer = pl.Trainer(max_epochs=1, callbacks=[callback], logger=logger, accelerator="cpu", enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Module(), torch.utils.data.DataLoader(torch.utils.data.TensorDataset(items), batch_size=16))
    assert mlflow.active_run() is None
    history = mlflow.MlflowClient(own).get_metric_history(logger.run_id, "popaudit/angle_share_90_1")
    trace = read_trace(path)
    assert [(m.step, m.value) for m in history] == [(r.step, r.angle_share_90_1) for r in trace.steps]
    assert [r.step for r in trace.steps] == [2, 4, 6, 8, 10]

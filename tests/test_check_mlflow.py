"""``popaudit check --mlflow`` (issue #26): the audit's flat metrics, verdict and HTML/JSON
reports in an MLflow run, read back from a real local file store with MLflow's client;
without MLflow, an error that names the extra."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.tracking import metric_key

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data"


def _inputs(folder: Path) -> list[str]:
    """A small table whose norms grow with the counts (item i seen i + 1 times, norm 1 + i)."""
    rng = np.random.default_rng(0)
    table = rng.normal(size=(30, 4))
    table = table / np.linalg.norm(table, axis=1, keepdims=True) * (1.0 + np.arange(30))[:, None]
    np.save(folder / "items.npy", table.astype(np.float32))
    (folder / "counts.csv").write_text("item_id,count\n" + "".join(f"{i},{i + 1}\n" for i in range(30)))
    return [str(folder / "items.npy"), "--frequencies", str(folder / "counts.csv"), "--bootstrap", "0", "--no-probes"]


def test_check_logs_to_a_new_run_in_the_tracking_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mlflow = pytest.importorskip("mlflow")
    uri = (tmp_path / "store").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)  # popaudit allows a local store itself
    args = _inputs(tmp_path)
    done = CliRunner().invoke(cli, ["check", *args, "--mlflow", "--json", str(tmp_path / "r.json")])
    assert done.exit_code == 0, done.output
    report = json.loads((tmp_path / "r.json").read_text())

    client = mlflow.MlflowClient(uri)
    (experiment,) = [e for e in client.search_experiments() if e.name == "popaudit"]
    (run,) = client.search_runs([experiment.experiment_id])
    assert f"Logged the audit to MLflow run {run.info.run_id}" in done.output
    assert run.info.status == "FINISHED"
    assert run.data.metrics["spearman"] == report["frequency_norm"]["spearman"] == 1.0  # norms rank as counts
    assert run.data.metrics[metric_key("loglog_slope")] == pytest.approx(report["frequency_norm"]["loglog_slope"])
    assert run.data.tags["popaudit.severity"] == report["verdict"]["severity"]
    assert run.data.tags["popaudit.bias_detected"] == str(report["verdict"]["bias_detected"]).lower()
    assert run.data.tags["popaudit.model"] == args[0]
    names = sorted(a.path for a in client.list_artifacts(run.info.run_id, "popaudit"))
    assert names == ["popaudit/report.html", "popaudit/report.json", "popaudit/verdict.json"]
    logged = json.loads(Path(client.download_artifacts(run.info.run_id, "popaudit/report.json", str(tmp_path))).read_text())
    assert logged["frequency_norm"] == report["frequency_norm"] and logged["verdict"] == report["verdict"]
    html = Path(client.download_artifacts(run.info.run_id, "popaudit/report.html", str(tmp_path))).read_text()
    assert html.startswith("<!DOCTYPE html>") and "Spearman" in html


def test_check_logs_to_the_active_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mlflow = pytest.importorskip("mlflow")
    uri = (tmp_path / "store").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri(uri)
    try:
        with mlflow.start_run() as run:
            done = CliRunner().invoke(cli, ["check", *_inputs(tmp_path), "--mlflow", "-q"])
            assert done.exit_code == 0, done.output
            assert mlflow.active_run() is not None  # the caller's run stays open
        client = mlflow.MlflowClient(uri)
        data = client.get_run(run.info.run_id).data
        assert data.metrics["spearman"] == 1.0 and "popaudit.severity" in data.tags
        assert len(client.search_runs([run.info.experiment_id])) == 1
    finally:
        mlflow.set_tracking_uri(None)


def test_without_mlflow_the_error_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)  # import mlflow raises ImportError
    monkeypatch.chdir(tmp_path)
    args = _inputs(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    done = CliRunner().invoke(cli, ["check", *args, "--mlflow", "--json", "r.json"])
    assert done.exit_code == 1
    assert "Error: MLflow is not installed: pip install 'popaudit[mlflow]'" in done.output
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # no report, no ./mlruns


def test_a_store_mlflow_cannot_use_is_an_error_after_the_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nosuchscheme://tracking.invalid")
    done = CliRunner().invoke(cli, ["check", *_inputs(tmp_path), "--mlflow", "--json", str(tmp_path / "r.json")])
    assert done.exit_code == 1 and "Traceback" not in done.output
    assert "Error: cannot log the audit to MLflow (nosuchscheme://tracking.invalid): " in done.output
    assert json.loads((tmp_path / "r.json").read_text())["frequency_norm"]["spearman"] == 1.0  # written before

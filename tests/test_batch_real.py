"""Batch with the real ``run_audit``: .npy item tables and Parquet logs made here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from scipy import stats
from test_batch_core import expected_rho, make_log, make_table, write_manifest

import auditor.audit
from auditor.audit import run_audit
from auditor.batch import run_batch
from auditor.cli import cli
from auditor.config import AuditConfig
from auditor.values import LogSpec

DEFAULTS = {"ks": (10,), "bootstrap": 0, "max_queries": 50, "probes": False}


@pytest.fixture()
def models(tmp_path: Path) -> dict[str, Any]:
    freqs_a = make_log(tmp_path / "log_a.parquet", 300, seed=3)
    freqs_b = make_log(tmp_path / "log_b.parquet", 300, seed=4)
    make_table(tmp_path / "flat.npy", freqs_a, 0.0, seed=1)
    make_table(tmp_path / "mild.npy", freqs_a, 0.5, seed=2)
    make_table(tmp_path / "strong.npy", freqs_b, 3.0, seed=3)
    np.save(tmp_path / "wrong_dim.npy", np.zeros((300,), dtype=np.float32))  # 1-D: not a table
    manifest = write_manifest(
        tmp_path / "manifest.parquet",
        {
            "model": ["flat.npy", "mild.npy", "wrong_dim.npy", "strong.npy"],
            "interactions": ["log_a.parquet", "log_a.parquet", "log_a.parquet", "log_b.parquet"],
        },
    )
    return {"dir": tmp_path, "manifest": manifest, "freqs": [freqs_a, freqs_a, None, freqs_b]}


def test_real_audits_good_and_broken_rows(models: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    d = models["dir"]
    reads: list[Path] = []
    real_count = auditor.audit.count_item_ids

    def counting(spec: LogSpec, **kwargs: Any) -> Any:
        reads.append(spec.path.name)
        return real_count(spec, **kwargs)

    monkeypatch.setattr(auditor.audit, "count_item_ids", counting)
    outcome = run_batch(models["manifest"], d / "results.parquet", defaults=DEFAULTS, inline=True)
    rows = pq.read_table(d / "results.parquet").to_pylist()
    assert [r["status"] for r in rows] == ["ok", "ok", "error", "ok"]
    assert rows[2]["error"].startswith("EmbeddingTableError: ") and "wrong_dim.npy must be 2-D" in rows[2]["error"]
    assert outcome.n_error == 1
    # The shared log_a is read once for its three rows (one InputCache in this process).
    assert reads == ["log_a.parquet", "log_b.parquet"]
    for row, name in ((0, "flat.npy"), (1, "mild.npy"), (3, "strong.npy")):
        norms = np.linalg.norm(np.load(d / name).astype(np.float64), axis=1)
        expected = stats.spearmanr(norms, models["freqs"][row]).statistic
        assert rows[row]["spearman"] == pytest.approx(expected, abs=1e-9)
        direct = run_audit(AuditConfig(model=d / name, interactions=d / rows[row]["interactions"], **DEFAULTS))
        report = json.loads(rows[row]["report_json"])
        assert report["frequency_norm"]["spearman"] == pytest.approx(direct.frequency_norm.spearman)
        assert rows[row]["head_share_1pct_ratio@10"] == pytest.approx(direct.flat_metrics()["head_share_1pct_ratio@10"])
        assert rows[row]["verdict_severity"] == direct.verdict.severity
        assert rows[row]["C2_status"] == direct.conditions["C2"].status
    assert rows[0]["spearman"] < rows[1]["spearman"] < rows[3]["spearman"]


def test_real_parallel_equals_serial(models: dict[str, Any]) -> None:
    d = models["dir"]
    run_batch(models["manifest"], d / "serial.parquet", defaults=DEFAULTS)
    run_batch(models["manifest"], d / "parallel.parquet", defaults=DEFAULTS, jobs=2)
    serial = pq.read_table(d / "serial.parquet").drop(["seconds"]).to_pylist()
    parallel = pq.read_table(d / "parallel.parquet").drop(["seconds"]).to_pylist()
    assert parallel == serial


def test_one_based_logs_need_an_id_offset_per_row_or_from_the_command_line(tmp_path: Path) -> None:
    freqs = make_log(tmp_path / "log0.parquet", 300, seed=3)
    log = pq.read_table(tmp_path / "log0.parquet")
    pq.write_table(log.set_column(1, "item_id", pc.add(log.column("item_id"), 1)), tmp_path / "log1.parquet")
    make_table(tmp_path / "strong.npy", freqs, 3.0, seed=3)
    expected = expected_rho(tmp_path / "strong.npy", freqs)
    manifest = write_manifest(
        tmp_path / "m.csv", {"model": ["strong.npy", "strong.npy"], "interactions": ["log1.parquet", "log1.parquet"],
                             "id_offset": [1, None]},
    )
    args = ["batch", str(manifest), "-k", "10", "--bootstrap", "0", "--no-probes", "--max-queries", "50"]
    runner = CliRunner()
    result = runner.invoke(cli, [*args, "-o", str(tmp_path / "a.parquet")])
    assert result.exit_code == 0, result.output
    rows = pq.read_table(tmp_path / "a.parquet").to_pylist()
    assert rows[0]["status"] == "ok" and rows[0]["spearman"] == pytest.approx(expected, abs=1e-9)
    assert rows[1]["status"] == "error" and "id_offset" in rows[1]["error"]  # the manifest column to set
    result = runner.invoke(cli, [*args, "--id-offset", "1", "-o", str(tmp_path / "b.parquet")])
    rows = pq.read_table(tmp_path / "b.parquet").to_pylist()
    assert [r["status"] for r in rows] == ["ok", "ok"] and rows[1]["spearman"] == pytest.approx(expected, abs=1e-9)

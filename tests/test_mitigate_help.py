"""`popaudit mitigate --help` names what the sidecar records (docs/report.md, "Changes"):
with --interactions the log-log slope of norm on frequency before and after, never
Spearman's rho (rescaling keeps the norms' order, so it cannot move rho)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from auditor.cli import cli


def test_help_names_the_figures_the_sidecar_records(tmp_path: Path) -> None:
    runner = CliRunner()
    helped = runner.invoke(cli, ["mitigate", "--help"], catch_exceptions=False)
    text = " ".join(helped.output.split())
    assert "the log-log slope of norm on frequency" in text and "Spearman rho with" not in text
    frequencies = np.arange(1, 50)
    directions = np.random.default_rng(3).standard_normal((49, 4))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    np.save(tmp_path / "items.npy", (np.sqrt(frequencies)[:, None] * directions).astype(np.float32))
    rows = np.repeat(np.arange(49), frequencies)
    pq.write_table(pa.table({"user_id": np.arange(rows.size) % 7, "item_id": rows}), tmp_path / "log.parquet")
    run = runner.invoke(cli, ["mitigate", str(tmp_path / "items.npy"), "--alpha", "0.5", "-o", str(tmp_path / "out.npy"),
                              "--interactions", str(tmp_path / "log.parquet")], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    side = json.loads((tmp_path / "out.npy.popaudit.json").read_text())["frequency_norm"]
    assert set(side["before"]) == set(side["after"]) == {"loglog_slope"}
    assert abs(side["before"]["loglog_slope"] - 0.5) < 0.02  # norms sqrt(f) on frequencies f = 1..49
    assert abs(side["after"]["loglog_slope"] - 0.25) < 0.01

"""A gate on a measure absent from a report (a plugin's measure, its plugin not loaded in
that run) says it is absent, not that the measure "returned no finite number", which is
the reason of a registered measure's null (QA plugins F5)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from auditor.cli import cli
from auditor.gate_reasons import why_unmeasured

PLUGIN = Path(__file__).resolve().parents[1] / "plugins" / "norm_measures.py"
ABSENT = "no measure named {} was registered in its audit"


def test_absent_and_null_measures_have_their_own_reasons() -> None:
    absent = why_unmeasured("norm_gini", {"measures": {"item_bias_spearman": None}, "not_measured": {}})
    assert absent.startswith(ABSENT.format("norm_gini")) and "absent from the report, not null" in absent
    null = why_unmeasured("norm_gini", {"measures": {"norm_gini": None}, "not_measured": {}})
    assert "returned no finite number" in null and "absent" not in null
    # A plugin's list measure the report never had is absent too (its name is no built-in one).
    assert why_unmeasured("norm_percentile_dot@10", {"measures": {}}).startswith(ABSENT.format("norm_percentile_dot@10"))


def test_diff_gate_on_a_plugin_measure_only_the_new_report_has(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    np.save(tmp_path / "items.npy", rng.normal(size=(40, 4)).astype(np.float32))
    pq.write_table(pa.table({"user_id": rng.integers(0, 20, 300), "item_id": rng.integers(0, 40, 300)}),
                   tmp_path / "log.parquet")
    runner = CliRunner()
    for name, extra in (("base", []), ("new", ["--plugin", str(PLUGIN)])):
        result = runner.invoke(cli, ["check", str(tmp_path / "items.npy"), "--interactions", str(tmp_path / "log.parquet"),
                                     "--queries", "history", "-k", "5", "--bootstrap", "0", "--no-probes", "-q",
                                     "--json", str(tmp_path / f"{name}.json"), *extra])
        assert result.exit_code == 0, result.output
    assert "norm_gini" not in json.loads((tmp_path / "base.json").read_text())["measures"]
    result = runner.invoke(cli, ["diff", str(tmp_path / "base.json"), str(tmp_path / "new.json"),
                                 "--fail-on", "norm_gini.delta>0"])
    assert result.exit_code == 1
    assert f"(the base report: {ABSENT.format('norm_gini')}" in result.stderr
    assert "returned no finite number" not in result.stderr  # before: the reason of a null

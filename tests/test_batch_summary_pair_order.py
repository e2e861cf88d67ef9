"""The batch summary names a row pair in diff's order, BASE (the earlier row) vs NEW, with
the values in that order (QA12 scale F2): "row 1 vs row 0: ... seed differs (1 vs 9)" read
as row 1 = 1 while row 0 had seed 1; it now reads "row 0 vs row 1: ... (1 vs 9)"."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from auditor.cli import cli

ROOT = Path(__file__).resolve().parents[1]


def test_seed_pair_reads_earlier_row_first(tmp_path: Path) -> None:
    """Row 0 samples 100 of the 600 log users with seed 1, row 1 with seed 9."""
    for name in ("biased.pt", "interactions.parquet"):
        shutil.copy(ROOT / "sample_data" / name, tmp_path / name)
    (tmp_path / "man.csv").write_text("model,label,seed\nbiased.pt,one,1\nbiased.pt,nine,9\n")
    out = tmp_path / "r.parquet"
    result = CliRunner().invoke(cli, ["batch", str(tmp_path / "man.csv"), "-o", str(out), "--interactions",
                                      str(tmp_path / "interactions.parquet"), "-k", "10", "--max-queries", "100",
                                      "--bootstrap", "0", "--no-probes", "--html", str(tmp_path / "s.html")])  # fmt: skip
    assert result.exit_code == 0, result.output
    seeds = [json.loads(text)["retrieval"]["population"]["seed"] for text in pq.read_table(out)
             .column("report_json").to_pylist()]  # fmt: skip
    assert seeds == [1, 9]
    said = "row 0 vs row 1: retrieval.population.seed differs (1 vs 9)."
    for text in (result.output, (tmp_path / "s.html").read_text()):
        flat = " ".join(text.split())
        assert said in flat and "row 1 vs row 0" not in flat  # before: "row 1 vs row 0: ... (1 vs 9)"


def test_back_and_forth_pairs_keep_each_pairs_order(tmp_path: Path) -> None:
    """exact, IVF, exact: "row 0 vs row 1: ... ("exact" vs "ivf"). row 1 vs row 2: ... ("ivf" vs "exact")."."""
    from auditor.batch.summary import summarise
    from auditor.cli._reports import rendered
    from auditor.plugin_api import RenderContext
    from auditor.report.batch_summary import batch_document

    for name in ("biased.pt", "interactions.parquet"):
        shutil.copy(ROOT / "sample_data" / name, tmp_path / name)
    (tmp_path / "man.csv").write_text("model\nbiased.pt\n")
    result = CliRunner().invoke(cli, ["batch", str(tmp_path / "man.csv"), "-o", str(tmp_path / "r.parquet"),
                                      "--interactions", str(tmp_path / "interactions.parquet"), "-k", "10",
                                      "--bootstrap", "0", "--no-probes", "-q"])  # fmt: skip
    assert result.exit_code == 0, result.output
    one = pq.read_table(tmp_path / "r.parquet")
    record = one.to_pylist()[0]
    records = []
    for row, index in enumerate(("exact", "ivf", "exact")):
        report = copy.deepcopy(json.loads(record["report_json"]))
        report["retrieval"]["index"] = index
        records.append({**record, "row": row, "index": index, "report_json": json.dumps(report)})
    summary = summarise(pa.Table.from_pylist(records, schema=one.schema), rank_by="spearman")
    text = str(rendered(batch_document(summary), "markdown", RenderContext(width=0)))
    flat = " ".join(re.sub(r"\\(.)", r"\1", text).split())
    assert ('not comparable (as in popaudit diff): row 0 vs row 1: retrieval.index differs ("exact" vs "ivf"). '
            'row 1 vs row 2: retrieval.index differs ("ivf" vs "exact").') in flat, flat[-600:]

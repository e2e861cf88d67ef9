"""The batch summary states a Spearman change only where ``popaudit diff`` compares the two
rows' rho (QA12 scale F1): one model read with rows as ids, then through a permuted
``item_ids`` file, moved rho from about 0.98 to about 0, a change of reading, not of the
model. Diff calls it not comparable (docs/diff.md, "the raw id → row mapping"); so do the
row-by-row table, its caption, the trend and the figure, by diff's one rule."""

from __future__ import annotations

import html as html_text
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from scipy import stats

from auditor.cli import cli

N_ITEMS = 300


def _write_table(path: Path, counts: np.ndarray, strength: float, seed: int) -> np.ndarray:
    """An item table whose norms grow with log(1 + count) by ``strength``; returns the norms."""
    rng = np.random.default_rng(seed)
    directions = rng.standard_normal((counts.shape[0], 8))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    norms = 1.0 + strength * np.log1p(counts) + rng.uniform(0, 0.5, counts.shape[0])
    np.save(path, (directions * norms[:, None]).astype(np.float32))
    return np.linalg.norm(np.load(path).astype(np.float64), axis=1)


@pytest.fixture(scope="module")
def batch_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Three rows: model a with rows as ids, model a through a permuted item_ids file, and
    model b (more biased) through the same file; each row's rho computed here with scipy."""
    d = tmp_path_factory.mktemp("batch_id_mapping")
    rng = np.random.default_rng(5)
    counts = np.maximum(1, (3000 / np.arange(1, N_ITEMS + 1) ** 1.1).astype(np.int64))
    rng.shuffle(counts)
    items = np.repeat(np.arange(N_ITEMS), counts)  # raw item id = position in counts
    pq.write_table(pa.table({"user_id": rng.integers(0, 80, items.shape[0]), "item_id": items}), d / "log.parquet")
    permuted = rng.permutation(N_ITEMS)  # row i of a table holds raw item id permuted[i]
    (d / "ids.txt").write_text("\n".join(map(str, permuted)) + "\n")
    norms_a = _write_table(d / "a.npy", counts, 2.0, seed=1)
    norms_b = _write_table(d / "b.npy", counts[permuted], 2.0, seed=2)  # biased as read through the file
    (d / "man.csv").write_text(f"model,interactions,item_ids,label\n{d / 'a.npy'},{d / 'log.parquet'},,rows\n"
                               f"{d / 'a.npy'},{d / 'log.parquet'},{d / 'ids.txt'},a mapped\n"
                               f"{d / 'b.npy'},{d / 'log.parquet'},{d / 'ids.txt'},b mapped\n")
    result = CliRunner().invoke(cli, ["batch", str(d / "man.csv"), "-o", str(d / "r.parquet"), "--bootstrap", "0",
                                      "--no-probes", "--html", str(d / "s.html")])  # fmt: skip
    assert result.exit_code == 0, result.output
    rho = [float(stats.spearmanr(norms_a, counts).statistic), float(stats.spearmanr(norms_a, counts[permuted]).statistic),
           float(stats.spearmanr(norms_b, counts[permuted]).statistic)]  # fmt: skip
    return {"dir": d, "table": pq.read_table(d / "r.parquet"), "rho": rho, "console": result.output}


def test_a_spearman_change_across_item_mappings_is_not_comparable(batch_run: dict[str, Any]) -> None:
    from auditor.batch.summary import summarise
    from auditor.diff import diff_reports

    rho = batch_run["rho"]
    assert rho[0] > 0.9 and abs(rho[1]) < 0.2 and rho[2] > 0.9  # the mapping, not the model, moved rho
    table = batch_run["table"]
    assert table.column("spearman").to_pylist() == pytest.approx(rho, abs=1e-12)
    summary = summarise(table, rank_by="spearman")
    reports = [json.loads(text) for text in table.column("report_json").to_pylist()]
    by_diff = diff_reports(reports[0], reports[1]).metric("spearman")
    assert by_diff.status == "incomparable" and by_diff.reason is not None
    assert "inputs.item_id_mapping differs" in by_diff.reason
    assert diff_reports(reports[1], reports[2]).metric("spearman").status == "compared"
    row1, row2 = summary.order[1], summary.order[2]
    assert row1.delta_spearman is None  # before: rho[1] - rho[0], about -0.9
    assert row1.spearman_apart == by_diff.reason and row1.pair_apart == by_diff.reason  # one rule, one wording
    assert row2.spearman_apart is None and row2.delta_spearman == pytest.approx(rho[2] - rho[1], abs=1e-12)
    trend = {t.metric: t for t in summary.trends}["spearman"]
    assert (trend.direction, trend.change) == ("not comparable", None)


def test_the_tables_caption_and_figure_say_not_comparable(batch_run: dict[str, Any]) -> None:
    from auditor.batch.summary import summarise
    from auditor.report.batch_summary import batch_document, summary_figure
    from auditor.report.formatting import fmt_num

    rho = batch_run["rho"]
    old = fmt_num(rho[1] - rho[0])
    pages = {"console": batch_run["console"], "html": html_text.unescape((batch_run["dir"] / "s.html").read_text())}
    for where, text in pages.items():
        flat = " ".join(text.split())
        assert old not in flat, where  # before: the Δ spearman cell of row 1
        assert fmt_num(rho[2] - rho[1]) in flat, where  # row 2's change is compared
        assert re.search(r"row 0 vs row 1: inputs\.item_id_mapping differs \(", flat), where
    summary = summarise(batch_run["table"], rank_by="spearman")
    assert [row[4] for row in batch_document(summary).sections[1].blocks[2].rows] == [  # type: ignore[union-attr]
        "n/a", "not comparable", fmt_num(rho[2] - rho[1])]
    fig = summary_figure(summary)
    joined = [list(line.get_xdata()) for line in fig.axes[0].get_lines() if line.get_marker() == "o"]
    assert joined == [[0], [1, 2]]  # before: [[0, 1, 2]], one line through the mapping's drop
    separators = [line.get_xdata()[0] for line in fig.axes[0].get_lines() if line.get_linestyle() == ":"]
    assert separators == [0.5]
    figure = batch_document(summary).sections[1].blocks[0]
    assert "Spearman ρ line is broken (dotted separator) between rows popaudit diff would not compare " \
           "(row 0 vs row 1)" in figure.alt  # type: ignore[union-attr]

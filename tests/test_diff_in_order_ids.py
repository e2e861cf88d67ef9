"""An id list holding N, N+1, ... in row order is the rule row = id − N, the rule of rows taken
as ids (``--id-offset N``), whatever the catalogue's size (QA12 scale N3): rows as ids over a
20,000-row model and its first 19,000 rows were compared (ρ 0.7850 → 0.7863), while the same
pair with either side read through an in-order ``--item-ids`` file (0..19999, 0..18999) was
"not comparable, inputs.item_id_mapping differs": comparability depended on the spelling.
Now the report says such a file is the rule, and diff and the batch summary compare it so."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import spearmanr

from auditor import AuditConfig, run_audit
from auditor.diff import diff_reports

N_SMALL = 190


def _audit(folder: Path, model: str, log: str = "log.parquet", **options: Any) -> dict[str, Any]:
    result = run_audit(AuditConfig(model=folder / model, interactions=folder / log, ks=(10,), probes=False,
                                   bootstrap=0, **options))
    report: dict[str, Any] = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    return report


def _ids(folder: Path, name: str, ids: Any) -> Path:
    (folder / name).write_text("\n".join(map(str, ids)) + "\n")
    return folder / name


@pytest.fixture(scope="module")
def two_sizes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A 200-row model whose norms follow log(1 + count) with noise, and its first 190 rows,
    each read with rows as ids and through an id file listing 0..n-1 in order; rho of each
    computed here with scipy (the two sizes' rho differ)."""
    d = tmp_path_factory.mktemp("in_order_ids")
    rng = np.random.default_rng(11)
    counts = (60 / np.arange(1, 201) ** 0.9).astype(np.int64) + 1
    norms = np.log1p(counts) + rng.uniform(0.0, 1.5, 200)
    directions = rng.standard_normal((200, 8))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    table = (directions * norms[:, None]).astype(np.float32)
    np.save(d / "items.npy", table)
    np.save(d / "small.npy", table[:N_SMALL])
    items = np.repeat(np.arange(200), counts)
    pq.write_table(pa.table({"user_id": rng.integers(0, 40, items.size), "item_id": items}), d / "log.parquet")
    reports = {"rows200": _audit(d, "items.npy")}
    reports["file200"] = _audit(d, "items.npy", item_ids=_ids(d, "ids200.txt", range(200)))
    reports["rows190"] = _audit(d, "small.npy", assume_row_ids=True)
    reports["file190"] = _audit(d, "small.npy", item_ids=_ids(d, "ids190.txt", range(N_SMALL)))
    norms = np.linalg.norm(table.astype(np.float64), axis=1)
    rho = {200: float(spearmanr(norms, counts)[0]), N_SMALL: float(spearmanr(norms[:N_SMALL], counts[:N_SMALL])[0])}
    return {"folder": d, "reports": reports, "rho": rho}


def test_the_report_says_an_in_order_file_is_the_offset_rule(two_sizes: dict[str, Any]) -> None:
    d, reports = two_sizes["folder"], two_sizes["reports"]
    assert reports["file200"]["inputs"]["item_id_mapping"] == (
        f"item rows mapped through item_ids {d / 'ids200.txt'} (the rows audited hold the ids 0..199 in order: row = "
        "raw item id − 0)")
    assert reports["file190"]["inputs"]["item_id_mapping"].endswith("hold the ids 0..189 in order: row = raw item id − 0)")
    permuted = _audit(d, "items.npy", item_ids=_ids(d, "perm.txt", np.random.default_rng(7).permutation(200)))
    assert permuted["inputs"]["item_id_mapping"] == f"item rows mapped through item_ids {d / 'perm.txt'}"


def test_an_in_order_file_compares_across_catalogue_sizes_as_rows_as_ids_do(two_sizes: dict[str, Any]) -> None:
    reports, rho = two_sizes["reports"], two_sizes["rho"]
    assert rho[N_SMALL] - rho[200] == pytest.approx(0.0194, abs=1e-4)  # 0.5794 -> 0.5989: the last 10 rows' part
    for name, report in reports.items():
        assert report["frequency_norm"]["spearman"] == pytest.approx(rho[int(name[-3:])], abs=1e-5), name
    for big, small in itertools.product(("rows200", "file200"), ("rows190", "file190")):
        diff = diff_reports(reports[big], reports[small])
        change = diff.metric("spearman")
        # Before: rows200 vs rows190 alone compared; the three pairs with a file were "not comparable".
        assert (change.status, change.delta) == ("compared", pytest.approx(rho[N_SMALL] - rho[200], abs=1e-5)), (big, small)
        assert [s.setting for s in diff.settings] == ["inputs.n_items"], (big, small)  # 2 vs 1 top-1% items


def test_the_batch_summary_states_the_change_across_the_spellings(two_sizes: dict[str, Any]) -> None:
    from auditor.batch.summary import summarise
    from auditor.summaries import STATUS_OK

    reports, rho = two_sizes["reports"], two_sizes["rho"]
    order = [reports[name] for name in ("file200", "rows190", "file190", "rows200")]
    table = pa.table({"row": [0, 1, 2, 3], "status": [STATUS_OK] * 4, "model": ["m"] * 4, "error": [None] * 4,
                      "spearman": [r["frequency_norm"]["spearman"] for r in order],
                      "report_json": [json.dumps(r) for r in order]})
    rows = summarise(table).order
    assert [r.spearman_apart for r in rows] == [None] * 4  # before: "inputs.item_id_mapping differs (...)" twice
    assert [r.delta_spearman for r in rows[1:]] == pytest.approx(
        [rho[N_SMALL] - rho[200], 0.0, rho[200] - rho[N_SMALL]], abs=1e-5)


def test_other_rules_stay_other_mappings(two_sizes: dict[str, Any]) -> None:
    """A permuted file, or ids 1..n in order (row = id − 1) against rows as ids (row = id), at
    another size: not comparable, as before; ids 1..200 in order against --id-offset 1 at 190 rows: compared."""
    d, reports = two_sizes["folder"], two_sizes["reports"]
    permuted = _audit(d, "items.npy", item_ids=_ids(d, "perm.txt", np.random.default_rng(7).permutation(200)))
    assert "inputs.item_id_mapping" in [s.setting for s in diff_reports(permuted, reports["rows190"]).settings]
    log = pq.read_table(d / "log.parquet")
    pq.write_table(log.set_column(1, "item_id", pa.array(log["item_id"].to_numpy() + 1)), d / "log1.parquet")
    file1 = _audit(d, "items.npy", "log1.parquet", item_ids=_ids(d, "ids1.txt", range(1, 201)))
    assert file1["inputs"]["item_id_mapping"].endswith("(the rows audited hold the ids 1..200 in order: row = raw item id − 1)")
    offset1 = _audit(d, "small.npy", "log1.parquet", id_offset=1, assume_row_ids=True)
    assert file1["frequency_norm"]["spearman"] == pytest.approx(reports["rows200"]["frequency_norm"]["spearman"])
    assert offset1["frequency_norm"]["spearman"] == pytest.approx(reports["rows190"]["frequency_norm"]["spearman"])
    assert diff_reports(file1, offset1).metric("spearman").status == "compared"
    assert "inputs.item_id_mapping" in [s.setting for s in diff_reports(file1, reports["rows190"]).settings]

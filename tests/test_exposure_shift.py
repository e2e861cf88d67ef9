"""The items dot serving raises and lowers most (auditor/metrics/exposure_shift.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import percentileofscore

from auditor.audit import run_audit
from auditor.config import AuditConfig
from auditor.metrics.exposure_shift import exposure_shift
from auditor.values import ItemRows

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"


def test_gains_and_losses_by_hand() -> None:
    exposure = {
        "dot": {5: np.array([9, 4, 4, 0, 2, 3])},
        "cosine": {5: np.array([1, 2, 0, 3, 2, 5])},
        "popular": {5: np.array([10, 10, 0, 0, 0, 0])},
    }
    freq = np.array([50, 20, 20, 1, 3, 2])
    norms = np.array([4.0, 2.0, 3.0, 0.5, 1.0, 1.0])
    ids = np.array(["a", "b", "c", "d", "e", "f"])
    table = exposure_shift(exposure, 5, freq, norms, ItemRows(ids, 6), n=2, n_queries=6)
    # gains: a +8, c +4, b +2 (e 0: in neither list); losses: d -3, f -2
    assert [e.item_id for e in table.gained] == ["a", "c"]
    assert [e.gain for e in table.gained] == [8, 4]
    assert [e.item_id for e in table.lost] == ["d", "f"]
    first = table.gained[0]
    assert (first.row, first.frequency, first.norm, first.exposure_dot, first.exposure_cosine,
            first.exposure_popular) == (0, 50, 4.0, 9, 1, 10)  # fmt: skip
    # norm percentile: share of items with norm <= the item's (scipy's "weak" kind)
    assert [e.norm_percentile for e in table.lost] == pytest.approx(
        [percentileofscore(norms, 0.5, kind="weak"), percentileofscore(norms, 1.0, kind="weak")])
    assert table.lost[1].norm_percentile == pytest.approx(50.0)
    out = json.loads(json.dumps(table.to_dict()))
    assert out["gained"][0]["gain"] == 8 and out["k"] == 5 and out["n_queries"] == 6 and out["definition"]


def test_ties_are_broken_by_exposure_then_row() -> None:
    exposure = {"dot": {3: np.array([3, 5, 3, 0, 1, 0])}, "cosine": {3: np.array([1, 3, 1, 2, 3, 2])}}
    table = exposure_shift(exposure, 3, np.ones(6, dtype=int), np.arange(6.0))
    # gains 2, 2, 2 (rows 0, 1, 2): higher dot exposure first (row 1), then row order
    assert [e.row for e in table.gained] == [1, 0, 2]
    # losses -2, -2, -2 (rows 3, 4, 5): higher cosine exposure first (row 4), then row order
    assert [e.row for e in table.lost] == [4, 3, 5]
    assert table.gained[0].item_id == 1 and table.gained[0].exposure_popular is None


def test_an_id_offset_names_rows_by_their_raw_ids() -> None:
    # With 1-based ids taken as rows (--id-offset 1), row r is raw id r + 1.
    exposure = {"dot": {5: np.array([9, 4, 4, 0, 2, 3])}, "cosine": {5: np.array([1, 2, 0, 3, 2, 5])}}
    table = exposure_shift(exposure, 5, np.ones(6, dtype=int), np.arange(6.0), ItemRows(None, 6, 1), n=2)
    assert [(e.row, e.item_id) for e in table.gained] == [(0, 1), (2, 3)]
    assert [(e.row, e.item_id) for e in table.lost] == [(3, 4), (5, 6)]
    assert all(type(e.item_id) is int for e in table.gained + table.lost)  # JSON-safe, not numpy
    with pytest.raises(ValueError, match="item ids cover 7 items but dot exposure 6"):
        exposure_shift(exposure, 5, np.ones(6, dtype=int), np.arange(6.0), ItemRows(np.arange(7), 7))


def test_the_audit_names_listed_items_by_raw_id_under_an_id_offset(tmp_path: Path) -> None:
    # 40 items, ids 1..40 in the log (row = id - 1); norms grow with frequency so dot
    # over-serves the popular rows. Every listed item's id must be its row + 1, and its
    # frequency the log's count of that raw id.
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(3)
    rows = rng.choice(40, size=1500, p=(p := 1 / np.arange(1, 41)) / p.sum())
    counts = np.bincount(rows, minlength=40)
    directions = rng.normal(size=(40, 6))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    np.save(tmp_path / "t.npy", (directions * (1 + np.log1p(counts))[:, None]).astype(np.float32))
    pq.write_table(pa.table({"user_id": rng.integers(0, 60, rows.size), "item_id": rows + 1}), tmp_path / "log.parquet")
    result = run_audit(AuditConfig(model=tmp_path / "t.npy", interactions=tmp_path / "log.parquet", id_offset=1,
                                   ks=(5,), probes=False, bootstrap=0, top_items=5))  # fmt: skip
    assert result.retrieval is not None
    shift = result.retrieval.exposure_shift[5]
    listed = shift["gained"] + shift["lost"]
    assert listed and all(item["item_id"] == item["row"] + 1 for item in listed)
    assert all(item["frequency"] == counts[item["item_id"] - 1] for item in listed)


def test_bad_inputs_are_named() -> None:
    with pytest.raises(ValueError, match="no cosine exposure at K=5"):
        exposure_shift({"dot": {5: np.zeros(2)}}, 5, np.zeros(2), np.zeros(2))
    with pytest.raises(ValueError, match="norms cover 3 items but dot exposure 2"):
        exposure_shift({"dot": {5: np.zeros(2)}, "cosine": {5: np.zeros(2)}}, 5, np.zeros(2), np.zeros(3))


def test_on_a_real_audit() -> None:
    result = run_audit(AuditConfig(model=SAMPLE / "biased.pt", ks=(10,), probes=False, bootstrap=0))
    data = result.plot_data
    assert data.norms is not None and data.frequencies is not None
    table = exposure_shift(data.exposure, 10, data.frequencies, data.norms)
    gain = data.exposure["dot"][10] - data.exposure["cosine"][10]
    assert len(table.gained) == 20 and table.gained[0].gain == gain.max() and table.lost[0].gain == gain.min()
    assert [e.gain for e in table.gained] == sorted((e.gain for e in table.gained), reverse=True)
    # On the biased sample dot over-serves popular, large-norm items.
    assert np.median([e.norm_percentile for e in table.gained]) > np.median([e.norm_percentile for e in table.lost])

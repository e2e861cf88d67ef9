"""Decimal Parquet columns (a warehouse's ``NUMBER(18,0)``) are integers where whole (Logs F2 of QA round 10).

Before, a counts file unloaded from Snowflake (``COUNT(*)`` as ``decimal128(18, 0)``) was
refused saying its counts "must be whole numbers", every one of them being whole, and a
log with decimal ids was refused as not holding integers or strings.
"""

from __future__ import annotations

import decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from auditor.errors import IdMappingError, InteractionsError
from auditor.loading import count_item_ids
from auditor.loading.frequencies import read_frequencies
from auditor.loading.ids import ids_to_numpy
from auditor.values import LogSpec


def _decimals(values: np.ndarray | list[str] | list[int], scale: int = 0, precision: int = 18) -> pa.Array:
    return pa.array([decimal.Decimal(str(v)) for v in values], pa.decimal128(precision, scale))


def _log() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.integers(0, 10, 300), np.minimum(rng.zipf(1.5, 300) - 1, 39)


@pytest.mark.parametrize("scale", [0, 2])
def test_whole_decimal_counts_are_read_as_integers(tmp_path: Path, scale: int) -> None:
    _, items = _log()
    counts = np.bincount(items, minlength=40)
    present = np.flatnonzero(counts)
    path = tmp_path / "counts.parquet"
    pq.write_table(pa.table({"item_id": _decimals(present), "count": _decimals(counts[present], scale)}), path)
    read = read_frequencies(path)  # was: "has type decimal128(18, 0); counts must be whole numbers"
    assert read.ids.tolist() == present.tolist() and read.counts.tolist() == counts[present].tolist()
    assert read.n_interactions == 300


def test_a_fractional_decimal_count_is_refused_naming_its_row(tmp_path: Path) -> None:
    path = tmp_path / "counts.parquet"
    pq.write_table(pa.table({"item_id": [0, 1, 2], "count": _decimals(["3.00", "4.00", "2.50"], 2)}), path)
    with pytest.raises(InteractionsError, match=r"count column 'count' of .*counts\.parquet: data row 3 is not a whole number"):
        read_frequencies(path)


def test_a_log_of_decimal_ids_counts_as_its_integer_ids(tmp_path: Path) -> None:
    users, items = _log()
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": _decimals(users), "item_id": _decimals(items)}), path)
    read = count_item_ids(LogSpec(path))  # was: "has type decimal128(18, 0); ids must be integers or strings"
    want_ids, want_counts = np.unique(items, return_counts=True)
    assert read.ids.tolist() == want_ids.tolist() and read.counts.tolist() == want_counts.tolist()
    assert read.n_users == len(np.unique(users))


def test_a_fractional_decimal_id_is_refused_naming_its_row(tmp_path: Path) -> None:
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": [1, 2, 3], "item_id": _decimals(["3.0", "4.0", "4.5"], 1)}), path)
    with pytest.raises(InteractionsError, match=r"item column 'item_id' of .*log\.parquet: data row 3 is not a whole number"):
        count_item_ids(LogSpec(path))


def test_decimal_id_files_are_integers() -> None:
    assert ids_to_numpy(_decimals([7, 3, 12]), "ids").tolist() == [7, 3, 12]
    big = ids_to_numpy(_decimals([2**63 + 5], precision=20), "ids")  # beyond int64: exact, as uint64 ids are
    assert big.tolist() == [str(2**63 + 5)]
    with pytest.raises(IdMappingError, match="non-integer numbers"):
        ids_to_numpy(_decimals(["1.5"], 1), "ids")

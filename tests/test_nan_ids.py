"""NaN in a float id column is an empty id, in every reader (Logs F3 of QA round 8).

polars (and pyarrow from numpy) write a missing id of a float column as NaN, pandas as
a null, a CSV as an empty cell: all three are the same empty id, left out (item) or not
counted as a user, and warned about with their number, column and first data row. Before,
a NaN item id refused the whole Parquet log as "holds non-integer numbers" (naming no
row), and a float .npy id file with a NaN said the same.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import spearmanr

from auditor.errors import IdMappingError
from auditor.loading import align_counts, count_item_ids
from auditor.loading.frequencies import read_frequencies
from auditor.loading.ids import read_id_file
from auditor.values import ItemRows, LogSpec

N = 40


def _log() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.integers(0, 10, 300).astype(float), np.minimum(rng.zipf(1.5, 300) - 1, N - 1).astype(float)


@pytest.mark.parametrize("missing", ["nan", "null"])
def test_nan_item_ids_are_left_out_as_nulls(tmp_path, missing):
    users, items = _log()
    items[5:10] = np.nan
    users[20] = np.nan
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": pa.array(users, from_pandas=missing == "null"),
                             "item_id": pa.array(items, from_pandas=missing == "null")}), path)
    counts = count_item_ids(LogSpec(path))
    assert (counts.n_null_items, counts.n_null_users, counts.n_interactions) == (5, 1, 295)
    kept = items[~np.isnan(items)].astype(int)
    expected = np.bincount(kept, minlength=N)
    stats = align_counts(counts, ItemRows(None, N))
    assert stats.frequencies.tolist() == expected.tolist()
    norms = np.linspace(1.0, 2.0, N) + 0.3 * np.sin(np.arange(N))
    assert spearmanr(stats.frequencies, norms).statistic == pytest.approx(spearmanr(expected, norms).statistic)


def test_nan_warning_names_number_column_and_first_row(tmp_path):
    """The audit's warning: 5 rows, column 'item_id', first at data row 6 (index 5 + 1)."""
    users, items = _log()
    items[5:10] = np.nan
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": users, "item_id": items}), path)
    counts = count_item_ids(LogSpec(path))
    from auditor.loading.statistics import _left_out  # the words item_stats appends
    stats = align_counts(counts, ItemRows(None, N))
    notes = _left_out(counts, path, stats, True, None)
    assert notes[0].endswith("have an empty item id ('item_id' column, first at data row 6); they are left out")
    assert notes[0].startswith("5 interactions in ")


def test_nan_in_float_id_file_names_the_row(tmp_path):
    path = tmp_path / "ids.npy"
    np.save(path, np.array([float(i) for i in range(N - 1)] + [np.nan]))
    with pytest.raises(IdMappingError, match=r"ids\.npy has 1 empty id \(NaN: row 39\)"):
        read_id_file(path)


def test_nan_in_counts_file_is_an_empty_id(tmp_path):
    path = tmp_path / "counts.parquet"
    pq.write_table(pa.table({"item_id": [0.0, np.nan, 2.0], "count": [4, 3, 2]}), path)
    counts = read_frequencies(path)
    assert counts.ids.tolist() == [0, 2] and counts.counts.tolist() == [4, 2] and counts.n_null_items == 3

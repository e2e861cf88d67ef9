"""Where a bad or empty id is: every message names the column and data row (Logs 2: N4).

Before, a fraction or infinity in a Parquet float id column was refused as "holds
non-integer numbers" with no row, and a counts file's NaN item id was warned of with no row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from auditor.errors import InteractionsError
from auditor.loading import count_item_ids
from auditor.loading.frequencies import read_frequencies
from auditor.loading.statistics import _first_blank
from auditor.values import LogSpec


@pytest.mark.parametrize(("bad", "why"), [(3.5, "is not a whole number"), (np.inf, "is infinite"),
                                          (-np.inf, "is infinite"), (1e19, "is beyond int64")])
def test_a_float_id_no_integer_equals_is_refused_naming_its_row(tmp_path, bad, why):
    items = np.arange(300, dtype=np.float64) % 40
    items[7] = bad
    path = tmp_path / "log.parquet"
    # two row groups: the row counts on across batches
    pq.write_table(pa.table({"user_id": np.arange(300) % 12, "item_id": items[::-1].copy()}), path, row_group_size=100)
    with pytest.raises(InteractionsError, match=rf"item column 'item_id' of .*log\.parquet: data row 293 {why}; "
                                                r"ids must be integers or strings"):
        count_item_ids(LogSpec(path))


def test_whole_floats_and_nan_still_count(tmp_path):
    items = (np.arange(300) % 40).astype(np.float64)
    items[5:10] = np.nan
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": np.arange(300) % 12, "item_id": items}), path)
    counts = count_item_ids(LogSpec(path))
    assert counts.n_null_items == 5 and counts.n_interactions == 295
    assert counts.counts.tolist() == np.bincount(items[~np.isnan(items)].astype(int), minlength=40).tolist()


def test_a_counts_file_names_its_first_empty_item_id_row(tmp_path):
    ids = np.arange(40, dtype=np.float64)
    ids[39] = np.nan
    path = tmp_path / "counts.parquet"
    pq.write_table(pa.table({"item_id": ids, "count": np.arange(1, 41)}), path)
    counts = read_frequencies(path)
    assert counts.n_null_items == 40 and counts.n_interactions == sum(range(1, 40))
    assert _first_blank(counts) == (", first at data row 40", "")  # was ("", "")

"""count_item_ids(need_users=False, need_n_users=False): item counts alone, the user column unread."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from auditor.loading import count_item_ids
from auditor.values import LogSpec


def _log(tmp_path: Path, suffix: str) -> Path:
    users = [1, 1, 2, 3, 3, 3, 4]
    items = [10, 11, 10, 10, 12, 12, 11]
    path = tmp_path / f"log.{suffix}"
    table = pa.table({"user_id": users, "item_id": items})
    if suffix == "parquet":
        pq.write_table(table, path)
    else:
        path.write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in zip(users, items)))
    return path


@pytest.mark.parametrize("suffix", ["parquet", "csv"])
def test_items_only_counts_equal_the_full_pass(tmp_path: Path, suffix: str) -> None:
    path = _log(tmp_path, suffix)
    full = count_item_ids(LogSpec(path), need_users=False)
    only = count_item_ids(LogSpec(path), need_users=False, need_n_users=False)
    np.testing.assert_array_equal(only.ids, [10, 11, 12])
    np.testing.assert_array_equal(only.counts, [3, 2, 2])  # by hand from the log above
    np.testing.assert_array_equal(only.ids, full.ids)
    np.testing.assert_array_equal(only.counts, full.counts)
    assert only.n_interactions == full.n_interactions == 7
    assert full.n_users == 4 and full.user_col == "user_id"
    assert only.n_users is None and only.user_col is None and only.user_counts is None


def test_need_users_wins_over_need_n_users(tmp_path: Path) -> None:
    counts = count_item_ids(LogSpec(_log(tmp_path, "parquet")), need_users=True, need_n_users=False)
    assert counts.n_users == 4
    np.testing.assert_array_equal(counts.user_counts, [3, 2, 1])  # item 10: users 1, 2, 3; 11: 1, 4; 12: 3

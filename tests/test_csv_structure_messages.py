"""CSV structure errors name the data row and give advice that works (Logs F5 of QA round 10).

Before, a ragged line said "a line has 3 fields where the first line has 2" naming no row,
and a header ``user_id,item_id,item_id`` advised ``--item-col NAME``, which then said
"appears 2 times ...; rename the duplicates".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from auditor.errors import InteractionsError
from auditor.loading import count_item_ids
from auditor.loading.frequencies import read_frequencies
from auditor.values import LogSpec


@pytest.mark.parametrize(("header", "bad_row"), [(True, 150), (False, 150), (True, 1), (False, 300)])
def test_a_ragged_line_is_named_by_its_data_row(tmp_path: Path, header: bool, bad_row: int) -> None:
    lines = [f"{r % 7},{r % 40}" for r in range(1, 301)]
    lines[bad_row - 1] = "3,4,5"  # data rows counted from 1 after any header
    path = tmp_path / "log.csv"
    path.write_text(("user_id,item_id\n" if header else "") + "\n".join(lines) + "\n")
    with pytest.raises(InteractionsError, match=rf"a line has 3 fields where the first line has 2 \(data row {bad_row}\)$"):
        count_item_ids(LogSpec(path))


def test_a_duplicated_header_name_is_refused_at_once_with_the_advice_that_works(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    path.write_text("user_id,item_id,item_id\n1,2,3\n2,3,4\n")
    with pytest.raises(InteractionsError, match=r"item id column 'item_id' appears 2 times in .*log\.csv; rename the "
                       r"duplicates so the column is unambiguous$") as err:
        count_item_ids(LogSpec(path))
    assert "item_col" not in str(err.value)


@pytest.mark.parametrize(("header", "delimiter", "bad_row"), [(True, ",", 10), (False, ",", 10), (True, "\t", 1),
                                                              (False, "\t", 40)])
def test_a_ragged_line_of_a_counts_file_is_named_by_its_data_row(tmp_path: Path, header: bool, delimiter: str,
                                                                   bad_row: int) -> None:
    # Logs F5 remainder (QA round 10 verification): a --frequencies CSV's ragged line named no row.
    lines = [f"{i}{delimiter}{i + 1}" for i in range(40)]
    lines[bad_row - 1] += f"{delimiter}1{delimiter}2"  # 4 fields; data rows counted from 1 after any header
    path = tmp_path / "counts.csv"
    path.write_text((f"item_id{delimiter}count\n" if header else "") + "\n".join(lines) + "\n")
    with pytest.raises(InteractionsError, match=r"as a frequencies file \(Parquet or CSV/TSV\): a line has 4 fields "
                       rf"where the first line has 2 \(data row {bad_row}\)$"):
        read_frequencies(path)

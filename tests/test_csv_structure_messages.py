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

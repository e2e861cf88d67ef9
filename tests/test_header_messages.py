"""A mistyped column name against a real header lists its columns (Logs F4 of QA round 8).

Before, ``a,b,c`` with ``--user-col x --item-col b`` said the first line "holds 3 fields
that do not look like a header of column names (is it an interaction log?)", although
``--user-col a`` audits the file; and a RecBole ``.inter`` read with
``--interactions-format tsv`` said the same of ``user_id:token  item_id:token``.
"""

from __future__ import annotations

import pytest

from auditor.errors import InteractionsError
from auditor.loading import count_item_ids
from auditor.values import LogSpec


def test_typo_against_a_header_the_user_named_lists_its_columns(tmp_path):
    path = tmp_path / "abc.csv"
    path.write_text("a,b,c\n1,2,1\n2,3,1\n")
    with pytest.raises(InteractionsError, match=r"user column 'x' is not in .*abc\.csv; columns found: a, b, c$"):
        count_item_ids(LogSpec(path, user_col="x", item_col="b"))
    assert count_item_ids(LogSpec(path, user_col="a", item_col="b")).counts.tolist() == [1, 1]


def test_a_line_the_user_named_nothing_of_is_still_not_echoed(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("alice,hunter2\nbob,letmein\n")
    with pytest.raises(InteractionsError, match=r"2 fields that do not look like a header") as err:
        count_item_ids(LogSpec(path, user_col="x", item_col="y"))
    assert "alice" not in str(err.value) and "hunter2" not in str(err.value)


@pytest.mark.parametrize("fmt", ["tsv", "csv"])
def test_recbole_header_read_as_tsv_suggests_the_recbole_format(tmp_path, fmt):
    path = tmp_path / "ds.inter"
    path.write_text("user_id:token\titem_id:token\ttimestamp:float\n1\t2\t3.0\n")
    with pytest.raises(InteractionsError, match=r"cannot find an item id column in .*ds\.inter; its first line is a RecBole "
                       r"header with typed names \(user_id:token, item_id:token, timestamp:float\); pass "
                       r"interactions_format recbole"):
        count_item_ids(LogSpec(path, fmt))
    assert count_item_ids(LogSpec(path, "recbole")).counts.tolist() == [1]

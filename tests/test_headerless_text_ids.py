"""A text file's first line is data when its cells look like the data below it (Logs F1 of QA round 10).

Before, a headerless log of text ids (``user_4,item_39``) had its first line taken as the
header: the error echoed it as "columns found: user_4, item_39", and the advice (``--item-col
item_39``) audited 299 of its 300 interactions without a word.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from auditor.errors import InteractionsError
from auditor.loading import count_item_ids
from auditor.loading.frequencies import read_frequencies
from auditor.loading.sniff import first_line_is_data
from auditor.values import LogSpec


def _pairs(n: int = 300) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.integers(0, 10, n), np.minimum(rng.zipf(1.5, n) - 1, 39)


def _expected(items: np.ndarray) -> tuple[list[str], list[int]]:
    """Counts per distinct text id, sorted as text (numpy, independently of the reader)."""
    ids, counts = np.unique(np.array([f"item_{i}" for i in items]), return_counts=True)
    return ids.tolist(), counts.tolist()


@pytest.mark.parametrize("header", [True, False])
def test_a_headerless_log_of_text_ids_counts_every_line(tmp_path: Path, header: bool) -> None:
    users, items = _pairs()
    path = tmp_path / "log.csv"
    path.write_text(("user_id,item_id\n" if header else "") + "".join(f"user_{u},item_{i}\n" for u, i in zip(users, items)))
    counts = count_item_ids(LogSpec(path))
    want_ids, want_counts = _expected(items)
    assert counts.n_interactions == 300  # was 299 headerless (its first line taken as the header)
    assert counts.ids.tolist() == want_ids and counts.counts.tolist() == want_counts
    assert counts.n_users == len(np.unique(users))


def test_a_headerless_counts_file_of_text_ids_counts_its_first_line(tmp_path: Path) -> None:
    path = tmp_path / "counts.csv"
    path.write_text("item_3,12\nitem_5,4\nitem_17,9\n")
    counts = read_frequencies(path)
    assert counts.ids.tolist() == ["item_17", "item_3", "item_5"] and counts.counts.tolist() == [9, 12, 4]


@pytest.mark.parametrize(("lines", "data"), [
    (["user_4,item_39", "user_7,item_2"], True),
    (["user_4,39,4.5", "user_17,2,3"], True),            # a number is a number, 4.5 as 3
    (["user_4,item_39"], True),                            # one line: a digit in every cell
    (["user_id,item_id", "user_7,item_2"], False),         # names without digits
    (["u1,i1", "5,7", "6,8"], False),                      # digits, but not the data's shape
    (["user_id,item_id,v2", "1,2,3"], False),
    (["3,4", "5,6"], True),
])
def test_the_header_rule(lines: list[str], data: bool) -> None:
    assert first_line_is_data(lines, ",") is data


def test_a_line_of_data_unlike_the_rest_is_never_offered_as_column_names(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    path.write_text("a1b2,x9\nc3,y77z\nd4,q5\n")
    with pytest.raises(InteractionsError, match=r"2 fields with a digit in every one.*add a header line naming its "
                       r"columns \(user_id,item_id for a log\)\.$") as err:
        count_item_ids(LogSpec(path))
    assert "a1b2" not in str(err.value) and "--item-col" not in str(err.value)


def test_a_header_with_digits_is_still_a_header(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    path.write_text("u1,i1\n5,7\n6,7\n")
    counts = count_item_ids(LogSpec(path, user_col="u1", item_col="i1"))
    assert counts.ids.tolist() == [7] and counts.counts.tolist() == [2]

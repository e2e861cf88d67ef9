"""Served lists read from a file (issue #21 item 4): each policy of
auditor/loading/served_lists.py on a small file whose lists are known by hand."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from auditor.errors import IdMappingError, ServedListsError, setting
from auditor.values import ItemRows
from auditor.values import LogSpec
from auditor.loading.served_lists import lists_for, read_served_lists

# Three users; item ids 10..14. User 2: 10, 11, 14 (ranks 1, 2, 3); user 1: 12, 13, 10.
def _s(name: str) -> str:
    """How messages name a setting: its field name, or the flag the CLI registers once
    imported (collection order decides which, so either is accepted)."""
    return f"(?:{re.escape(name)}|{re.escape(setting(name))}|--{re.escape(name.replace('_', '-'))})"


RANKED = "user_id,item_id,rank\n2,10,1\n1,10,3\n2,11,2\n1,12,1\n1,13,2\n2,14,3\n"


def _csv(tmp_path: Path, text: str, name: str = "recs.csv") -> LogSpec:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return LogSpec(path)


def test_ranked_lists_in_sorted_user_order_through_the_catalogue(tmp_path: Path) -> None:
    served = read_served_lists(_csv(tmp_path, RANKED), log_items=np.array([10, 11, 12, 20]))
    assert served.user_ids.tolist() == [1, 2]  # sorted raw ids, whatever the row order
    # Catalogue: the log's items and the lists' items, sorted: 10 11 12 13 14 20 -> rows 0..5.
    assert served.catalogue and served.items.item_ids is not None
    assert served.items.item_ids.tolist() == [10, 11, 12, 13, 14, 20]
    assert served.lists.tolist() == [[2, 3, 0], [0, 1, 4]]
    assert served.order.kind == "rank" and served.order.name == "rank" and served.matrix.rank_base == 1
    assert (served.n_rows, served.k, served.n_users) == (6, 3, 2)
    # Items 13 and 14 are not in the log: kept as cold items, counted.
    assert (served.n_cold_items, served.n_cold_rows) == (2, 2)
    assert served.warnings == (
        f"2 of the 5 distinct items in {served.source} never appear in the training log (2 rows, 33.3% of the served "
        "slots): kept as items without training interactions (popularity 0)",
    )
    assert served.cold_slot_share == pytest.approx(2 / 6)
    assert "ordered by rank column 'rank', 1-based" in served.description


def test_scores_order_higher_first_and_ties_fall_to_the_lower_item_id(tmp_path: Path) -> None:
    text = "user,item,score\nu,a,0.5\nu,b,0.9\nu,c,0.5\nu,d,-inf\nv,c,2\nv,a,1\n"
    served = read_served_lists(_csv(tmp_path, text))
    assert served.order.kind == "score" and served.matrix.rank_base is None
    assert served.user_ids.tolist() == ["u", "v"]
    # rows a0 b1 c2 d3; u: b (0.9), then a and c tied at 0.5 -> lower row a first, then d.
    assert served.lists.tolist() == [[1, 0, 2, 3], [2, 0, -1, -1]]
    assert served.matrix.n_tied_lists == 1 and served.matrix.n_short_lists == 1
    # Under a model whose rows run the other way, the tie still goes to the lower id, a (row 3)
    # before c (row 1): one file, one order on both routes (Served F3).
    reverse = ItemRows(np.array(["d", "c", "b", "a"], dtype=object), 4)
    by_model = read_served_lists(_csv(tmp_path, text), items=reverse)
    assert by_model.lists.tolist() == [[2, 3, 1, 0], [1, 3, -1, -1]]
    assert not by_model.catalogue and by_model.items is reverse


def test_tied_ranks_are_ordered_by_item_id_and_counted(tmp_path: Path) -> None:
    served = read_served_lists(_csv(tmp_path, "user_id,item_id,rank\n1,7,2\n1,5,1\n1,6,2\n"))
    assert served.lists.tolist() == [[0, 1, 2]]  # 5, then 6 before 7 (rows 1 < 2)
    assert served.matrix.n_tied_lists == 1 and served.matrix.n_gap_lists == 0
    assert any("give several items the same rank" in w for w in served.warnings)


def test_zero_based_ranks_and_gaps_are_compacted_and_counted(tmp_path: Path) -> None:
    zero = read_served_lists(_csv(tmp_path, "user_id,item_id,rank\n1,5,0\n1,6,1\n2,5,1\n2,6,0\n"))
    assert zero.matrix.rank_base == 0 and zero.matrix.n_gap_lists == 0
    assert zero.lists.tolist() == [[0, 1], [1, 0]]
    # 1-based with gaps: user 1 has ranks 1, 2, 4; user 2 starts at 3; user 3 is whole.
    text = "user_id,item_id,rank\n1,5,1\n1,6,2\n1,7,4\n2,7,3\n2,5,4\n3,6,1\n"
    gaps = read_served_lists(_csv(tmp_path, text))
    assert gaps.matrix.rank_base == 1 and gaps.matrix.n_gap_lists == 2
    assert gaps.lists.tolist() == [[0, 1, 2], [2, 0, -1], [1, -1, -1]]
    assert any("2 of the 3 lists" in w and "skip ranks" in w for w in gaps.warnings)


def test_huge_ranks_order_but_size_nothing(tmp_path: Path) -> None:
    path = tmp_path / "recs.parquet"
    pq.write_table(pa.table({"user_id": [1, 1, 1], "item_id": [3, 4, 5],
                             "rank": pa.array([2**62, 5, 2**63 - 1], pa.int64())}), path)
    served = read_served_lists(LogSpec(path))
    assert served.lists.shape == (1, 3) and served.lists.tolist() == [[1, 0, 2]]
    assert served.matrix.n_gap_lists == 1


def test_lists_of_different_lengths_are_padded_and_can_be_cut(tmp_path: Path) -> None:
    text = "user_id,item_id,rank\n" + "".join(f"1,{i},{i + 1}\n" for i in range(6)) + "2,0,1\n2,1,2\n"
    served = read_served_lists(_csv(tmp_path, text))
    assert served.k == 6 and served.matrix.longest == 6 and served.matrix.n_short_lists == 1
    assert served.lists[1].tolist() == [0, 1, -1, -1, -1, -1]
    assert any("1 of the 2 lists" in w and "fewer than 6 items" in w for w in served.warnings)
    cut = read_served_lists(_csv(tmp_path, text), max_k=3)
    assert cut.lists.tolist() == [[0, 1, 2], [0, 1, -1]]
    assert cut.matrix.n_truncated_lists == 1 and cut.matrix.longest == 6
    with pytest.raises(ServedListsError, match="max_k must be at least 1"):
        read_served_lists(_csv(tmp_path, text), max_k=0)


def test_a_repeated_item_in_one_list_is_refused_naming_its_data_rows(tmp_path: Path) -> None:
    # Row 2 has an empty user id (left out), so the repeat's rows are 4 and 6 of the file.
    text = "user_id,item_id,rank\n1,5,1\n,6,1\n1,6,2\n2,5,1\n1,7,3\n2,5,2\n"
    with pytest.raises(ServedListsError, match=r"lists item 5 twice for user 2 \(data rows 4, 6; 1 repeats in 1 list\)"):
        read_served_lists(_csv(tmp_path, text))
    # The same item for two users is no repeat.
    fine = read_served_lists(_csv(tmp_path, "user_id,item_id,rank\n1,5,1\n2,5,1\n"))
    assert fine.lists.tolist() == [[0], [0]]


def test_text_ids_are_not_quoted_in_the_repeat_message(tmp_path: Path) -> None:
    with pytest.raises(ServedListsError, match=r"lists item twice for user \(data rows 1, 2;") as info:
        read_served_lists(_csv(tmp_path, "user,item,rank\nsecret-user,secret-item,1\nsecret-user,secret-item,2\n"))
    assert "secret" not in str(info.value).replace(str(tmp_path), "")


def test_empty_ids_are_left_out_and_counted(tmp_path: Path) -> None:
    served = read_served_lists(_csv(tmp_path, "user_id,item_id,rank\n1,5,1\n,6,2\n1,,2\n1,7,3\n"))
    assert served.n_empty_ids == 2 and served.lists.tolist() == [[0, 1]]
    assert served.warnings[0] == f"2 rows of {served.source} have an empty user or item id: left out"


def test_users_absent_from_the_log_are_kept_and_counted(tmp_path: Path) -> None:
    served = read_served_lists(_csv(tmp_path, RANKED), log_users=np.array([2, 3]))
    assert served.n_unknown_users == 1 and served.n_users == 2
    assert any("1 of the 2 users" in w and "do not appear in the training log" in w for w in served.warnings)
    assert read_served_lists(_csv(tmp_path, RANKED)).n_unknown_users is None


def test_items_without_a_table_row_leave_their_slot_empty(tmp_path: Path) -> None:
    # row = id - 10 over a 3-row table: items 13 and 14 have no row.
    served = read_served_lists(_csv(tmp_path, RANKED), items=ItemRows(None, 3, offset=10), log_items=np.array([10, 11]))
    assert served.lists.tolist() == [[2, -1, 0], [0, 1, -1]]  # 10 stays third for user 1
    assert (served.n_unknown_items, served.n_unknown_rows) == (2, 2)
    assert (served.n_cold_items, served.n_cold_rows) == (1, 1)  # 12 has a row, but the log never saw it
    assert any("2 of the 6 served items" in w and "keeping their positions" in w for w in served.warnings)
    with pytest.raises(IdMappingError, match=r"none of the 5 items in .*recs\.csv \(column 'item_id'\) has a row in the "
                                             r"item table \(3 rows\); pass " + _s("item_ids") + " FILE"):
        read_served_lists(_csv(tmp_path, RANKED), items=ItemRows(None, 3, offset=100))
    with pytest.raises(IdMappingError, match=r"item ids in .*recs\.csv are not integers \(the first in data row 1"):
        read_served_lists(_csv(tmp_path, "user,item,rank\n1,abc,1\n"), items=ItemRows(None, 3))


def test_text_catalogue_mixes_log_ids_and_list_ids_as_text(tmp_path: Path) -> None:
    served = read_served_lists(_csv(tmp_path, "user,item,rank\n1,b7,1\n1,12,2\n"), log_items=np.array([12, 3]))
    assert served.items.item_ids is not None
    assert served.items.item_ids.tolist() == ["12", "3", "b7"]
    assert served.lists.tolist() == [[2, 0]] and served.n_cold_items == 1


def test_parquet_tsv_and_csv_give_the_same_lists(tmp_path: Path) -> None:
    csv = read_served_lists(_csv(tmp_path, RANKED))
    tsv = read_served_lists(_csv(tmp_path, RANKED.replace(",", "\t"), "recs.tsv"))
    path = tmp_path / "recs.parquet"
    rows = [line.split(",") for line in RANKED.splitlines()[1:]]
    columns = {"user_id": pa.array([r[0] for r in rows]).dictionary_encode(),
               "item_id": [int(r[1]) for r in rows], "rank": [float(r[2]) for r in rows]}
    # Row groups of two rows: several record batches, whose codes must agree.
    pq.write_table(pa.table(columns), path, row_group_size=2)
    parquet = read_served_lists(LogSpec(path))
    for other in (tsv, parquet):
        assert other.lists.tolist() == csv.lists.tolist()
    assert parquet.user_ids.tolist() == [1, 2]  # text that is all plain integers is integers, as in the CSV (Logs F2)


def test_columns_are_found_by_common_names_or_given(tmp_path: Path) -> None:
    assert read_served_lists(_csv(tmp_path, "userId,movieId,position\n1,5,1\n")).order.name == "position"
    assert read_served_lists(_csv(tmp_path, "user_id,item_id,prediction\n1,5,0.3\n")).order.kind == "score"
    both = read_served_lists(_csv(tmp_path, "user_id,item_id,score,rank\n1,5,0.1,1\n1,6,0.9,2\n"))
    assert both.order.name == "rank" and both.lists.tolist() == [[0, 1]]  # the served order wins
    by_score = read_served_lists(_csv(tmp_path, "user_id,item_id,score,rank\n1,5,0.1,1\n1,6,0.9,2\n"), score_col="SCORE")
    assert by_score.order.name == "score" and by_score.lists.tolist() == [[1, 0]]
    # Two rank names (or two score names) are ambiguous (Served F2); the setting picks one.
    two = "user_id,item_id,position,rank,score,prediction\n1,5,1,2,0.1,0.9\n1,6,2,1,0.9,0.1\n"
    assert read_served_lists(_csv(tmp_path, two), rank_col="position").lists.tolist() == [[0, 1]]
    assert read_served_lists(_csv(tmp_path, two), rank_col="rank").lists.tolist() == [[1, 0]]
    assert read_served_lists(_csv(tmp_path, two), score_col="prediction").lists.tolist() == [[0, 1]]
    given = read_served_lists(LogSpec(_csv(tmp_path, "a,b,c\n1,5,2\n1,6,1\n").path, user_col="a", item_col="b"),
                              rank_col="c")
    assert given.lists.tolist() == [[1, 0]] and (given.user_col, given.item_col) == ("a", "b")


@pytest.mark.parametrize(("text", "kwargs", "message"), [
    ("user_id,item_id,rank\n1,5,1\n", {"rank_col": "rank", "score_col": "s"}, r"pass " + _s("rank_col") + " or " + _s("score_col") + ", not both"),
    ("user_id,item_id,rank\n1,5,1\n", {"rank_col": "pos"}, r"rank column 'pos' \(" + _s("rank_col") + r"\) is not in .*columns found: "),
    ("user_id,item_id,weight\n1,5,1\n", {}, r"cannot find a rank or score column in .*columns found: user_id, item_id, "
                                            r"weight\. Pass " + _s("rank_col") + r" NAME \(lower first\) or " + _s("score_col") + " NAME"),
    ("user_id,item_id,rank,Rank\n1,5,1,1\n", {}, r"several columns of .* could be the rank column"),
    ("user_id,item_id,position,rank\n1,5,1,2\n1,6,2,1\n", {}, r"several columns of .* could be the rank column "
                                                             r"\('position', 'rank'\); pass " + _s("rank_col") + " NAME"),
    ("user_id,item_id,score,prediction\n1,5,0.9,0.1\n", {}, r"several columns of .* could be the score column "
                                                          r"\('score', 'prediction'\); pass " + _s("score_col") + " NAME"),
    ("user_id,item_id,rank\n1,5,1\n", {"rank_col": "item_id"}, r"rank column of .* is 'item_id', which is also an id"),
    ("item_id,rank\n5,1\n", {}, r"cannot find a user id column in .*Pass " + _s("user_col") + " NAME"),
    ("1,5,1\n1,6,2\n", {}, r"has no header: name its columns"),
    ("user_id,item_id,rank\n", {}, r"no served lists in .*recs\.csv: it has a header but no rows"),
    ("", {}, r"no served lists in .*recs\.csv: the file is empty"),
    ("user_id,item_id,rank\n,5,1\n1,,2\n", {}, r"every row has an empty user or item id"),
])
def test_files_that_cannot_be_read_as_lists(tmp_path: Path, text: str, kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ServedListsError, match=message):
        read_served_lists(_csv(tmp_path, text), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("cells", "message"), [
    ("1\n2\nfirst", r"rank column 'rank' of .*: data row 3 is not a number; ranks must be whole numbers >= 0"),
    ("1\n2.5", r"data row 2 is not a whole number"),
    ("1\n-2\n-3", r"data row 2 is negative \(rows 2, 3\)"),
    ("1\n\n3", r"data row 2 is empty"),
    ("0x10", r"data row 1 is not a number"),
    ("1e300", r"data row 1 is 2\*\*53 or more"),
    ("nan", r"data row 1 is empty \(no value, or NA/NaN/null\)"),
    ("inf", r"data row 1 is not a whole number"),
])
def test_bad_ranks_are_refused_naming_the_row(tmp_path: Path, cells: str, message: str) -> None:
    lines = cells.split("\n")
    text = "user_id,item_id,rank\n" + "".join(f"1,{i},{c}\n" for i, c in enumerate(lines))
    with pytest.raises(ServedListsError, match=message):
        read_served_lists(_csv(tmp_path, text))


def test_bad_scores_and_types_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"user_id": [1, 1], "item_id": [1, 2], "score": [0.5, float("nan")]}), path)
    with pytest.raises(ServedListsError, match=r"score column 'score' of .*: data row 2 is not a number \(NaN\); "
                                               r"scores must be numbers \(higher first\)"):
        read_served_lists(LogSpec(path))
    with pytest.raises(ServedListsError, match=r"score column 'score' of .*: data row 2 is not a number;"):
        read_served_lists(_csv(tmp_path, "user_id,item_id,score\n1,1,0.5\n1,2,high\n"))
    pq.write_table(pa.table({"user_id": [1], "item_id": [1], "rank": [True]}), path)
    with pytest.raises(ServedListsError, match=r"rank column 'rank' of .* has type bool; ranks must be whole numbers"):
        read_served_lists(LogSpec(path))
    pq.write_table(pa.table({"user_id": [1], "item_id": [1], "rank": pa.array([2**64 - 1], pa.uint64())}), path)
    with pytest.raises(ServedListsError, match=r"data row 1 is beyond int64"):
        read_served_lists(LogSpec(path))
    with pytest.raises(ServedListsError, match=r"served lists are read as auto, parquet, csv, tsv, not 'movielens'"):
        read_served_lists(LogSpec(path, fmt="movielens"))


def test_a_matrix_beyond_the_memory_budget_is_refused(tmp_path: Path) -> None:
    # One list of 5,000 items beside 999 lists of one: 1,000 x 5,000 slots = 40 MB.
    rows = [f"0,{i},{i + 1}" for i in range(5000)] + [f"{u},0,1" for u in range(1, 1000)]
    spec = _csv(tmp_path, "user_id,item_id,rank\n" + "\n".join(rows) + "\n")
    with pytest.raises(ServedListsError, match=r"need 39M as a 1,000 users x 5,000 slots matrix \(the longest list "
                                               r"holds 5,000 items\), more than the memory budget of 1M \("
                                               + _s("max_memory") + r"\)"):
        read_served_lists(spec, max_memory=1 << 20)
    assert read_served_lists(spec, max_memory=1 << 20, max_k=100).lists.shape == (1000, 100)


def test_lists_for_follows_a_population_order(tmp_path: Path) -> None:
    served = read_served_lists(_csv(tmp_path, RANKED))
    lists, missing = lists_for(served, np.array([2, 9, 1]))
    assert lists.tolist() == [[0, 1, 4], [-1, -1, -1], [2, 3, 0]] and missing == 1


def test_ids_that_turn_to_text_after_the_first_block_are_read_again_as_text(tmp_path: Path) -> None:
    # About 5 MiB of integer user ids, then a text one: the CSV reader typed the column
    # from its first 4 MiB block, so the reader starts over with every id as text, and
    # integer ids keep their integer identity where all of them are integers (items).
    n = 400_000
    body = "".join(f"{i // 10},{i % 10},{i % 10 + 1}\n" for i in range(n))
    served = read_served_lists(_csv(tmp_path, "user_id,item_id,rank\n" + body + "guest,3,1\n"))
    assert served.n_users == n // 10 + 1 and served.k == 10
    assert served.user_ids.dtype == object and served.user_ids[-1] == "guest"
    assert served.items.item_ids is not None and served.items.item_ids.tolist() == list(range(10))
    assert served.lists[0].tolist() == list(range(10))

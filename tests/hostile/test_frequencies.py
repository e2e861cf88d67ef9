"""Hostile ``--frequencies`` files (item counts computed elsewhere) given to ``popaudit check``."""

from __future__ import annotations

import decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from .corpus import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    N_ITEMS,
    Built,
    Case,
    Outcome,
    check_args,
    fifo,
    log,
    params,
    parquet,
    run_case,
    strict_json,
    table,
    write,
)

def _decimal(values: Any, scale: int = 0) -> pa.Array:
    return pa.array([decimal.Decimal(str(v)) for v in values], pa.decimal128(18, scale))


GOOD = "item_id,count\n" + "".join(f"{i},{i + 1}\n" for i in range(N_ITEMS))
"""The counts of the corpus's standard log (item i seen i + 1 times)."""


def _counts(name: str, content: bytes | str | dict[str, Any], *extra: str, outputs: tuple[str, ...] = (),
            check: Any = None, make: Any = None) -> Any:
    """The valid table and ``content`` as the ``--frequencies`` file (a dict: Parquet columns);
    ``make`` makes more files in the case folder."""

    def build(d: Path) -> Built:
        table(d)
        if make is not None:
            make(d)
        if isinstance(content, dict):
            parquet(d, name, content)
        else:
            write(d, name, content)
        return Built([*check_args("items.npy", interactions=None), "--frequencies", name, *extra], outputs=outputs,
                     check=check)

    return build


def _with_good(*extra: str, make: Any = None, outputs: tuple[str, ...] = (), check: Any = None) -> Any:
    def build(d: Path) -> Built:
        table(d)
        write(d, "counts.csv", GOOD)
        if make is not None:
            make(d)
        return Built([*check_args("items.npy", interactions=None), *extra], outputs=outputs, check=check)

    return build


def _warned(d: Path, outcome: Outcome) -> None:
    assert "4 interactions in counts.csv have an empty item id" in strict_json(d / "r.json")["warnings"][0]


def _says_why(d: Path, outcome: Outcome) -> None:
    report = strict_json(d / "r.json")
    assert report["frequency_norm"]["n_items"] == N_ITEMS
    # The table has no user table: history queries need the log itself.
    assert "--frequencies gives counts per item only" in report["not_measured"]["retrieval"]


CASES = [
    Case("frequencies-ok", _counts("counts.csv", GOOD, "--json", "r.json", outputs=("r.json",)), EXIT_OK, None),
    Case("frequencies-no-user-table-says-why", _with_good("--frequencies", "counts.csv", "--json", "r.json",
                                                           outputs=("r.json",), check=_says_why), EXIT_OK, None),
    Case("frequencies-duplicate-id", _counts("counts.csv", GOOD + "3,7\n"), EXIT_ERROR,
         r"duplicate item id 3 in column 'item_id' of counts\.csv \(data rows 4, 11\).*add them up"),
    Case("frequencies-negative-count", _counts("counts.csv", "item_id,count\n0,3\n1,-5\n"), EXIT_ERROR,
         r"count column 'count' of counts\.csv: data row 2 is negative"),
    Case("frequencies-fractional-count", _counts("counts.csv", "item_id,count\n0,3\n1,2.5\n"), EXIT_ERROR,
         r"count column 'count' of counts\.csv: data row 2 is not a whole number"),
    Case("frequencies-text-count", _counts("counts.csv", "item_id,count\n0,3\n1,3\n2,many\n"), EXIT_ERROR,
         r"count column 'count' of counts\.csv: data row 3 is not a whole number", absent="many"),
    Case("frequencies-empty-count", _counts("counts.csv", "item_id,count\n0,3\n1,\n"), EXIT_ERROR,
         r"count column 'count' of counts\.csv: data row 2 is empty"),
    Case("frequencies-nan-count-parquet", _counts("c.parquet", {"item_id": [0, 1], "count": [3.0, float("nan")]}),
         EXIT_ERROR, r"count column 'count' of c\.parquet: data row 2 is not a whole number"),
    Case("frequencies-count-beyond-int64", _counts("counts.csv", "item_id,count\n0,3\n1,99999999999999999999\n"),
         EXIT_ERROR, r"count column 'count' of counts\.csv: data row 2 is beyond int64"),
    Case("frequencies-sum-beyond-int64", _counts("counts.csv", f"item_id,count\n0,{2**62}\n1,{2**62}\n"),
         EXIT_ERROR, r"counts in column 'count' of counts\.csv add up beyond int64"),
    Case("frequencies-more-users-than-interactions", _counts("counts.csv", "item_id,count,users\n0,3,2\n1,3,4\n"),
         EXIT_ERROR, r"distinct-users column 'users' of counts\.csv exceeds the count column 'count' in data row 2"),
    Case("frequencies-all-zero", _counts("counts.csv", "item_id,count\n0,0\n1,0\n"), EXIT_ERROR,
         r"no interactions in counts\.csv: every count in column 'count' is 0"),
    Case("frequencies-ragged-line", _counts("counts.csv", GOOD.replace("\n9,10\n", "\n9,10,1,2\n")), EXIT_ERROR,
         r"cannot read counts\.csv as a frequencies file \(Parquet or CSV/TSV\): a line has 4 fields where the "
         r"first line has 2 \(data row 10\)$"),
    Case("frequencies-ragged-line-headerless", _counts("counts.tsv", "0\t1\n1\t2\n2\n3\t4\n"), EXIT_ERROR,
         r"counts\.tsv as a frequencies file \(Parquet or CSV/TSV\): a line has 1 fields where the first line has 2 "
         r"\(data row 3\)$"),
    Case("frequencies-header-only", _counts("counts.csv", "item_id,count\n"), EXIT_ERROR,
         r"no item counts in counts\.csv: it has a header but no rows"),
    Case("frequencies-empty-file", _counts("counts.csv", ""), EXIT_ERROR,
         r"no item counts in counts\.csv: the file is empty"),
    Case("frequencies-npy-file", _counts("counts.csv", b"\x93NUMPY" + bytes(100)), EXIT_ERROR,
         r"counts\.csv is not a text frequencies file \(it looks like a NumPy \.npy array\); pass a Parquet or CSV"),
    Case("frequencies-no-count-column", _counts("counts.csv", "item_id,value\n0,3\n"), EXIT_ERROR,
         r"cannot find the count column of frequencies file counts\.csv; columns found: item_id, value\. "
         r"Pass --count-col NAME"),
    Case("frequencies-count-col-not-there", _counts("counts.csv", GOOD, "--count-col", "n_clicks"), EXIT_ERROR,
         r"count column 'n_clicks' \(--count-col\) is not in counts\.csv"),
    Case("frequencies-count-col-is-item-col", _counts("counts.csv", GOOD, "--count-col", "item_id"), EXIT_ERROR,
         r"item id, count and distinct-users columns of counts\.csv must be different columns"),
    Case("frequencies-headerless-four-columns", _counts("counts.csv", "0,3,1,9\n1,4,1,9\n"), EXIT_ERROR,
         r"counts\.csv has no header and 4 columns"),
    Case("frequencies-null-item-id-left-out", _counts("counts.csv", GOOD + ",4\n", "--json", "r.json",
                                                      outputs=("r.json",), check=_warned), EXIT_OK, None),
    Case("frequencies-and-interactions", _with_good("--frequencies", "counts.csv", "--interactions", "log.parquet",
                                                    make=log), EXIT_USAGE,
         r"--interactions and --frequencies both give the item counts; pass one"),
    Case("count-col-without-frequencies", _with_good("--interactions", "log.parquet", "--count-col", "n",
                                                     make=log), EXIT_USAGE,
         r"--count-col names a column of --frequencies, which was not given"),
    Case("frequencies-missing", _with_good("--frequencies", "nope.csv"), EXIT_ERROR,
         r"frequencies file not found: nope\.csv"),
    Case("frequencies-fifo", _with_good("--frequencies", "pipe", make=lambda d: fifo(d, "pipe")), EXIT_ERROR,
         r"frequencies file pipe is a FIFO \(named pipe\)", process=True, timeout=30),
    Case("output-is-frequencies", _with_good("--frequencies", "counts.csv", "--json", "counts.csv"), EXIT_ERROR,
         r"--json counts\.csv is the input file given as --frequencies; popaudit never overwrites an input"),
    # Distinct users asked of a counts file without them: the remedy is the counts file's
    # column (or the log), not the log's --user-col.
    Case("frequencies-popularity-users-without-users-column",
         _counts("counts.csv", GOOD, "--queries", "q.npy", "--popularity", "users", make=lambda d: table(d, "q.npy")),
         EXIT_ERROR,
         r"--popularity users needs distinct users per item, but the counts file counts\.csv has no distinct-users "
         r"column: name it with --user-count-col \(or give a counts file with one, or the log itself with "
         r"--interactions\), or use --popularity interactions"),
    Case("frequencies-ids-not-rows", _counts("counts.csv", "item_id,count\nabc,3\ndef,4\n"), EXIT_ERROR,
         r"item ids in counts\.csv are not integers.*--item-ids FILE"),
    # Two count (or item id, or distinct-users) columns: refused naming both and the option (Logs 2 N2).
    Case("frequencies-two-count-columns", _counts("counts.csv", "item_id,frequency,count\n0,2,1\n1,1,2\n"), EXIT_ERROR,
         r"several columns of counts\.csv could be the count column \('frequency', 'count'\); pass --count-col NAME"),
    Case("frequencies-two-item-columns", _counts("counts.csv", "item_id,movie_id,count\n0,1,1\n1,0,2\n"), EXIT_ERROR,
         r"several columns of counts\.csv could be the item id column \('item_id', 'movie_id'\); pass --item-col NAME"),
    Case("frequencies-two-users-columns", _counts("counts.csv", "item_id,count,users,n_users\n0,2,1,1\n1,2,2,1\n"),
         EXIT_ERROR, r"several columns of counts\.csv could be the distinct-users column \('users', 'n_users'\); "
         r"pass --user-count-col NAME"),
    Case("frequencies-two-count-columns-one-picked", _counts(
        "counts.csv", "item_id,frequency,count\n" + "".join(f"{i},{N_ITEMS - i},{i + 1}\n" for i in range(N_ITEMS)),
        "--count-col", "count"), EXIT_OK, None),
    # Logs F2 (QA 10): a warehouse's NUMBER(18,0) counts and ids are integers; a fraction names its row.
    Case("frequencies-decimal-counts", _counts("counts.parquet", {
        "item_id": _decimal(range(N_ITEMS)), "count": _decimal(range(1, N_ITEMS + 1))}), EXIT_OK, None),
    Case("frequencies-fractional-decimal-count", _counts("counts.parquet", {
        "item_id": list(range(3)), "count": _decimal(["1.00", "2.50", "3.00"], 2)}), EXIT_ERROR,
         r"count column 'count' of counts\.parquet: data row 2 is not a whole number", absent=r"has type"),
]

PRODUCT_FAILURES: list[Case] = []


@pytest.mark.parametrize("case", params(CASES, PRODUCT_FAILURES))
def test_hostile_frequencies(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)


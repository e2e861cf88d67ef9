"""Hostile interaction logs, item-id files and query files given to ``popaudit check``."""

from __future__ import annotations

import decimal
import gzip
from pathlib import Path
from typing import Any

import numpy as np
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
    symlink,
    table,
    write,
)

BIG_IDS = [2**63 + 7 * i for i in range(N_ITEMS)]
"""Raw uint64 ids at and above 2^63 (hashed ids): beyond int64, exact only as integers."""


def _rows_csv() -> str:
    items = np.repeat(np.arange(N_ITEMS), np.arange(1, N_ITEMS + 1))
    return "user_id,item_id\n" + "".join(f"{u % 5},{i}\n" for u, i in enumerate(items))


def _log_file(name: str, content: bytes | str, *extra: str) -> Any:
    """The valid table and ``content`` as the interaction log."""

    def build(d: Path) -> Built:
        table(d)
        write(d, name, content)
        return Built(check_args("items.npy", *extra, interactions=name))

    return build


def _with_log(*extra: str, make: Any) -> Any:
    """The valid table and log, plus whatever ``make(d)`` writes (named in ``extra``)."""

    def build(d: Path) -> Built:
        table(d)
        log(d)
        make(d)
        return Built(check_args("items.npy", *extra))

    return build


def _special_log(path: str) -> Any:
    def build(d: Path) -> Built:
        table(d)
        return Built(check_args("items.npy", interactions=path))

    return build


def _fifo_as(flag: str) -> Any:
    def build(d: Path) -> Built:
        table(d)
        log(d)
        fifo(d, "pipe")
        if flag == "--interactions":
            return Built(check_args("items.npy", interactions="pipe"))
        return Built(check_args("items.npy", flag, "pipe"))

    return build


def _u64_log(name: str, *, mapped: bool) -> Any:
    def build(d: Path) -> Built:
        table(d)
        log(d, name, ids=BIG_IDS)
        if not mapped:
            return Built(check_args("items.npy", interactions=name))
        write(d, "ids.txt", "".join(f"{i}\n" for i in BIG_IDS))
        return Built(check_args("items.npy", "--item-ids", "ids.txt", "--json", "r.json", interactions=name),
                     outputs=["r.json"], must_exist=["r.json"], check=_all_mapped)

    return build


def _all_mapped(d: Path, outcome: Outcome) -> None:
    report = strict_json(d / "r.json")
    assert report["inputs"]["n_interactions"] == N_ITEMS * (N_ITEMS + 1) // 2
    assert report["frequency_norm"]["n_cold"] == 0  # every id found its row: none collapsed
    assert not report["inputs"].get("n_unmapped_interactions")


def _offset_by_one(*extra: str, outputs: tuple[str, ...] = ()) -> Any:
    def build(d: Path) -> Built:
        table(d)
        log(d, ids=list(range(1, N_ITEMS + 1)))
        return Built(check_args("items.npy", *extra), outputs=outputs, must_exist=outputs)

    return build


_ONE_BASED_SPARSE = "user_id,item_id\n" + "".join(f"{u % 5},{i}\n" for u, i in enumerate([1, 2, 2, 4, 5, 7, 7, 9, 10]))
"""A 1-based log over the 10-row table whose items 3, 6 and 8 are cold: only id 10 is past the end."""


def _one_based_assumed(d: Path) -> Built:
    table(d)
    write(d, "log.csv", _ONE_BASED_SPARSE)
    return Built(check_args("items.npy", "--assume-row-ids", "--json", "r.json", interactions="log.csv"),
                 outputs=["r.json"], must_exist=["r.json"], check=_one_based_warned)


def _one_based_warned(d: Path, outcome: Outcome) -> None:
    warnings = strict_json(d / "r.json")["warnings"]
    assert any("every id has a row if the rows are the ids minus 1: if they are, pass --id-offset 1" in w
               for w in warnings), warnings


def _zero_based_under_offset(*extra: str) -> Any:
    def build(d: Path) -> Built:
        table(d)
        log(d)
        return Built(check_args("items.npy", "--id-offset", "1", *extra, "--json", "r.json"), outputs=["r.json"],
                     check=_drop_offset_warned if extra else None)

    return build


def _drop_offset_warned(d: Path, outcome: Outcome) -> None:
    warnings = strict_json(d / "r.json")["warnings"]
    assert any("while every id has a row without --id-offset 1 (row = id): if the rows are the ids, drop --id-offset"
               in w for w in warnings), warnings


def _scrambled(d: Path) -> Built:
    table(d)
    log(d, ids=[int(i) for i in np.random.default_rng(0).choice(10**9, N_ITEMS, replace=False)])
    return Built(check_args("items.npy"))


def _parquet_log(columns: dict[str, Any]) -> Any:
    def build(d: Path) -> Built:
        table(d)
        parquet(d, "bad.parquet", columns)
        return Built(check_args("items.npy", interactions="bad.parquet"))

    return build


def _truncated_gzip(d: Path) -> Built:
    table(d)
    data = gzip.compress(("user_id,item_id\n" + "".join(f"{i % 5},{i % 10}\n" for i in range(2000))).encode())
    write(d, "log.csv.gz", data[: len(data) // 2])
    return Built(check_args("items.npy", interactions="log.csv.gz"))


def _truncated_parquet(d: Path) -> Built:
    table(d)
    log(d, "full.parquet")
    data = (d / "full.parquet").read_bytes()
    write(d, "cut.parquet", data[: len(data) // 2])
    return Built(check_args("items.npy", interactions="cut.parquet"))


def _two_item_columns(d: Path) -> Built:
    table(d)
    write(d, "log.csv", "user_id,item_id,item_id\n1,2,3\n2,3,4\n")
    return Built(check_args("items.npy", interactions="log.csv"))


def _folder_log(d: Path) -> Built:
    table(d)
    (d / "logs").mkdir()
    return Built(check_args("items.npy", interactions="logs"))


def _loop_log(d: Path) -> Built:
    table(d)
    symlink(d, "a.csv", "b.csv")
    symlink(d, "b.csv", "a.csv")
    return Built(check_args("items.npy", interactions="a.csv"))


def _missing_log(d: Path) -> Built:
    table(d)
    return Built(check_args("items.npy", interactions="nope.parquet"))


def _queries(array: np.ndarray) -> Any:
    return lambda d: np.save(d / "q.npy", array, allow_pickle=array.dtype == object)


def _empty_user_id_with_user_table(d: Path) -> Built:
    """A model with a user table and a CSV log in which one user id cell is empty (Logs F3):
    the default audit queries the log's users; the empty one is no user, not "not integers"."""
    rng = np.random.default_rng(0)
    np.savez(d / "model.npz", item_embeddings=rng.normal(size=(N_ITEMS, 4)).astype(np.float32),
             user_embeddings=rng.normal(size=(5, 4)).astype(np.float32))
    rows = _rows_csv().splitlines()
    rows[6] = "," + rows[6].split(",")[1]  # data row 6: empty user id
    write(d, "log.csv", "\n".join(rows) + "\n")
    return Built(check_args("model.npz", interactions="log.csv"))


def _one_based_users_zero_based_items(d: Path) -> Built:
    """Users 1..5 on a 5-row user table beside 0-based items 0..9 (Logs N3, QA 12): the offset
    the users are offered shifts the items too, and the message says so."""
    rng = np.random.default_rng(0)
    np.savez(d / "model.npz", item_embeddings=rng.normal(size=(N_ITEMS, 4)).astype(np.float32),
             user_embeddings=rng.normal(size=(5, 4)).astype(np.float32))
    write(d, "log.csv", "user_id,item_id\n" + "".join(f"{k % 5 + 1},{k % N_ITEMS}\n" for k in range(30)))
    return Built(check_args("model.npz", interactions="log.csv"))


def _headerless_text_ids(d: Path) -> Built:
    """A log of text ids without a header, and the table's ids (Logs F1 of QA 10)."""
    table(d)
    write(d, "log.csv", "".join(f"user_{u % 5},item_{u}\n" for u in range(N_ITEMS)))
    write(d, "ids.txt", "".join(f"item_{i}\n" for i in range(N_ITEMS)))
    return Built(check_args("items.npy", "--item-ids", "ids.txt", "--queries", "history", interactions="log.csv"))


def _parquet_items_only_with_user_table(d: Path) -> Built:
    """A one-column Parquet log (item_id) for a model with a user table (Logs F6)."""
    rng = np.random.default_rng(0)
    np.savez(d / "model.npz", item_embeddings=rng.normal(size=(N_ITEMS, 4)).astype(np.float32),
             user_embeddings=rng.normal(size=(5, 4)).astype(np.float32))
    parquet(d, "bad.parquet", {"item_id": list(range(N_ITEMS))})
    return Built(check_args("model.npz", interactions="bad.parquet"))


CASES = [
    Case("parquet-log-typed-item-column-name", _parquet_log({"user_id": [1, 2], "item_id:token": [3, 4]}), EXIT_ERROR,
         r"cannot find an item id column in bad\.parquet; columns found: user_id, item_id:token\. Pass --item-col NAME"),
    Case("parquet-log-of-other-columns", _parquet_log({"alpha": [1, 2], "beta": [3, 4]}), EXIT_ERROR,
         r"cannot find an item id column in bad\.parquet; its 2 columns \(from its schema\) do not look like an "
         r"interaction log's\. Pass --item-col NAME", absent="alpha"),
    Case("parquet-log-without-user-column", _parquet_items_only_with_user_table, EXIT_ERROR,
         r"no user id column was found in bad\.parquet; columns found: item_id\. Pass --user-col NAME"),
    Case("empty-user-id-in-default-audit", _empty_user_id_with_user_table, EXIT_OK, None),
    Case("empty-log", _log_file("log.csv", ""), EXIT_ERROR, r"no interactions in log\.csv: the file is empty \(0 bytes\)"),
    Case("blank-lines-log", _log_file("log.csv", "\n\n  \n\n"), EXIT_ERROR,
         r"no interactions in log\.csv: it holds only blank lines"),
    # Logs F4 (QA 8): a mistyped column name against a real header lists it; a typed RecBole header names its format.
    Case("mistyped-user-col-lists-the-header",
         _log_file("abc.csv", "a,b,c\n" + "".join(f"{u % 5},{u},1\n" for u in range(N_ITEMS)), "--user-col", "x", "--item-col", "b"),
         EXIT_ERROR, r"user column 'x' is not in abc\.csv; columns found: a, b, c"),
    Case("recbole-header-read-as-tsv",
         _log_file("ds.inter", "user_id:token\titem_id:token\n" + "".join(f"{u % 5}\t{u}\n" for u in range(N_ITEMS)),
                   "--interactions-format", "tsv"),
         EXIT_ERROR, r"RecBole header with typed names \(user_id:token, item_id:token\); pass --interactions-format recbole"),
    Case("header-only-log", _log_file("log.csv", "user_id,item_id\n"), EXIT_ERROR, r"no interactions in log\.csv"),
    # Logs F1/F2 (QA 8): "3.0" is text in every format; a log of them names the fix.
    Case("decimal-item-ids-without-id-file",
         _log_file("log.csv", "user_id,item_id\n" + "".join(f"{u % 5},{i}.0\n" for u, i in enumerate(range(N_ITEMS)))),
         EXIT_ERROR, r"item ids in log\.csv are not integers.*written as decimals \(3\.0\).*astype\(\"Int64\"\)"),
    Case("utf8-bom-header", _log_file("log.csv", ("\ufeff" + _rows_csv()).encode()), EXIT_OK, None),
    Case("crlf-line-ends", _log_file("log.csv", _rows_csv().replace("\n", "\r\n").encode()), EXIT_OK, None),
    Case("empty-parquet-log", _parquet_log({"user_id": pa.array([], pa.int64()), "item_id": pa.array([], pa.int64())}),
         EXIT_ERROR, r"no interactions in bad\.parquet"),
    # Logs F3 (QA 8): NaN in a float id column (polars' missing id) is an empty id, as a null.
    Case("nan-item-ids-in-float-parquet-log",
         _parquet_log({"user_id": [0.0, 1.0, 2.0, 3.0], "item_id": [1.0, float("nan"), 2.0, 3.0]}), EXIT_OK, None),
    Case("all-null-item-ids", _parquet_log({"user_id": [1, 2], "item_id": pa.array([None, None], pa.int64())}),
         EXIT_ERROR, r"no interactions in bad\.parquet \(2 rows, every item id empty\)"),
    Case("binary-log", _log_file("log.csv", bytes(range(256)) * 4), EXIT_ERROR,
         r"log\.csv is not a text interaction log \(it looks like binary data"),
    Case("nul-inside-csv", _log_file("log.csv", b"user_id,item_id\n1,2\n2,\x003\n"), EXIT_ERROR,
         r"log\.csv is not a text interaction log"),
    Case("two-item-id-columns", _two_item_columns, EXIT_ERROR,
         r"item id column 'item_id' appears 2 times in log\.csv; rename the duplicates", absent=r"--item-col"),
    Case("uint64-ids-parquet-unmapped", _u64_log("big.parquet", mapped=False), EXIT_ERROR,
         r"big\.parquet reach 9223372036854775\d+.*--item-ids FILE"),
    Case("ids-offset-by-one", _offset_by_one(), EXIT_ERROR, r"log\.parquet.*Pass --item-ids FILE.*the ids look shifted: if the rows are the ids minus 1 \(1-based ids\), pass --id-offset 1"),
    Case("ids-offset-by-one-declared", _offset_by_one("--id-offset", "1", "--json", "r.json", outputs=("r.json",)),
         EXIT_OK, None),
    # Logs F1 (QA 12): a 1-based log leaving rows cold (7 of 10 covered) is offered the offset, as a possibility.
    Case("ids-one-based-sparse", _log_file("log.csv", _ONE_BASED_SPARSE), EXIT_ERROR,
         r"log\.csv.*Pass --item-ids FILE.*; every id has a row if the rows are the ids minus 1 \(1-based ids\), "
         r"though the ids cover only 7 of the 10 rows: if they are, pass --id-offset 1 \(or --assume-row-ids"),
    Case("ids-one-based-sparse-assumed", _one_based_assumed, EXIT_OK, None),
    # Logs N1 (QA 12): 0-based ids under a wrong --id-offset 1 are told to drop it, in the refusal and the escape's warning.
    Case("ids-zero-based-under-offset-one", _zero_based_under_offset(), EXIT_ERROR,
         r"log\.parquet.*taken minus 1 as rows.*Pass --item-ids FILE.*; every id has a row without --id-offset 1 "
         r"\(row = id\): if the rows are the ids, drop --id-offset \(or --assume-row-ids"),
    Case("ids-zero-based-under-offset-one-assumed", _zero_based_under_offset("--assume-row-ids"), EXIT_OK, None),
    Case("one-based-users-beside-zero-based-items", _one_based_users_zero_based_items, EXIT_ERROR,
         r"user ids in the training log .*log\.csv.*pass --id-offset 1 instead \(--id-offset applies to the item ids taken "
         r"as rows too: where they lack rows under it, pass --item-ids FILE for the items\)"),
    Case("scrambled-ids-beyond-table", _scrambled, EXIT_ERROR,
         r"10 of the 10 distinct item ids in log\.parquet.*evidently not the table's row numbers.*--item-ids FILE"),
    Case("negative-ids", _log_file("log.csv", "user_id,item_id\n1,-3\n2,4\n"), EXIT_ERROR,
         r"log\.csv.*ids run from -3 to 4.*--item-ids FILE"),
    Case("fifo-interactions", _fifo_as("--interactions"), EXIT_ERROR,
         r"interaction log pipe is a FIFO \(named pipe\)", process=True, timeout=30),
    Case("fifo-queries", _fifo_as("--queries"), EXIT_ERROR, r"query file pipe is a FIFO \(named pipe\)",
         process=True, timeout=30),
    Case("fifo-item-ids", _fifo_as("--item-ids"), EXIT_ERROR, r"item ids file pipe is a FIFO \(named pipe\)",
         process=True, timeout=30),
    Case("dev-zero-interactions", _special_log("/dev/zero"), EXIT_ERROR,
         r"interaction log /dev/zero is a character device", process=True, timeout=30),
    Case("dev-zero-item-ids", _with_log("--item-ids", "/dev/zero", make=lambda d: None), EXIT_ERROR,
         r"item ids file /dev/zero is a character device", process=True, timeout=30),
    Case("latin1-log", _log_file("log.csv", "user_id,item_id\n1,caf\xe9\n2,th\xe9\n".encode("latin-1")), EXIT_ERROR,
         r"'item_id' of log\.csv .*not valid UTF-8"),
    Case("parquet-struct-ids", _parquet_log({"user_id": [[1.0], [2.0]], "item_id": [{"a": 1}, {"a": 2}]}), EXIT_ERROR,
         r"item column 'item_id' of bad\.parquet has type struct<a: int64>.*--item-col"),
    Case("parquet-float-ids", _parquet_log({"user_id": [1, 2], "item_id": [0.5, 1.5]}), EXIT_ERROR,
         r"item column 'item_id' of bad\.parquet: data row 1 is not a whole number"),
    # Logs F2 (QA 10): NUMBER(18,0) ids (a warehouse unload) are integers; a fractional decimal id names its row.
    Case("parquet-decimal-ids", _parquet_log({"user_id": pa.array([1, 2], pa.decimal128(18, 0)),
                                              "item_id": pa.array([3, 4], pa.decimal128(18, 0))}), EXIT_OK, None),
    Case("parquet-fractional-decimal-id", _parquet_log({"user_id": [1, 2], "item_id": pa.array(
        [decimal.Decimal("3"), decimal.Decimal("4.5")], pa.decimal128(18, 1))}), EXIT_ERROR,
         r"item column 'item_id' of bad\.parquet: data row 2 is not a whole number"),
    Case("parquet-binary-ids", _parquet_log({"user_id": [1, 2], "item_id": pa.array([b"\xff\x00", b"\x01"])}),
         EXIT_ERROR, r"'item_id' of bad\.parquet"),
    Case("huge-line-without-newline", _log_file("log.csv", "user_id,item_id\n1," + "9" * (9 << 20)), EXIT_ERROR,
         r"log\.csv: a line is longer than 4 MiB"),
    Case("ragged-csv", _log_file("log.csv", "user_id,item_id\n1,2\n2,3,4,5\n3,4\n"), EXIT_ERROR,
         r"log\.csv: a line has 4 fields where the first line has 2 \(data row 2\)"),
    Case("ragged-csv-without-header", _log_file("log.csv", "1,2\n2,3\n3,4\n5,6,7\n"), EXIT_ERROR,
         r"log\.csv: a line has 3 fields where the first line has 2 \(data row 4\)"),
    Case("truncated-gzip", _truncated_gzip, EXIT_ERROR, r"log\.csv\.gz.*[Tt]runcated"),
    Case("truncated-parquet", _truncated_parquet, EXIT_ERROR, r"cut\.parquet as Parquet"),
    Case("no-item-column", _log_file("log.csv", "alpha,beta\n1,2\n3,4\n"), EXIT_ERROR,
         r"cannot find an item id column in log\.csv.*--item-col NAME"),
    Case("item-col-not-there", _with_log("--item-col", "nope", make=lambda d: None), EXIT_ERROR,
         r"item column 'nope' is not in log\.parquet; columns found: user_id, item_id"),
    Case("tsv-declared-parquet", _log_file("log.tsv", "user_id\titem_id\n1\t2\n", "--interactions-format", "parquet"),
         EXIT_ERROR, r"log\.tsv as Parquet"),
    Case("item-ids-too-short", _with_log("--item-ids", "ids.txt", make=lambda d: write(d, "ids.txt", "0\n1\n2\n")),
         EXIT_ERROR, r"--item-ids file ids\.txt has 3 ids but the item table in items\.npy has 10 rows"),
    Case("item-ids-duplicated", _with_log("--item-ids", "ids.txt", make=lambda d: write(d, "ids.txt", "5\n" * 10)),
         EXIT_ERROR, r"duplicate item id 5 in --item-ids file ids\.txt"),
    Case("item-ids-latin1", _with_log("--item-ids", "ids.txt", make=lambda d: write(
        d, "ids.txt", b"".join(b"caf\xe9%d\n" % i for i in range(10)))), EXIT_ERROR, r"ids\.txt.*not valid UTF-8"),
    # Logs N2 (QA 10): an empty value is the mistyped word's usage error (was: exit 1, "(a str or pathlib.Path)").
    Case("queries-empty-path", _with_log("--queries", "", make=lambda d: None), EXIT_USAGE,
         r"Invalid value for '--queries': must be one of the words auto, users, history, or a path .*got '', an empty "
         r"value", absent=r"is a folder|pathlib"),
    Case("queries-blank-path", _with_log("--queries", "  ", make=lambda d: None), EXIT_USAGE,
         r"Invalid value for '--queries': must be one of the words auto, users, history.*got '  ', an empty value"),
    Case("queries-text-file", _with_log("--queries", "q.txt", make=lambda d: write(d, "q.txt", "hello\n")), EXIT_ERROR,
         r"--queries must be one of the words auto, users, history, or a path to a \.npy or \.parquet file of query "
         r"vectors; got 'q\.txt', a \.txt file"),
    # Logs F4 (QA 10): a mistyped word is a usage error listing the words (was: "query file not found: user", exit 1).
    Case("queries-mistyped-word", _with_log("--queries", "user", make=lambda d: None), EXIT_USAGE,
         r"Invalid value for '--queries': must be one of the words auto, users, history, or a path", absent=r"not found"),
    Case("queries-nan", _with_log("--queries", "q.npy", make=_queries(np.full((3, 4), np.nan, np.float32))),
         EXIT_ERROR, r"query file q\.npy holds NaN or infinite values"),
    Case("queries-object-dtype", _with_log("--queries", "q.npy", make=_queries(np.array([{"a": 1}] * 3, dtype=object))),
         EXIT_ERROR, r"q\.npy.*Python objects"),
    Case("queries-wrong-dimension", _with_log("--queries", "q.npy", make=_queries(np.ones((3, 7), np.float32))),
         EXIT_ERROR, r"q\.npy.*dimension 7.*dimension 4"),
    Case("folder-log", _folder_log, EXIT_USAGE, r"'--interactions'.*logs.*is a directory"),
    Case("symlink-loop-log", _loop_log, EXIT_ERROR, r"interaction log a\.csv.*symbolic links"),
    Case("missing-log", _missing_log, EXIT_ERROR, r"not found: nope\.parquet"),
    Case("line-of-5MiB-without-newline", _log_file("log.csv", "user_id,item_id\n1," + "9" * (5 << 20)), EXIT_ERROR,
         r"log\.csv: a line is longer than 4 MiB", absent=r"non-integer"),
    Case("uint64-ids-csv-unmapped", _u64_log("big.csv", mapped=False), EXIT_ERROR,
         r"big\.csv reach 9223372036854775\d+, beyond any table row.*--item-ids FILE", absent=r"non-integer"),
    Case("uint64-ids-parquet-mapped", _u64_log("big.parquet", mapped=True), EXIT_OK, None),
    Case("uint64-ids-csv-mapped", _u64_log("big.csv", mapped=True), EXIT_OK, None),
    # Every user cell empty: the user column is to blame, not the item table (no item lacks a row).
    Case("user-column-all-empty-csv", _log_file("log.csv", "user_id,item_id\n" + ",1\n" * 30), EXIT_ERROR,
         r"the user column 'user_id' of log\.csv is empty in every row, so no user can be queried",
         absent=r"item table"),
    Case("user-column-all-null-parquet", _with_log("--interactions", "nulls.parquet", make=lambda d: parquet(
        d, "nulls.parquet", {"user_id": pa.array([None] * 30, pa.string()), "item_id": pa.array([1] * 30)})),
         EXIT_ERROR,
         r"the user column 'user_id' of nulls\.parquet is empty in every row", absent=r"item table"),
    # Header messages (Logs 2 N4): a comma header read as TSV/RecBole names the delimiter and the format
    # option (was "holds 1 field that do not look like a header"); a header whose every given name is
    # mistyped is listed; a data line is still never echoed.
    Case("csv-header-read-as-tsv", _log_file("log.csv", _rows_csv(), "--interactions-format", "tsv"), EXIT_ERROR,
         r"cannot find an item id column in log\.csv; its first line is one field, a header separated by ',' "
         r"\(user_id, item_id\), not by the format's delimiter; pass --interactions-format csv to read it\.",
         absent=r"do not look|Pass --item-col"),
    Case("csv-header-read-as-recbole", _log_file("log.csv", _rows_csv(), "--interactions-format", "recbole"),
         EXIT_ERROR, r"separated by ',' \(user_id, item_id\).*pass --interactions-format csv to read it\."),
    Case("every-given-column-mistyped", _log_file("abc.csv", "a,b,c\n1,2,3\n", "--user-col", "x", "--item-col", "y"),
         EXIT_ERROR, r"item column 'y' is not in abc\.csv; columns found: a, b, c"),
    Case("given-columns-beside-a-data-line", _log_file("s.csv", "alice,hunter2\nbob,pw9\n", "--item-col", "y"),
         EXIT_ERROR, r"item column 'y' is not in s\.csv; its first line holds 2 fields that do not look like a header",
         absent=r"hunter2|alice"),
    Case("one-field-not-a-header", _log_file("w.csv", "swordfish\nmarlin\n"), EXIT_ERROR,
         r"its first line holds 1 field that does not look like a header of column names", absent=r"swordfish"),
    # Logs F1 (QA 10): a first line whose cells have the data's shape (user_4,item_39) is data; one
    # whose every cell holds a digit is never echoed nor offered as column names (was: --item-col item_39).
    Case("headerless-text-id-log", _headerless_text_ids, EXIT_OK, None),
    Case("data-like-first-line-unlike-the-rest", _log_file("log.csv", "a1b2,x9\nc3,y77z\nd4,q5\n"), EXIT_ERROR,
         r"log\.csv; its first line holds 2 fields with a digit in every one.*add a header line naming its columns",
         absent=r"a1b2|--item-col"),
    # A float id no integer equals: refused naming the column and data row (Logs 2 N4; was: no row).
    Case("parquet-log-fractional-item-id", _parquet_log({"user_id": [1, 2, 3], "item_id": [3.0, 4.0, 3.5]}), EXIT_ERROR,
         r"item column 'item_id' of bad\.parquet: data row 3 is not a whole number; ids must be integers or strings"),
    Case("parquet-log-infinite-user-id", _parquet_log({"user_id": [float("inf"), 2.0], "item_id": [3, 4]}), EXIT_ERROR,
         r"user column 'user_id' of bad\.parquet: data row 1 is infinite; ids must be integers or strings"),
    # Two columns of one role (Logs 2 N2): refused naming both and the option, for every role.
    Case("log-two-item-columns", _log_file("log.csv", "user_id,movie_id,item_id\n0,3,1\n1,2,2\n"), EXIT_ERROR,
         r"several columns of log\.csv could be the item id column \('movie_id', 'item_id'\); pass --item-col NAME"),
    # Logs F6 (QA 10): an encoded item_index beside the raw item_id is ambiguous, as item_idx is (was: item_id taken silently).
    Case("log-item-index-beside-item-id", _log_file("log.csv", "user_id,item_id,item_index\n0,3,1\n1,2,2\n"), EXIT_ERROR,
         r"several columns of log\.csv could be the item id column \('item_id', 'item_index'\); pass --item-col NAME"),
    Case("log-two-user-columns-of-other-names", _log_file("log.csv", "customer_id,user_id,item_id\n0,3,1\n1,2,2\n"),
         EXIT_ERROR,
         r"several columns of log\.csv could be the user id column \('customer_id', 'user_id'\); pass --user-col NAME"),
    Case("log-two-item-columns-one-picked", _log_file("log.csv", "user_id,movie_id,item_id\n" + "".join(
        f"{u % 5},{99},{i}\n" for u, i in enumerate(np.repeat(np.arange(N_ITEMS), np.arange(1, N_ITEMS + 1)))),
        "--item-col", "item_id"), EXIT_OK, None),
]

PRODUCT_FAILURES: list[Case] = []


@pytest.mark.parametrize("case", params(CASES, PRODUCT_FAILURES))
def test_hostile_log(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)


def test_corpus_size() -> None:
    assert len(CASES) + len(PRODUCT_FAILURES) >= 25

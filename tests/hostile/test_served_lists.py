"""Hostile served-lists files (``--recommendations``, issue #21 item 4), run against the
library reader; :mod:`tests.hostile.test_served_lists_cli` runs every case again through
``popaudit check``.

Each case is a corpus :class:`~tests.hostile.corpus.Case` whose ``Built.args`` are the
options a lists-only audit will take (``--recommendations FILE --interactions LOG``, plus
``--rank-col``/``--score-col``/``--user-col``/``--item-col``/``--max-memory``). Today
:func:`run_library` turns those options into a call of
:func:`auditor.loading.served_lists.read_served_lists` (items mapped through the catalogue
of the log and the lists, as a lists-only audit maps them) and checks what the corpus
checks: the exit code an :class:`~auditor.errors.AuditError` carries, an ``Error:``
message matching the case's regex and quoting nothing the case forbids, no Python
traceback (any other exception fails the test), and every input file unchanged with
nothing left beside it. A run that succeeds prints the counts of the value it read on
stdout and each warning as a ``Warning:`` line on stderr.

Through the CLI the same cases run by ``run_case(replace(case, build=as_cli(case.build)), ...)``,
with :func:`as_cli` prefixing ``check`` and the fast options (``corpus.FAST``); the
``stdout`` regexes of successful cases become a check of the JSON report there.
"""

from __future__ import annotations

import gzip
import re
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from auditor.config import parse_memory_size
from auditor.errors import AuditError
from auditor.loading.counting import count_item_ids
from auditor.values import LogSpec
from auditor.loading.served_lists import read_served_lists

from .corpus import (
    EXIT_ERROR,
    EXIT_OK,
    FAST,
    Built,
    Case,
    Outcome,
    fifo,
    log,
    params,
    parquet,
    snapshot,
    symlink,
    write,
)

GOOD = "user_id,item_id,rank\n0,3,1\n0,5,2\n0,9,3\n1,2,1\n1,3,2\n1,4,3\n"
"""Lists of two users of the corpus log (items 0..9), three items each, ranks 1..3."""

_OPTIONS = {"--recommendations": "path", "--interactions": "log", "--rank-col": "rank_col",
            "--score-col": "score_col", "--user-col": "user_col", "--item-col": "item_col",
            "--max-memory": "max_memory"}


def _recs(name: str, content: bytes | str | dict[str, Any] | None, *extra: str,
          make: Callable[[Path], object] | None = None) -> Callable[[Path], Built]:
    """The corpus log, ``content`` as the served lists ``name`` (a dict: Parquet columns;
    None: made by ``make`` or not at all), and the options of a lists-only audit."""

    def build(d: Path) -> Built:
        log(d)
        if isinstance(content, dict):
            parquet(d, name, content)
        elif content is not None:
            write(d, name, content)
        if make is not None:
            make(d)
        return Built(["--recommendations", name, "--interactions", "log.parquet", *extra])

    return build


def as_cli(build: Callable[[Path], Built]) -> Callable[[Path], Built]:
    """The case as a command line, once ``popaudit check`` takes ``--recommendations``."""

    def cli_build(d: Path) -> Built:
        built = build(d)
        return Built(["check", *built.args, *FAST], built.outputs, built.must_exist, built.markers, built.outside,
                     built.check)

    return cli_build


def _arguments(args: Sequence[str]) -> dict[str, str]:
    pairs = dict(zip(args[::2], args[1::2]))
    unknown = sorted(set(pairs) - set(_OPTIONS))
    assert not unknown and len(args) % 2 == 0, f"options the library runner does not know: {unknown}"
    return {_OPTIONS[flag]: value for flag, value in pairs.items()}


def run_library(case: Case, root: Path, monkeypatch: pytest.MonkeyPatch) -> Outcome:
    """Build ``case``, read its served lists with the library, and check what the corpus checks."""
    work = root / "case"
    work.mkdir()
    built = case.build(work)
    before = snapshot(work)
    monkeypatch.chdir(work)
    given = _arguments(built.args)
    try:
        counts = count_item_ids(LogSpec(Path(given["log"]))) if "log" in given else None
        served = read_served_lists(
            LogSpec(Path(given["path"]), user_col=given.get("user_col"), item_col=given.get("item_col")),
            rank_col=given.get("rank_col"), score_col=given.get("score_col"),
            log_items=None if counts is None else counts.ids,
            max_memory=parse_memory_size(given["max_memory"]) if "max_memory" in given else None,
        )
    except AuditError as exc:
        outcome = Outcome(exc.exit_code, "", f"Error: {exc}\n")
    except Exception:  # what a user would see: a traceback (the checks below fail on it)
        outcome = Outcome(EXIT_ERROR, "", traceback.format_exc())
    else:
        m = served.matrix
        shown = served.lists.tolist() if served.lists.size <= 100 else served.lists.shape
        stdout = (f"users={served.n_users} k={served.k} lists={shown} empty_ids={served.n_empty_ids} "
                  f"gaps={m.n_gap_lists} ties={m.n_tied_lists} short={m.n_short_lists} cold={served.n_cold_items}\n")
        outcome = Outcome(EXIT_OK, stdout, "".join(f"Warning: {w}\n" for w in served.warnings))
    _check(case, work, before, outcome)
    return outcome


def _check(case: Case, work: Path, before: dict[str, tuple[Any, ...]], outcome: Outcome) -> None:
    """The corpus's checks (corpus._check) that apply to a library call."""
    shown = f"\n--- exit {outcome.exit_code}\n--- stdout\n{outcome.stdout[-2000:]}\n--- stderr\n{outcome.stderr[-3000:]}"
    assert "Traceback" not in outcome.output, f"a Python traceback{shown}"
    assert outcome.exit_code == case.exit_code, f"exit {outcome.exit_code}, expected {case.exit_code}{shown}"
    if case.error is None:
        assert not outcome.stderr.startswith("Error:"), f"unexpected Error: line{shown}"
    else:
        assert re.search(case.error, outcome.stderr, re.S), f"Error: message does not match {case.error!r}{shown}"
    for pattern, text, what in ((case.stdout, outcome.stdout, "stdout"), (case.stderr, outcome.stderr, "stderr")):
        if pattern is not None:
            assert re.search(pattern, text, re.S), f"{what} does not match {pattern!r}{shown}"
    if case.absent is not None:
        found = re.search(case.absent, outcome.output)
        assert not found, f"output holds {found.group(0)!r} (must not match {case.absent!r}){shown}"
    after = snapshot(work)
    changed = [name for name, entry in before.items() if after.get(name) != entry]
    assert not changed, f"input changed or removed: {changed}{shown}"
    assert set(after) == set(before), f"files appeared: {sorted(set(after) - set(before))}{shown}"


def _ragged(d: Path) -> None:
    rows = [f"0,{i % 10},{i + 1}" for i in range(5000)]
    write(d, "recs.csv", "user_id,item_id,rank\n" + "\n".join(rows) + "\n")


def _ragged_many(d: Path) -> None:
    # One list of 5,000 slots (items repeat in no list: 5,000 distinct ids) beside 999 lists of one.
    rows = [f"0,{i},{i + 1}" for i in range(5000)] + [f"{u},0,1" for u in range(1, 1000)]
    write(d, "recs.csv", "user_id,item_id,rank\n" + "\n".join(rows) + "\n")
    # A log that saw every listed item (lists alone refuse a majority of slots the log never saw).
    parquet(d, "log.parquet", {"user_id": np.arange(5000) % 5, "item_id": np.arange(5000)})


OK = r"users=2 k=3 lists=\[\[3, 5, 9\], \[2, 3, 4\]\]"
CASES = [
    Case("recs-ok", _recs("recs.csv", GOOD), EXIT_OK, None, stdout=OK),
    Case("recs-ok-parquet-scores", _recs("r.parquet", {"user_id": [0, 0, 0, 1, 1, 1], "item_id": [9, 3, 5, 4, 2, 3],
                                                       "score": [0.1, 0.9, 0.5, -1.0, 3.0, 2.0]}),
         EXIT_OK, None, stdout=OK),
    Case("recs-ok-tsv-gzip", _recs("recs.tsv.gz", None, make=lambda d: gzip.open(
        d / "recs.tsv.gz", "wt").write(GOOD.replace(",", "\t"))), EXIT_OK, None, stdout=OK),
    Case("recs-missing", _recs("nope.csv", None), EXIT_ERROR, r"recommendations file not found: nope\.csv"),
    Case("recs-folder", _recs("recs", None, make=lambda d: (d / "recs").mkdir()), EXIT_ERROR,
         r"recommendations file recs is a folder, not a file"),
    Case("recs-fifo", _recs("pipe", None, make=lambda d: fifo(d, "pipe")), EXIT_ERROR,
         r"recommendations file pipe is a FIFO \(named pipe\)"),
    Case("recs-dev-zero", _recs("zero", None, make=lambda d: symlink(d, "zero", "/dev/zero")), EXIT_ERROR,
         r"recommendations file zero is a character device"),
    Case("recs-empty", _recs("recs.csv", ""), EXIT_ERROR, r"no served lists in recs\.csv: the file is empty"),
    Case("recs-header-only", _recs("recs.csv", "user_id,item_id,rank\n"), EXIT_ERROR,
         r"no served lists in recs\.csv: it has a header but no rows"),
    Case("recs-parquet-no-rows", _recs("r.parquet", {"user_id": pa.array([], pa.int64()),
                                                     "item_id": pa.array([], pa.int64()),
                                                     "rank": pa.array([], pa.int64())}),
         EXIT_ERROR, r"no served lists in r\.parquet: it has no rows"),
    Case("recs-npy-named-csv", _recs("recs.csv", b"\x93NUMPY" + bytes(200)), EXIT_ERROR,
         r"recs\.csv is not a text recommendations file \(it looks like a NumPy \.npy array\); pass a Parquet or "
         r"CSV/TSV file of served lists"),
    Case("recs-random-bytes", _recs("recs.csv", bytes(np.random.default_rng(1).integers(128, 256, 600, np.uint8))),
         EXIT_ERROR, r"recs\.csv is not a text recommendations file \(it looks like binary data"),
    Case("recs-truncated-parquet", _recs("r.parquet", b"PAR1" + bytes(100)), EXIT_ERROR,
         r"cannot read r\.parquet as Parquet"),
    Case("recs-movielens-dat", _recs("recs.dat", "0::3::1\n0::5::2\n"), EXIT_ERROR,
         r"recs\.dat is a '::'-separated MovieLens file; served lists are Parquet or CSV/TSV"),
    Case("recs-headerless", _recs("recs.csv", "0,3,1\n0,5,2\n"), EXIT_ERROR,
         r"recs\.csv has no header: name its columns \(user id, item id, and a rank or a score\)"),
    Case("recs-no-user-column", _recs("recs.csv", "item_id,rank\n3,1\n"), EXIT_ERROR,
         r"cannot find a user id column in recs\.csv; columns found: item_id, rank\. Pass (--user-col|user_col) NAME"),
    Case("recs-no-order-column", _recs("recs.csv", "user_id,item_id,weight\n0,3,1\n"), EXIT_ERROR,
         r"cannot find a rank or score column in recs\.csv; columns found: user_id, item_id, weight\. Pass "
         r"(--rank-col|rank_col) NAME \(lower first\) or (--score-col|score_col) NAME \(higher first\)"),
    Case("recs-rank-and-score-given", _recs("recs.csv", GOOD, "--rank-col", "rank", "--score-col", "rank"), EXIT_ERROR,
         r"pass (--rank-col|rank_col) or (--score-col|score_col), not both"),
    Case("recs-rank-col-not-there", _recs("recs.csv", GOOD, "--rank-col", "position"), EXIT_ERROR,
         r"rank column 'position' \((--rank-col|rank_col)\) is not in recs\.csv; columns found: user_id, item_id, rank"),
    Case("recs-rank-col-is-item-col", _recs("recs.csv", GOOD, "--rank-col", "item_id"), EXIT_ERROR,
         r"the rank column of recs\.csv is 'item_id', which is also an id column"),
    # Two recognised order columns that may disagree (a re-ranker's position beside the
    # model's rank; Served F2): refused, naming both and the option that picks one.
    Case("recs-rank-and-position", _recs("r.parquet", {"user_id": [0, 0, 0], "item_id": [3, 5, 9],
                                                       "position": [1, 2, 3], "rank": [3, 2, 1]}), EXIT_ERROR,
         r"several columns of r\.parquet could be the rank column \('position', 'rank'\); pass (--rank-col|rank_col) NAME"),
    Case("recs-score-and-prediction", _recs("recs.csv", "user_id,item_id,score,prediction\n0,3,0.9,0.1\n0,5,0.1,0.9\n"),
         EXIT_ERROR, r"several columns of recs\.csv could be the score column \('score', 'prediction'\); pass "
                     r"(--score-col|score_col) NAME"),
    Case("recs-rank-and-position-picked", _recs("recs.csv", "user_id,item_id,position,rank\n0,3,1,3\n0,5,2,2\n0,9,3,1\n",
                                                "--rank-col", "position"), EXIT_OK, None,
         stdout=r"users=1 k=3 lists=\[\[3, 5, 9\]\]"),
    Case("recs-user-col-given", _recs("recs.csv", GOOD.replace("user_id", "visitor"), "--user-col", "visitor"),
         EXIT_OK, None, stdout=OK),
    Case("recs-repeated-item", _recs("recs.csv", GOOD + "1,2,4\n"), EXIT_ERROR,
         r"recs\.csv lists item 2 twice for user 1 \(data rows 4, 7; 1 repeats in 1 list\): a served list shows each "
         r"item once"),
    Case("recs-rank-text", _recs("recs.csv", "user_id,item_id,rank\n0,3,1\n0,5,hunter2\n"), EXIT_ERROR,
         r"rank column 'rank' of recs\.csv: data row 2 is not a number; ranks must be whole numbers >= 0",
         absent=r"hunter2"),
    Case("recs-rank-hex", _recs("recs.csv", "user_id,item_id,rank\n0,3,0x10\n"), EXIT_ERROR,
         r"rank column 'rank' of recs\.csv: data row 1 is not a number"),
    Case("recs-rank-negative", _recs("recs.csv", "user_id,item_id,rank\n0,3,1\n0,5,-2\n"), EXIT_ERROR,
         r"rank column 'rank' of recs\.csv: data row 2 is negative"),
    Case("recs-rank-fraction", _recs("recs.csv", "user_id,item_id,rank\n0,3,1.5\n"), EXIT_ERROR,
         r"rank column 'rank' of recs\.csv: data row 1 is not a whole number"),
    Case("recs-rank-empty", _recs("recs.csv", "user_id,item_id,rank\n0,3,\n"), EXIT_ERROR,
         r"rank column 'rank' of recs\.csv: data row 1 is empty"),
    Case("recs-rank-huge-text", _recs("recs.csv", "user_id,item_id,rank\n0,3,1e300\n"), EXIT_ERROR,
         r"rank column 'rank' of recs\.csv: data row 1 is 2\*\*53 or more"),
    Case("recs-rank-beyond-int64", _recs("r.parquet", {"user_id": [0], "item_id": [3],
                                                       "rank": pa.array([2**64 - 1], pa.uint64())}),
         EXIT_ERROR, r"rank column 'rank' of r\.parquet: data row 1 is beyond int64"),
    Case("recs-rank-huge-int64-sizes-nothing", _recs("r.parquet", {"user_id": [0, 0], "item_id": [3, 5],
                                                                   "rank": [2**63 - 1, 2**62]}),
         EXIT_OK, None, stdout=r"users=1 k=2 lists=\[\[5, 3\]\] .*gaps=1"),
    Case("recs-rank-bool", _recs("r.parquet", {"user_id": [0], "item_id": [3], "rank": [True]}), EXIT_ERROR,
         r"rank column 'rank' of r\.parquet has type bool; ranks must be whole numbers"),
    Case("recs-score-nan", _recs("r.parquet", {"user_id": [0, 0], "item_id": [3, 5], "score": [1.0, float("nan")]}),
         EXIT_ERROR, r"score column 'score' of r\.parquet: data row 2 is not a number \(NaN\); scores must be numbers"),
    Case("recs-score-text", _recs("recs.csv", "user_id,item_id,score\n0,3,0.5\n0,5,swordfish\n"), EXIT_ERROR,
         r"score column 'score' of recs\.csv: data row 2 is not a number", absent=r"swordfish"),
    Case("recs-score-na", _recs("recs.csv", "user_id,item_id,score\n0,3,0.5\n0,5,NA\n"), EXIT_ERROR,
         r"score column 'score' of recs\.csv: data row 2 is empty \(no value, or NA/NaN/null\)"),
    # A float column of user ids (Parquet) holds a non-integer number (its data row named, Logs 2 N4); "0.5" in a CSV is a text
    # id, as the same text is in a Parquet string column (Logs F1, QA 8: one rule for text ids).
    Case("recs-float-user-ids", _recs("recs.parquet", {"user_id": [0.5], "item_id": [3], "rank": [1]}), EXIT_ERROR,
         r"user column 'user_id' of recs\.parquet: data row 1 is not a whole number"),
    Case("recs-decimal-text-user-ids", _recs("recs.csv", "user_id,item_id,rank\n0.5,3,1\n"), EXIT_OK, None),
    Case("recs-latin1", _recs("recs.csv", "user_id,item_id,rank\n0,caf\xe9,1\n".encode("latin-1")), EXIT_ERROR,
         r"'item_id' of recs\.csv holds ids that are not valid UTF-8 text; re-save the file as UTF-8"),
    Case("recs-ragged-row", _recs("recs.csv", "user_id,item_id,rank\n0,3,1\n0,5,2,9\n"), EXIT_ERROR,
         r"recs\.csv: a line has 4 fields where the first line has 3"),
    Case("recs-line-of-5MiB", _recs("recs.csv", "user_id,item_id,rank\n0,3," + "9" * (5 << 20)), EXIT_ERROR,
         r"recs\.csv: a line is longer than 4 MiB"),
    Case("recs-all-ids-empty", _recs("recs.csv", "user_id,item_id,rank\n,3,1\n0,,2\n"), EXIT_ERROR,
         r"no served lists in recs\.csv: every row has an empty user or item id"),
    Case("recs-long-list-beyond-memory", _recs("recs.csv", None, "--max-memory", "1M", make=_ragged_many), EXIT_ERROR,
         r"the served lists of recs\.csv need 39M as a 1,000 users x 5,000 slots matrix \(the longest list holds "
         r"5,000 items\), more than the memory budget of 1M"),
    # Counted, not refused: each writes its warning and reads the rest.
    Case("recs-gaps-compacted", _recs("recs.csv", "user_id,item_id,rank\n0,3,1\n0,5,4\n0,9,9\n"), EXIT_OK, None,
         stdout=r"lists=\[\[3, 5, 9\]\] .*gaps=1", stderr=r"Warning: 1 of the 1 lists in recs\.csv skip ranks"),
    Case("recs-tied-ranks", _recs("recs.csv", "user_id,item_id,rank\n0,9,1\n0,5,1\n"), EXIT_OK, None,
         stdout=r"lists=\[\[5, 9\]\] .*ties=1",
         stderr=r"give several items the same rank: tied items are ordered by their item id in recs\.csv \(lower first: "
                r"numbers numerically, text as text\), with or without a model"),
    # Tied scores over ids 9 and 10 (10 never trained): numbers order numerically, not as text (Served F3).
    Case("recs-tied-scores-by-numeric-id", _recs("recs.csv", "user_id,item_id,score\n0,10,0.5\n0,9,0.5\n0,3,0.5\n"),
         EXIT_OK, None, stdout=r"lists=\[\[3, 9, 10\]\] .*ties=1", stderr=r"ordered by their item id in recs\.csv"),
    Case("recs-short-lists-padded", _recs("recs.csv", GOOD + "2,7,1\n"), EXIT_OK, None,
         stdout=r"users=3 k=3 .*\[7, -1, -1\]\] .*short=1", stderr=r"1 of the 3 lists in recs\.csv hold fewer than 3"),
    Case("recs-empty-ids-left-out", _recs("recs.csv", GOOD + ",4,1\n2,,1\n"), EXIT_OK, None, stdout=OK + r" empty_ids=2",
         stderr=r"Warning: 2 rows of recs\.csv have an empty user or item id: left out"),
    Case("recs-cold-items-kept", _recs("recs.csv", GOOD + "2,77,1\n"), EXIT_OK, None,
         stdout=r"users=3 .*\[10, -1, -1\]\] .*cold=1", stderr=r"1 of the 6 distinct items in recs\.csv never appear in "
                                                            r"the training log \(1 row, 14\.3% of the served slots\): kept"),
    # Ids that do not line up with the log's (QA batchlists F1): refused, not graded "none".
    Case("recs-items-spelled-otherwise", _recs("recs.csv", "user_id,item_id,rank\n0,i3,1\n0,i5,2\n1,i2,1\n"),
         EXIT_ERROR, r"none of the 3 items in recs\.csv \(column 'item_id'\) is an item of the training log \(10 "
                     r"items\): the ids evidently do not match \(the lists spell them as 'i2', the log as 0\)"),
    Case("recs-items-mostly-unknown", _recs("recs.csv", GOOD + "".join(f"2,{77 + i},{i + 1}\n" for i in range(7))),
         EXIT_ERROR, r"7 of the 13 served slots in recs\.csv \(column 'item_id'\) \(53\.8%\) name items the training "
                     r"log never saw, more than the 50% an audit measures: .*the lists spell them as 77, the log as 0"),
    Case("recs-items-half-unknown-measured", _recs("recs.csv", GOOD + "".join(f"2,{77 + i},{i + 1}\n" for i in range(6))),
         EXIT_OK, None, stdout=r"users=3 .*cold=6", stderr=r"6 of the 11 distinct items in recs\.csv never appear in the "
                                                         r"training log \(6 rows, 50\.0% of the served slots\)"),
    Case("recs-many-repeats", _recs("recs.csv", None, make=_ragged), EXIT_ERROR,
         r"lists item 0 twice for user 0 \(data rows 1, 11, 21, 31, 41, \.\.\.; 4,990 repeats in 1 list\)"),
    Case("recs-one-long-list-within-memory", _recs("recs.csv", None, make=_ragged_many), EXIT_OK, None,
         stdout=r"users=1000 k=5000 lists=\(1000, 5000\) .*short=999"),
]

PRODUCT_FAILURES: list[Case] = []


@pytest.mark.parametrize("case", params(CASES, PRODUCT_FAILURES))
def test_hostile_served_lists(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_library(case, tmp_path, monkeypatch)

"""Hostile served lists through ``popaudit check --recommendations`` (issue #21 item 4).

Every case of :mod:`tests.hostile.test_served_lists` runs again as a command line: the
same exit code and ``Error:`` message, inputs unchanged, nothing left behind; a case the
reader accepts must audit (exit 0) and write a JSON report whose warnings hold what the
reader counted. Then the cases only the command has: its signature (MODEL optional only
with ``--recommendations``), settings a lists-only audit refuses, an output naming the
lists, lists beside a model that names none of the model's items, and gates.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from .corpus import (
    EXIT_ERROR,
    EXIT_GATE,
    EXIT_OK,
    EXIT_USAGE,
    FAST,
    Built,
    Case,
    Outcome,
    log,
    params,
    run_case,
    table,
    write,
)
from .test_served_lists import CASES, GOOD, as_cli

# The reader's longest list is the matrix width only up to the largest K a check measures.
_WIDE = {"recs-long-list-beyond-memory": ("-k", "5000")}
# Refused by the option's own type before the reader sees it: a usage error, as for every path option.
_USAGE = {"recs-folder": r"Invalid value for '--recommendations': File 'recs' is a directory"}
# --user-col and --item-col name the columns of the log and of the lists alike (docs/served-lists.md).
_ERRORS = {"recs-user-col-given": r"user column 'visitor' is not in log\.parquet; columns found: user_id, item_id"}


def _cli_case(case: Case) -> Case:
    """The library case as a command line: errors unchanged; successes audit and report."""
    wide = _WIDE.get(case.id, ())
    cli_build = as_cli(case.build)

    def build(d: Path) -> Built:
        built = cli_build(d)
        if case.exit_code != EXIT_OK or case.id in _ERRORS:
            return replace(built, args=[*built.args, *wide])
        return replace(built, args=[*built.args, *wide, "--json", "report.json"], outputs=["report.json"],
                       must_exist=["report.json"], check=_warned(case.stderr))

    if case.id in _ERRORS:
        return replace(case, id=f"cli-{case.id}", build=build, exit_code=EXIT_ERROR, error=_ERRORS[case.id],
                       stdout=None, stderr=None)
    if case.id in _USAGE:
        return replace(case, id=f"cli-{case.id}", build=build, exit_code=EXIT_USAGE, error=_USAGE[case.id])
    return replace(case, id=f"cli-{case.id}", build=build, stdout=None, stderr=None)


def _warned(pattern: str | None) -> object:
    """A check that the JSON report's warnings hold ``pattern`` (the reader's warning)."""

    def check(work: Path, outcome: Outcome) -> None:
        report = json.loads((work / "report.json").read_text())
        assert report["retrieval"]["at"], "no served measures in the report"
        if pattern is not None:
            text = "\n".join(f"Warning: {w}" for w in report["warnings"])
            assert re.search(pattern, text, re.S), f"{pattern!r} not in the report's warnings:\n{text}"

    return check


def _recs(*extra: str, model: bool = False, content: str = GOOD, outputs: tuple[str, ...] = (),
          check: Callable[[Path, Outcome], None] | None = None, make: Callable[[Path], object] | None = None) -> object:
    def build(d: Path) -> Built:
        log(d)
        if make is not None:
            make(d)
        write(d, "recs.csv", content)
        head = ["check", table(d)] if model else ["check"]
        return Built([*head, "--recommendations", "recs.csv", "--interactions", "log.parquet", *FAST, *extra],
                     outputs=outputs, must_exist=outputs, check=check)

    return build


def _clamped(work: Path, outcome: Outcome) -> None:
    """K=50 over lists of three: measured at K=3, and said."""
    report = json.loads((work / "r.json").read_text())
    assert list(report["retrieval"]["at"]) == ["3"] and report["settings"]["ks"] == [3]
    assert report["settings"]["ks_asked"] == [50]  # what was asked, beside what was measured
    assert any("K=50 exceeds the longest served list (3 items" in w for w in report["warnings"])


def _partly_served(work: Path, outcome: Outcome) -> None:
    """Lists for one of the five queried users: the others are served an empty list, counted."""
    report = json.loads((work / "r.json").read_text())
    assert report["served"]["n_queried_without_list"] == 4
    assert any(re.search(r"4 of the 5 queried users have no list in recs\.csv", w) for w in report["warnings"])
    assert report["retrieval"]["at"]["3"]["served"]["coverage"] is not None


def _stranger_not_measured(work: Path, outcome: Outcome) -> None:
    """Beside a model only the queried users' lists are in the served scoring's figures: a list of a
    user the log lacks is said not to be, but grades the severity, as lists alone grade it (Served F1)."""
    report = json.loads((work / "r.json").read_text())
    assert "1 of the 3 users in recs.csv do not appear in the training log: their lists are in none of the served " \
           "scoring's per-K figures (the model's lists are lined up with the users it queries, the log's) but grade " \
           "the severity, as lists alone grade them" in report["warnings"]
    assert report["served"]["n_graded_apart"] == 1, report["served"]


def _newcomers_graded(work: Path, outcome: Outcome) -> None:
    """Users the log lacks served the head item: their lists grade the severity beside a model, as alone
    (10 head slots of 33, 30.3% vs 10 of 55 interactions, 18.2%: moderate); old: user 0's 0 of 3, none."""
    report = json.loads((work / "r.json").read_text())
    assert report["served"]["head_share_every_list"] == {"3": pytest.approx(10 / 33)}, report["served"]
    assert (report["served"]["n_graded_apart"], report["verdict"]["graded_by"]) == (10, "served"), report["verdict"]
    assert "graded over all 11 lists of the file, 10 of them in none of the served scoring's per-K figures" in \
        report["verdict"]["summary"]


def _short_lists_graded(work: Path, outcome: Outcome) -> None:
    """Two-item lists audited at -k 3 beside a model: graded at K=2, their length, as alone (5 head slots
    of 10 vs 18.2%: high); old: no K graded, severity the model's."""
    report = json.loads((work / "r.json").read_text())
    assert report["served"]["head_share_every_list"] == {"2": pytest.approx(0.5)}, report["served"]
    assert report["verdict"]["severity"] == "high" and "at K=2, their length, which no K asked fits" in \
        report["verdict"]["summary"]
    assert any("the severity grades them at K=2, their length, as lists alone do" in w for w in report["warnings"])


def _users_unmatched(work: Path, outcome: Outcome) -> None:
    """No served user is a log user: exposure measured, the per-user figures said not to be,
    and the most-popular list keeps training items (none are known)."""
    report = json.loads((work / "r.json").read_text())
    reason = report["not_measured"]["who_pays"]
    assert reason.startswith("none of the 2 users in recs.csv (column 'user_id') is a user of the training log (the "
                             "lists spell them as 'u0', the log as ")
    assert report["warnings"][0] == reason
    at = report["retrieval"]["at"]["2"]
    assert at["served"]["coverage"] == 0.3 and at["served"]["gap_delta_niche"] is None
    assert report["accuracy"] is None or report["accuracy"]["seen_excluded"] is False


def _serving_ignored(work: Path, outcome: Outcome) -> None:
    """--max-queries 1 samples nobody out: both users of the lists are measured, and every model-only setting given
    is named in one warning, in one list (QA batchlists F9b: the training settings and --no-probes too)."""
    report = json.loads((work / "r.json").read_text())
    assert ("--max-queries, --no-probes, --bootstrap, --optimizer, --lr, --loss, --alpha, --accuracy-tolerance "
            "ignored: they apply to a model (reading, serving or probing its tables, its query sample and scorings, "
            "its training), and served lists alone are measured as they are: every user of the file, as served, "
            "numbered by their own item ids") in report["warnings"], report["warnings"]
    assert report["served"]["n_users"] == 2 and report["retrieval"]["at"]["3"]["served"]["coverage"] == 0.5


def _strangers(d: Path) -> None:
    """A holdout of items neither in the log (items 0..9) nor in the lists."""
    write(d, "strangers.csv", "user_id,item_id\n0,500\n1,501\n")


def _counted(*extra: str) -> object:
    """Lists alone with counts made elsewhere (``--frequencies``): no user's training items."""
    def build(d: Path) -> Built:
        write(d, "recs.csv", GOOD)
        write(d, "counts.csv", "item_id,count\n" + "".join(f"{i},{i + 1}\n" for i in range(10)))
        return Built(["check", "--recommendations", "recs.csv", "--frequencies", "counts.csv", *FAST, *extra])

    return build


def _no_model(*args: str) -> object:
    def build(d: Path) -> Built:
        log(d)
        write(d, "recs.csv", GOOD)
        return Built(["check", *args])

    return build


def _whole_inter(d: Path) -> Built:
    """Lists alone against a RecBole .inter (typed header; Served F1): the corpus log's rows as
    the .inter, the lists of GOOD (user 0's item 3 and user 1's items 2-4 are in it)."""
    items = np.repeat(np.arange(10), np.arange(1, 11))
    write(d, "data.inter", "user_id:token\titem_id:token\n" + "".join(
        f"{u}\t{i}\n" for u, i in zip(np.arange(items.size) % 5, items)))
    write(d, "recs.csv", GOOD)
    return Built(["check", "--recommendations", "recs.csv", "--interactions", "data.inter", "-k", "3", "--json", "r.json"],
                 outputs=["r.json"], must_exist=["r.json"], check=_read_whole)


def _read_whole(work: Path, outcome: Outcome) -> None:
    """Said first, once; the lists' logged items never called re-served training items."""
    warnings = json.loads((work / "r.json").read_text())["warnings"]
    assert warnings[0].startswith("data.inter is a RecBole .inter read whole as the training log: ") and \
        sum("read whole" in w for w in warnings) == 2, warnings
    assert "2 of the 2 served lists hold some items their user has in the training log, a RecBole .inter read whole" \
        in "\n".join(warnings) and not any("lists re-serve" in w for w in warnings), warnings


def _every_list(work: Path, outcome: Outcome) -> None:
    """--max-queries 1 beside a model: both lists still graded (Served F2), the sample said."""
    report = json.loads((work / "r.json").read_text())
    assert set(report["served"]["head_share_every_list"]) == {"3"}, report["served"]
    assert any(w.startswith("the severity grades the served lists of recs.csv by the lists-only rule over all 2 lists")
               and "the model's queries were sampled: 1 of " in w for w in report["warnings"]), report["warnings"]


def _unqueried(work: Path, outcome: Outcome) -> None:
    """--no-retrieval beside a model: the lists still graded, every list of the file (Served N1, F1), and said."""
    report = json.loads((work / "r.json").read_text())
    assert set(report["served"]["head_share_every_list"]) == {"3"}, report["served"]
    assert any(w.startswith("the severity grades the served lists of recs.csv by the lists-only rule over all 2 lists")
               and "retrieval not measured: skipped with --no-retrieval" in w for w in report["warnings"]), \
        report["warnings"]


def _new_items_graded(work: Path, outcome: Outcome) -> None:
    """Items 100 and 101 have no row in the 10-row table (nor a log interaction): beside the model their slots
    are empty in the served scoring's figures but graded by raw id, as lists alone (head {9}: 5 of 15 top-3
    slots, 5 of 25 top-5 slots; moderate at K=3); old: over the filled slots only, 5 of 5 at K=3, high (QA
    "Served N3")."""
    report = json.loads((work / "r.json").read_text())
    assert report["served"]["head_share_every_list"] == {"3": pytest.approx(1 / 3), "5": pytest.approx(0.2)}
    assert report["verdict"]["severity"] == "moderate", report["verdict"]
    assert report["served"]["cold_slot_share"] == pytest.approx(0.4), report["served"]  # 10 of 25 slots; old: 0.0
    assert any("have no row in the item table: the served scoring's figures and the lists' grade (the severity) "
               "count them by their raw ids all the same, as lists alone do" in w for w in report["warnings"]), \
        report["warnings"]
    # ... and the per-K figures count them too (QA13 harms F2): 100 and 101 are long-tail items of popularity 0
    # in the 5 lists' second and third slots, as alone (old beside: their slots empty, ACLT 2.0, coverage 3/10).
    figures = report["retrieval"]["at"]["5"]["served"]
    assert (figures["aclt"], figures["coverage"]) == (pytest.approx(4.0), pytest.approx(5 / 12)), figures


def _zero_counts(d: Path) -> Built:
    """Lists alone with a counts file of 300 items, 290 of them count 0 (QA "Served N4"): the grade's head is
    the top 1% of the 10 items trained on or served, {9}; the per-K figures' catalogue holds all 300, {7, 8, 9}."""
    write(d, "recs.csv", GOOD)
    write(d, "counts.csv", "item_id,count\n" + "".join(f"{i},{i + 1 if i < 10 else 0}\n" for i in range(300)))
    return Built(["check", "--recommendations", "recs.csv", "--frequencies", "counts.csv", "-k", "3", *FAST,
                  "--json", "r.json"], outputs=["r.json"], must_exist=["r.json"], check=_reference_of_the_grade)


def _reference_of_the_grade(work: Path, outcome: Outcome) -> None:
    """The most-popular list [9, 8, 7] holds 1 of its 3 slots in the grade's head: 33.3%, quoted beside the
    grade (old: 100.0%, the per-K head_share_1pct_popular@3 over {7, 8, 9})."""
    report = json.loads((work / "r.json").read_text())
    assert report["served"]["head_share_popular"] == {"3": pytest.approx(1 / 3)}, report["served"]
    assert report["retrieval"]["at"]["3"]["popular"]["head_share_1pct"] == pytest.approx(1.0)
    assert "(the most-popular list: 33.3%)" in report["verdict"]["summary"], report["verdict"]["summary"]


def _shifted_holdout(d: Path) -> None:
    """A holdout numbering the log's users 0..4 as 1..5 (Loaders QA12 verify-2 A, lists alone)."""
    write(d, "held.csv", "user_id,item_id\n" + "".join(f"{u + 1},{u + 3}\n" for u in range(5)))


def _by_users(*extra: str, counts: bool = False) -> object:
    """Beside the corpus table with --no-retrieval --popularity users: a log where item 0 has the most
    interactions (user 0, 20 times) and item 9 the most users (all 5, once each); every two-item list serves
    item 9 first. Or (``counts``) the corpus counts file, which has no distinct-users column."""
    def build(d: Path) -> Built:
        pairs = [(0, 0)] * 20 + [(u, 9) for u in range(5)] + [(u, i) for i in range(1, 9) for u in (i % 5, (i + 1) % 5)]
        write(d, "train.csv", "user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in pairs))
        write(d, "counts.csv", "item_id,count\n" + "".join(f"{i},{i + 1}\n" for i in range(10)))
        write(d, "recs.csv", "user_id,item_id,rank\n" + "".join(f"{u},9,1\n{u},{u + 1},2\n" for u in range(5)))
        counted = ["--frequencies", "counts.csv"] if counts else ["--interactions", "train.csv"]
        return Built(["check", table(d), "--recommendations", "recs.csv", *counted, *FAST, "-k", "2", "--no-retrieval",
                      "--popularity", "users", *extra], outputs=["r.json"] if extra else [],
                     must_exist=["r.json"] if extra else [], check=_graded_by_users if extra else None)

    return build


def _graded_by_users(work: Path, outcome: Outcome) -> None:
    """Head {9} by distinct users: 5 of the 10 top-2 slots against 5 of the 22 user-item pairs (22.7%), high,
    graded by the lists; old: no grade at all (the log counted without users), the model's none, rc 0."""
    report = json.loads((work / "r.json").read_text())
    assert report["served"]["head_share_every_list"] == {"2": pytest.approx(0.5)}, report["served"]
    assert report["served"]["head_share_log"] == pytest.approx(5 / 22), report["served"]
    assert (report["verdict"]["severity"], report["verdict"]["graded_by"]) == ("high", "served"), report["verdict"]


def _log_item_without_a_row(*extra: str) -> object:
    """The corpus log (items 0..9) with item 10, 5 interactions, which the table's id file (0..9) gives no row;
    with served lists that list it, or without lists."""
    def build(d: Path) -> Built:
        log(d, "log.csv")
        (d / "log.csv").write_text((d / "log.csv").read_text() + "".join(f"{u},10\n" for u in range(5)))
        write(d, "ids.txt", "".join(f"{i}\n" for i in range(10)))
        write(d, "recs.csv", "user_id,item_id,rank\n0,10,1\n0,3,2\n1,10,1\n1,4,2\n")
        return Built(["check", table(d), "--item-ids", "ids.txt", "--interactions", "log.csv", *FAST, "-k", "2",
                      *extra, "--json", "r.json"], outputs=["r.json"], must_exist=["r.json"],
                     check=_log_item_said(bool(extra)))

    return build


def _log_item_said(lists: bool) -> Callable[[Path, Outcome], None]:
    """The statistics' warning says the lists' grade counts the item by raw id where lists are given (old: only
    'left out of the frequencies'), and stays as it was without lists."""
    def check(work: Path, outcome: Outcome) -> None:
        warning = ("5 interactions (8.3%) reference 1 item id with no row in the item table; they are left out of the "
                   "frequencies") + (" (the model's scorings'); the served lists recs.csv are graded (the severity) and "
                                     "measured (the served scoring's figures) over them all the same, by their raw "
                                     "ids, as lists alone are" if lists else "")
        assert warning in json.loads((work / "r.json").read_text())["warnings"]

    return check


def _shift_warned(work: Path, outcome: Outcome) -> None:
    """The holdout used as numbered, with both readings of its ids said."""
    warnings = json.loads((work / "r.json").read_text())["warnings"]
    assert any(w.startswith("1 of the 5 distinct user ids of the held-out log held.csv (--holdout) is not among the "
                            "user ids of the training log, while every id minus 1 is: the holdout was used as numbered. "
                            "If its user ids are shifted by +1 against them, each held-out user was evaluated on its "
                            "neighbour's list") and w.endswith("beside 1 user among them without held-out items, nothing "
                                                               "is wrong") for w in warnings), warnings


def _newcomer_holdout(d: Path) -> None:
    """A holdout of a served user (0), a log user without a list (2) and user 77, never in the log."""
    write(d, "held.csv", "user_id,item_id\n0,3\n2,7\n77,1\n77,2\n")


def _newcomer_counted(work: Path, outcome: Outcome) -> None:
    """User 77 is absent from the training log: counted so, as beside a model (QA accuracy N1), never as
    trained but not queried; user 2 is served nothing (a miss); no held-out interaction is dropped."""
    report = json.loads((work / "r.json").read_text())
    accuracy = report["accuracy"]
    assert (accuracy["n_users_evaluated"], accuracy["n_users_not_in_training"], accuracy["n_users_not_sampled"],
            accuracy["n_dropped"], accuracy["n_pairs_evaluated"]) == (2, 1, 0, 0, 2), accuracy
    assert any(w.startswith("1 of the 3 held-out users in held.csv has no served list in recs.csv and never appears "
                            "in the training log") for w in report["warnings"]), report["warnings"]


OWN_CASES = [
    # --no-retrieval beside a model queries nobody: the served lists still grade the severity (Served N1).
    Case("cli-recs-beside-model-no-retrieval", _recs("-k", "3", "--no-retrieval", "--json", "r.json", model=True,
                                                      outputs=("r.json",), check=_unqueried), EXIT_OK, None),
    # --max-queries beside a model samples the model's queries, not the served lists' grade (Served F2).
    Case("cli-recs-beside-model-sampled-queries", _recs("-k", "3", "--max-queries", "1", "--json", "r.json", model=True,
                                                         outputs=("r.json",), check=_every_list), EXIT_OK, None),
    # Lists of users the log lacks (cold-start fallbacks) grade the severity beside a model, as alone (Served F1).
    Case("cli-recs-beside-model-newcomers-trip-the-gate",
         _recs("-k", "3", "--json", "r.json", "--fail-on", "severity_level>=2", model=True,
               content="user_id,item_id,rank\n0,0,1\n0,1,2\n0,2,3\n" + "".join(
                   f"{u},9,1\n{u},8,2\n{u},7,3\n" for u in range(70, 80)),
               outputs=("r.json",), check=_newcomers_graded), EXIT_GATE, None),
    # Lists shorter than every -k grade the severity at their length beside a model, as alone (Served F2).
    Case("cli-recs-beside-model-lists-shorter-than-every-k",
         _recs("-k", "3", "--json", "r.json", "--fail-on", "severity_level>=3", model=True,
               content="user_id,item_id,rank\n" + "".join(f"{u},9,1\n{u},0,2\n" for u in range(5)),
               outputs=("r.json",), check=_short_lists_graded), EXIT_GATE, None),
    # Listed items without a row in the model's table grade by raw id beside it, as alone (Served N3).
    Case("cli-recs-beside-model-new-items-graded-by-raw-id",
         _recs("-k", "3", "-k", "5", "--json", "r.json", "--fail-on", "severity_level>=3", model=True,
               content="user_id,item_id,rank\n" + "".join(
                   f"{u},{i},{r + 1}\n" for u in range(5) for r, i in enumerate((9, 100, 101, 0, 1))),
               outputs=("r.json",), check=_new_items_graded), EXIT_OK, None),
    # A counts file's zero-count items: the reference beside the grade counts the grade's head (Served N4).
    Case("cli-recs-alone-counts-with-zero-count-items", _zero_counts, EXIT_OK, None),
    # Beside a model, slots naming items neither the log nor the table knows: refused past half, as alone (Served N3).
    Case("cli-recs-beside-model-items-neither-knows-mostly",
         _recs("-k", "3", model=True, content="user_id,item_id,rank\n" + "".join(
             f"{u},{i},{r + 1}\n" for u in range(5) for r, i in enumerate((9, 100, 101, 102, 0)))), EXIT_ERROR,
         r"15 of the 25 served slots in recs\.csv \(column 'item_id'\) \(60\.0%\) name items "
         r"neither the training log nor the model's item table knows, more than the 50% an audit measures"),
    # --popularity users with --no-retrieval beside a model: the log counted with distinct users, the lists graded
    # by them as on every route (QA12 served, round 4: old, ungraded, the model's none, rc 0).
    Case("cli-recs-beside-model-no-retrieval-popularity-users-trips-the-gate",
         _by_users("--fail-on", "severity_level>=2", "--json", "r.json"), EXIT_GATE, None,
         stderr=r"severity_level>=2: 3 \(TRIPPED\)"),
    # ... and counts without distinct users are refused there as on every route (old: ungraded, rc 0).
    Case("cli-recs-beside-model-no-retrieval-popularity-users-counts-without-users", _by_users(counts=True),
         EXIT_ERROR, r"^Error: --popularity users needs distinct users per item, but the counts file counts\.csv has no "
                     r"distinct-users column: name it with --user-count-col"),
    # A log item without a model row: its warning says the lists' grade counts it by raw id (QA12 served, round 4).
    Case("cli-recs-beside-model-log-item-without-a-row", _log_item_without_a_row("--recommendations", "recs.csv"),
         EXIT_OK, None),
    Case("cli-model-log-item-without-a-row-no-lists", _log_item_without_a_row(), EXIT_OK, None),
    # ... and its served figures are the lists-alone ones: item 10 in the users' profiles and the popularity, so a
    # gate that trips alone trips beside the model (QA13 harms F1: old beside ΔGAP diverse -0.28, rc 0).
    Case("cli-recs-beside-model-log-item-without-a-row-served-gate-trips", _log_item_without_a_row(
        "--recommendations", "recs.csv", "--fail-on", "gap_delta_diverse_served@2>-0.25"), EXIT_GATE, None,
        stderr=r"gap_delta_diverse_served@2>-0\.25: -0\.2227 \(TRIPPED\)"),
    # Listed items without a row are long-tail items of popularity 0 in the served figures beside a model, as alone
    # (QA13 harms F2: old beside, their slots empty, ACLT 2 and the gate passed).
    Case("cli-recs-beside-model-new-items-served-gate-trips",
         _recs("-k", "5", "--fail-on", "aclt_served@5>3", model=True, content="user_id,item_id,rank\n" + "".join(
             f"{u},{i},{r + 1}\n" for u in range(5) for r, i in enumerate((9, 100, 101, 0, 1)))), EXIT_GATE, None,
         stderr=r"aclt_served@5>3: 4 \(TRIPPED\)"),
    Case("cli-recs-alone-new-items-served-gate-trips",
         _recs("-k", "5", "--fail-on", "aclt_served@5>3", content="user_id,item_id,rank\n" + "".join(
             f"{u},{i},{r + 1}\n" for u in range(5) for r, i in enumerate((9, 100, 101, 0, 1)))), EXIT_GATE, None,
         stderr=r"aclt_served@5>3: 4 \(TRIPPED\)"),
    # A RecBole .inter read whole by lists alone (its held-out part counted as training): said (Served F1).
    Case("cli-recs-alone-whole-recbole-inter", _whole_inter, EXIT_OK, None),
    Case("cli-recs-no-model-no-lists", _no_model("--interactions", "log.parquet"), EXIT_USAGE,
         r"Missing argument 'MODEL' \(or --recommendations FILE to audit served lists alone\)"),
    Case("cli-recs-rank-col-without-lists", _no_model("--interactions", "log.parquet", "--rank-col", "rank"),
         EXIT_USAGE, r"Missing argument 'MODEL'"),
    Case("cli-recs-score-col-without-lists", lambda d: Built(["check", table(d), "--score-col", "score"]),
         EXIT_USAGE, r"--score-col names a column of --recommendations, which was not given"),
    Case("cli-recs-alone-without-log", _no_model("--recommendations", "recs.csv"), EXIT_ERROR,
         r"served lists alone are measured against the training log: pass --interactions"),
    Case("cli-recs-alone-holdout-of-strangers", _recs("--holdout", "strangers.csv", make=_strangers), EXIT_ERROR,
         r"no item of the held-out log strangers\.csv \(--holdout\) is in the training log or the served lists of "
         r"recs\.csv: the holdout must come from the same catalogue"),
    # A held-out user who never trained and has no list: absent from the training log, as beside a model (Accuracy N1).
    # QA13 accuracy F1: warned with both readings (a shift, or churned ids beside new ones), never refused (was exit 1).
    Case("cli-recs-alone-holdout-users-shifted", _recs("--holdout", "held.csv", "--json", "r.json", make=_shifted_holdout,
                                                       outputs=("r.json",), check=_shift_warned), EXIT_OK, None),
    Case("cli-recs-alone-holdout-newcomer", _recs("-k", "3", "--holdout", "held.csv", "--json", "r.json",
                                                  make=_newcomer_holdout, outputs=("r.json",), check=_newcomer_counted),
         EXIT_OK, None),
    Case("cli-recs-output-over-lists", _recs("--json", "recs.csv"), EXIT_ERROR, r"recs\.csv.*--recommendations"),
    Case("cli-recs-beside-model-no-item-has-a-row", _recs(model=True, content="user_id,item_id,rank\n0,500,1\n"),
         EXIT_ERROR, r"none of the 1 items in recs\.csv \(column 'item_id'\) has a row in the item table \(10 rows\)"),
    Case("cli-recs-gate-trips", _recs("-k", "3", "--fail-on", "head_share_1pct_served@3>0.01"), EXIT_GATE, None,
         stderr=r"head_share_1pct_served@3>0\.01: 0\.1667 \(TRIPPED\)"),
    Case("cli-recs-gate-on-a-model-measure", _recs("--fail-on", "spearman>0.5"), EXIT_ERROR, r"spearman"),
    # A model's own figures on served lists alone: "no model", never a plugin not loaded or a
    # --trust-pickle never given (QA11 verification N1).
    Case("cli-recs-gate-on-the-item-bias", _recs("--fail-on", "item_bias_spearman>0.5"), EXIT_ERROR,
         r"^Error: cannot evaluate --fail-on item_bias_spearman>0\.5: no model: served lists alone .*audit measures "
         r"\(item_bias_spearman\) take a model; pass the model with --recommendations", absent=r"plugin|--plugin"),
    Case("cli-recs-gate-on-unsafe-globals", _recs("--fail-on", "unsafe_globals>0"), EXIT_ERROR,
         r"^Error: cannot evaluate --fail-on unsafe_globals>0: no model: served lists alone were audited, so no model "
         r"file was read .*; pass the model with --recommendations", absent=r"trust-pickle"),
    Case("cli-recs-gate-on-dot-without-a-model", _recs("-k", "3", "--fail-on", "head_share_1pct_ratio@3>1"), EXIT_ERROR,
         r"^Error: cannot evaluate --fail-on head_share_1pct_ratio@3>1: dot not measured: no model: served lists alone"),
    Case("cli-recs-gate-past-the-lists", _recs("-k", "3", "-k", "5", "--fail-on", "gini_served@5>0.9"), EXIT_ERROR,
         r"gini_served@5>0\.9: cut-off K=5 exceeds the longest served list \(3 items in recs\.csv\); measured at K=3 "
         r"\(gate gini_served@3\)$"),
    # A K not asked for: the advice says the lists must hold K items too (QA11 report F5).
    Case("cli-recs-gate-at-a-k-not-asked", _recs("-k", "3", "--fail-on", "gini_served@5>0.9"), EXIT_ERROR,
         r"gini_served@5>0\.9: K=5 was not asked for \(add -k 5; .*pass them all: -k 3 -k 5\); the served lists are "
         r"measured at K=5 only if the longest of them holds 5 items or more"),
    Case("cli-recs-gate-past-the-lists-as-advised", _recs("-k", "5", "-k", "3", "--fail-on", "gini_served@3>0.9"),
         EXIT_OK, None),
    Case("cli-recs-beside-model-some-users-without-list",
         _recs("-k", "3", "--json", "r.json", model=True, content="user_id,item_id,rank\n0,3,1\n0,5,2\n0,9,3\n",
               outputs=("r.json",), check=_partly_served), EXIT_OK, None),
    Case("cli-recs-beside-model-users-spelled-otherwise",
         _recs(model=True, content="user_id,item_id,rank\nu0,3,1\nu0,5,2\nu1,2,1\n"), EXIT_ERROR,
         r"none of the 2 users in recs\.csv \(column 'user_id'\) is a user of the training log, so no served list "
         r"lines up with a queried user: the ids evidently do not match \(the lists spell them as 'u0', the log as "
         r"0\); give lists whose user ids are the training log's"),
    Case("cli-recs-beside-model-a-stranger-is-not-measured",
         _recs("-k", "3", "--json", "r.json", model=True, content=GOOD + "7,1,1\n", outputs=("r.json",),
               check=_stranger_not_measured), EXIT_OK, None),
    # A Who-pays gate with counts alone quotes the audit's own reason (--frequencies), never "a query file" (QA F7).
    Case("cli-recs-counts-gate-on-who-pays", _counted("-k", "3", "--fail-on", "gap_delta_niche_served@3<0"), EXIT_ERROR,
         r"^Error: cannot evaluate --fail-on gap_delta_niche_served@3<0: gap_delta_niche: the user- and item-side "
         r"measures .* need each queried user's training items; --frequencies gives counts per item only"),
    Case("cli-recs-counts-gate-on-pop-rsp", _counted("-k", "3", "--fail-on", "pop_rsp_served@3>0.5"), EXIT_ERROR,
         r"^Error: cannot evaluate --fail-on pop_rsp_served@3>0\.5: pop_rsp: .*--frequencies gives counts per item "
         r"only(?!.*query file)"),
    # Lists alone whose users are none of the log's (QA batchlists F1): measured, the per-group figures said not.
    Case("cli-recs-alone-users-spelled-otherwise",
         _recs("-k", "2", "--json", "r.json", content="user_id,item_id,rank\nu0,3,1\nu0,5,2\nu1,2,1\n",
               outputs=("r.json",), check=_users_unmatched), EXIT_OK, None),
    Case("cli-recs-alone-users-spelled-otherwise-gate",
         _recs("-k", "1", "--fail-on", "gap_delta_niche_served@1<0", content="user_id,item_id,rank\nu0,3,1\nu1,2,1\n"),
         EXIT_ERROR, r"^Error: cannot evaluate --fail-on gap_delta_niche_served@1<0: .*none of the 2 users in recs\.csv "
                     r"\(column 'user_id'\) is a user of the training log \(the lists spell them as 'u0', the log as "),
    # The amplification reference beside a model too (QA batchlists F10); without lists: not measured, said.
    Case("cli-recs-beside-model-head-share-log-gate", _recs("-k", "3", "--fail-on", "head_share_log>0.01", model=True),
         EXIT_GATE, None, stderr=r"head_share_log>0\.01: 0\.1818 \(TRIPPED\)"),
    Case("cli-model-head-share-log-gate-without-lists",
         lambda d: Built(["check", table(d), "--interactions", log(d), *FAST, "--fail-on", "head_share_log>0"]),
         EXIT_ERROR, r"^Error: cannot evaluate --fail-on head_share_log>0: measured for served lists "
                     r"\(--recommendations\), alone or beside a model$"),
    # Serving settings given to lists alone are named as ignored, as the table settings are (QA batchlists F9).
    Case("cli-recs-alone-serving-settings-ignored",
         _recs("-k", "3", "--max-queries", "1", "--alpha", "0.3", "--accuracy-tolerance", "0.9", "--optimizer", "adam",
               "--lr", "0.01", "--loss", "bpr", "--json", "r.json", outputs=("r.json",), check=_serving_ignored),
         EXIT_OK, None),
    Case("cli-recs-k-beyond-lists", _recs("-k", "50", "--json", "r.json", outputs=("r.json",),
                                                   check=_clamped), EXIT_OK, None),
]
# The gate case: two lists of three over items 0..9 of a log where item i is seen i + 1
# times; the top 1% (ties in) is item 9 alone, served once in six slots at K=3.


@pytest.mark.parametrize("case", params([*map(_cli_case, CASES), *OWN_CASES]))
def test_hostile_served_lists_cli(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)

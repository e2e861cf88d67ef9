"""Hostile held-out logs given to ``popaudit check --holdout`` (auditor/loading/holdout.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from .corpus import (
    DIM,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    N_ITEMS,
    Built,
    Case,
    Outcome,
    check_args,
    params,
    run_case,
    standard,
    strict_json,
    write,
)

N_USERS = 5


def _two_tower(d: Path) -> str:
    """A state dict with an item table and a 5-row user table."""
    rng = torch.Generator().manual_seed(0)
    torch.save(
        {"item_embedding.weight": torch.randn(N_ITEMS, DIM, generator=rng),
         "user_embedding.weight": torch.randn(N_USERS, DIM, generator=rng)},
        d / "tt.pt",
    )
    return "tt.pt"


def _holdout(content: str, *extra: str, model: str = "items.npy", json: bool = False,
             check: Any = None, make: Any = None) -> Any:
    """The standard table and log, a two-tower model when ``model`` is tt.pt, and
    ``content`` as held.csv."""

    def build(d: Path) -> Built:
        standard(d)
        if model == "tt.pt":
            _two_tower(d)
        if make is not None:
            make(d)
        write(d, "held.csv", content)
        report = ("--json", "r.json") if json else ()
        outputs = ["r.json"] if json else []
        return Built(check_args(model, "--holdout", "held.csv", "-k", "5", *report, *extra),
                     outputs=outputs, must_exist=outputs, check=check)

    return build


def _rows(pairs: list[tuple[Any, Any]]) -> str:
    return "user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in pairs)


def _accuracy(**expected: int) -> Any:
    def check(d: Path, outcome: Outcome) -> None:
        accuracy = strict_json(d / "r.json")["accuracy"]
        for name, value in expected.items():
            assert accuracy[name] == value, (name, accuracy[name])

    return check


def _no_accuracy(pattern: str) -> Any:
    """Accuracy not measured (null, with its reason), and ``pattern`` among the warnings."""
    def check(d: Path, outcome: Outcome) -> None:
        report = strict_json(d / "r.json")
        assert report["accuracy"] is None and "accuracy" in report["not_measured"], report["not_measured"]
        assert any(pattern in w for w in report["warnings"]), report["warnings"]

    return check


def _warned(pattern: str) -> Any:
    def check(d: Path, outcome: Outcome) -> None:
        warnings = strict_json(d / "r.json")["warnings"]
        assert any(pattern in w for w in warnings), warnings

    return check


def _rowless_served_nothing(d: Path, outcome: Outcome) -> None:
    """Log user 4 has no user-table row: not queried, yet one of the 5 evaluated (a miss)."""
    report = strict_json(d / "r.json")
    population, accuracy = report["retrieval"]["population"], report["accuracy"]
    assert (population["n_queries"], population["n_eligible"], population["n_unmatched_log_users"]) == (4, 5, 1)
    assert (accuracy["n_users_evaluated"], accuracy["n_dropped_users"]) == (5, 0), accuracy
    assert "of 5 users" in report["retrieval"]["definitions"]["user_group_sizes"]
    said = [w for w in report["warnings"] if "no row in the user table" in w]
    assert len(said) == 1 and "1 user of the training log log.parquet has no row" in said[0], said
    assert "serve them nothing" in said[0] and "as misses (NDCG 0)" in said[0]


def _same_as_training(d: Path) -> Built:
    standard(d)
    return Built(check_args("items.npy", "--holdout", "log.parquet", "-k", "5", "--json", "r.json"),
                 outputs=["r.json"], must_exist=["r.json"],
                 check=_warned("is identical to the training log log.parquet"))


def _retrain_with_holdout(d: Path) -> None:
    """m.pt: a retrain checkpoint of log.csv that records a 20% holdout."""
    from click.testing import CliRunner

    from auditor.cli import cli

    write(d, "log.csv", _rows([(u, (u * 7 + j) % 12) for u in range(12) for j in range(5)]))
    made = CliRunner().invoke(cli, ["retrain", "--data", str(d / "log.csv"), "--holdout-fraction", "0.2", "--epochs",
                                    "1", "--threads", "1", "--dim", "4", "-q", "-o", str(d / "m.pt")])
    assert made.exit_code == 0, made.output


def _retrained_beside_its_whole_log(d: Path) -> Built:
    """A retrain checkpoint that records a 20% holdout, audited beside the whole log it was
    split from: the recorded holdout lies in that log (refused: it read 0 accuracy)."""
    _retrain_with_holdout(d)
    return Built(["check", "m.pt", "--interactions", "log.csv", "--bootstrap", "0", "--no-probes", "-q"])


def _mitigated_beside_its_whole_log(d: Path) -> Built:
    """The same checkpoint rescaled by a given alpha beside its whole log: the sidecar's
    slopes would count the held-out pairs as training, and the printed `Next: check` would
    be refused (as --alpha auto and check refuse it)."""
    _retrain_with_holdout(d)
    return Built(["mitigate", "m.pt", "--alpha", "0.5", "--interactions", "log.csv", "-q", "-o", "out.pt"])


def _auto_on_a_mitigate_output(d: Path) -> Built:
    """`mitigate --alpha auto` of a mitigate output: its audit recommends no α (accuracy QA9
    F1), so auto refuses rather than stacking a second alpha on the first."""
    from click.testing import CliRunner

    from auditor.cli import cli

    standard(d)
    made = CliRunner().invoke(cli, ["mitigate", str(d / "items.npy"), "--alpha", "0.5", "-o", str(d / "out.npy"), "-q"])
    assert made.exit_code == 0, made.output
    write(d, "held.csv", _rows([(u, (u + 3) % 10) for u in range(5)]))
    return Built(["mitigate", "out.npy", "--alpha", "auto", "--interactions", "log.parquet", "--holdout", "held.csv",
                  "-o", "again.npy", "-q"])


CASES = [
    Case("mitigate-auto-of-a-mitigate-output", _auto_on_a_mitigate_output, EXIT_ERROR,
         r"--alpha auto: out\.npy is already a popaudit mitigate output carrying alpha 0\.5, whose audit recommends "
         r"no α.*run --alpha auto on the original table \(.*items\.npy\) once instead"),
    Case("mitigate-beside-the-whole-log-split-from", _mitigated_beside_its_whole_log, EXIT_ERROR,
         r"the training log log\.csv holds every held-out pair of .*m\.pt \(recorded holdout\) \(\d+, and every training "
         r"count\): it is the whole log the checkpoint was split from.*Leave out --interactions"),
    Case("holdout-empty-file", _holdout(""), EXIT_ERROR, r"held\.csv.*empty"),
    Case("holdout-header-only", _holdout("user_id,item_id\n"), EXIT_ERROR,
         r"the held-out log held\.csv \(--holdout\) holds no interactions"),
    Case("holdout-items-without-rows", _holdout(_rows([(0, 50), (1, 51)])), EXIT_ERROR,
         r"no item id of the held-out log held\.csv \(--holdout\) \(column 'item_id'\) has a row in the "
         r"10-row item table.*--item-ids FILE"),
    Case("holdout-some-items-without-rows", _holdout(_rows([(0, 1), (1, 51), (2, 3)]), json=True,
                                                      check=_accuracy(n_dropped=1, n_users_evaluated=2)),
         EXIT_OK, None),
    Case("holdout-no-user-column", _holdout("item_id\n1\n2\n"), EXIT_ERROR,
         r"held-out accuracy needs the user of each interaction, but no user id column was found in held\.csv"
         r".*--user-col NAME"),
    # Held-out users past the user table never trained (every training user has a row, the
    # training log's check): left out and counted, never evidence that ids are not rows.
    Case("holdout-users-beyond-user-table",
         _holdout(_rows([(100 + u, u) for u in range(8)]), model="tt.pt", json=True, check=_no_accuracy(
             "8 held-out users in held.csv (8 interactions) have no row in the user table and never appear in the "
             "training log")),
         EXIT_OK, None),
    Case("holdout-new-user-past-user-table",
         _holdout(_rows([(0, 1), (1, 2), (5, 3)]), model="tt.pt", json=True,
                  check=_accuracy(n_dropped=1, n_dropped_users=1, n_users_evaluated=2)),
         EXIT_OK, None),
    # A training user the user table has no row for (row 4 named 99 in --user-ids) is served
    # nothing, as a zero vector is: queried by no scoring, yet evaluated as a miss (was dropped,
    # which redrew every user group and raised the accuracy: QA "harms F1").
    Case("holdout-trained-user-without-user-table-row",
         _holdout(_rows([(u, (u + 5) % 10) for u in range(5)]), "--user-ids", "users.txt", model="tt.pt", json=True,
                  make=lambda d: write(d, "users.txt", "0\n1\n2\n3\n99\n"),
                  check=_rowless_served_nothing),
         EXIT_OK, None),
    # The query sample (--max-queries 1, seed 0) draws only that user: nothing can be retrieved.
    Case("max-queries-samples-only-users-without-rows",
         _holdout(_rows([(0, 1)]), "--user-ids", "users.txt", "--max-queries", "1", "--seed", "0", model="tt.pt",
                  make=lambda d: write(d, "users.txt", "0\n1\n2\n3\n99\n")),
         EXIT_ERROR, r"none of the 1 users sampled from log\.parquet with seed 0 has a row in the "
                     r"user table.*raise --max-queries or pass another --seed"),
    Case("holdout-text-users-without-user-ids", _holdout(_rows([("alice", 1), ("bob", 2)]), model="tt.pt"),
         EXIT_ERROR, r"user ids of held\.csv \(column 'user_id'\) are not integers.*--user-ids FILE"),
    Case("holdout-users-not-among-user-ids",
         _holdout(_rows([("x", 1), ("y", 2)]), "--user-ids", "users.txt", model="tt.pt",
                  make=lambda d: write(d, "users.txt", "0\n1\n2\n3\n4\n")),
         EXIT_ERROR, r"none of the 2 user ids of held\.csv \(column 'user_id'\) is among the raw ids of the user "
         r"table's rows \(--user-ids\)"),
    Case("training-users-not-among-user-ids",
         _holdout(_rows([("x", 1), ("y", 2)]), "--user-ids", "users.txt", model="tt.pt",
                  make=lambda d: write(d, "users.txt", "a\nb\nc\nd\ne\n")),
         EXIT_ERROR, r"none of the 5 user ids of the training log log\.parquet \(column 'user_id'\) is among the raw "
         r"ids of the user table's rows \(--user-ids users\.txt\): the log's users are not the model's users, or are "
         r"spelled otherwise \(the log: \d; --user-ids users\.txt: 'a'\); list in --user-ids users\.txt the raw user "
         r"id of each row as the log spells it", absent=r"pass --user-ids"),
    # Logs F2 (QA 12): zero-padded user ids beside integers are named as the cause, on both ways in.
    Case("training-users-against-zero-padded-user-ids",
         _holdout(_rows([(0, 1), (1, 2)]), "--user-ids", "users.txt", model="tt.pt",
                  make=lambda d: write(d, "users.txt", "000\n001\n002\n003\n004\n")),
         EXIT_ERROR, r"\(--user-ids users\.txt\): the ids of --user-ids users\.txt are zero-padded \('000'\), the "
         r"log's are not \(0\); a zero-padded id is text, so it matches no integer id: write both the same way",
         absent=r"pass --user-ids"),
    Case("zero-padded-holdout-users-against-user-ids",
         _holdout(_rows([("001", 1), ("002", 2)]), "--user-ids", "users.txt", model="tt.pt",
                  make=lambda d: write(d, "users.txt", "0\n1\n2\n3\n4\n")),
         EXIT_ERROR, r"none of the 2 user ids of held\.csv \(column 'user_id'\) is among the raw ids of the user "
         r"table's rows \(--user-ids\): the log's ids are zero-padded \('001'\), those of --user-ids are not \(1\)"),
    Case("holdout-one-user-without-row",
         _holdout(_rows([(0, 1), (99, 2), (2, 3)]), "--user-ids", "users.txt", model="tt.pt", json=True,
                  make=lambda d: write(d, "users.txt", "0\n1\n2\n3\n4\n"),
                  check=_accuracy(n_dropped=1, n_dropped_users=1, n_users_evaluated=2)),
         EXIT_OK, None),
    # Loaders QA12 verify-2 A: held-out ids that fit the training log's users (0..4) or the item
    # table's rows (0..9) only moved by one were used silently; QA13 accuracy F1: ids alone cannot
    # tell a shift from churned ids beside new ones (a time split), so warned with both readings and
    # used as numbered (was exit 1), --assume-row-ids alike.
    Case("holdout-user-ids-shifted-against-the-training-log",
         _holdout(_rows([(u + 1, (u + 5) % 10) for u in range(5)]), model="tt.pt", json=True,
                  check=_warned("1 of the 5 distinct user ids of the held-out log held.csv (--holdout) is not among "
                                "the user ids of log.parquet, while every id minus 1 is: the holdout was used as "
                                "numbered. If its user ids are shifted by +1 against them, each held-out user was "
                                "evaluated on its neighbour's list: write them as the training log numbers them (each "
                                "id -1); if it is a new user (left out and counted) beside 1 user among them without "
                                "held-out items, nothing is wrong")),
         EXIT_OK, None),
    Case("holdout-user-ids-shifted-used-as-numbered",
         _holdout(_rows([(u + 1, (u + 5) % 10) for u in range(5)]), "--assume-row-ids", model="tt.pt", json=True,
                  check=_warned("the holdout was used as numbered. If its user ids are shifted by +1 against them, "
                                "each held-out user was evaluated on its neighbour's list")),
         EXIT_OK, None),
    Case("holdout-item-ids-shifted-against-the-item-table",
         _holdout(_rows([(i % 5, i + 1) for i in range(10)]), model="tt.pt", json=True,
                  check=_warned("1 of the 10 distinct item ids of the held-out log held.csv (--holdout) is not among "
                                "the raw ids of the item table's 10 rows, while every id minus 1 is: the holdout was "
                                "used as numbered. If its item ids are shifted by +1 against them, each held-out item "
                                "was looked for as its neighbour")),
         EXIT_OK, None),
    Case("holdout-is-the-training-log", _same_as_training, EXIT_OK, None),
    Case("recorded-holdout-inside-the-log-given", _retrained_beside_its_whole_log, EXIT_ERROR,
         r"the training log log\.csv holds every held-out pair of m\.pt \(recorded holdout\) .* it is the whole log "
         r"the checkpoint was split from, not its training part.*Leave out --interactions"),
    # Norm-aware exponents outside [0, 1] and a tolerance outside (0, 1] are usage errors.
    Case("alpha-above-one", _holdout(_rows([(0, 1)]), "--alpha", "1.5"), EXIT_USAGE, r"--alpha.*1\.5.*<= 1"),
    Case("alpha-negative", _holdout(_rows([(0, 1)]), "--alpha", "-0.1"), EXIT_USAGE, r"--alpha.*-0\.1.*>= 0"),
    Case("alpha-nan", _holdout(_rows([(0, 1)]), "--alpha", "nan"), EXIT_USAGE, r"--alpha.*not a finite number"),
    Case("tolerance-zero", _holdout(_rows([(0, 1)]), "--accuracy-tolerance", "0"), EXIT_USAGE,
         r"--accuracy-tolerance.*must be > 0"),
]

PRODUCT_FAILURES: list[Case] = []


@pytest.mark.parametrize("case", params(CASES, PRODUCT_FAILURES))
def test_hostile_holdout(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)

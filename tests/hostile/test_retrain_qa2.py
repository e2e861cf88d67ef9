"""Hostile inputs of ``popaudit retrain`` and ``experiment`` from the retrain QA's second
round: a time column that cannot be used when only the transformer's histories read it
(N1), options of the training monitor given without the option they qualify (N2), a hidden
width the transformer's heads cannot split (N3), whitespace-only ids (N4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .corpus import EXIT_ERROR, EXIT_OK, EXIT_USAGE, Built, Case, params, run_case
from .test_retrain_qa import _log, _retrain  # the same small logs and runs

FREE_TEXT = "user_id,item_id,timestamp\n" + "".join(f"{u % 7},{u % 5},{'soon' if u % 2 else 'later'}\n" for u in range(40))
"""A time column of free text: no row has a usable time (data row 1 is the first)."""
ONE_BLANK = "user_id,item_id,timestamp\n" + "".join(f"{u % 7},{u % 5},{'' if u == 4 else 100 + u}\n" for u in range(40))
"""One blank time, at data row 5."""


def _experiment(name: str, rows: str, *args: str) -> Any:
    def build(d: Path) -> Built:
        (d / name).write_text(rows)
        return Built(["experiment", *args, "--data", name, "--epochs", "1", "--threads", "1", "--seeds", "1",
                      "-o", "out"], outputs=["out", "out/*"])

    return build


FILE_ORDER = r"each user's recent items for the transformer user tower are its last rows in file order"
CASES = [
    Case("retrain-transformer-free-text-times", _log("t.csv", FREE_TEXT, "retrain", "--user-encoder", "transformer", "-q"),
         EXIT_OK, None, stderr=r"^Warning: the time column 'timestamp' of t.csv has no usable time at data row 1 "
         r"\(neither a number nor an ISO 8601 date and time\): " + FILE_ORDER + r"\n$"),
    Case("retrain-transformer-one-blank-time", _log("t.csv", ONE_BLANK, "retrain", "--user-encoder", "transformer", "-q"),
         EXIT_OK, None, stderr=r"^Warning: the time column 'timestamp' of t.csv has no usable time at data row 5 "
         r"\(it is blank\): " + FILE_ORDER + r"\n$", absent=r"--split"),
    Case("retrain-transformer-random-split-free-text-times",
         _log("t.csv", FREE_TEXT, "retrain", "--user-encoder", "transformer", "--holdout-fraction", "0.2", "--split",
              "random"), EXIT_OK, None, stderr=r"data row 1 .*" + FILE_ORDER, absent=r"--split random"),
    Case("retrain-time-split-free-text-times",
         _log("t.csv", FREE_TEXT, "retrain", "--user-encoder", "transformer", "--holdout-fraction", "0.2"), EXIT_ERROR,
         r"the time column 'timestamp' of t.csv has no usable time at data row 1 .*; fix the column or pass --split "
         r"random"),
    Case("retrain-transformer-named-time-col-blank",
         _log("t.csv", ONE_BLANK, "retrain", "--user-encoder", "transformer", "--time-col", "timestamp"), EXIT_ERROR,
         r"the time column 'timestamp' of t.csv has no usable time at data row 5 \(it is blank\); fix the column, or "
         r"leave out --time-col$"),
    Case("experiment-conditions-free-text-times",
         _experiment("t.csv", FREE_TEXT, "conditions", "--settings", "reference,asymmetric", "--bootstrap", "0"), EXIT_OK, None,
         stderr=r"Warning: the time column 'timestamp' of t.csv has no usable time at data row 1 .*" + FILE_ORDER,
         absent=r"--split"),
    Case("retrain-transformer-odd-hidden-dim", _retrain("--user-encoder", "transformer", "--hidden-dim", "7"),
         EXIT_USAGE, r"--hidden-dim 7 cannot be split among the transformer user tower's 2 attention heads: give a "
         r"multiple of 2", absent=r"n_heads"),
    Case("retrain-whitespace-only-ids", _log("ws.csv", "user_id,item_id\n1,2\n3, \n ,4\n5,6\n1,6\n", "retrain", "-q"),
         EXIT_OK, None, stderr=r"^Warning: ws.csv: 2 of 5 rows \(40.0%\) have a blank id and are left out of training "
         r"and the catalogue: 1 with no item id \(column 'item_id', first at data row 2\); 1 with no user id \(column "
         r"'user_id', first at data row 3\)\n$"),
    Case("experiment-mitigations-empty-time-split",
         _experiment("s.csv", "user_id,item_id,timestamp\n" + "".join(f"{u},{u % 3},{u}\n" for u in range(8)),
                     "mitigations"), EXIT_ERROR,
         r"experiment mitigations measures held-out accuracy, but on s.csv \(time split\) .*8 users with a single "
         r"interaction", absent=r"seed 0"),
    Case("retrain-on-alert-without-an-alert", _retrain("--on-alert", "fail"), EXIT_USAGE,
         r"--on-alert says what a training alert does when it fires, and no --alert is given"),
]

PRODUCT_FAILURES: list[Case] = []


@pytest.mark.parametrize("case", params(CASES, PRODUCT_FAILURES))
def test_hostile_retrain_qa2(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)

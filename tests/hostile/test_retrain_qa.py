"""Hostile options of ``popaudit experiment`` and ``retrain`` found by the retrain QA:
seeds past the seed range, the experiment list options (``--lrs``, ``--settings``,
``--mitigations``), a temperature or logQ correction for a loss without a softmax: each a usage error (exit 2)
before anything trains."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .corpus import EXIT_ERROR, EXIT_OK, EXIT_USAGE, Built, Case, params, run_case

TOP = str(2**64 - 1)
"""The largest seed torch and numpy take (auditor/ranges.py)."""


def _experiment(*extra: str) -> Any:
    def build(d: Path) -> Built:
        return Built(["experiment", *extra, "--n-users", "20", "--n-items", "10", "--n-interactions", "100",
                      "--epochs", "1", "-o", "out"])

    return build


def _retrain(*extra: str) -> Any:
    def build(d: Path) -> Built:
        return Built(["retrain", *extra, "--n-users", "20", "--n-items", "10", "--n-interactions", "100",
                      "--epochs", "1", "-o", "model.pt"])

    return build


def _log(name: str, rows: str, *args: str) -> Any:
    """A small CSV log ``name`` with ``rows`` (after the header) and the command on it."""
    def build(d: Path) -> Built:
        (d / name).write_text(rows)
        return Built([*args, "--data", name, "--epochs", "1", "--threads", "1", "-o", "out.pt"],
                     outputs=["out.pt", "out.pt.*", "out.pt/*"])

    return build


SINGLE = "user_id,item_id\n" + "".join(f"{u},{u % 3}\n" for u in range(8))
"""8 users of one interaction each: no user holds anything out."""
REPEATS = "user_id,item_id,timestamp\n" + "".join(f"{u},{u % 3},{t}\n" for u in range(8) for t in (1, 2))
"""8 users with the same item twice: each held-out interaction repeats the training pair."""

CASES = [
    Case("retrain-holdout-empty-single-interaction-users", _log("single.csv", SINGLE, "retrain", "--holdout-fraction",
         "0.2"), EXIT_OK, None, stderr=r"Warning: the holdout of single.csv came out empty: .*8 users with a single "
         r"interaction keep it for training", absent=r"measures accuracy on them"),
    Case("retrain-holdout-empty-repeats", _log("repeats.csv", REPEATS, "retrain", "--holdout-fraction", "0.5"), EXIT_OK,
         None, stderr=r"came out empty: .*all 8 held-out interactions repeat one of the user's training pairs"),
    Case("retrain-transformer-log-without-time-column",
         _log("notime.csv", SINGLE + "".join(f"{u},{(u + 1) % 3}\n" for u in range(8)), "retrain", "--user-encoder",
              "transformer"), EXIT_OK, None, stderr=r"^(?!(?s:.*)no time column(?s:.*)no time column)(?s:.*)Warning: notime.csv has no time column .*: each user's recent items "
         r"for the transformer user tower are its last rows in file order\n$"),
    Case("retrain-blank-ids", _log("holes.csv", "user_id,item_id\n1,2\n1,\n,4\n2,3\n", "retrain"), EXIT_OK, None,
         stderr=r"Warning: holes.csv: 2 of 4 rows \(50.0%\) have a blank id and are left out of training and the "
         r"catalogue: 1 with no item id \(column 'item_id', first at data row 2\); 1 with no user id \(column "
         r"'user_id', first at data row 3\)"),
    Case("retrain-one-item-left-after-blank-users", _log("phantom.csv", "user_id,item_id\n1,2\n2,2\n,4\n", "retrain"),
         EXIT_ERROR, r"phantom.csv: training needs at least 2 distinct items, found 1"),
    Case("experiment-blank-ids", _log("holes.csv", "user_id,item_id\n" + "".join(f"{u},{u % 5}\n" for u in range(30))
                                      + ",3\n", "experiment", "lr-sweep", "--lrs", "1", "--seeds", "1", "--bootstrap", "0"),
         EXIT_OK, None, stderr=r"Warning: holes.csv: 1 of 31 rows \(3.2%\) have a blank id .*1 with no user id "
         r"\(column 'user_id', first at data row 31\)"),
    Case("experiment-mitigations-empty-holdout", _log("single.csv", SINGLE, "experiment", "mitigations", "--seeds", "1"),
         EXIT_ERROR, r"experiment mitigations measures held-out accuracy, but on single.csv \(random split, seed 0\) .*8 "
         r"users with a single interaction", absent=r"popaudit-mitigation"),
    Case("retrain-temperature-with-the-pointwise-loss", _retrain("--loss", "cosine", "--temperature", "10"),
         EXIT_USAGE, r"--temperature applies to the InfoNCE losses \(infonce-cos, infonce-dot\); --loss cosine is "
         r"pointwise and has no temperature"),
    Case("retrain-logq-with-the-pointwise-loss", _retrain("--loss", "cosine", "--logq"), EXIT_USAGE,
         r"--logq corrects in-batch softmax logits: use it with --loss infonce-cos or infonce-dot, not cosine"),
    Case("retrain-logq-and-temperature-with-the-pointwise-loss",
         _retrain("--logq", "--temperature", "0.2", "--loss", "cosine"), EXIT_USAGE,
         r"--temperature applies to the InfoNCE losses"),
    Case("retrain-momentum-without-a-momentum-optimizer", _retrain("--momentum", "0.9"), EXIT_USAGE,
         r"--momentum is the momentum of the 'momentum' optimizer, which neither tower uses \(--optimizer sgd, "
         r"--user-optimizer sgd\): pass --optimizer momentum or --user-optimizer momentum"),
    Case("retrain-momentum-with-adam", _retrain("--optimizer", "adam", "--momentum", "0.5"), EXIT_USAGE,
         r"--momentum .*\(--optimizer adam, --user-optimizer adam\)"),
    Case("retrain-hidden-dim-without-a-hidden-layer", _retrain("--hidden-dim", "7"), EXIT_USAGE,
         r"--hidden-dim is the hidden width of .*; --item-encoder embedding and --user-encoder embedding have no hidden "
         r"layer"),
    Case("retrain-history-length-without-the-transformer", _retrain("--history-length", "5", "--user-encoder", "mlp"),
         EXIT_USAGE, r"--history-length is the number of recent items the transformer user tower reads; "
         r"--user-encoder mlp reads none"),
    Case("experiment-lrs-not-a-number", _experiment("lr-sweep", "--lrs", "abc"), EXIT_USAGE,
         r"Invalid value for '--lrs': 'abc' is not a number"),
    Case("experiment-lrs-zero", _experiment("lr-sweep", "--lrs", "0,1"), EXIT_USAGE,
         r"Invalid value for '--lrs': '0' must be > 0"),
    Case("experiment-lrs-past-the-lr-range", _experiment("lr-sweep", "--lrs", "1e31"), EXIT_USAGE,
         r"Invalid value for '--lrs': '1e31' must be <= 1e\+30"),
    Case("experiment-lrs-nan", _experiment("lr-sweep", "--lrs", "nan"), EXIT_USAGE,
         r"Invalid value for '--lrs': 'nan' is not a finite number"),
    Case("experiment-lrs-empty", _experiment("lr-sweep", "--lrs", ","), EXIT_USAGE,
         r"Invalid value for '--lrs': ',' names nothing"),
    Case("experiment-lrs-empty-entry", _experiment("lr-sweep", "--lrs", "1,,3"), EXIT_USAGE,
         r"Invalid value for '--lrs': '1,,3' has an empty entry \(entry 2\)"),
    Case("experiment-lrs-trailing-comma", _experiment("lr-sweep", "--lrs", "1,3,"), EXIT_USAGE,
         r"Invalid value for '--lrs': '1,3,' has an empty entry \(entry 3\)"),
    Case("experiment-lrs-repeated-as-floats", _experiment("lr-sweep", "--lrs", "0.1,1,1e-1"), EXIT_USAGE,
         r"Invalid value for '--lrs': '0.1,1,1e-1' repeats '0.1' \(entries 1 and 3, '1e-1'\): give each once"),
    Case("experiment-settings-repeated", _experiment("conditions", "--settings", "reference,adam,reference"),
         EXIT_USAGE, r"Invalid value for '--settings': 'reference,adam,reference' repeats 'reference' \(entries 1 and 3"),
    Case("experiment-settings-unknown", _experiment("conditions", "--settings", "reference,bogus"), EXIT_USAGE,
         r"Invalid value for '--settings': unknown 'bogus'; choose from reference, momentum, adam"),
    Case("experiment-mitigations-unknown", _experiment("mitigations", "--mitigations", "foo"), EXIT_USAGE,
         r"Invalid value for '--mitigations': unknown 'foo'; choose from reference, logq, weight-decay, adam"),
    Case("experiment-seeds-past-the-top-lr-sweep", _experiment("lr-sweep", "--lrs", "1", "--seeds", "2", "--seed", TOP),
         EXIT_USAGE, r"--seed 18446744073709551615 with --seeds 2 would run seeds up to 18,446,744,073,709,551,616, "
         r"past the largest seed 18,446,744,073,709,551,615: give --seed at most 18,446,744,073,709,551,614"),
    Case("experiment-seeds-past-the-top-conditions",
         _experiment("conditions", "--settings", "reference", "--seeds", "3", "--seed", str(2**64 - 2)),
         EXIT_USAGE, r"--seed 18446744073709551614 with --seeds 3 .* give --seed at most 18,446,744,073,709,551,613"),
    Case("experiment-seeds-past-the-top-mitigations", _experiment("mitigations", "--seeds", "2", "--seed", TOP),
         EXIT_USAGE, r"--seed 18446744073709551615 with --seeds 2 would run seeds"),
]

PRODUCT_FAILURES: list[Case] = []


@pytest.mark.parametrize("case", params(CASES, PRODUCT_FAILURES))
def test_hostile_retrain_qa(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)

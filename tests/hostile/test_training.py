"""Hostile options and logs for training: retrain's held-out split, time column, logQ and
threads, and experiment's data options, jobs and outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .corpus import EXIT_ERROR, EXIT_OK, EXIT_USAGE, Built, Case, params, run_case, write

SMALL = ["--n-users", "20", "--n-items", "10", "--n-interactions", "100", "--epochs", "1"]
LOG = "user_id,item_id\n1,5\n1,6\n2,5\n2,7\n3,6\n"


def _retrain(*extra: str, files: dict[str, str] | None = None, synthetic: bool = True) -> Any:
    def build(d: Path) -> Built:
        for name, text in (files or {}).items():
            write(d, name, text)
        return Built(["retrain", *(SMALL if synthetic else ["--epochs", "1"]), *extra, "-o", "model.pt"])

    return build


def _experiment(*extra: str, files: dict[str, str] | None = None, out: str = "out") -> Any:
    def build(d: Path) -> Built:
        for name, text in (files or {}).items():
            write(d, name, text)
        return Built(["experiment", *extra, "-o", out])

    return build


CASES = [
    Case("retrain-output-dash", lambda d: Built(["retrain", *SMALL, "-o", "-"]), EXIT_USAGE,
         r"'-o' / '--output': '-' is not stdin or stdout here"),
    Case("retrain-holdout-fraction-one", _retrain("--holdout-fraction", "1"), EXIT_USAGE,
         r"'--holdout-fraction': '1' must be < 1"),
    Case("retrain-holdout-fraction-zero", _retrain("--holdout-fraction", "0"), EXIT_USAGE,
         r"'--holdout-fraction': '0' must be > 0"),
    Case("retrain-holdout-fraction-nan", _retrain("--holdout-fraction", "nan"), EXIT_USAGE,
         r"'--holdout-fraction': 'nan' is not a finite number"),
    Case("retrain-split-without-fraction", _retrain("--split", "time"), EXIT_USAGE,
         r"--split applies with --holdout-fraction only"),
    Case("retrain-time-split-synthetic", _retrain("--holdout-fraction", "0.2", "--split", "time"), EXIT_ERROR,
         r"--split time needs the time of each interaction, but synthetic data has no time column"),
    Case("retrain-time-split-no-column",
         _retrain("--data", "log.csv", "--holdout-fraction", "0.2", "--split", "time", files={"log.csv": LOG},
                  synthetic=False),
         EXIT_ERROR, r"--split time needs the time of each interaction, but log\.csv has no time column.*--time-col"),
    Case("retrain-time-col-missing",
         _retrain("--data", "log.csv", "--holdout-fraction", "0.2", "--time-col", "when", files={"log.csv": LOG},
                  synthetic=False),
         EXIT_ERROR, r"time column 'when' is not in log\.csv; .*user_id"),
    Case("retrain-time-not-a-time",
         _retrain("--data", "log.csv", "--holdout-fraction", "0.5",
                  files={"log.csv": "user_id,item_id,timestamp\n1,5,yesterday\n1,6,today\n"}, synthetic=False),
         EXIT_ERROR, r"the time column 'timestamp' of log\.csv has no usable time at data row 1 \(neither a number nor an "
         r"ISO 8601 date and time\); fix the column or pass --split random"),
    Case("retrain-time-empty",
         _retrain("--data", "log.csv", "--holdout-fraction", "0.5",
                  files={"log.csv": "user_id,item_id,timestamp\n1,5,10\n1,6,\n"}, synthetic=False),
         EXIT_ERROR, r"the time column 'timestamp' of log\.csv has no usable time at data row 2 \(it is blank\); fix the "
         r"column or pass --split random"),
    Case("retrain-logq-pointwise", _retrain("--logq", "--loss", "cosine"), EXIT_USAGE,
         r"--logq corrects in-batch softmax logits: use it with --loss infonce-cos or infonce-dot"),
    Case("retrain-threads-zero", _retrain("--threads", "0"), EXIT_USAGE, r"'--threads': 0 is not in the range 1<=x<=1024"),
    Case("retrain-synthetic-option-with-log",
         _retrain("--data", "log.csv", "--n-users", "5", files={"log.csv": LOG}, synthetic=False), EXIT_USAGE,
         r"--n-users applies to synthetic data \(without --data PATH\) only"),
    Case("retrain-alert-unknown-figure", _retrain("--alert", "sperman>0.5", "--alert", "spearman>"), EXIT_USAGE,
         r"invalid --alert: 'sperman>0\.5': unknown metric 'sperman'; 'spearman>' is not 'METRIC OP NUMBER'.*"
         r"Valid metrics: spearman, loglog_slope.*angle_share_90_1"),
    Case("retrain-angle-alert-without-step-records", _retrain("--trace-every", "0", "--alert", "angle_share_90_1>0.9"),
         EXIT_USAGE, r"invalid --alert: angle_share_90_1 is measured around optimizer steps only, and --trace-every 0 "
         r"records none, so the alert could never fire; give --trace-every above 0"),
    Case("retrain-growth-alert-without-step-records", _retrain("--trace-every", "0", "--alert", "growth_per_update>0"),
         EXIT_USAGE, r"invalid --alert: growth_per_update is measured around optimizer steps only"),
    Case("retrain-alert-fail-on-ratio-name", _retrain("--alert", "head_share_1pct_ratio@10>1"), EXIT_USAGE,
         r"invalid --alert: 'head_share_1pct_ratio@10>1': unknown metric 'head_share_1pct_ratio@10'\. Valid metrics: "
         r"spearman, .*, loss, lr, n_nonfinite$"),
    Case("retrain-alert-share-as-a-percentage", _retrain("--alert", "head_share_dot>5", "--on-alert", "fail"),
         EXIT_USAGE, r"invalid --alert: 'head_share_dot>5': head_share_dot is a fraction 0–1: 5% is 0\.05; the "
         r"threshold 5 is outside that range"),
    Case("retrain-alert-angle-share-as-a-percentage", _retrain("--alert", "angle_share_90_1>90"), EXIT_USAGE,
         r"invalid --alert: 'angle_share_90_1>90': angle_share_90_1 is a fraction 0–1: 90% is 0\.9"),
    Case("retrain-alert-more-non-finite-rows-than-items", _retrain("--alert", "n_nonfinite>10", "--trace", "t.jsonl"),
         EXIT_USAGE, r"invalid --alert: 'n_nonfinite>10': n_nonfinite is a number of item rows, 0–10 \(the watched "
         r"table's\); it is never > 10, so the gate could never trip"),
    Case("retrain-alert-rho-beyond-one", _retrain("--alert", "spearman>1.5", "--on-alert", "fail"), EXIT_USAGE,
         r"invalid --alert: 'spearman>1\.5': spearman is a correlation from -1 to 1; the threshold 1\.5 is outside"),
    Case("retrain-alert-angle-beyond-180", _retrain("--alert", "angle_median>180"), EXIT_USAGE,
         r"invalid --alert: 'angle_median>180': angle_median is an angle in degrees, 0–180; it is never > 180, so "
         r"the gate could never trip"),
    Case("retrain-alert-lr-below-zero", _retrain("--alert", "lr<0"), EXIT_USAGE,
         r"invalid --alert: 'lr<0': lr is a non-negative figure, never below 0; it is never < 0"),
    Case("retrain-trace-every-negative", _retrain("--trace-every", "-1"), EXIT_USAGE,
         r"'--trace-every': -1 is not in the range x>=0"),
    Case("retrain-trace-is-the-log",
         _retrain("--data", "log.csv", "--trace", "log.csv", files={"log.csv": LOG}, synthetic=False),
         EXIT_ERROR, r"--trace log\.csv is the input file given as --data; popaudit never overwrites"),
    Case("retrain-trace-over-a-foreign-file",
         _retrain("--trace", "notes.txt", files={"notes.txt": "my notes, not a trace\n"}),
         EXIT_ERROR, r"notes\.txt exists and is not a popaudit trace; popaudit replaces only its own traces"),
    Case("retrain-trace-is-a-folder", _retrain("--trace", "runs", files={"runs/keep.txt": "x"}), EXIT_USAGE,
         r"Invalid value for '--trace': File 'runs' is a directory"),
    Case("retrain-trace-and-output-the-same", _retrain("--trace", "model.pt"), EXIT_ERROR,
         r"-o and --trace both name model\.pt; give each output its own file"),
    Case("experiment-jobs-zero", _experiment("conditions", "-j", "0"), EXIT_USAGE,
         r"'-j' / '--jobs': 0 is not in the range 1<=x<=512"),
    Case("experiment-alpha-outside-mitigations", _experiment("conditions", "--alpha", "0.5"), EXIT_USAGE,
         r"--alpha applies to 'mitigations' only, not 'conditions'"),
    Case("experiment-lr-in-lr-sweep", _experiment("lr-sweep", "--lr", "5"), EXIT_USAGE,
         r"--lr applies to 'conditions' and 'mitigations' only, not 'lr-sweep'"),
    Case("experiment-bootstrap-in-mitigations", _experiment("mitigations", "--bootstrap", "100"), EXIT_USAGE,
         r"--bootstrap applies to 'conditions' and 'lr-sweep' only, not 'mitigations'"),
    Case("experiment-file-option-without-log", _experiment("lr-sweep", "--time-col", "ts"), EXIT_USAGE,
         r"--time-col applies to a --data PATH log only"),
    Case("experiment-output-is-the-log",
         _experiment("conditions", "--data", "out/results.md", "--data-format", "csv",
                     files={"out/results.md": LOG}),
         EXIT_ERROR, r"-o results\.md out/results\.md is the input file given as --data; popaudit never overwrites"),
    Case("experiment-missing-log", _experiment("conditions", "--data", "nope.csv"), EXIT_ERROR, r"nope\.csv"),
]

PRODUCT_FAILURES: list[Case] = []


# F2: retrain and experiment run no plugin hook: --plugin is refused (before: accepted, never used).
DECLARES_C1 = """from auditor.hookspecs import hookimpl


@hookimpl
def popaudit_condition_evidence(bundle):
    return {"C1": {"name": "SGD", "status": "violated", "evidence": "declared"}}
"""
CASES += [
    Case("retrain-plugin-refused", _retrain("--plugin", "plug.py", files={"plug.py": DECLARES_C1}), EXIT_USAGE,
         r"--plugin does not apply to retrain: retrain writes a checkpoint and runs no plugin hook"),
    Case("experiment-conditions-plugin-refused",
         _experiment("conditions", *SMALL, "--seeds", "1", "--plugin", "plug.py", files={"plug.py": DECLARES_C1}),
         EXIT_USAGE, r"--plugin does not apply to experiment conditions: a grid measures each run with check's own "
                     r"functions .* `popaudit check MODEL\.pt --plugin FILE`"),
    Case("experiment-plugin-before-the-grid-refused",
         _experiment("--plugin=plug.py", "lr-sweep", files={"plug.py": DECLARES_C1}), EXIT_USAGE,
         r"--plugin does not apply to experiment lr-sweep"),
]


# F4: a model named like an option: the printed command names it ./-dash.pt (before: -dash.pt, exit 2 when run).
CASES += [
    Case("retrain-output-starts-with-a-dash", lambda d: Built(["retrain", *SMALL, "-o", "-dash.pt"],
                                                              outputs=("-dash.pt",)),
         EXIT_OK, None, stdout=r"Next: popaudit check \./-dash\.pt\n"),
]


@pytest.mark.parametrize("case", params(CASES, PRODUCT_FAILURES))
def test_hostile_training(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)

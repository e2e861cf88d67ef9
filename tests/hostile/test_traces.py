"""Hostile ``--trace`` files (training traces) given to ``popaudit check``: what is not a
trace, a newer or broken one, one cut mid-write, one of another model, and an output
aimed at the trace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from auditor.trace_schema import TraceEnd, TraceHeader, TraceRecord

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
    params,
    run_case,
    standard,
    strict_json,
    write,
)


def _record(step: int, share: float | None = 1.0) -> dict[str, Any]:
    return TraceRecord(
        # No rho: a made-up one beside the standard table would mark the trace as another model's.
        kind="step", step=step, epoch=1, elapsed_s=0.1 * step, wall_time=1.0e9 + step, spearman=None,
        spearman_n=N_ITEMS, spearman_method="exact", spearman_ci=None, loglog_slope=0.05 * step, mean_norm=1.0,
        n_nonfinite=0, n_counted=55, angle_n=4, angle_share_90_1=share, angle_share_90_10=share, angle_median=90.0,
        growth_per_update=0.01, head_share_dot=0.2, head_share_cosine=0.1, head_share_ratio=2.0, lr=1.0, loss=0.5,
    ).to_json()


def trace_lines(n_items: int = N_ITEMS) -> list[str]:
    """A valid trace of the corpus's standard table: a header, two step records, the end."""
    header = TraceHeader(source="pytorch", n_items=n_items, dim=4, counts="running", interval=2, k=10,
                         head_percent=1.0, queries="items", n_queries=n_items, max_exact_items=200_000,
                         sample_items=100_000, optimizer="SGD")
    records = [header.to_json(), _record(2), _record(4), TraceEnd(step=4, epoch=1, reason="completed").to_json()]
    return [json.dumps(r) for r in records]


GOOD = "\n".join(trace_lines()) + "\n"


def _trace(content: bytes | str | None, *extra: str, name: str = "trace.jsonl", outputs: tuple[str, ...] = (),
           check: Any = None, make: Any = None) -> Any:
    """The standard table and log, ``content`` as the trace (None: none written)."""

    def build(d: Path) -> Built:
        standard(d)
        if content is not None:
            write(d, name, content)
        if make is not None:
            make(d)
        return Built([*check_args("items.npy"), "--trace", name, *extra], outputs=outputs, check=check)

    return build


def _cut(d: Path, outcome: Outcome) -> None:
    report = strict_json(d / "r.json")
    assert report["training"]["truncated"] is True and len(report["training"]["points"]) == 2
    assert any("its last line was cut mid-write" in w and "1 record lost" in w for w in report["warnings"])


def _other_model(d: Path, outcome: Outcome) -> None:
    report = strict_json(d / "r.json")
    assert report["training"]["matches_model"] is False
    assert report["training"]["mismatch"] == f"the trace watched 12 items, the audited table has {N_ITEMS} rows"
    assert any("is of another model" in w for w in report["warnings"])
    assert "trace_angles" not in report["conditions"]["C1"]["details"]  # another model's angles are no evidence


def _used(d: Path, outcome: Outcome) -> None:
    report = strict_json(d / "r.json")
    assert [p["step"] for p in report["training"]["points"]] == [2, 4]
    assert report["conditions"]["C1"]["status"] == "holds" and "source: trace" in report["conditions"]["C1"]["evidence"]


def _contradicted(d: Path, outcome: Outcome) -> None:
    report = strict_json(d / "r.json")
    assert report["training"]["matches_model"] is False and report["training"]["recorded_loss"] == "infonce-cos"
    assert report["training"]["mismatch"] == ("the trace's config records the loss 'infonce-cos', --loss declares "
                                              "'infonce-dot' (one scores by cosine, the other not)")
    assert report["conditions"]["C4"]["status"] == "violated"  # the declared name; the trace's 90° angles are no evidence
    assert "trace_angles" not in report["conditions"]["C4"]["details"]


def _diverged(d: Path, outcome: Outcome) -> None:
    report = strict_json(d / "r.json")
    assert report["training"]["nonfinite_step"] == 4 and report["training"]["nonfinite_rows"] == 3
    assert any("training diverged: item rows were NaN or infinite from step 4 (up to 3 rows in a record)" in w
               for w in report["warnings"])


def _no_end(d: Path, outcome: Outcome) -> None:
    report = strict_json(d / "r.json")
    assert report["training"]["complete"] is False and report["training"]["steps"] == 4
    assert any("has no end record (its training died, or is still running): its last record is at step 4" in w
               for w in report["warnings"])


def _resumed(start: int | None) -> Any:
    def check(d: Path, outcome: Outcome) -> None:
        report = strict_json(d / "r.json")
        assert report["training"]["start_step"] == (start or 0)
        said = [w for w in report["warnings"] if "a run resumed from a checkpoint" in w]
        assert said == ([f"--trace trace.jsonl begins at step {start} (a run resumed from a checkpoint): its records "
                         "cover the steps after it only, while its steps (4) and epochs count the whole run from step "
                         "0, which C5 projects over"] if start else [])
    return check


def _settings_run(step: int | None) -> Any:
    """C1 judged by the run a malformed or valid ``resumed_runs`` names (None: the header's)."""
    def check(d: Path, outcome: Outcome) -> None:
        report = strict_json(d / "r.json")
        c1 = report["conditions"]["C1"]
        assert report["training"]["settings_run"] == step
        assert c1["status"] == ("violated" if step else "holds"), c1["evidence"]
        assert c1["details"]["sources"]["momentum"] == ("trace (config.momentum)" if step is None else
                                                        f"trace (config.resumed_runs: momentum of the run resumed at step {step})")
    return check


def _with_config(config: dict[str, Any]) -> str:
    lines = trace_lines()
    header = json.loads(lines[0])
    header["config"] = config
    return "\n".join([json.dumps(header), *lines[1:]]) + "\n"


def _empty_epoch_first(steps: bool) -> str:
    """Epoch 1 ended at step 0 (no step: a loader that yielded nothing), then, with ``steps``,
    epoch 2's step records at 2 and 4 and the end; else only the end, at step 0."""
    lines = trace_lines()
    empty = json.loads(lines[1]) | {"record": "epoch", "step": 0, "epoch": 1, "angle_n": 0, "angle_share_90_1": None,
                                    "angle_share_90_10": None, "angle_median": None, "growth_per_update": None}
    if not steps:
        end = TraceEnd(step=0, epoch=1, reason="completed").to_json()
        return "\n".join([lines[0], json.dumps(empty), json.dumps(end)]) + "\n"
    later = [json.dumps(json.loads(line) | {"epoch": 2}) for line in lines[1:]]
    return "\n".join([lines[0], json.dumps(empty), *later]) + "\n"


def _empty_epochs(epochs: int | None, said: str) -> Any:
    def check(d: Path, outcome: Outcome) -> None:
        report = strict_json(d / "r.json")
        assert report["training"]["epochs"] == epochs and report["training"]["empty_epochs"] == [1]
        assert any(said in w for w in report["warnings"])
    return check


_LINES = trace_lines()
DIVERGED = "\n".join([*_LINES[:2], _LINES[2].replace('"mean_norm": 1.0, "n_nonfinite": 0',
                                                     '"mean_norm": null, "n_nonfinite": 3'), _LINES[3]]) + "\n"
"""The record at step 4 found 3 rows NaN or infinite (its mean norm unmeasured)."""
NO_ITEMS = GOOD.replace('"n_items": 10, ', "", 1)
NOT_A_RECORD = GOOD.replace("\n", "\n[1, 2, 3]\n", 1)
NEWER = GOOD.replace('"version": 1', '"version": 99', 1)
BAD_TYPE = GOOD.replace('"step": 4,', '"step": "four",', 1)
ALERTS_ADDED_NOT_A_MAP = GOOD.replace('"alerts_added": {}', '"alerts_added": ["spearman>0.5"]', 1)
RESUMED_WITH_ALERTS = GOOD.replace('"alerts": []', '"alerts": ["spearman>0.5", "lr>2"]', 1).replace(
    '"alerts_added": {}, "alerts_dropped": {}', '"alerts_added": {"lr>2": 2}, "alerts_dropped": {"spearman>0.5": 2}', 1)
"""A header a run resumed at step 2 rewrote (monitor F1): it added lr>2 and dropped spearman>0.5."""
ZERO_QUERIES_NOT_A_COUNT = GOOD.replace('"n_zero_queries": 0,', '"n_zero_queries": "thirty",', 1)
BEFORE_ZERO_QUERIES = GOOD.replace('"n_zero_queries": 0, ', '')
"""A trace written before records counted their zero queries (QA 11 monitor F1): read as 0."""

CASES = [
    Case("trace-ok", _trace(GOOD, "--json", "r.json", outputs=("r.json",), check=_used), EXIT_OK, None),
    Case("trace-missing", _trace(None, name="nope.jsonl"), EXIT_ERROR, r"trace not found: nope\.jsonl"),
    Case("trace-is-a-folder", _trace(None, name="runs", make=lambda d: write(d, "runs/keep.txt", "x")), EXIT_USAGE,
         r"Invalid value for '--trace': File 'runs' is a directory"),
    Case("trace-fifo", _trace(None, name="pipe", make=lambda d: fifo(d, "pipe")), EXIT_ERROR,
         r"trace pipe is a FIFO \(named pipe\)", process=True, timeout=30),
    Case("trace-empty", _trace(""), EXIT_ERROR, r"trace\.jsonl is empty, not a popaudit trace"),
    Case("trace-is-a-csv", _trace("user_id,item_id\n1,2\n", name="log.csv"), EXIT_ERROR,
         r"log\.csv is not a popaudit trace: line 1 is not a trace header", absent="user_id"),
    Case("trace-is-binary", _trace(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe"), EXIT_ERROR,
         r"trace\.jsonl is not a popaudit trace: line 1 is not a trace header"),
    Case("trace-foreign-json-lines", _trace('{"event": "epoch", "secret": "token-123"}\n'), EXIT_ERROR,
         r"trace\.jsonl is not a popaudit trace: line 1 is not a trace header", absent="token-123"),
    Case("trace-newer-version", _trace(NEWER), EXIT_ERROR,
         r"trace\.jsonl is a popaudit trace of version 99; this popaudit reads version 1"),
    Case("trace-broken-middle-line", _trace(GOOD.replace("\n", "\n{not json\n", 1)), EXIT_ERROR,
         r"trace\.jsonl: line 2 is not valid JSON \(UTF-8\)"),
    Case("trace-field-of-wrong-type", _trace(BAD_TYPE), EXIT_ERROR,
         r"trace\.jsonl: line 3: 'step' is not of the documented type \(int\)", absent="four"),
    Case("trace-zero-queries-not-a-count", _trace(ZERO_QUERIES_NOT_A_COUNT), EXIT_ERROR,
         r"trace\.jsonl: line 2: 'n_zero_queries' is not of the documented type \(int\)", absent="thirty"),
    Case("trace-written-before-zero-queries-were-counted", _trace(BEFORE_ZERO_QUERIES, "--json", "r.json",
                                                                  outputs=("r.json",), check=_used), EXIT_OK, None),
    Case("trace-alerts-added-not-a-mapping", _trace(ALERTS_ADDED_NOT_A_MAP), EXIT_ERROR,
         r"trace\.jsonl: line 1: 'alerts_added' is not of the documented type \(Mapping\[str, Any\]\)"),
    Case("trace-header-of-a-resumed-run-with-new-alerts", _trace(RESUMED_WITH_ALERTS, "--json", "r.json",
                                                                 outputs=("r.json",), check=_used), EXIT_OK, None),
    Case("trace-header-lacks-a-key", _trace(NO_ITEMS), EXIT_ERROR,
         r"trace\.jsonl: line 1: the header record lacks 'n_items'"),
    Case("trace-line-not-a-record", _trace(NOT_A_RECORD), EXIT_ERROR,
         r"trace\.jsonl: line 2 is not a trace record \(no \"record\" key\)"),
    Case("trace-cut-mid-write", _trace("\n".join(trace_lines()[:3]) + "\n" + trace_lines()[3][:15], "--json", "r.json",
                                       outputs=("r.json",), check=_cut), EXIT_OK, None),
    Case("trace-of-another-model", _trace("\n".join(trace_lines(12)) + "\n", "--json", "r.json", outputs=("r.json",),
                                          check=_other_model), EXIT_OK, None),
    Case("trace-contradicts-the-declared-loss", _trace(_with_config({"loss": "infonce-cos", "lr": 0.02}), "--loss",
                                                       "infonce-dot", "--json", "r.json", outputs=("r.json",),
                                                       check=_contradicted), EXIT_OK, None),
    Case("trace-of-a-diverged-run", _trace(DIVERGED, "--json", "r.json", outputs=("r.json",), check=_diverged),
         EXIT_OK, None),
    Case("trace-without-an-end-record", _trace("\n".join(trace_lines()[:3]) + "\n", "--json", "r.json",
                                               outputs=("r.json",), check=_no_end), EXIT_OK, None),
    Case("trace-of-a-resumed-run", _trace(_with_config({"start_step": 2, "start_epoch": 1}), "--json", "r.json",
                                          outputs=("r.json",), check=_resumed(2)), EXIT_OK, None),
    Case("trace-start-step-not-a-step", _trace(_with_config({"start_step": "ten"}), "--json", "r.json",
                                               outputs=("r.json",), check=_resumed(None)), EXIT_OK, None),
    Case("trace-start-step-negative", _trace(_with_config({"start_step": -5}), "--json", "r.json",
                                             outputs=("r.json",), check=_resumed(None)), EXIT_OK, None),
    Case("trace-resumed-runs-not-a-list", _trace(_with_config({"momentum": 0.0, "resumed_runs": 5}), "--json", "r.json",
                                                 outputs=("r.json",), check=_settings_run(None)), EXIT_OK, None),
    Case("trace-resumed-runs-malformed", _trace(_with_config({"momentum": 0.0, "resumed_runs": [
        "SGD", {"momentum": 0.9}, {"step": "ten", "momentum": 0.9}, {"step": 3, "momentum": "high"}]}), "--json", "r.json",
        outputs=("r.json",), check=_settings_run(None)), EXIT_OK, None),
    Case("trace-resumed-run-under-momentum", _trace(_with_config({"momentum": 0.0, "resumed_runs": [
        {"step": 2, "optimizer": "SGD", "momentum": 0.9, "weight_decay": 0.0}]}), "--json", "r.json",
        outputs=("r.json",), check=_settings_run(2)), EXIT_OK, None),
    Case("trace-with-an-empty-first-epoch", _trace(_empty_epoch_first(True), "--json", "r.json", outputs=("r.json",),
         check=_empty_epochs(1, "epoch 1 ended without an optimizer step (an epoch record at the step it began "
                                "at: a loader that yielded nothing?); not counted as epochs trained (the run "
                                "trained 1 epoch)")),
         EXIT_OK, None),
    Case("trace-of-an-empty-epoch-only", _trace(_empty_epoch_first(False), "--json", "r.json", outputs=("r.json",),
         check=_empty_epochs(None, "not counted as epochs trained (the run trained no epoch)")), EXIT_OK, None),
    Case("output-is-the-trace", _trace(GOOD, "--json", "trace.jsonl"), EXIT_ERROR,
         r"--json trace\.jsonl is the input file given as --trace; popaudit never overwrites an input"),
]

PRODUCT_FAILURES: list[Case] = []


@pytest.mark.parametrize("case", params(CASES, PRODUCT_FAILURES))
def test_hostile_traces(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)

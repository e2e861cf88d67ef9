"""A progress track left by Ctrl-C closes "· interrupted", never "· done" (QA scale F2):
a log scraper that keys on "done" must not read an interrupted batch as finished."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from test_batch_core import fake_audit, make_log, make_table, write_manifest

from auditor.batch import run_batch
from auditor.batch.run import BatchInterrupted
from auditor.cli._progress import PlainLines, RichProgress
from auditor.config import AuditConfig


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _track(stop: BaseException | None, rows_done: int = 2) -> list[str]:
    """A 12-row track: ``rows_done`` rows of 10 s, then 11 s into the next, ``stop`` is raised."""
    clock, lines = Clock(), []
    plain = PlainLines(lines.append, interval=10.0, task_seconds=1.0, clock=clock)
    try:
        with plain.track("Auditing 12 of 12 models", total=12) as advance:
            for _ in range(rows_done):
                clock.now += 10.0
                advance(1)
            clock.now += 11.0
            if stop is not None:
                raise stop
    except BaseException as exc:  # noqa: BLE001 - the test looks at what the track said
        assert exc is stop
    return [line.split("] ", 1)[1] for line in lines]


def test_ctrl_c_closes_the_track_as_interrupted_with_the_units_done() -> None:
    assert _track(KeyboardInterrupt()) == [
        "Auditing 12 of 12 models: 1/12 (8%), 0:10 elapsed",
        "Auditing 12 of 12 models: 2/12 (17%), 0:20 elapsed",
        "Auditing 12 of 12 models: 2/12 (17%), 0:31 elapsed · interrupted",  # before: no closing line here
    ]
    # At 0 of 12 (QA: "0/12 (0%), 0:12 elapsed · done" from the batch): interrupted, after 11 s.
    assert _track(KeyboardInterrupt(), rows_done=0) == ["Auditing 12 of 12 models: 0/12 (0%), 0:11 elapsed · interrupted"]


def test_another_error_prints_no_closing_line_and_a_normal_end_says_done() -> None:
    assert _track(ValueError("bad row"))[-1] == "Auditing 12 of 12 models: 2/12 (17%), 0:20 elapsed"
    assert _track(None)[-1] == "Auditing 12 of 12 models: 2/12 (17%), 0:31 elapsed · done"


def stopping_audit(config: AuditConfig, *, pm: Any = None, progress: Any = None, cache: Any = None) -> Any:
    """fake_audit, except that a model named stop* is where the user presses Ctrl-C."""
    if Path(config.model).stem.startswith("stop"):
        raise KeyboardInterrupt
    return fake_audit(config, pm=pm, progress=progress, cache=cache)


def test_an_interrupted_batchs_last_progress_line_says_interrupted(tmp_path: Path) -> None:
    freqs = make_log(tmp_path / "log.parquet", 200, seed=1)
    for name in ("m0", "m1", "stop2", "m3"):
        make_table(tmp_path / f"{name}.npy", freqs, 1.0, seed=3)
    manifest = write_manifest(tmp_path / "m.csv", {"model": ["m0.npy", "m1.npy", "stop2.npy", "m3.npy"]})
    stream = io.StringIO()
    progress = RichProgress(console=Console(file=stream, force_terminal=False), task_seconds=0)  # a line per row
    with pytest.raises(BatchInterrupted, match=r"interrupted: 2 of 4 rows are saved"):
        run_batch(manifest, tmp_path / "r.parquet", defaults={"interactions": tmp_path / "log.parquet", "ks": (10,)},
                  progress=progress, audit_fn=stopping_audit, inline=True)
    # the elapsed time depends on the machine's load: compared as a pattern
    lines = [re.sub(r"\d+:\d\d elapsed", "T elapsed", line.split("] ", 1)[1]) for line in stream.getvalue().splitlines()]
    assert lines[:2] == ["Auditing 4 of 4 models: 1/4 (25%), T elapsed", "Auditing 4 of 4 models: 2/4 (50%), T elapsed"]
    assert lines[-1] == "Auditing 4 of 4 models: 2/4 (50%), T elapsed · interrupted"  # before: "... · done"
    assert not any(re.search(r"· done$", line) for line in lines), lines

"""The trace file: written as training goes, read back typed, readable after a crash, and
refusing what is not a trace (auditor/monitor/trace.py, auditor/loading/trace.py, docs/monitor.md)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from auditor.errors import OutputError, TraceError
from auditor.monitor import TRACE_VERSION, TrainingMonitor, read_trace


def _run(path: Path, steps: int = 6, interval: int = 2) -> TrainingMonitor:
    torch.manual_seed(0)
    emb = torch.nn.Embedding(40, 4)
    opt = torch.optim.SGD(emb.parameters(), lr=0.5)
    monitor = TrainingMonitor(emb, interval=interval, trace=path, optimizer=opt, alerts=["spearman>=-1"], config={"lr": 0.5})
    gen = torch.Generator().manual_seed(1)
    with pytest.warns(Warning):
        for _ in range(steps):
            items = torch.randint(0, 40, (8,), generator=gen)
            loss = (1 - torch.nn.functional.cosine_similarity(emb(items), torch.ones(8, 4))).mean()
            opt.zero_grad()
            loss.backward()
            with monitor.step(items):
                opt.step()
        monitor.end_epoch(loss=float(loss))
    return monitor


def test_every_record_reads_back_as_written(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    monitor = _run(path)
    monitor.close()
    trace = read_trace(path)
    # the config given, and the item optimizer's momentum and weight decay (monitor F6)
    assert trace.header == replace(monitor.header, config={"momentum": 0.0, "weight_decay": 0.0, "lr": 0.5})
    assert trace.header.optimizer == "SGD"
    assert trace.records == tuple(monitor.records)
    assert [r.step for r in trace.steps] == [2, 4, 6] and [r.epoch for r in trace.epochs] == [1]
    assert trace.steps[0].lr == 0.5 and trace.steps[0].angle_n > 0
    assert [a.step for a in trace.alerts] == [2] and trace.complete and not trace.truncated
    assert trace.end is not None and trace.end.reason == "completed" and trace.end.step == 6
    steps, rho = trace.series("spearman")
    assert steps.tolist() == [2, 4, 6] and np.allclose(rho, [r.spearman for r in monitor.records[:3]])
    angles = trace.angles()
    assert angles is not None and angles.n == sum(r.angle_n for r in trace.steps)
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["schema"] == "popaudit-trace" and json.loads(lines[0])["version"] == TRACE_VERSION


def test_a_trace_is_readable_while_training_and_after_it_dies(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    monitor = _run(path)  # not closed: training is still going (or the process died)
    alive = read_trace(path)
    assert len(alive.records) == 4 and alive.end is None and not alive.complete
    with open(path, "a") as fh:  # a crash in the middle of writing the next record
        fh.write('{"record":"step","step":8,"epo')
    dead = read_trace(path)
    assert dead.truncated and dead.records == alive.records
    monitor.close()


def test_bad_traces_are_refused_with_the_line_at_fault(tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    _run(good).close()
    lines = good.read_text().splitlines()

    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    with pytest.raises(TraceError, match=r"trace not found: .*missing\.jsonl"):
        read_trace(tmp_path / "missing.jsonl")
    with pytest.raises(TraceError, match=r"empty\.jsonl is empty, not a popaudit trace"):
        read_trace(write("empty.jsonl", ""))
    with pytest.raises(TraceError, match=r"log\.csv is not a popaudit trace: line 1 is not a trace header"):
        read_trace(write("log.csv", "user_id,item_id\nalice,hunter2\n"))
    newer = json.loads(lines[0]) | {"version": TRACE_VERSION + 1}
    with pytest.raises(TraceError, match=rf"of version {TRACE_VERSION + 1}; this popaudit reads version {TRACE_VERSION}"):
        read_trace(write("newer.jsonl", json.dumps(newer) + "\n"))
    bad_type = json.loads(lines[1]) | {"spearman": "high"}
    with pytest.raises(TraceError, match=r"line 2: 'spearman' is not of the documented type"):
        read_trace(write("type.jsonl", "\n".join([lines[0], json.dumps(bad_type), *lines[2:]]) + "\n"))
    with pytest.raises(TraceError, match=r"line 2 is not valid JSON") as caught:
        read_trace(write("middle.jsonl", "\n".join([lines[0], "{oops hunter2", *lines[1:]]) + "\n"))
    assert "hunter2" not in str(caught.value)  # never quotes the file
    missing = {k: v for k, v in json.loads(lines[1]).items() if k != "step"}
    with pytest.raises(TraceError, match=r"line 2: the step record lacks 'step'"):
        read_trace(write("lacks.jsonl", "\n".join([lines[0], json.dumps(missing)]) + "\n"))
    extra = json.loads(lines[1]) | {"future_figure": 1.5}  # fields added within a version are ignored
    assert read_trace(write("extra.jsonl", "\n".join([lines[0], json.dumps(extra)]) + "\n")).records[0].step == 2


def test_the_writer_never_replaces_a_file_that_is_not_a_trace(tmp_path: Path) -> None:
    data = tmp_path / "interactions.csv"
    data.write_text("user_id,item_id\n1,2\n")
    with pytest.raises(OutputError, match=r"interactions\.csv exists and is not a popaudit trace"):
        TrainingMonitor(torch.ones(3, 2), trace=data)
    assert data.read_text() == "user_id,item_id\n1,2\n"
    with pytest.raises(OutputError, match="it is a folder"):
        TrainingMonitor(torch.ones(3, 2), trace=tmp_path)
    old = tmp_path / "old.jsonl"
    _run(old).close()
    TrainingMonitor(torch.ones(3, 2), trace=old).close()  # an old trace is replaced
    assert read_trace(old).header.n_items == 3

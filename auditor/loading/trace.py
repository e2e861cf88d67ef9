"""A training trace read back into a :class:`Trace` (the monitor writes it:
:mod:`auditor.monitor.trace`): the header and every field's type checked, the line at
fault named in a :class:`~auditor.errors.TraceError`, the file's content never quoted,
record kinds and keys it does not know ignored (fields added within a version), and a
last line cut mid-write (a process that died while writing) dropped and reported.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from auditor.errors import TraceError
from auditor.io import require_regular_file
from auditor.sections import share_ratio
from auditor.trace_section import TrainingAngles
from auditor.trace_schema import (
    ALERT_ACTIONS,
    FIGURES,
    TRACE_SCHEMA,
    TRACE_VERSION,
    AlertEvent,
    TraceEnd,
    TraceHeader,
    TraceRecord,
)


PER_STEP_SOURCES = ("keras", "recbole")
"""Adapters whose callbacks never see the batch's rows: their growth is per optimizer step."""


@dataclass(frozen=True)
class Trace:
    """A trace file read back: its header, its records in order, the alerts that fired
    and how training ended (``end`` None: it did not end normally, e.g. it died)."""

    path: Path
    header: TraceHeader
    records: tuple[TraceRecord, ...]
    alerts: tuple[AlertEvent, ...]
    end: TraceEnd | None
    truncated: bool
    """The last line was cut mid-write (training died while writing it); it was dropped."""

    @property
    def steps(self) -> tuple[TraceRecord, ...]:
        return tuple(r for r in self.records if r.kind == "step")

    @property
    def epochs(self) -> tuple[TraceRecord, ...]:
        return tuple(r for r in self.records if r.kind == "epoch")

    @property
    def complete(self) -> bool:
        """Training ended normally or by an alert (an ``end`` record was written)."""
        return self.end is not None

    def series(self, name: str, kind: str = "step") -> tuple[np.ndarray, np.ndarray]:
        """(x, values) of one of :data:`~auditor.trace_schema.FIGURES` over the records of
        ``kind``: x is the step for step records, the epoch for epoch records; NaN where
        the figure was not measured; +inf where a ratio's divisor was 0 (:data:`~auditor.trace_schema.RATIO_FIGURES`)."""
        if name not in FIGURES:
            raise KeyError(f"unknown trace figure {name!r}; one of {', '.join(FIGURES)}")
        chosen = [r for r in self.records if r.kind == kind]
        x = np.array([r.step if kind == "step" else (r.epoch or 0) for r in chosen], dtype=np.int64)
        values = np.array([np.nan if (v := r.figure(name)) is None else v for r in chosen], dtype=np.float64)
        return x, values

    def angles(self) -> TrainingAngles | None:
        """The step records' measured update angles, pooled (None: no angle was measured)."""
        rows = [r for r in self.steps if r.angle_n > 0 and r.angle_share_90_1 is not None]
        if not rows:
            return None
        n = np.array([r.angle_n for r in rows], dtype=np.float64)
        s1 = np.array([r.angle_share_90_1 for r in rows], dtype=np.float64)
        s10 = np.array([r.angle_share_90_10 for r in rows], dtype=np.float64)
        growth = [r.growth_per_update for r in rows if r.growth_per_update is not None]
        grew = [r for r in rows if r.growth_per_update is not None]
        # Per step where a record says so; a trace older than growth_basis, by the adapters
        # that never know the batch's rows.
        per_step = any(r.growth_basis == "step" for r in grew) or (
            bool(grew) and all(r.growth_basis is None for r in grew) and self.header.source in PER_STEP_SOURCES)
        return TrainingAngles(
            n_records=len(rows),
            n=int(n.sum()),
            share_90_1=float((n * s1).sum() / n.sum()),  # the share over all pooled angles
            share_90_10=float((n * s10).sum() / n.sum()),
            growth_per_update=float(np.median(growth)) if growth else None,
            first_step=rows[0].step,
            last_step=rows[-1].step,
            growth_per_step=per_step,
        )


def read_trace(path: Path | str) -> Trace:
    """Read a trace written by :class:`~auditor.monitor.TrainingMonitor` (any adapter).

    A trace whose training died is read up to its last complete line (``truncated``
    says whether a cut line was dropped; ``end`` is None). Raises TraceError when the
    file is missing, not a popaudit trace, of a newer version, or has a malformed line.
    """
    path = require_regular_file(path, "trace", error=TraceError)
    lines, truncated = _json_lines(path)
    if not lines:
        raise TraceError(f"{path} is empty, not a popaudit trace")
    number, first = lines[0]
    if not (isinstance(first, dict) and first.get("record") == "header" and first.get("schema") == TRACE_SCHEMA):
        raise TraceError(f"{path} is not a popaudit trace: line {number} is not a trace header")
    version = first.get("version")
    if type(version) is not int or version < 1:
        raise TraceError(f"{path}: line {number}: the trace header has no valid version")
    if version > TRACE_VERSION:
        raise TraceError(f"{path} is a popaudit trace of version {version}; this popaudit reads version {TRACE_VERSION}")
    header = _build(TraceHeader, first, path, number)
    records: list[TraceRecord] = []
    alerts: list[AlertEvent] = []
    end: TraceEnd | None = None
    for number, obj in lines[1:]:
        kind = obj.get("record") if isinstance(obj, dict) else None
        if not isinstance(obj, dict) or not isinstance(kind, str):
            raise TraceError(f"{path}: line {number} is not a trace record (no \"record\" key)")
        if kind in ("step", "epoch"):
            records.append(_with_ratio(_build(TraceRecord, {**obj, "kind": kind}, path, number)))
        elif kind == "alert":
            infinite = "value" in obj and obj["value"] is None  # a ratio's +inf (AlertEvent.to_json)
            alerts.append(_build(AlertEvent, {**obj, "value": math.inf} if infinite else obj, path, number))
        elif kind == "end":
            end = _build(TraceEnd, obj, path, number)
    return Trace(path, header, tuple(records), tuple(alerts), end, truncated)


def _with_ratio(record: TraceRecord) -> TraceRecord:
    """``record`` with the head-share ratio its line wrote as null restored by the ratio
    policy (:func:`~auditor.sections.share_ratio`): +inf where cosine's share is 0 and dot's
    is not (JSON has no inf), still None where it is undefined. A finite ratio was written
    as it was; a trace written before this rule (null when cosine's share was 0) reads
    the same."""
    if record.head_share_ratio is not None:
        return record
    ratio = share_ratio(record.head_share_dot, record.head_share_cosine)
    return record if ratio is None else replace(record, head_share_ratio=ratio)


def _json_lines(path: Path) -> tuple[list[tuple[int, Any]], bool]:
    """(line number, parsed JSON) of every non-blank line, and whether a last line
    (without its newline) that does not parse was dropped: cut mid-write."""
    out: list[tuple[int, Any]] = []
    truncated = False
    try:
        with open(path, "rb") as fh:
            raw = fh.read().split(b"\n")
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror or exc}") from exc
    last = len(raw)  # split leaves "" after a final newline; a cut line is the last item
    for number, data in enumerate(raw, start=1):
        if not data.strip():
            continue
        try:
            out.append((number, json.loads(data.decode("utf-8"))))
        except (UnicodeDecodeError, ValueError):
            if not out:
                raise TraceError(f"{path} is not a popaudit trace: line {number} is not a trace header") from None
            if number == last:
                truncated = True
                continue
            raise TraceError(f"{path}: line {number} is not valid JSON (UTF-8)") from None
    return out, truncated


def _int(v: Any) -> bool:
    return type(v) is int


def _number(v: Any) -> bool:
    return type(v) in (int, float)


_CHECKS: dict[str, Callable[[Any], bool]] = {
    "int": _int,
    "float": _number,
    "str": lambda v: isinstance(v, str),
    "int | None": lambda v: v is None or _int(v),
    "float | None": lambda v: v is None or _number(v),
    "str | None": lambda v: v is None or isinstance(v, str),
    "tuple[float, float] | None": lambda v: v is None or (
        isinstance(v, list) and len(v) == 2 and all(x is None or _number(x) for x in v)
    ),
    "tuple[str, ...]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "Mapping[str, Any]": lambda v: isinstance(v, dict),
    "RecordKind": lambda v: v in ("step", "epoch"),
    "AlertAction": lambda v: v in ALERT_ACTIONS,
    "Literal['running', 'given']": lambda v: v in ("running", "given"),
    "Literal['exact', 'sample']": lambda v: v in ("exact", "sample"),
}


def _build(cls: Any, obj: Mapping[str, Any], path: Path, number: int) -> Any:
    """``cls`` from the known keys of ``obj``, each checked against its field's type."""
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in obj or (obj[f.name] is None and "None" not in str(f.type)):
            if f.default is MISSING and f.default_factory is MISSING:
                raise TraceError(f"{path}: line {number}: the {obj.get('record', 'header')} record lacks {f.name!r}")
            continue
        value = obj[f.name]
        if not _CHECKS[str(f.type)](value):
            raise TraceError(f"{path}: line {number}: {f.name!r} is not of the documented type ({f.type})")
        if isinstance(value, list):
            value = tuple(float("nan") if x is None else float(x) for x in value) if "float" in str(f.type) else tuple(value)
        elif _int(value) and str(f.type).startswith("float"):
            value = float(value)
        values[f.name] = value
    return cls(**values)

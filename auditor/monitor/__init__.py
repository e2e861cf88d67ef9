"""Watch popularity bias while a model trains (docs/monitor.md).

:class:`TrainingMonitor` works in any PyTorch loop::

    monitor = TrainingMonitor(model.item_embedding, trace="trace.jsonl", alerts=["spearman>0.5"])
    for users, items in loader:
        loss = model.loss(users, items)
        optimizer.zero_grad()
        loss.backward()
        with monitor.step(items):
            optimizer.step()
    monitor.close()

:func:`read_trace` reads a trace back as a typed :class:`Trace`. The adapters live in
their own modules and import their framework only there:
:mod:`auditor.monitor.lightning`, :mod:`auditor.monitor.keras`,
:mod:`auditor.monitor.recbole`.
"""

from __future__ import annotations

from auditor.monitor.alerts import TrainingAlertWarning, parse_alerts
from auditor.monitor.monitor import DEFAULT_INTERVAL, TrainingMonitor
from auditor.trace_schema import (
    FIGURES,
    TRACE_SCHEMA,
    TRACE_VERSION,
    AlertEvent,
    TraceEnd,
    TraceHeader,
    TraceRecord,
)
from auditor.loading.trace import Trace, read_trace
from auditor.trace_section import TrainingAngles

__all__ = [
    "DEFAULT_INTERVAL",
    "FIGURES",
    "TRACE_SCHEMA",
    "TRACE_VERSION",
    "AlertEvent",
    "Trace",
    "TrainingAngles",
    "TraceEnd",
    "TraceHeader",
    "TraceRecord",
    "TrainingAlertWarning",
    "TrainingMonitor",
    "parse_alerts",
    "read_trace",
]

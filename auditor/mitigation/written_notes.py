"""What ``mitigate`` says of the table it wrote (:mod:`auditor.mitigation.run`): a plugin
writer's claims against what reads back, the zero rows of a table written at α = 0, and the
sidecar's warnings, each said once."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import numpy as np

from auditor.alpha import zero_rows_at_cosine
from auditor.plugin_api import Written


def as_read_back(written: Written, dtype: str) -> Written:
    """A plugin writer's report with the dtype of the table read back and the layout check
    reads (rows, items × dim), each claim that differs said in a note."""
    notes = list(written.notes)
    if written.dtype != dtype:
        notes.append(f"the writer reported dtype {written.dtype!r}, but the table reads back as {dtype}; "
                     "the sidecar records the latter")
    if written.layout != "rows":
        notes.append(f"the writer reported layout {written.layout!r}; its reader gives check the table as rows "
                     "(items × dim), the layout the sidecar records")
    return replace(written, dtype=dtype, layout="rows", notes=notes)


def zero_rows_note(alpha: float, after: np.ndarray) -> list[str]:
    """The zero rows of a table written at α = 0, which dot over it serves and cosine never
    does (:func:`auditor.alpha.zero_rows_at_cosine`)."""
    note = zero_rows_at_cosine(int(np.count_nonzero(after == 0))) if alpha == 0.0 else None
    return [] if note is None else [note]


def said_once(*parts: Iterable[str]) -> list[str]:
    """The warnings of ``parts`` in order, each once (``--alpha auto``'s audit reads the model
    and its log as mitigate does, so their loaders' warnings repeat)."""
    return list(dict.fromkeys(w for part in parts for w in part))

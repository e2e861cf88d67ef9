"""What ``mitigate`` says of the table it wrote (:mod:`auditor.mitigation.run`): a plugin
writer's claims against what reads back, the zero rows of a table written at α = 0, the
rounding of a table stored narrower than float32 where nothing measured it, and the
sidecar's warnings, each said once."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import numpy as np

from auditor.alpha import zero_rows_at_cosine
from auditor.errors import setting
from auditor.mitigation.sidecar import FULL_PRECISION
from auditor.plugin_api import RowNorms, Written


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


def table_notes(alpha: float, written: Written, output: object, tradeoff: dict[str, Any] | None) -> list[str]:
    """What the table as written gives the sidecar's warnings: its zero rows at α = 0
    (:func:`zero_rows_note`) and, unless ``--alpha auto`` measured it as written (its
    ``tradeoff`` read back), its rounding (:func:`rounding_note`)."""
    measured = tradeoff is not None and bool(tradeoff.get("read_back"))
    alpha = float(alpha)
    return zero_rows_note(alpha, written.norms.after) + ([] if measured else rounding_note(alpha, written, output))


def rounding_note(alpha: float, written: Written, output: object) -> list[str]:
    """The warning of a table stored in a dtype outside :data:`FULL_PRECISION` (the rule
    ``--alpha auto`` measures the output as written by) at a given α: its rounding can move
    the lists dot serving of it gives away from check's ``alpha_<α>`` lists (QA13 accuracy F2:
    float8 at α 0.5, 173 of 200 lists moved, unsaid), with how far it moved the rows' norms
    from the promised ‖k‖^α (:func:`norm_rounding`; a norm order of near-equal rows is no
    measure: any rounding flips it). None at α = 1: a copy."""
    if written.dtype in FULL_PRECISION or alpha == 1.0:
        return []
    moved = norm_rounding(alpha, written.norms)
    by = "" if moved is None else f" by up to {moved[0]:.2%} (median {moved[1]:.2%})"
    return [f"stored as {written.dtype}, the output's table rounds the rescaled rows, so dot serving of it may not rank "
            f"as check's alpha_{alpha:g} of the input does (the rounding moves the rows' norms from ||k||^{alpha:g}{by}, "
            f"and their directions too); measure it as written with popaudit check {output}, or write it with "
            f"{setting('alpha')} auto, which does"]


def norm_rounding(alpha: float, norms: RowNorms) -> tuple[float, float] | None:
    """How far the written norms stand from the promised ‖k‖^α, relative to it: (largest,
    median) over the nonzero rows; None without one."""
    before, after = np.asarray(norms.before, dtype=np.float64), np.asarray(norms.after, dtype=np.float64)
    nonzero = before > 0
    if not nonzero.any():
        return None
    promised = before[nonzero] ** alpha
    moved = np.abs(after[nonzero] - promised) / promised
    return float(moved.max()), float(np.median(moved))

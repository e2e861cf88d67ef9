"""What a plugin format's writer wrote, read back as ``check`` will read it.

popaudit's own writers are tested against the rule; a plugin's writer is third-party code
that reports its own norms (:class:`~auditor.plugin_api.Written`). A writer that writes
fewer rows, NaN rows or nothing at all would otherwise give exit 0 and a sidecar
certifying a table that ``check`` then refuses. So the written file is read back by the
format's own reader and finished as ``check`` finishes a model
(:func:`~auditor.loading.finish_bundle`), and compared with the input as ``check`` read
it: the same rows and dimension, finite values, each row the rule's k·‖k‖^(α−1) (within
what a narrower float dtype rounds away), and the norms the writer reports equal to the
rows written. Anything else is a :class:`~auditor.errors.PluginError` naming the plugin;
the caller then renames nothing into place.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pluggy

from auditor.alpha import rescale_rows
from auditor.config import LoadOptions
from auditor.errors import AuditError, PluginError
from auditor.loading import finish_bundle
from auditor.loading.plugin_formats import plugin_owner, read_written
from auditor.memory import block_rows
from auditor.model import ModelBundle
from auditor.plugin_api import ModelFormat, RowNorms

ROW_TOLERANCE = 1e-2
"""Largest ‖written − expected‖ / ‖expected‖ of a row: bfloat16 (8 significant bits)
rounds a row by at most about 2^-9 of its norm; anything beyond 1% is another table."""
NORM_TOLERANCE = 1e-4
"""Largest relative gap between a norm the writer reports and the norm of the row read
back (float32 rounding of the stored value is about 6e-8)."""


def verify_written(pm: pluggy.PluginManager, fmt: ModelFormat, path: Path, source: ModelBundle, alpha: float,
                   norms: RowNorms, options: LoadOptions, output: Path) -> str:
    """Raise PluginError unless ``path`` (written by ``fmt``'s writer, to be renamed to
    ``output``, the name messages give) reads back as ``source`` rescaled by ``alpha``, with
    the norms the writer reported (``norms``); the dtype of the table read back (what the
    sidecar records, whatever the writer claims)."""
    owner = plugin_owner(pm, fmt)
    whose = "" if owner is None else f"plugin {owner!r}'s "
    who = f"the writer of {whose}format {fmt.name!r}"
    if path.stat().st_size == 0:
        raise PluginError(f"{who} wrote nothing (an empty file); nothing is written")
    try:
        read_back = read_written(pm, fmt, path, options)
        dtype = str(getattr(read_back.item_table, "dtype", "unknown")).removeprefix("torch.")
        table = finish_bundle(read_back, options).item_table
    except PluginError:
        raise
    except AuditError as exc:
        said = str(exc).replace(str(path), str(output))  # the temporary file's name means nothing to the user
        raise PluginError(f"{who} wrote a table check cannot read ({said}); nothing is written") from exc
    expected = source.item_table
    if table.shape != expected.shape:
        raise PluginError(f"{who} wrote a {_shape(table.shape)} table, but check reads a {_shape(expected.shape)} "
                          "table from the model; nothing is written")
    problem = _rows_problem(table, expected, alpha, norms, options.max_memory)
    if problem is not None:
        raise PluginError(f"{who} wrote {problem}; nothing is written")
    return dtype


def _rows_problem(table: np.ndarray, expected: np.ndarray, alpha: float, norms: RowNorms,
                  max_memory: int | None) -> str | None:
    """The first row (or norm) that differs from the rule, in words; None when none does.
    In row blocks: a few float64 copies of one block at a time."""
    n, dim = expected.shape
    step = block_rows(dim, bytes_per_value=8, max_memory=max_memory)
    for start in range(0, n, step):
        stop = min(n, start + step)
        source = np.asarray(expected[start:stop], dtype=np.float64)
        before = _norms(source)
        wanted = rescale_rows(source, alpha, before) if alpha != 1.0 else source
        got = np.asarray(table[start:stop], dtype=np.float64)
        after = _norms(got)
        scale = np.maximum(np.power(before, alpha), np.finfo(np.float32).tiny)  # the rule's norms, ‖k‖^α
        gap = _norms(got - wanted) / scale
        bad = np.flatnonzero(gap > ROW_TOLERANCE)
        if bad.size:
            row = start + int(bad[0])
            return (f"row {row} as {_vector(got[bad[0]])}, not the rule's k*|k|^(alpha-1) = {_vector(wanted[bad[0]])} "
                    f"({bad.size} such rows in rows {start}-{stop - 1})")
        for name, claimed, actual in (("before", norms.before, before), ("after", norms.after, after)):
            off = np.flatnonzero(~np.isclose(claimed[start:stop], actual, rtol=NORM_TOLERANCE, atol=0.0))
            if off.size:
                row = start + int(off[0])
                return (f"row {row} with norm {actual[off[0]]:.6g} {name} the rescaling, but reports "
                        f"{claimed[row]:.6g} (the sidecar would record norms that were not written)")
    return None


def _norms(rows: np.ndarray) -> np.ndarray:
    """Row norms of float64 rows that hold float32 values (both tables were read as check
    reads them): their squares neither overflow nor underflow in float64, so the plain sum
    is exact to float64 rounding, at a fraction of the overflow-safe norms' cost."""
    return np.sqrt(np.einsum("ij,ij->i", rows, rows))


def _shape(shape: tuple[int, ...]) -> str:
    return " x ".join(f"{s:,}" for s in shape)


def _vector(row: np.ndarray, show: int = 4) -> str:
    values = ", ".join(f"{v:.4g}" for v in row[:show])
    return f"[{values}{', ...' if row.size > show else ''}]"


__all__ = ["NORM_TOLERANCE", "ROW_TOLERANCE", "verify_written"]

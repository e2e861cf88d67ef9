"""The query vectors retrieval is measured on: the model's user table, users' histories
(mean item vector of each user's interactions), or a file of vectors.

Each source is sampled the same way (``max_queries`` with ``seed``), and zero vectors,
which score every item 0 and so would get an arbitrary list, are dropped and counted.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from auditor.errors import QueryError, setting
from auditor.io import require_regular_file
from auditor.loading.history import HistoryQueries, sample_indices
from auditor.loading.npy import load_npy
from auditor.loading.parquet_table import is_vector_type
from auditor.model import ModelBundle
from auditor.retrieval.shards import parquet_shards


def load_query_file(path: Path) -> np.ndarray:
    """Query vectors from a ``.npy`` (2-D) or Parquet file (one list-of-number column)."""
    require_regular_file(path, "query file", error=QueryError)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        if path.stat().st_size == 0:
            raise QueryError(f"cannot read query vectors from {path}: the file is empty (0 bytes)")
        vectors = load_npy(path, ".npy matrix of query vectors", QueryError, mmap=True)
        if vectors.ndim != 2:
            raise QueryError(
                f"{path} holds an array of shape {vectors.shape}; expected (n_queries, dim)"
            )
        if not np.issubdtype(vectors.dtype, np.number) or np.iscomplexobj(vectors):
            raise QueryError(f"{path} holds {vectors.dtype} values; expected floats")
        return vectors
    if suffix in (".parquet", ".pq"):
        try:
            reader = pq.ParquetFile(path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise QueryError(f"cannot read {path} as Parquet: {exc}") from exc
        columns = [f.name for f in reader.schema_arrow if is_vector_type(f.type, integers=True)]
        if len(columns) != 1:
            found = ", ".join(columns) if columns else "none"
            raise QueryError(
                f"{path} must hold exactly one list-of-float column of query vectors; found {found}"
            )
        parts = [part for part in parquet_shards(path, columns[0], error=QueryError) if part.size]
        if not parts:
            raise QueryError(f"{path} holds no query vectors")
        return np.concatenate(parts)
    raise QueryError(
        f"{setting('queries')} must be users, history, or a path to a .npy or .parquet file; got {str(path)!r}"
    )


def query_vectors(
    bundle: ModelBundle, source: str, history: HistoryQueries | None, max_queries: int | None, seed: int
) -> tuple[np.ndarray, str]:
    """The query matrix for the ``queries`` setting ``source`` and a description of it.

    ``auto`` takes the user table, else the histories; ``max_queries`` rows are sampled
    with ``seed`` (history queries come sampled already).
    """
    flag = setting("queries")
    if source == "auto":
        if bundle.user_table is not None:
            source = "users"
        elif history is not None:
            source = "history"
        else:
            raise QueryError(
                f"retrieval needs queries: the model has no user table, so pass {flag} PATH "
                f"(a .npy or Parquet file of query vectors) or {setting('interactions')} (history queries)"
            )
    if source == "users":
        if bundle.user_table is None:
            raise QueryError(
                f"{flag} users: {bundle.source} has no user table (use {setting('user_key')}, "
                f"{flag} history with {setting('interactions')}, or {flag} PATH)"
            )
        table, what = bundle.user_table, f"user table {bundle.user_key or ''}".strip()
    elif source == "history":
        if history is None:
            raise QueryError(
                f"{flag} history needs {setting('interactions')} with at least one mapped interaction"
            )
        return history.vectors, history.describe()
    else:
        path = Path(source)
        table, what = load_query_file(path), f"query file {path}"
    if table.ndim != 2 or table.shape[0] == 0:
        raise QueryError(f"{what} holds no query vectors (shape {table.shape})")
    if table.shape[1] != bundle.dim:
        raise QueryError(
            f"{what} has dimension {table.shape[1]} but the item table has dimension {bundle.dim}"
        )
    picked = sample_indices(table.shape[0], max_queries, seed)
    vectors = np.asarray(table if picked is None else table[picked], dtype=np.float32)
    if not np.isfinite(vectors).all():
        bad = int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
        row = bad if picked is None else int(picked[bad])
        raise QueryError(f"{what} holds NaN or infinite values (first at row {row})")
    sampled = "" if picked is None else f", {vectors.shape[0]} sampled with seed {seed}"
    kind = "users" if source == "users" else "file"
    return vectors, f"{kind}: {what} ({table.shape[0]} rows{sampled})"


def drop_zero_queries(queries: np.ndarray) -> tuple[np.ndarray, int]:
    """``queries`` without its zero vectors, and how many there were; QueryError when
    every query is zero."""
    zero = ~np.any(queries, axis=1)
    n_zero = int(zero.sum())
    if n_zero == 0:
        return queries, 0
    if n_zero == queries.shape[0]:
        raise QueryError(f"all {n_zero} query vectors are zero; nothing can be retrieved")
    return np.ascontiguousarray(queries[~zero]), n_zero

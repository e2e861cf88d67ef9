"""Query vectors from a file (the ``queries`` setting given a path): a ``.npy`` matrix or a
Parquet file with one list-of-number column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from auditor.config import QUERY_SOURCES
from auditor.errors import QueryError, setting
from auditor.io import require_regular_file
from auditor.loading.npy import load_npy
from auditor.loading.parquet_table import is_vector_type, parquet_shards
from auditor.query_source import query_source_choices, refuse_mistyped_query_source


def load_query_file(path: Path) -> np.ndarray:
    """Query vectors from a ``.npy`` (2-D) or Parquet file (one list-of-number column)."""
    refuse_mistyped_query_source(path, QUERY_SOURCES)  # "user": a mistyped word, not a missing file
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
    raise QueryError(f"{setting('queries')} {query_source_choices(QUERY_SOURCES)}; got {str(path)!r}, a {suffix or 'suffix-less'} "
                     "file")


def sample_query_file(path: Path, dim: int, max_queries: int | None, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """float32 vectors of a seeded sample of at most ``max_queries`` rows of the query
    file, their file rows, and the file's row count; QueryError when the file holds no
    (dim-wide) vectors."""
    from auditor.sampling import sample_indices

    table = load_query_file(path)
    if table.ndim != 2 or table.shape[0] == 0:
        raise QueryError(f"query file {path} holds no query vectors (shape {table.shape})")
    if table.shape[1] != dim:
        raise QueryError(f"query file {path} has dimension {table.shape[1]} but the item table has dimension {dim}")
    picked = sample_indices(table.shape[0], max_queries, seed)
    rows = np.arange(table.shape[0]) if picked is None else picked
    return np.array(table[rows], dtype=np.float32), rows, int(table.shape[0])

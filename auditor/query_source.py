"""What the ``queries`` setting may be: one of its words or a query file (one policy for the
CLI's usage check and the library's loader). numpy-free: the CLI checks it before importing
what an audit needs."""

from __future__ import annotations

import os
from pathlib import Path

from auditor.errors import setting

QUERY_FILE_SUFFIXES = (".npy", ".parquet", ".pq")
"""Endings of the query files :func:`auditor.loading.queries.load_query_file` reads."""


def query_source_choices(words: tuple[str, ...]) -> str:
    """What the setting takes, after its name: the one wording of every refusal of a value."""
    return f"must be one of the words {', '.join(words)}, or a path to a .npy or .parquet file of query vectors"


def mistyped_query_source(value: str | Path, words: tuple[str, ...]) -> str | None:
    """Why ``value`` is neither one of ``words`` nor a query file (``user``, ``histroy``: a
    mistyped word, not a missing file; an empty or blank value), else None: the message after
    the setting's name. A value naming an existing path, or ending as a query file does, is a
    file: its reader says what is wrong with it."""
    text = str(value)
    if not text.strip():  # names no file and no word: the same usage error as a mistyped word
        return f"{query_source_choices(words)}; got {text!r}, an empty value"
    if text in words or os.path.lexists(text) or Path(text).suffix.lower() in QUERY_FILE_SUFFIXES:
        return None
    return f"{query_source_choices(words)}; got {text!r}, which is neither (no such file)"


def refuse_mistyped_query_source(value: str | Path, words: tuple[str, ...]) -> None:
    """QueryError (exit 1 where no front end checks usage) for :func:`mistyped_query_source`."""
    from auditor.errors import QueryError

    problem = mistyped_query_source(value, words)
    if problem is not None:
        raise QueryError(f"{setting('queries')} {problem}")

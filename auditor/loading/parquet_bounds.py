"""Parquet data bounded before Arrow expands it: pages, and dictionary-encoded text.

Pages
-----
Arrow allocates each page's *declared* uncompressed size (its page header, not the
footer, which may say otherwise) and decompresses the page whole. A few kilobytes of
zstd can declare gigabytes, so before a Parquet file is read, the headers of every page
of the columns popaudit reads are walked (a few bytes each, one seek per page) and each
page must pass :func:`auditor.memory.check_expansion`: within :data:`MAX_EXPANSION` of
its compressed size and within the memory ceiling. Nothing is decompressed to find out.

Each column chunk as a whole must also stay within :data:`MAX_EXPANSION` of the bytes it
stores (many small pages of zeros are no cheaper to decode than one large one). Page
headers are Thrift compact-protocol structs; only fields 2 and 3 of ``PageHeader``
(uncompressed and compressed page size) are read, the rest is skipped.

Dictionary-encoded text
-----------------------
A dictionary page holds each distinct value once and the data pages refer to it by a
few bits per row, so a kilobyte can stand for a megabyte-long string repeated a million
times. Text columns are read as dictionaries (``read_dictionary``) and decoded by
:class:`TextDecoder` only once the bytes they decode to are counted: within the memory
ceiling per batch, and within :data:`MAX_EXPANSION` of the file's size in all.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from auditor.errors import InputError
from auditor.memory import EXPANSION_SLACK, MAX_EXPANSION, check_expansion

MAX_HEADER = 1 << 20
"""Bytes of one page header read at most (statistics hold min/max values)."""
_MAX_DEPTH = 32


class _Malformed(Exception):
    """A page header that is not valid Thrift (Arrow reports it better when it reads)."""


def check_pages(
    pf: pq.ParquetFile, path: Path, columns: Iterable[str], max_memory: int | None, error: type[InputError]
) -> None:
    """Raise ``error`` naming ``path`` when a page of ``columns`` (top-level names; every
    leaf under them) declares more than the file can hold or the memory ceiling allows.

    A file whose page headers cannot be walked is left to Arrow, which reports it when
    reading (nothing was allocated here)."""
    meta = pf.metadata
    wanted = set(columns)
    leaves = [j for j in range(meta.num_columns) if meta.schema.column(j).path.split(".")[0] in wanted]
    try:
        with open(path, "rb") as fh:
            for r in range(meta.num_row_groups):
                group = meta.row_group(r)
                for j in leaves:
                    chunk = group.column(j)
                    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else None
                    start = start if start else chunk.data_page_offset
                    name = meta.schema.column(j).path
                    total = 0
                    for uncompressed, compressed in _pages(fh, int(start), int(chunk.total_compressed_size)):
                        check_expansion(
                            f"{path}: a page of column {name!r} (row group {r})", uncompressed, compressed,
                            max_memory, error,
                        )
                        total += uncompressed
                    check_expansion(f"{path}: column {name!r} (row group {r})", total,
                                    int(chunk.total_compressed_size), max_memory, error, in_memory=False)
    except _Malformed:
        return


_VALUE_BYTES = {"FLOAT": 4, "DOUBLE": 8, "INT32": 4, "INT64": 8, "BOOLEAN": 1, "INT96": 12}


def check_values(pf: pq.ParquetFile, path: Path, column: str, error: type[InputError]) -> None:
    """Raise ``error`` when the values ``column`` declares (every leaf under it, summed over
    row groups) decode to more than :data:`MAX_EXPANSION` times the bytes stored for them:
    dictionary and run-length encoding can make a few bytes stand for billions of values
    (streamed, but still work and disk the file never paid for)."""
    meta = pf.metadata
    leaves = [j for j in range(meta.num_columns) if meta.schema.column(j).path.split(".")[0] == column]
    declared = stored = 0
    for r in range(meta.num_row_groups):
        for j in leaves:
            chunk = meta.row_group(r).column(j)
            declared += int(chunk.num_values) * _VALUE_BYTES.get(chunk.physical_type, 8)
            stored += int(chunk.total_compressed_size)
    check_expansion(f"{path}: column {column!r} ({meta.num_rows:,} rows)", declared, stored, None, error,
                    in_memory=False)


def text_columns(schema: pa.Schema, columns: Iterable[str] | None = None) -> list[str]:
    """The string and binary columns among ``columns`` (all when None): read them as
    dictionaries (``read_dictionary``) and decode them through :class:`TextDecoder`."""
    names = set(schema.names if columns is None else columns)
    return [f.name for f in schema if f.name in names and _is_text(f.type)]


def _is_text(t: pa.DataType) -> bool:
    t = t.value_type if pa.types.is_dictionary(t) else t
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
                or pa.types.is_large_binary(t))


class TextDecoder:
    """Decodes a file's dictionary-encoded text columns batch by batch, counting the bytes."""

    def __init__(self, path: Path, max_memory: int | None, error: type[InputError]) -> None:
        self.path, self.max_memory, self.error = path, max_memory, error
        self.stored = os.stat(path).st_size
        self.decoded = 0

    def plain(self, arr: pa.Array | pa.ChunkedArray, column: str) -> pa.Array | pa.ChunkedArray:
        """``arr`` without its dictionary (text decoded only once its size is checked)."""
        if not pa.types.is_dictionary(arr.type):
            return arr
        if _is_text(arr.type):
            chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
            size = sum(_decoded_bytes(chunk) for chunk in chunks)
            self.decoded += size
            what = f"{self.path}: column {column!r}"
            check_expansion(f"{what} (dictionary-encoded text, {len(arr):,} rows)", size, self.stored,
                            self.max_memory, self.error)
            if self.decoded > MAX_EXPANSION * self.stored + EXPANSION_SLACK:
                check_expansion(what, self.decoded, self.stored, self.max_memory, self.error, in_memory=False)
        return arr.dictionary_decode() if isinstance(arr, pa.Array) else pa.chunked_array(
            [c.dictionary_decode() for c in arr.chunks], type=arr.type.value_type
        )


def _decoded_bytes(arr: pa.DictionaryArray) -> int:
    """Bytes of text ``arr`` decodes to: each row's dictionary value's length, summed."""
    if len(arr) == 0 or len(arr.dictionary) == 0:
        return 0
    lengths = pc.binary_length(arr.dictionary)
    total = pc.sum(pc.take(lengths, arr.indices)).as_py()
    return int(total or 0)


def read_table(
    path: Path, max_memory: int | None, error: type[InputError], columns: list[str] | None = None
) -> pa.Table:
    """A whole (small) Parquet file as a table, pages and text bounded as above;
    pyarrow's errors pass through to the caller, which words them."""
    pf = pq.ParquetFile(path, read_dictionary=None)
    check_pages(pf, path, columns or pf.schema_arrow.names, max_memory, error)
    text = text_columns(pf.schema_arrow, columns)
    table = pq.ParquetFile(path, read_dictionary=text).read(columns=columns)
    decoder = TextDecoder(path, max_memory, error)
    arrays = [decoder.plain(table.column(name), name) for name in table.column_names]
    return pa.Table.from_arrays(arrays, names=table.column_names, metadata=table.schema.metadata)


def _pages(fh: io.BufferedReader, start: int, length: int) -> Iterator[tuple[int, int]]:
    """(uncompressed, compressed) size of each page in ``length`` bytes from ``start``."""
    pos, end = start, start + length
    while pos < end:
        for window in (512, 1 << 16, MAX_HEADER):  # most headers are tens of bytes
            fh.seek(pos)
            data = fh.read(min(window, end - pos))
            reader = _Compact(data)
            try:
                sizes = reader.page_sizes()
                break
            except _Malformed:
                if len(data) < window:  # the whole rest was there: truly malformed
                    raise
        else:
            raise _Malformed
        if sizes[1] < 0 or sizes[0] < 0:
            raise _Malformed
        yield sizes
        pos += reader.pos + sizes[1]


class _Compact:
    """Just enough of Thrift's compact protocol to read a PageHeader's two sizes."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def page_sizes(self) -> tuple[int, int]:
        sizes = {2: -1, 3: -1}
        for field, kind in self._fields():
            if field in sizes and kind == 5:
                sizes[field] = self._zigzag()
            else:
                self._skip(kind, 0)
        return sizes[2], sizes[3]

    def _fields(self) -> Iterator[tuple[int, int]]:
        field = 0
        while True:
            byte = self._byte()
            if byte == 0:
                return
            delta, kind = byte >> 4, byte & 0x0F
            field = field + delta if delta else self._zigzag()
            yield field, kind

    def _byte(self) -> int:
        if self.pos >= len(self.data):
            raise _Malformed
        self.pos += 1
        return self.data[self.pos - 1]

    def _varint(self) -> int:
        value, shift = 0, 0
        while True:
            byte = self._byte()
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise _Malformed

    def _zigzag(self) -> int:
        value = self._varint()
        return (value >> 1) ^ -(value & 1)

    def _skip(self, kind: int, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise _Malformed
        if kind in (1, 2):  # booleans live in the field header
            return
        if kind == 3:
            self._byte()
        elif kind in (4, 5, 6):
            self._varint()
        elif kind == 7:
            self.pos += 8
        elif kind == 8:
            size = self._varint()  # read before adding: the varint moves pos
            self.pos += size
        elif kind in (9, 10):
            head = self._byte()
            size, inner = head >> 4, head & 0x0F
            size = self._varint() if size == 15 else size
            for _ in range(size):
                self._skip(inner, depth + 1) if inner not in (1, 2) else self._byte()
        elif kind == 11:
            size = self._varint()
            if size:
                kinds = self._byte()
                for _ in range(size):
                    self._skip(kinds >> 4, depth + 1)
                    self._skip(kinds & 0x0F, depth + 1)
        elif kind == 12:
            for _, inner in self._fields():
                self._skip(inner, depth + 1)
        else:
            raise _Malformed
        if self.pos > len(self.data):
            raise _Malformed


__all__ = ["TextDecoder", "check_pages", "check_values", "read_table", "text_columns"]

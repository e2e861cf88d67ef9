"""The results journal: each finished row appended to disk as it arrives, between rewrites.

The results Parquet file cannot grow in place (its footer indexes every row), so
:class:`~auditor.batch.results.ResultsWriter` rewrites it whole, rarely, and appends the
rows finished since its last rewrite here: an Arrow IPC stream beside it
(``.<name>.journal``), one record batch per append, each written to the operating system
at once. Saving a row costs the row, not the table; a crash or a kill loses only the
audits in flight, and ``resume`` reads the rows the journal holds beyond the results file
(a batch cut mid-write is dropped). The journal is removed whenever the results file is
rewritten (it then holds every row), so it never outlives a run that ends; a special
output (``/dev/null``, a FIFO) has none.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from auditor.errors import OutputError
from auditor.io import is_special_file


def journal_path(output: Path) -> Path | None:
    """Where the journal of the results file ``output`` lives (None: a special file has none)."""
    output = Path(output)
    return None if is_special_file(output) else output.with_name(f".{output.name}.journal")


class Journal:
    """Append-only record batches of one schema (a new schema starts after a rewrite)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._sink: pa.OSFile | None = None
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None
        self.schema: pa.Schema | None = None
        """The schema of the rows appended since the last :meth:`remove` (None: none yet)."""

    def append(self, table: pa.Table) -> None:
        """Write ``table``'s rows at the journal's end (its schema must be the journal's)."""
        if self.path is None or table.num_rows == 0:
            return
        try:
            if self._writer is None:
                self._sink = pa.OSFile(str(self.path), "wb")  # unbuffered: each batch reaches the OS
                self._writer = pa.ipc.new_stream(self._sink, table.schema)
                self.schema = table.schema
            self._writer.write_table(table)
        except OSError as exc:
            self.remove()
            raise OutputError(f"cannot write {self.path} (the results journal): {exc.strerror or exc}") from exc

    def remove(self) -> None:
        """Close and delete the journal (the results file now holds every row)."""
        with contextlib.suppress(OSError, pa.ArrowException):
            if self._writer is not None:
                self._writer.close()
            if self._sink is not None:
                self._sink.close()
        self._writer = self._sink = None
        self.schema = None
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.unlink(missing_ok=True)


def read_journal(path: Path | None) -> pa.Table | None:
    """The rows a journal holds (a batch cut mid-write dropped); None without a readable one."""
    if path is None or not path.is_file():
        return None
    batches: list[pa.RecordBatch] = []
    try:
        with pa.OSFile(str(path), "rb") as source:
            reader = pa.ipc.open_stream(source)
            schema = reader.schema
            while True:
                try:
                    batches.append(reader.read_next_batch())
                except StopIteration:
                    break
                except (pa.ArrowException, OSError):  # the last batch cut mid-write by a crash
                    break
    except (pa.ArrowException, OSError):  # not a journal, or cut before its schema
        return None
    return pa.Table.from_batches(batches, schema=schema)


def with_journal(table: pa.Table, journal: pa.Table | None) -> pa.Table:
    """``table`` (a results file) with the journal's rows, which replace rows of the same number."""
    if journal is None or journal.num_rows == 0 or "row" not in journal.column_names:
        return table
    kept = table.filter(pc.invert(pc.is_in(table["row"], value_set=journal["row"])))
    merged = pa.concat_tables([kept, journal], promote_options="permissive")
    return merged.sort_by("row")


__all__ = ["Journal", "journal_path", "read_journal", "with_journal"]

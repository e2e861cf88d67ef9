"""Embedding tables: finding the item/user tables in a state dict, reading table files
(.npy, Parquet), reading ``--item-ids`` files, and validating what was found.

Discovery works on names and shapes only, so it never needs more than the chosen
tensors in memory (safetensors and mmap-loaded checkpoints stay lazy).

Tables larger than memory: a float32 ``.npy`` is memory-mapped; a Parquet table (or a
``.npy`` needing conversion to float32) that exceeds the memory ceiling (``--max-memory``,
or half the available memory when none is given) is streamed into a temporary ``.npy``
memory map (:func:`spill_table`), deleted once the table is garbage collected. Every later
stage reads tables in row blocks, so such a table is never loaded whole.
"""

from __future__ import annotations

import os
import re
import tempfile
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import torch

from auditor.config import format_size
from auditor.errors import (
    AmbiguousTableError,
    EmbeddingTableError,
    IdMappingError,
    InputError,
    ModelLoadError,
)

ITEM_WORDS = ("item", "movie", "product", "video", "song", "track", "article", "poi", "doc", "candidate", "target")
USER_WORDS = ("user", "query", "customer", "member", "account")
# Words that mark an embedding-style table (higher score than an MLP weight of the tower).
_TABLE_WORDS = ("emb", "table", "lookup", "factor", "vector")
_LINEAR_WORDS = ("linear", "fc", "proj", "dense")
# A Linear weight (d, n) over one-hot ids: n must be at least this many times d.
ONEHOT_RATIO = 4
_MIN_ITEMS = 3
_ID_COLUMN_NAMES = ("item_id", "itemid", "item", "id", "movieid", "product_id", "productid", "iid")
_FIRST_ROWS = 5

BLOCK_BYTES = 1 << 20
"""Scratch memory of one row block in the block-wise scans (validation, norms, finite checks)."""
MAX_BLOCK_ROWS = 1 << 16
MIN_BLOCK_ROWS = 1024
"""The smallest row shard a memory ceiling must hold (with its normalised copy)."""
PARQUET_BATCH_ROWS = 1 << 16
SPILL_PREFIX = "popaudit-table-"
"""Name prefix of the temporary files that hold tables larger than memory."""


# ---------------------------------------------------------------- memory ceiling


def available_memory() -> int | None:
    """Bytes of memory available now: Linux's MemAvailable (free plus reclaimable page
    cache), else free physical pages (``os.sysconf``); None where the OS does not say."""
    try:
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024  # reported in kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        pages, page_size = os.sysconf("SC_AVPHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return pages * page_size if pages > 0 and page_size > 0 else None


def memory_budget(max_memory: int | None) -> int | None:
    """The ceiling tables must respect: ``max_memory``, else half the available memory."""
    if max_memory is not None:
        return max_memory
    free = available_memory()
    return None if free is None else free // 2


def min_memory(dim: int, n_rows: int | None = None) -> int:
    """The smallest ceiling for ``dim``-wide rows: one block of :data:`MIN_BLOCK_ROWS`
    float32 rows (fewer when the table has fewer) and its normalised copy (what one
    retrieval shard holds)."""
    rows = MIN_BLOCK_ROWS if n_rows is None else max(1, min(MIN_BLOCK_ROWS, int(n_rows)))
    return rows * max(int(dim), 1) * 4 * 2


def check_memory_ceiling(max_memory: int | None, dim: int, what: str, n_rows: int | None = None) -> None:
    """Raise InputError when ``max_memory`` cannot hold one block of ``dim``-wide rows
    (:func:`min_memory`; ``n_rows``: the table's rows, when known)."""
    if max_memory is None:
        return
    need = min_memory(dim, n_rows)
    if max_memory < need:
        rows = need // (max(int(dim), 1) * 8)
        raise InputError(
            f"--max-memory {max_memory:,} bytes is too small for {what}: one block of "
            f"{rows} rows x {dim} dimensions and its normalised copy need {need:,} "
            f"bytes; pass --max-memory {format_size(need)} or more"
        )


def block_rows(dim: int, bytes_per_value: int = 4, max_memory: int | None = None) -> int:
    """Rows per block so that one block of ``bytes_per_value`` scratch stays within
    :data:`BLOCK_BYTES` (and within a quarter of ``max_memory`` when that is smaller)."""
    budget = BLOCK_BYTES if max_memory is None else max(1, min(BLOCK_BYTES, max_memory // 4))
    return int(min(MAX_BLOCK_ROWS, max(1, budget // (max(int(dim), 1) * bytes_per_value))))


def _remove_file(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def spill_table(n_rows: int, dim: int, source: object) -> np.ndarray:
    """A new float32 (n_rows, dim) ``.npy`` memory map in :func:`tempfile.gettempdir`.

    The file is allocated in full up front (a full disk fails here with a clear error,
    not later with SIGBUS) and deleted when the array and every view of it are garbage
    collected, or at interpreter exit.
    """
    fd, name = tempfile.mkstemp(prefix=SPILL_PREFIX, suffix=".npy")
    os.close(fd)
    try:
        table = np.lib.format.open_memmap(name, mode="w+", dtype=np.float32, shape=(n_rows, dim))
        if hasattr(os, "posix_fallocate") and table.nbytes:
            with open(name, "r+b") as fh:
                os.posix_fallocate(fh.fileno(), 0, table.offset + table.nbytes)
    except (OSError, ValueError) as exc:
        _remove_file(name)
        raise InputError(
            f"cannot create a {n_rows * dim * 4:,}-byte temporary file for the item table of "
            f"{source} in {tempfile.gettempdir()}: {exc} (free disk space there, or set TMPDIR "
            "to a folder with room)"
        ) from exc
    weakref.finalize(table, _remove_file, name)
    return table


def spill_note(n_rows: int, dim: int, source: object, max_memory: int | None, path: str) -> str:
    """The warning that says a table was streamed to disk, and why.

    Names the folder, not the random file name, so two runs' reports stay identical.
    """
    size = n_rows * dim * 4
    ceiling = (
        f"--max-memory ({max_memory:,} bytes)" if max_memory is not None else "half the available memory"
    )
    return (
        f"item table of {source} ({n_rows:,} x {dim} float32, {size:,} bytes) exceeds {ceiling}: "
        f"streamed to a temporary file in {os.path.dirname(path)} and read in row blocks "
        "(deleted when the audit ends; set TMPDIR to place it elsewhere)"
    )


def table_file(table: np.ndarray) -> tuple[str, int] | None:
    """(file, byte offset of row 0) when ``table`` is a C-contiguous float32 2-D view into a
    memory-mapped file (a spilled table, a memory-mapped ``.npy``); None otherwise.

    Lets another process (a Dask worker) open the same rows without copying the array.
    """
    if table.dtype != np.float32 or table.ndim != 2 or not table.flags.c_contiguous:
        return None
    root: np.memmap | None = None
    obj: object = table
    while isinstance(obj, np.ndarray):
        if isinstance(obj, np.memmap):
            root = obj  # the outermost memmap is the one whose offset matches its data
        obj = obj.base
    if root is None or not getattr(root, "filename", None):
        return None
    start = table.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    return str(root.filename), int(root.offset) + int(start)


def _tokens(component: str) -> list[str]:
    """Lower-case words of one dotted-name component (snake_case and camelCase split)."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", component)
    return [re.sub(r"\d+", "", t).lower() for t in re.split(r"[^A-Za-z0-9]+", spaced) if t]


def _has_word(tokens: list[str], words: tuple[str, ...]) -> bool:
    for tok in tokens:
        for w in words:
            # "poi"/"doc" are prefixes of unrelated words (point, docker): whole token only.
            if tok == w or tok == w + "s" or (len(w) > 3 and tok.startswith(w)):
                return True
    return False


def table_role(key: str) -> str | None:
    """``item``, ``user``, ``both`` or None, from the innermost name component that says so."""
    for component in reversed(key.split(".")):
        toks = _tokens(component)
        item, user = _has_word(toks, ITEM_WORDS), _has_word(toks, USER_WORDS)
        if item and user:
            return "both"
        if item:
            return "item"
        if user:
            return "user"
    return None


@dataclass(frozen=True)
class TensorInfo:
    """Name-level facts about one tensor of a state dict."""

    key: str
    shape: tuple[int, ...]
    floating: bool

    @property
    def is_candidate(self) -> bool:
        return len(self.shape) == 2 and self.floating and not self.key.rsplit(".", 1)[-1].startswith("bias")

    @property
    def onehot_linear(self) -> bool:
        """A ``*.weight`` of a linear/fc/proj/dense layer whose input (ids) is much wider."""
        parts = self.key.split(".")
        if parts[-1] != "weight" or len(self.shape) != 2:
            return False
        toks = [t for p in parts[:-1] for t in _tokens(p)]
        return _has_word(toks, _LINEAR_WORDS) and self.shape[1] >= ONEHOT_RATIO * self.shape[0]

    def score(self, role: str) -> int:
        """Name score for ``role`` (0: the name does not say ``role``)."""
        found = table_role(self.key)
        if found not in (role, "both"):
            return 0
        toks = [t for p in self.key.split(".") for t in _tokens(p)]
        score = 10 if found == role else 5
        if any(t.startswith(w) for t in toks for w in _TABLE_WORDS):
            score += 5
        if any(t in ("pos", "position", "positional") for t in toks):
            score -= 4
        if _has_word(toks, _LINEAR_WORDS) and not self.onehot_linear:
            score -= 3
        return max(score, 1)

    def describe(self) -> str:
        # Say why a 2-D tensor is no candidate: an int/bool/complex table is a common mix-up.
        return f"{self.key} {list(self.shape)}" + ("" if self.floating else " (not floating-point)")


def tensor_infos(tensors: Mapping[str, torch.Tensor]) -> list[TensorInfo]:
    """Name, shape and dtype class of every tensor in a state dict."""
    return [TensorInfo(k, tuple(int(s) for s in t.shape), bool(t.is_floating_point())) for k, t in tensors.items()]


@dataclass
class TableChoice:
    """The tensors chosen as item and user tables, and what the reader should be told."""

    item: TensorInfo
    user: TensorInfo | None
    warnings: list[str]


def _candidates_listing(infos: list[TensorInfo]) -> str:
    cands = [i for i in infos if i.is_candidate]
    if not cands:
        return "(none)"
    return "; ".join(c.describe() for c in cands)


def resolve_key(key: str, infos: list[TensorInfo], flag: str, source: Path) -> TensorInfo:
    """The tensor named ``key`` exactly, or the one whose name ends with it."""
    by_key = {i.key: i for i in infos}
    for k in (key, key.removeprefix("module.")):
        if k in by_key:
            return by_key[k]
    matches = [i for i in infos if i.key.endswith(key) or i.key.endswith(key.removeprefix("module."))]
    dotted = [i for i in matches if i.key.endswith("." + key)]
    if len(dotted) == 1:
        return dotted[0]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise ModelLoadError(
            f"{flag} {key!r} matches several tensors in {source}: "
            + "; ".join(m.describe() for m in matches)
            + ". Give the full key."
        )
    raise ModelLoadError(
        f"{flag} {key!r} is not a tensor in {source}; 2-D tensors available: {_candidates_listing(infos)}"
    )


def _pick(infos: list[TensorInfo], role: str, exclude: str | None, source: Path) -> TensorInfo | None:
    """The unique best-scoring tensor for ``role``; None when no name says ``role``."""
    scored = [(i.score(role), i) for i in infos if i.is_candidate and i.key != exclude]
    scored = [(s, i) for s, i in scored if s > 0]
    if not scored:
        return None
    best = max(s for s, _ in scored)
    top = [i for s, i in scored if s == best]
    if len(top) > 1:
        flag = "--item-key" if role == "item" else "--user-key"
        raise AmbiguousTableError(
            f"several tensors in {source} could be the {role} table ("
            + ", ".join(t.key for t in top)
            + f"); pass {flag} with one of the candidates: {_candidates_listing(infos)}"
        )
    return top[0]


def choose_tables(
    infos: list[TensorInfo], source: Path, item_key: str | None = None, user_key: str | None = None
) -> TableChoice:
    """Find the item table (required) and the user table (optional) among ``infos``.

    Candidates are 2-D floating tensors; the unique best name score wins, ties raise
    :class:`AmbiguousTableError` listing every candidate with its shape.
    """
    warnings: list[str] = []
    user = resolve_key(user_key, infos, "--user-key", source) if user_key else None
    if item_key:
        item = resolve_key(item_key, infos, "--item-key", source)
    else:
        picked = _pick(infos, "item", user.key if user else None, source)
        if picked is None:
            rest = [
                i
                for i in infos
                if i.is_candidate and table_role(i.key) is None and (user is None or i.key != user.key)
            ]
            if not rest:
                raise ModelLoadError(
                    f"no item embedding table in {source}: no 2-D floating tensor"
                    + (f" (tensors: {'; '.join(i.describe() for i in infos[:20])})" if infos else " (no tensors)")
                )
            if len(rest) > 1:
                raise AmbiguousTableError(
                    f"cannot tell which tensor in {source} is the item table (no name says item); "
                    f"pass --item-key with one of the candidates: {_candidates_listing(infos)}"
                )
            picked = rest[0]
            warnings.append(
                f"no tensor name in {source} says 'item'; using the only 2-D tensor "
                f"{picked.describe()} as the item table"
            )
        item = picked
    if user is None:
        user = _pick(infos, "user", item.key, source)
    if user is not None and user.key == item.key:
        raise ModelLoadError(f"--item-key and --user-key both name {item.key!r} in {source}")
    return TableChoice(item, user, warnings)


def table_to_numpy(tensor: torch.Tensor, info: TensorInfo, what: str, warnings: list[str]) -> np.ndarray:
    """A contiguous float32 (rows, dim) array; transposes one-hot linear weights (and says so)."""
    if not tensor.is_floating_point():
        raise ModelLoadError(f"{what} {info.key!r} holds {tensor.dtype} values, not floating-point embeddings")
    arr = tensor.detach().cpu().float().numpy()
    if info.onehot_linear:
        warnings.append(
            f"{what} {info.key!r} has shape {list(arr.shape)}: read as a linear layer over one-hot ids "
            f"and transposed to {[arr.shape[1], arr.shape[0]]}"
        )
        arr = arr.T
    return np.ascontiguousarray(arr, dtype=np.float32)


def _first_rows(rows: np.ndarray) -> str:
    shown = ", ".join(str(int(r)) for r in rows[:_FIRST_ROWS])
    return shown + (", ..." if len(rows) > _FIRST_ROWS else "")


def validate_item_table(table: np.ndarray, source: str) -> list[str]:
    """Check an item table; return warnings (all-zero rows), raise on fatal problems.

    Fatal: not 2-D, fewer than 3 rows (a rank correlation needs at least 3 items), no
    columns, NaN/inf values. Scanned in row blocks so memory-mapped tables stay mapped.
    """
    if table.ndim != 2:
        raise EmbeddingTableError(
            f"item table in {source} must be 2-D (items x dim), got shape {list(table.shape)}"
        )
    n, d = table.shape
    if n == 0:
        raise EmbeddingTableError(f"item table in {source} is empty (0 rows)")
    if n < _MIN_ITEMS:
        raise EmbeddingTableError(
            f"item table in {source} has only {n} item{'s' if n != 1 else ''}; "
            f"a frequency-norm correlation needs at least {_MIN_ITEMS} items"
        )
    if d == 0:
        raise EmbeddingTableError(f"item table in {source} has {n} rows but 0 dimensions")
    bad_parts: list[np.ndarray] = []
    zero_parts: list[np.ndarray] = []
    step = block_rows(d, bytes_per_value=1)  # np.isfinite's bool scratch is the largest
    for start in range(0, n, step):
        block = np.asarray(table[start : start + step])
        bad_parts.append(np.flatnonzero(~np.isfinite(block).all(axis=1)) + start)
        zero_parts.append(np.flatnonzero(~block.any(axis=1)) + start)
    bad = np.concatenate(bad_parts)
    if bad.size:
        raise EmbeddingTableError(
            f"item table in {source} has {bad.size} row{'s' if bad.size != 1 else ''} with NaN or "
            f"infinite values (rows {_first_rows(bad)})"
        )
    zero = np.concatenate(zero_parts)
    if zero.size:
        return [
            f"item table in {source} has {zero.size} all-zero row{'s' if zero.size != 1 else ''} "
            f"(rows {_first_rows(zero)}); their norm is 0"
        ]
    return []


def validate_user_table(table: np.ndarray, source: str, dim: int) -> None:
    """A user table must be 2-D, non-empty, finite and of the item table's dimension."""
    if table.ndim != 2 or table.shape[0] == 0:
        raise EmbeddingTableError(f"user table in {source} must be a non-empty 2-D array, got {list(table.shape)}")
    if table.shape[1] != dim:
        raise EmbeddingTableError(
            f"user table in {source} has dimension {table.shape[1]} but the item table has {dim}"
        )
    step = block_rows(dim, bytes_per_value=1)
    for start in range(0, table.shape[0], step):
        rows = np.flatnonzero(~np.isfinite(np.asarray(table[start : start + step])).all(axis=1))
        if rows.size:
            raise EmbeddingTableError(
                f"user table in {source} has NaN or infinite values (first row {int(rows[0]) + start})"
            )


# ---------------------------------------------------------------- raw ids


def ids_to_numpy(arr: pa.Array | pa.ChunkedArray, what: str) -> np.ndarray:
    """int64 for integer ids (floats only when integral), else an object array of str."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    t = arr.type
    if pa.types.is_integer(t):
        return arr.cast(pa.int64()).to_numpy(zero_copy_only=False)
    if pa.types.is_floating(t):
        try:
            return arr.cast(pa.int64(), safe=True).to_numpy(zero_copy_only=False)
        except pa.ArrowException as exc:  # lossy or unsupported cast
            raise IdMappingError(f"{what} holds non-integer numbers; ids must be integers or strings") from exc
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return arr.cast(pa.string()).to_numpy(zero_copy_only=False)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        try:
            return arr.cast(pa.string()).to_numpy(zero_copy_only=False)
        except pa.ArrowInvalid as exc:  # bytes that are not UTF-8 (e.g. a Latin-1 file)
            raise IdMappingError(
                f"{what} holds ids that are not valid UTF-8 text (e.g. {_first_non_utf8(arr)!r}); "
                "re-save the file as UTF-8"
            ) from exc
    raise IdMappingError(f"{what} has type {t}; ids must be integers or strings")


def _first_non_utf8(arr: pa.Array) -> bytes | None:
    """The first value of a binary array that does not decode as UTF-8 (error path only)."""
    for value in arr.to_pylist():
        if value is not None:
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                return bytes(value)
    return None


def check_unique_ids(ids: np.ndarray, source: str) -> None:
    """Raise IdMappingError naming the first duplicated id (by row) and the rows holding it."""
    if ids.size < 2:
        return
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    repeat = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1]) + 1
    if repeat.size == 0:
        return
    first_row = int(order[repeat].min())
    dup = ids[first_row]
    dup = dup.item() if isinstance(dup, np.generic) else dup  # 7, not np.int64(7)
    rows = np.flatnonzero(ids == dup)
    raise IdMappingError(
        f"duplicate item id {dup!r} in {source} (rows {_first_rows(rows)}); "
        "each table row needs its own id"
    )


def read_id_file(path: Path) -> np.ndarray:
    """Raw ids, one per row in row order: .txt/.csv (one per line), .npy, or Parquet (first column)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"file not found: {path}")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            arr = np.load(path, allow_pickle=False)
            if arr.ndim != 1:
                raise IdMappingError(f"item ids in {path} must be a 1-D array, got shape {list(arr.shape)}")
            column = pa.array(arr)
        elif suffix in (".parquet", ".pq"):
            table = pq.read_table(path)
            if table.num_columns == 0:
                raise IdMappingError(f"item ids file {path} has no columns")
            column = table.column(0)
        else:
            column = _read_text_ids(path)
    except (OSError, ValueError, pa.ArrowException) as exc:
        if isinstance(exc, IdMappingError):
            raise
        raise IdMappingError(f"cannot read item ids from {path}: {exc}") from exc
    if column.null_count:
        nulls = np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))
        raise IdMappingError(f"item ids file {path} has {nulls.size} empty ids (rows {_first_rows(nulls)})")
    return ids_to_numpy(column, f"item ids file {path}")


def _read_text_ids(path: Path) -> pa.ChunkedArray:
    """One id per line; a first line naming an id column (id, item_id, ...) is a header."""
    with open(path, "rb") as fh:
        first = fh.readline().decode("utf-8", errors="replace").strip()
    first_field = first.split(",")[0].strip().strip('"').lower() if path.suffix.lower() == ".csv" else first.lower()
    header = first_field in _ID_COLUMN_NAMES
    delimiter = "," if path.suffix.lower() == ".csv" else "\x1f"  # .txt: whole line is the id
    table = pacsv.read_csv(
        path,
        read_options=pacsv.ReadOptions(autogenerate_column_names=not header, skip_rows=0),
        parse_options=pacsv.ParseOptions(delimiter=delimiter),
    )
    return table.column(0)


# ---------------------------------------------------------------- table files


def read_npy_table(
    path: Path, mmap_threshold: int = 256 << 20, *, max_memory: int | None = None
) -> tuple[np.ndarray, list[str]]:
    """An item table from ``.npy`` (no pickles).

    Memory-mapped when the file is large (``mmap_threshold``) or exceeds the memory
    ceiling (``max_memory``, else half the available memory); a table that needs
    converting to float32 and exceeds the ceiling is converted block by block into a
    temporary memory map (:func:`spill_table`) instead of RAM.
    """
    budget = memory_budget(max_memory)
    try:
        size = path.stat().st_size
        big = size >= mmap_threshold or (budget is not None and size > budget)
        arr = np.load(path, allow_pickle=False, mmap_mode="r" if big else None)
    except (ValueError, EOFError) as exc:  # EOFError: header cut off
        raise ModelLoadError(f"cannot read {path} as a numeric .npy table: {exc}") from exc
    except OSError as exc:
        raise ModelLoadError(f"cannot read {path}: {exc}") from exc
    if arr.dtype.kind not in "fiu":
        raise ModelLoadError(f"{path} holds {arr.dtype} values, not a numeric embedding table")
    warnings: list[str] = []
    if arr.dtype.kind in "iu":
        warnings.append(f"{path} holds integer values ({arr.dtype}); read as float32")
    if arr.dtype != np.float32 or not arr.flags.c_contiguous:
        n_bytes = int(np.prod(arr.shape, dtype=np.int64)) * 4
        if arr.ndim == 2 and arr.shape[0] > 0 and budget is not None and n_bytes > budget:
            check_memory_ceiling(max_memory, arr.shape[1], f"the item table in {path}", arr.shape[0])
            out = spill_table(arr.shape[0], arr.shape[1], path)
            step = block_rows(arr.shape[1], max_memory=max_memory)
            for start in range(0, arr.shape[0], step):
                out[start : start + step] = arr[start : start + step]
            out.flush()
            warnings.append(spill_note(arr.shape[0], arr.shape[1], path, max_memory, str(out.filename)))
            return out, warnings
        arr = np.ascontiguousarray(arr, dtype=np.float32)
    return arr, warnings


def _is_float_list(t: pa.DataType) -> bool:
    return (
        pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
    ) and pa.types.is_floating(t.value_type)


def read_parquet_table(
    path: Path,
    vector_col: str | None = None,
    *,
    max_memory: int | None = None,
    warnings: list[str] | None = None,
) -> tuple[np.ndarray, np.ndarray | None, str]:
    """(table, ids, vector column) from a Parquet file of an id column and a float-list column.

    Read in record batches into one preallocated float32 array: in RAM when the table
    fits the memory ceiling (``max_memory``, else half the available memory), otherwise a
    temporary disk-backed memory map (:func:`spill_table`; a note is appended to
    ``warnings``). Raises InputError when ``max_memory`` cannot hold one row block.
    """
    try:
        pf = pq.ParquetFile(path, pre_buffer=False)  # stream, do not buffer column chunks ahead
    except (OSError, pa.ArrowException) as exc:
        raise ModelLoadError(f"cannot read {path} as Parquet: {exc}") from exc
    schema = pf.schema_arrow
    vec_cols = [f.name for f in schema if _is_float_list(f.type)]
    if vector_col is not None:
        if vector_col not in schema.names:
            raise ModelLoadError(
                f"--item-key {vector_col!r} is not a column of {path}; float-list columns: {vec_cols or '(none)'}"
            )
        if vector_col not in vec_cols:
            raise ModelLoadError(
                f"column {vector_col!r} of {path} has type {schema.field(vector_col).type}, not a list of floats"
            )
    elif len(vec_cols) == 1:
        vector_col = vec_cols[0]
    elif not vec_cols:
        raise ModelLoadError(
            f"{path} has no list-of-float column to read as embeddings; columns: "
            + ", ".join(f"{f.name} ({f.type})" for f in schema)
        )
    else:
        raise AmbiguousTableError(
            f"several list-of-float columns in {path} could be the item table: "
            + ", ".join(vec_cols)
            + "; pass --item-key with the column name"
        )
    id_col = _parquet_id_column(schema, path)
    n = pf.metadata.num_rows
    vtype = schema.field(vector_col).type
    dim: int | None = vtype.list_size if pa.types.is_fixed_size_list(vtype) else None
    batch_rows = PARQUET_BATCH_ROWS
    if max_memory is not None:
        width = dim if dim is not None else _first_vector_length(pf, vector_col)
        if width:
            check_memory_ceiling(max_memory, width, f"the item table in {path}", n)
            # A batch (Arrow's decoded copy and numpy's view of it) takes <= 1/8 of the ceiling.
            batch_rows = int(min(PARQUET_BATCH_ROWS, max(MIN_BLOCK_ROWS, max_memory // (8 * width * 4))))
    budget = memory_budget(max_memory)
    out: np.ndarray | None = None
    ids: list[pa.Array] = []
    row = 0
    columns = [vector_col] + ([id_col] if id_col else [])
    for batch in pf.iter_batches(batch_size=batch_rows, columns=columns):
        vec = batch.column(vector_col)
        if vec.null_count:
            nulls = np.flatnonzero(vec.is_null().to_numpy(zero_copy_only=False)) + row
            raise EmbeddingTableError(f"{path} column {vector_col!r} has empty vectors (rows {_first_rows(nulls)})")
        if not pa.types.is_fixed_size_list(vtype):  # variable length: row 0 sets the width
            lengths = pc.list_value_length(vec).to_numpy(zero_copy_only=False)
            if dim is None and lengths.size:
                dim = int(lengths[0])
            bad = np.flatnonzero(lengths != dim)
            if bad.size:
                raise EmbeddingTableError(
                    f"{path} column {vector_col!r}: vectors have different lengths (row 0 has {dim}, "
                    f"row {int(bad[0]) + row} has {int(lengths[bad[0]])})"
                )
        if out is None:
            if dim and budget is not None and n * dim * 4 > budget:
                out = spill_table(n, dim, path)
                if warnings is not None:
                    warnings.append(spill_note(n, dim, path, max_memory, str(out.filename)))
            else:
                out = np.empty((n, dim or 0), dtype=np.float32)
        values = vec.flatten().to_numpy(zero_copy_only=False)  # nulls inside vectors become NaN
        out[row : row + batch.num_rows] = values.reshape(batch.num_rows, -1)
        if id_col:
            ids.append(batch.column(id_col))
        row += batch.num_rows
    if out is None:
        out = np.empty((0, dim or 0), dtype=np.float32)
    if isinstance(out, np.memmap):
        out.flush()
    id_arr = None
    if id_col:
        chunked = pa.chunked_array(ids, type=schema.field(id_col).type)
        if chunked.null_count:
            nulls = np.flatnonzero(chunked.is_null().to_numpy(zero_copy_only=False))
            raise IdMappingError(
                f"{path} id column {id_col!r} has {nulls.size} empty ids (rows {_first_rows(nulls)})"
            )
        id_arr = ids_to_numpy(chunked, f"{path} column {id_col!r}")
    return out, id_arr, vector_col


def _first_vector_length(pf: pq.ParquetFile, column: str) -> int | None:
    """Length of the first non-null vector of a list column (one small batch read)."""
    batch = next(pf.iter_batches(batch_size=MIN_BLOCK_ROWS, columns=[column]), None)
    if batch is None:
        return None
    lengths = pc.list_value_length(batch.column(0)).drop_null().to_numpy(zero_copy_only=False)
    return int(lengths[0]) if lengths.size else None


def _parquet_id_column(schema: pa.Schema, path: Path) -> str | None:
    """The id column: the one integer/string column, or the one named like an item id."""
    def ok(t: pa.DataType) -> bool:
        if pa.types.is_dictionary(t):
            t = t.value_type
        return pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)

    cands = [f.name for f in schema if ok(f.type)]
    if len(cands) <= 1:
        return cands[0] if cands else None
    lowered = {c.lower(): c for c in cands}
    for name in _ID_COLUMN_NAMES:
        if name in lowered:
            return lowered[name]
    raise ModelLoadError(
        f"several columns of {path} could hold the item ids ({', '.join(cands)}); name one of them "
        "'item_id' or pass --item-ids"
    )

"""Reading ``.npy`` files safely: never a pickle, never an allocation the file cannot back.

``np.load`` allocates what the header declares before reading, so a crafted header
(shape (2**60,)) asked for exabytes: the header is checked against the file's size first.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from auditor.errors import InputError, ModelLoadError
from auditor.memory import block_rows, check_memory_ceiling, memory_budget, spill_note, spill_table


def load_npy(path: Path, what: str, error: type[InputError], mmap: bool = False) -> np.ndarray:
    """A ``.npy`` array (never a pickle), its header checked against the file first:
    declared bytes beyond the file's are refused with ``error`` naming ``what``."""
    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read_header = (
                np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            )
            shape, _fortran, dtype = read_header(fh, max_header_size=1 << 16)
            body = path.stat().st_size - fh.tell()
    except (ValueError, EOFError, SyntaxError) as exc:  # bad magic, cut-off or malformed header
        raise error(f"cannot read {path} as a {what}: the header is not a valid .npy header") from exc
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror}") from exc
    if dtype.hasobject:
        raise error(f"cannot read {path} as a {what}: it holds Python objects ({dtype}), which are never unpickled")
    declared = int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
    if declared > body:
        raise error(
            f"cannot read {path} as a {what}: its header declares shape {list(shape)} of {dtype} "
            f"({declared:,} bytes) but the file holds {body:,} bytes of data (truncated or corrupt)"
        )
    try:
        array: np.ndarray = np.load(path, allow_pickle=False, mmap_mode="r" if mmap else None)
    except (ValueError, EOFError) as exc:
        raise error(f"cannot read {path} as a {what}: {exc}") from exc
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror}") from exc
    return array


def read_npy_table(
    path: Path, mmap_threshold: int = 256 << 20, *, max_memory: int | None = None
) -> tuple[np.ndarray, list[str]]:
    """An item table from ``.npy`` and the warnings to pass on.

    Memory-mapped when the file is large (``mmap_threshold``) or exceeds the memory
    ceiling (``max_memory``, else half the available memory); a table that needs
    converting to float32 and exceeds the ceiling is converted block by block into a
    temporary memory map (:func:`~auditor.memory.spill_table`) instead of RAM.
    """
    budget = memory_budget(max_memory)
    size = path.stat().st_size
    big = size >= mmap_threshold or (budget is not None and size > budget)
    arr = load_npy(path, "numeric .npy table", ModelLoadError, mmap=big)
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

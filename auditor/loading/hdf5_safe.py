"""HDF5 objects reached and read without leaving the model file.

HDF5 can point outside the file it is in: an *external link* opens another HDF5 file, a
*virtual dataset* maps other files' datasets, and *external storage* reads a dataset's
raw bytes from any local path (``/etc/passwd``, ``/proc/self/environ``, a FIFO that
blocks forever). A model file written by someone else must not make popaudit read what
it names, so all three are refused with a clear error rather than allowed under a rule
(the ONNX reader's "inside the model's folder" rule buys nothing here: Keras never
writes any of them). Soft and hard links stay inside the file; every group is entered
once (a link to an ancestor would make the walk endless).

Datasets are read in row blocks into one float32 array, after the declared size is
checked against the bytes the file stores for them and against the memory ceiling
(:func:`auditor.memory.check_expansion`): a gzip-compressed dataset or one of unwritten
chunks cannot make popaudit decompress gigabytes to find out how large it is.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from auditor.errors import ModelLoadError
from auditor.loading.pickle_scan import shown
from auditor.memory import BLOCK_BYTES, check_expansion

MAX_OBJECTS = 100_000
"""Groups and datasets one walk may visit: a file cannot make it endless."""
_OUTSIDE = "popaudit reads only what the model file itself holds"


class H5Walk:
    """Looks members up by link, refusing links that leave the file; one per open file."""

    def __init__(self, h5py: Any, path: Path) -> None:
        self._h5py, self.path = h5py, path
        self._seen: set[Any] = set()
        self._steps = 0

    def get(self, group: Any, name: str) -> Any | None:
        """Member ``name`` of ``group`` (a path of ``/``-separated parts is followed part by
        part), or None when there is none; ModelLoadError for a link out of the file."""
        obj = group
        for part in (p for p in name.split("/") if p):
            if not hasattr(obj, "keys"):
                return None
            link = obj.get(part, getlink=True)
            if link is None:
                return None
            where = f"{obj.name.rstrip('/')}/{part}"
            if isinstance(link, self._h5py.ExternalLink):
                raise ModelLoadError(
                    f"cannot read {self.path}: {shown(where)} is an HDF5 external link to another file; {_OUTSIDE}"
                )
            if not isinstance(link, (self._h5py.HardLink, self._h5py.SoftLink)):
                raise ModelLoadError(f"cannot read {self.path}: {shown(where)} is a user-defined HDF5 link; {_OUTSIDE}")
            obj = obj.get(part)
            if obj is None:  # a dangling soft link
                return None
            self._count()
        if hasattr(obj, "shape"):
            refuse_outside_storage(obj, self.path)
        return obj

    def enter(self, group: Any) -> bool:
        """True the first time ``group`` (by object, whatever link reached it) is entered."""
        self._count()
        if group.id in self._seen:
            return False
        self._seen.add(group.id)
        return True

    def _count(self) -> None:
        self._steps += 1
        if self._steps > MAX_OBJECTS:
            raise ModelLoadError(f"cannot read {self.path}: it links more than {MAX_OBJECTS:,} HDF5 objects")


def refuse_outside_storage(ds: Any, path: Path) -> None:
    """ModelLoadError for a dataset whose data lives in other files (virtual datasets,
    external storage): checked before a byte of it is read."""
    if ds.is_virtual:
        raise ModelLoadError(
            f"cannot read {path}: dataset {shown(ds.name)} is an HDF5 virtual dataset, whose data comes from "
            f"other files; {_OUTSIDE}"
        )
    if ds.external:
        raise ModelLoadError(
            f"cannot read {path}: dataset {shown(ds.name)} keeps its data in {len(ds.external)} file(s) outside "
            f"the model (HDF5 external storage); {_OUTSIDE}"
        )


def read_float32(ds: Any, key: str, path: Path, max_memory: int | None) -> np.ndarray:
    """A float dataset as a C-contiguous float32 array, read in row blocks.

    The declared size (and one chunk, which HDF5 decompresses whole) is checked first
    against the bytes stored for the dataset and against the memory ceiling.
    """
    refuse_outside_storage(ds, path)
    itemsize = int(ds.dtype.itemsize)
    chunk = math.prod(ds.chunks) if ds.chunks else 0
    declared = max(int(ds.size) * max(itemsize, 4), chunk * itemsize)
    stored = int(ds.id.get_storage_size())
    what = f"cannot read {path}: dataset {shown(key)} of shape {list(ds.shape)}"
    check_expansion(what, declared, stored, max_memory, ModelLoadError)
    out = np.empty(ds.shape, dtype=np.float32)
    if ds.ndim == 0 or ds.size == 0:
        out[...] = ds[()] if ds.size else out
        return out
    row = max(1, int(ds.size) // int(ds.shape[0])) * itemsize
    step = max(1, BLOCK_BYTES // row)
    if ds.chunks:  # whole chunks per block: a chunk is never decompressed twice
        step = max(ds.chunks[0], step - step % ds.chunks[0])
    for start in range(0, int(ds.shape[0]), step):
        block = np.s_[start : min(start + step, int(ds.shape[0]))]
        ds.read_direct(out, block, block)
    return out


__all__ = ["H5Walk", "MAX_OBJECTS", "read_float32", "refuse_outside_storage"]

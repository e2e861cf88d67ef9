"""popaudit's own constructors for the torch and numpy globals the restricted unpickler allows.

Nothing here calls a function named by a file: tensors are strided views of storages whose
bounds are checked first, numpy arrays are built from byte strings of the exact length their
shape and (numeric) dtype need, and markers such as ``torch.FloatStorage`` are inert objects.
:class:`FileBytes` gives a storage the bytes it occupies in the file, memory-mapped.
:func:`torch_numpy_allowlist` maps each allowed ``(module, qualname)`` to one of these.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from auditor.errors import ModelLoadError
from auditor.loading.pickle_scan import CorruptFileError, shown

MAX_DIMS = 64  # torch's own limit on a tensor's rank


class Inert:
    """Base of popaudit's marker objects: a BUILD on them is a malformed file."""

    __slots__ = ()

    def __setstate__(self, state: Any) -> None:
        raise ModelLoadError(f"the pickle sets the state of {self!r}, which torch files never do")


class Marker(Inert):
    """A class the pickle names only as an argument (``numpy.ndarray``); never constructed."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


class StorageType(Inert):
    """A torch storage class (``torch.FloatStorage`` ...): names the dtype of a persistent id."""

    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype: torch.dtype) -> None:
        self.name, self.dtype = name, dtype

    def __repr__(self) -> str:
        return f"torch.{self.name}"


class Storage(Inert):
    """One storage's bytes (a 1-D uint8 tensor, memory-mapped or on the meta device)."""

    __slots__ = ("data", "dtype", "key")

    def __init__(self, data: torch.Tensor, dtype: torch.dtype, key: str) -> None:
        self.data, self.dtype, self.key = data, dtype, key

    def typed(self, dtype: torch.dtype) -> torch.Tensor:
        """The bytes as a 1-D tensor of ``dtype``."""
        if self.data.numel() % dtype.itemsize:
            raise ModelLoadError(f"storage {shown(self.key)} of {self.data.numel()} bytes does not hold whole {dtype}")
        return self.data.view(dtype)

    def __repr__(self) -> str:
        return f"<storage {shown(self.key)}>"


class FileBytes:
    """Byte ranges of the file as uint8 tensors: mapped copy-on-write, or read if mapping fails."""

    def __init__(self, path: Path, fh: io.BufferedIOBase, size: int) -> None:
        self._path, self._fh, self._size = path, fh, size
        self._map: np.ndarray[Any, Any] | None = None
        self._failed = False

    def tensor(self, offset: int, n: int) -> torch.Tensor:
        """``n`` bytes at ``offset`` as a 1-D uint8 tensor (the bytes of one :class:`Storage`)."""
        if n == 0:
            return torch.empty(0, dtype=torch.uint8)
        if self._map is None and not self._failed:
            try:  # mode "c": pages are private copies; nothing is ever written to the file
                self._map = np.memmap(self._path, dtype=np.uint8, mode="c")
            except (OSError, ValueError):
                self._failed = True
        if self._map is not None and offset + n <= len(self._map):
            arr = np.asarray(self._map[offset : offset + n])
            return torch.from_numpy(arr.copy() if offset % 16 else arr)  # misaligned data is copied
        self._fh.seek(offset)
        buf = bytearray(n)
        if self._fh.readinto(buf) != n:
            raise CorruptFileError("the file ends inside a storage (truncated?)")
        return torch.from_numpy(np.frombuffer(buf, dtype=np.uint8))


STORAGE_TYPES = {
    "DoubleStorage": torch.float64, "FloatStorage": torch.float32, "HalfStorage": torch.float16,
    "BFloat16Storage": torch.bfloat16, "LongStorage": torch.int64, "IntStorage": torch.int32,
    "ShortStorage": torch.int16, "CharStorage": torch.int8, "ByteStorage": torch.uint8,
    "BoolStorage": torch.bool, "ComplexDoubleStorage": torch.complex128,
    "ComplexFloatStorage": torch.complex64, "QInt8Storage": torch.int8, "QUInt8Storage": torch.uint8,
    "QInt32Storage": torch.int32, "QUInt4x2Storage": torch.uint8, "QUInt2x4Storage": torch.uint8,
    "UntypedStorage": torch.uint8,
}  # fmt: skip
_DTYPE_NAMES = (
    "float64 double float32 float float16 half bfloat16 complex128 cdouble complex64 cfloat "
    "complex32 chalf int64 long int32 int int16 short int8 uint8 uint16 uint32 uint64 bool "
    "float8_e4m3fn float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz"
).split()
_NUMPY_CODES = frozenset("b1 i1 i2 i4 i8 u1 u2 u4 u8 f2 f4 f8 c8 c16".split())
_TEXT = re.compile(r"[US][1-9]\d{0,5}")
"""Fixed-width text dtypes (numpy's str_/bytes_), at most 999,999 characters an element."""
_UNIT = re.compile(rb"Y|M|W|D|h|m|s|ms|us|ns|ps|fs|as|generic")
_DEVICE = re.compile(r"[a-z_]{1,32}(:\d{1,5})?")


class _GuardTensor(torch.Tensor):
    """What rebuilt tensors are while unpickling: a BUILD or SETITEM on a tensor is refused."""

    __slots__ = ()

    def __setstate__(self, state: Any) -> None:
        raise ModelLoadError("the pickle sets the state of a tensor, which torch files never do")

    def __setitem__(self, key: Any, value: Any) -> None:
        raise ModelLoadError("the pickle writes into a tensor, which torch files never do")


class RebuildContext:
    """Per-load state of the rebuilds: guarded tensors and requires_grad flags."""

    def __init__(self) -> None:
        self.tensors: list[torch.Tensor] = []
        self.requires_grad: dict[int, bool] = {}
        """id(tensor) -> the requires_grad flag its rebuild recorded (TorchScript needs it)."""
        self.rebuilds: tuple[Callable[..., Any], ...] = ()

    def guard(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` as a :class:`_GuardTensor` until :meth:`release`."""
        guarded = tensor.as_subclass(_GuardTensor)
        self.tensors.append(guarded)
        return guarded

    def release(self) -> None:
        """Turn the guarded tensors back into plain ``torch.Tensor`` objects, in place."""
        for tensor in self.tensors:
            tensor.__class__ = torch.Tensor
        self.tensors.clear()

    def unread(self, module: str, name: str, *args: Any) -> Any:
        """An inert record of a call popaudit does not make (the unpickler supplies it)."""
        raise ModelLoadError(f"{module}.{name} is not read")


def check_int(value: Any, what: str) -> int:
    """``value`` when it is a plain int, else a ModelLoadError naming ``what``."""
    if type(value) is not int:  # bools and placeholders are not sizes
        raise ModelLoadError(f"{what} is a {type(value).__name__}, not an integer")
    return value


def _ints(values: Any, what: str) -> tuple[int, ...]:
    if not isinstance(values, (tuple, list)) or len(values) > MAX_DIMS:
        raise ModelLoadError(f"{what} is not a tuple of at most {MAX_DIMS} integers")
    return tuple(check_int(v, what) for v in values)


def check_call(ok: bool, what: str) -> None:
    """Refuse a call of an allowed global with arguments its writers never use."""
    if not ok:
        raise ModelLoadError(f"the pickle calls {what} with arguments torch and numpy never write")


def _rebuild(ctx: RebuildContext, storage: Any, offset: Any, size: Any, stride: Any, dtype: Any = None) -> torch.Tensor:
    """A strided view of a storage, its bounds checked here (offsets are in elements)."""
    if not isinstance(storage, Storage):
        raise ModelLoadError(f"a tensor is built on a {type(storage).__name__}, not on a storage")
    dtype = storage.dtype if dtype is None else dtype
    if not isinstance(dtype, torch.dtype):
        raise ModelLoadError(f"a tensor's dtype is a {type(dtype).__name__}")
    shape, strides = _ints(size, "a tensor's size"), _ints(stride, "a tensor's stride")
    start = check_int(offset, "a tensor's storage offset")
    if len(shape) != len(strides) or min((start, *shape, *strides)) < 0:
        raise ModelLoadError(f"a tensor has size {list(shape)}, stride {list(strides)} and offset {start}")
    flat = storage.typed(dtype)
    end = start + sum((d - 1) * s for d, s in zip(shape, strides)) + 1 if math.prod(shape) else start
    if end > flat.numel():
        raise ModelLoadError(
            f"a tensor of size {list(shape)} at offset {start} reaches element {end} of storage "
            f"{shown(storage.key)}, which holds {flat.numel()}"
        )
    if math.prod(shape) > flat.numel() - start:
        # Zero or overlapping strides: the view repeats elements, and copying it (any
        # table read) would allocate more than the file holds. What a view covers is
        # counted from its size, not from the span its strides reach.
        raise ModelLoadError(
            f"a tensor of size {list(shape)} and stride {list(strides)} has {math.prod(shape):,} elements but "
            f"storage {shown(storage.key)} holds {flat.numel() - start:,} from offset {start}: its elements "
            "alias each other (zero or overlapping strides), which torch.save never writes for a table"
        )
    return ctx.guard(flat.as_strided(shape, strides, start))


def _parameter(ctx: RebuildContext, data: Any, requires_grad: Any = False, *_: Any) -> Any:
    """Parameters become plain tensors; their requires_grad flag is remembered."""
    if isinstance(data, torch.Tensor):
        ctx.requires_grad[id(data)] = bool(requires_grad)
    return data


def _from_type_v2(ctx: RebuildContext, func: Any, new_type: Any, args: Any, state: Any) -> Any:
    """``torch._tensor._rebuild_from_type_v2``: the plain tensor when ``func`` is one of ours."""
    if any(func is f for f in ctx.rebuilds) and isinstance(args, tuple):
        return func(*args)
    return ctx.unread("torch._tensor", "_rebuild_from_type_v2", func, new_type, args, state)


def _device(*args: Any) -> torch.device:
    check_call(1 <= len(args) <= 2 and isinstance(args[0], str) and bool(_DEVICE.fullmatch(args[0])), "torch.device")
    check_call(len(args) == 1 or type(args[1]) is int and 0 <= args[1] < 1 << 16, "torch.device")
    try:
        return torch.device(*args)
    except RuntimeError as exc:
        raise ModelLoadError(f"unknown torch device {shown(args[0])}") from exc


class NumpyDtype(Inert):
    """A ``numpy.dtype`` call: numeric codes, fixed-width text (``U5``, ``S3``) and datetimes
    (``M8``/``m8`` with their unit) and a byte order only (no object, void or record dtypes):
    numpy writes the others for string ids and timestamps, inert data like numbers."""

    __slots__ = ("spec", "order", "extra", "unit")

    def __init__(self, spec: Any, *_: Any) -> None:
        self.spec, self.order, self.extra, self.unit = spec, "=", False, ""

    def __setstate__(self, state: Any) -> None:  # (version, order, subarray, names, fields, ..., metadata)
        ok = isinstance(state, tuple) and len(state) >= 5 and isinstance(state[1], str)
        self.order = state[1] if ok else "?"
        self.extra = not ok or any(s is not None for s in state[2:5])
        meta = state[8] if ok and len(state) >= 9 and isinstance(state[8], tuple) and len(state[8]) == 2 else None
        unit = meta[1] if meta is not None and isinstance(meta[1], tuple) and len(meta[1]) == 4 else None
        if unit is not None and isinstance(unit[0], bytes) and _UNIT.fullmatch(unit[0]) and type(unit[1]) is int \
                and 0 < unit[1] < 1 << 20:  # (b"D", 1, 1, 1): days; (b"s", 5, ...): five seconds
            self.unit = f"[{unit[1] if unit[1] > 1 else ''}{unit[0].decode()}]"

    def resolve(self) -> np.dtype[Any] | None:
        """The real dtype, or None for one popaudit does not rebuild."""
        if self.extra or self.order not in ("<", ">", "|", "="):
            return None
        if isinstance(self.spec, str) and _TEXT.fullmatch(self.spec):
            dtype: np.dtype[Any] = np.dtype(self.spec)
        elif self.spec in ("M8", "m8") and self.unit:
            dtype = np.dtype(self.spec + self.unit)
        elif self.spec in _NUMPY_CODES:
            dtype = np.dtype(self.spec)
        else:
            return None
        if self.order == "<":
            return dtype.newbyteorder("<")
        return dtype.newbyteorder(">") if self.order == ">" else dtype

    def __repr__(self) -> str:
        return f"numpy.dtype({shown(self.spec)})"


class SafeArray(np.ndarray[Any, Any]):
    """An ndarray whose BUILD state popaudit checks before numpy sees it.

    ``unread`` says why an array of a dtype popaudit does not rebuild (object, string,
    record) was left empty.
    """

    unread: str | None = None

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise ModelLoadError("a numpy array has a malformed state")
        shape, dtype, fortran, raw = state[-4:]
        dims = _ints(shape, "a numpy array's shape")
        real = dtype.resolve() if isinstance(dtype, NumpyDtype) else None
        if real is None or not isinstance(raw, (bytes, bytearray, str)):
            self.unread = f"dtype {dtype!r}"
            return
        raw = raw.encode("latin-1") if isinstance(raw, str) else raw  # Python 2 str payloads
        _check_bytes(dims, real, len(raw))
        checked: Any = (1, dims, real, bool(fortran), raw)  # every field validated above
        np.ndarray.__setstate__(self, checked)


def _check_bytes(dims: tuple[int, ...], dtype: np.dtype[Any], n: int) -> None:
    if min(dims, default=0) < 0 or math.prod(dims) * dtype.itemsize != n:
        raise ModelLoadError(f"a numpy array of shape {list(dims)} and dtype {dtype} comes with {n} bytes")


def _np_reconstruct(subtype: Any, *_: Any) -> SafeArray:
    if subtype is not _NDARRAY:
        raise ModelLoadError("numpy _reconstruct of another class than numpy.ndarray")
    return np.ndarray.__new__(SafeArray, (0,), np.uint8)


def _np_frombuffer(buf: Any, dtype: Any, shape: Any, order: Any = "C") -> SafeArray:
    real = dtype.resolve() if isinstance(dtype, NumpyDtype) else None
    dims = _ints(shape, "a numpy array's shape")
    check_call(real is not None and isinstance(buf, (bytes, bytearray)) and order in ("C", "F"), "numpy _frombuffer")
    assert real is not None
    _check_bytes(dims, real, len(buf))
    return np.frombuffer(buf, dtype=real).reshape(dims, order=order).view(SafeArray)


def _np_scalar(dtype: Any, data: Any = None) -> Any:
    """A numpy scalar as the plain Python value it holds (BUILD cannot touch it): a number,
    ``str`` for ``np.str_`` (cornac ids fit on a numpy string array), ``bytes`` for
    ``np.bytes_``, ISO text for a ``datetime64``/``timedelta64`` (a timestamp in hparams)."""
    real = dtype.resolve() if isinstance(dtype, NumpyDtype) else None
    if real is None:
        raise ModelLoadError(f"the pickle holds a numpy scalar of {dtype!r}, a dtype popaudit does not rebuild "
                             "(numbers, fixed-width text and datetimes only)")  # fmt: skip
    data = data.encode("latin-1") if isinstance(data, str) else data
    check_call(isinstance(data, bytes) and len(data) == real.itemsize, f"numpy scalar of dtype {real}")
    value = np.frombuffer(data, dtype=real)[0]
    if real.kind == "U":
        return str(value)
    if real.kind == "S":
        return bytes(value)
    return str(value) if real.kind in "Mm" else value.item()


_NDARRAY = Marker("numpy.ndarray")


def torch_numpy_allowlist(ctx: RebuildContext) -> dict[tuple[str, str], Any]:
    """The torch and numpy part of the allowlist, bound to ``ctx``."""
    v1 = lambda s, o, z, t, *_: _rebuild(ctx, s, o, z, t)  # noqa: E731
    v2 = lambda s, o, z, t, rg=False, *_: _parameter(ctx, _rebuild(ctx, s, o, z, t), rg)  # noqa: E731
    v3 = lambda s, o, z, t, rg, hooks, dt, *_: _parameter(ctx, _rebuild(ctx, s, o, z, t, dt), rg)  # noqa: E731
    ctx.rebuilds = (v1, v2, v3)
    table: dict[tuple[str, str], Any] = {
        ("torch._utils", "_rebuild_tensor"): v1,
        ("torch._utils", "_rebuild_tensor_v2"): v2,
        ("torch._utils", "_rebuild_tensor_v3"): v3,
        ("torch._utils", "_rebuild_parameter"): lambda *a: _parameter(ctx, *a),
        ("torch._utils", "_rebuild_parameter_with_state"): lambda *a: _parameter(ctx, *a),
        ("torch._tensor", "_rebuild_from_type_v2"): lambda *a: _from_type_v2(ctx, *a),
        ("torch", "device"): _device,
        ("torch", "Size"): lambda dims: torch.Size(_ints(dims, "torch.Size")),
        ("numpy", "ndarray"): _NDARRAY,
        ("numpy", "dtype"): NumpyDtype,
    }
    for name, dtype in STORAGE_TYPES.items():
        table[("torch", name)] = StorageType(name, dtype)
    untyped = table[("torch", "UntypedStorage")]
    table[("torch.storage", "UntypedStorage")] = table[("torch.storage", "TypedStorage")] = untyped
    for name in _DTYPE_NAMES:
        if isinstance(getattr(torch, name, None), torch.dtype):
            table[("torch", name)] = getattr(torch, name)
    for core in ("numpy.core", "numpy._core"):
        table[(f"{core}.multiarray", "_reconstruct")] = _np_reconstruct
        table[(f"{core}.multiarray", "scalar")] = _np_scalar
        table[(f"{core}.numeric", "_frombuffer")] = _np_frombuffer
    return table

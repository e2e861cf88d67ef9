"""A restricted unpickler: it rebuilds tensors, storages, numpy arrays and plain containers only.

Each global a pickle names is looked up in an exact allowlist of ``(module, qualname)`` pairs
that map to popaudit's own constructors; any other global becomes a :class:`Placeholder`
class made on the spot, which records how the file wanted its objects built and never
imports, calls or runs anything. Reading a model file this way runs no code from the file.

Memory and time are bounded by the file: :func:`~auditor.loading.pickle_scan.scan_pickle`
walks the opcode stream first (building nothing) and refuses lengths, frames and memo indices
the bytes cannot back, before the C unpickler allocates anything a header declares; tensors
are strided views of storages whose bounds :mod:`auditor.loading.pickle_rebuild` checks.
Walks over the result are iterative (no recursion limit).
"""

from __future__ import annotations

import _compat_pickle
import pickle
import re
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import IO, Any, ClassVar, cast

import torch

from auditor.errors import ModelLoadError
from auditor.loading.pickle_rebuild import (
    Marker,
    NumpyDtype,
    RebuildContext,
    Storage,
    StorageType,
    check_call,
    torch_numpy_allowlist,
)
from auditor.loading.pickle_scan import BoundedReader, CorruptFileError, reason, scan_pickle

MAX_WALK = 2_000_000  # module-tree steps; a file cannot make the walk exponential


class Placeholder:
    """An object of a class popaudit never imports: records how the pickle built it.

    ``args``/``kwargs`` are the constructor arguments, ``state`` the BUILD state (often the
    object's ``__dict__``), ``items`` what APPEND(S)/ADDITEMS added and ``setitems`` the
    SETITEM(S) pairs of dict subclasses. Nothing a pickle does to it runs any code.
    """

    pickle_module: ClassVar[str] = ""
    pickle_name: ClassVar[str] = ""
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    state: Any
    items: list[Any]
    setitems: list[tuple[Any, Any]]

    def __new__(cls, *args: Any, **kwargs: Any) -> Placeholder:
        self = object.__new__(cls)
        self.args, self.kwargs, self.state = args, kwargs, None
        self.items, self.setitems = [], []
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to do: ``__new__`` recorded the arguments (REDUCE calls both)."""

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __setitem__(self, key: Any, value: Any) -> None:
        self.setitems.append((key, value))

    def append(self, item: Any) -> None:
        """APPEND on a list subclass: recorded."""
        self.items.append(item)

    def extend(self, items: Iterable[Any]) -> None:
        """APPENDS on a list subclass: recorded (the unpickler passes a real list)."""
        self.items.extend(items if isinstance(items, list) else [])

    def add(self, item: Any) -> None:
        """ADDITEMS on a set subclass: recorded."""
        self.items.append(item)

    def __call__(self, *args: Any, **kwargs: Any) -> PlaceholderCall:
        call = PlaceholderCall(*args, **kwargs)
        call.func = self
        return call

    def __repr__(self) -> str:
        return f"<{qualname_of(self)} (not imported)>"


class PlaceholderCall(Placeholder):
    """What calling a placeholder instance returned: records the callee and the arguments."""

    func: Placeholder


def qualname_of(obj: Any) -> str:
    """``module.Name`` of a placeholder or placeholder class (``f()`` for a call result)."""
    calls = 0
    while isinstance(obj, PlaceholderCall):  # iterative: call chains may be long
        obj, calls = obj.func, calls + 1
    cls = obj if isinstance(obj, type) else type(obj)
    name = f"{cls.pickle_module}.{cls.pickle_name}" if issubclass(cls, Placeholder) else cls.__name__
    return name + "()" * calls


def placeholder_attrs(obj: Any) -> dict[str, Any] | None:
    """The attribute dict a placeholder's BUILD state holds (``(state, slotstate)`` merged)."""
    if not isinstance(obj, Placeholder):
        return None
    state = obj.state
    if isinstance(state, tuple) and len(state) == 2 and all(s is None or isinstance(s, dict) for s in state):
        merged = dict(state[0] or {})
        merged.update(state[1] or {})
        return {k: v for k, v in merged.items() if isinstance(k, str)}
    if isinstance(state, Mapping):
        return {k: v for k, v in state.items() if isinstance(k, str)}
    return None


def _reconstructor(ctx: _Context, cls: Any, base: Any, state: Any = None) -> Any:
    """``copyreg._reconstructor``: an instance of a placeholder class, nothing else."""
    if isinstance(cls, type) and issubclass(cls, Placeholder):
        return cls(*(() if state is None else (state,)))
    return ctx.unread("copyreg", "_reconstructor", cls, base, state)


def _nested_class(ctx: _Context, owner: Any, *args: Any) -> Any:
    """``builtins.getattr``, as protocol 2 names a nested class (``getattr(Outer, "Inner")``):
    the placeholder class of ``module.Outer.Inner``. Any other use stays an inert record."""
    if isinstance(owner, type) and issubclass(owner, Placeholder) and len(args) == 1 and isinstance(args[0], str):
        return ctx.placeholder(owner.pickle_module, f"{owner.pickle_name}.{args[0]}")
    return ctx.unread("builtins", "getattr", owner, *args)


def _pairs(items: Any, what: str) -> Any:
    check_call(isinstance(items, (list, tuple, dict)), what)
    return items


class _Context(RebuildContext):
    """Per-load state: placeholder classes (one per global) and the names they stand for."""

    def __init__(self) -> None:
        super().__init__()
        self.classes: dict[tuple[str, str], type[Placeholder]] = {}
        self.names: Counter[str] = Counter()
        """``module.name`` -> how many times the pickle named it (GLOBAL/STACK_GLOBAL, or a
        call popaudit does not make)."""

    def placeholder(self, module: str, name: str) -> type[Placeholder]:
        """The placeholder class for global ``module.name`` (made once per load)."""
        key = (module, name)
        self.names[f"{module}.{name}"] += 1
        if key not in self.classes:
            title = re.sub(r"\W", "_", name.rsplit(".", 1)[-1])[:100] or "_"
            attrs = {"pickle_module": module, "pickle_name": name, "__module__": "popaudit.placeholders"}
            self.classes[key] = type(title, (Placeholder,), attrs)
        return self.classes[key]

    def unread(self, module: str, name: str, *args: Any) -> Any:
        return self.placeholder(module, name)(*args)

    def allowlist(self) -> dict[tuple[str, str], Any]:
        """(module, qualname) -> popaudit's own constructor or marker, bound to this load."""
        table = torch_numpy_allowlist(self)
        table.update({
            ("collections", "OrderedDict"): lambda items=(): OrderedDict(_pairs(items, "OrderedDict")),
            ("collections", "defaultdict"): lambda factory=None, items=(): dict(_pairs(items, "defaultdict")),
            ("builtins", "dict"): lambda items=(): dict(_pairs(items, "dict")),
            ("builtins", "list"): lambda items=(): list(_pairs(items, "list")),
            ("builtins", "tuple"): lambda items=(): tuple(_pairs(items, "tuple")),
            ("builtins", "set"): lambda items=(): set(_pairs(items, "set")),
            ("builtins", "frozenset"): lambda items=(): frozenset(_pairs(items, "frozenset")),
            ("builtins", "complex"): _complex,
            ("builtins", "slice"): _slice,
            ("builtins", "bytes"): _bytes,
            ("builtins", "bytearray"): lambda *a: bytearray(_bytes(*a)),
            ("copyreg", "_reconstructor"): lambda *a: _reconstructor(self, *a),
            ("builtins", "getattr"): lambda *a: _nested_class(self, *a),
            ("_codecs", "encode"): _latin1,
            ("torch.jit._pickle", "restore_type_tag"): lambda value, *_: value,
        })  # fmt: skip
        for kind in ("build_intlist", "build_doublelist", "build_boollist", "build_tensorlist"):
            table[("torch.jit._pickle", kind)] = lambda items: list(_pairs(items, "a TorchScript list"))
        return table


def _complex(real: Any = 0.0, imag: Any = 0.0) -> complex:
    check_call(all(type(x) in (int, float) for x in (real, imag)), "complex")
    return complex(real, imag)


def _slice(*args: Any) -> slice:
    check_call(len(args) <= 3 and all(a is None or type(a) is int for a in args), "slice")
    return slice(*args)


def _bytes(data: Any = b"", encoding: Any = None) -> bytes:
    if isinstance(data, str) and encoding in ("latin-1", "latin1"):
        return data.encode("latin-1")
    check_call(isinstance(data, (bytes, bytearray)) and encoding is None, "bytes")  # never bytes(n)
    return bytes(data)


def _latin1(text: Any, encoding: Any = "utf-8", *_: Any) -> bytes:
    """``_codecs.encode``: how protocol 2 stores bytes; latin-1 of a str only."""
    check_call(isinstance(text, str) and encoding in ("latin1", "latin-1"), "_codecs.encode")
    return cast(str, text).encode("latin-1")


class SafeUnpickler(pickle.Unpickler):
    """The C unpickler with popaudit's ``find_class`` and ``persistent_load``."""

    def __init__(self, file: BoundedReader, ctx: _Context, protocol: int, persistent: Callable[[Any], Any] | None) -> None:
        super().__init__(cast(IO[bytes], file), encoding="latin1")  # Python 2 str payloads (numpy data) stay bytes-exact
        self._ctx, self._protocol, self._persistent = ctx, protocol, persistent
        self._allowed = ctx.allowlist()

    def find_class(self, module: str, name: str) -> Any:
        if self._protocol < 3:  # what the default find_class does with fix_imports for Python 2 names
            if (module, name) in _compat_pickle.NAME_MAPPING:
                module, name = _compat_pickle.NAME_MAPPING[(module, name)]
            elif module in _compat_pickle.IMPORT_MAPPING:
                module = _compat_pickle.IMPORT_MAPPING[module]
        found = self._allowed.get((module, name))
        if found is not None:
            return found
        return self._ctx.placeholder(module, name)

    def persistent_load(self, pid: Any) -> Any:
        if self._persistent is None:
            raise ModelLoadError("the pickle refers to external data (a persistent id), which only torch files hold")
        return self._persistent(pid)


@dataclass
class Unpickled:
    """One pickle read by :func:`safe_load`."""

    value: Any
    end: int
    """Offset just past its STOP opcode."""
    placeholders: dict[str, int]
    """``module.name`` of every global that became a placeholder -> how often it is named
    (:mod:`auditor.loading.pickle_globals` says which would run code)."""
    requires_grad: dict[int, bool]
    """id(tensor) -> requires_grad, for tensors rebuilt as parameters or with the flag."""


def safe_load(
    reader: BoundedReader,
    end: int,
    what: str,
    persistent: Callable[[Any], Any] | None = None,
    scanned: tuple[int, int] | None = None,
) -> Unpickled:
    """Read the pickle at the reader's position without importing or running anything.

    ``what`` starts every error message (it names the file); ``persistent`` resolves
    persistent ids (torch storages); ``scanned`` is :func:`scan_pickle`'s answer if the
    caller already has it. Raises ModelLoadError for anything malformed.
    """
    start = reader.tell()
    protocol, stop = scanned or scan_pickle(reader.view(), start, end, what)
    reader.seek(start)
    ctx = _Context()
    unpickler = SafeUnpickler(reader, ctx, protocol, persistent)
    try:
        value = unpickler.load()
    except ModelLoadError as exc:  # a damaged archive member stays a CorruptFileError
        raise (CorruptFileError if isinstance(exc, CorruptFileError) else ModelLoadError)(f"{what}: {exc}") from exc
    except Exception as exc:  # the C unpickler's own errors (bad memo, stack underflow, ...)
        raise ModelLoadError(f"{what}: the pickle is malformed ({reason(exc)})") from exc
    finally:
        ctx.release()
    reader.seek(stop)
    return Unpickled(value, stop, dict(ctx.names), ctx.requires_grad)


def as_mapping(obj: Any) -> dict[Any, Any]:
    """A dict view of a mapping or a placeholder of a dict subclass (its SETITEMs)."""
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, Placeholder):
        return {k: v for k, v in obj.setitems if _hashable(k)}
    return {}


def _hashable(key: Any) -> bool:
    return isinstance(key, (str, int, float, bool, bytes, tuple)) or key is None


def is_module(obj: Any) -> bool:
    """True for a placeholder of a pickled ``torch.nn.Module`` (its state has ``_modules``)."""
    attrs = placeholder_attrs(obj)
    return attrs is not None and "_parameters" in attrs and "_modules" in attrs


def module_state_dict(obj: Any) -> dict[str, torch.Tensor]:
    """Dotted names -> tensors of a module placeholder, as ``state_dict()`` would name them.

    Parameters, then persistent buffers, then submodules in order; a module that contains
    itself is visited once per path, and the walk is iterative and bounded by ``MAX_WALK``.
    """
    out: dict[str, torch.Tensor] = {}
    on_path: set[int] = set()
    stack: list[tuple[str, Any, bool]] = [("", obj, False)]
    steps = 0
    while stack:
        prefix, module, leaving = stack.pop()
        if leaving:
            on_path.discard(id(module))
            continue
        steps += 1
        if steps > MAX_WALK:
            raise ModelLoadError(f"the pickled module tree has more than {MAX_WALK} submodules")
        attrs = placeholder_attrs(module) or {}
        skip = attrs.get("_non_persistent_buffers_set")
        skip = skip if isinstance(skip, (set, frozenset)) else set()
        for name, value in as_mapping(attrs.get("_parameters")).items():
            if isinstance(value, torch.Tensor):
                out[f"{prefix}{name}"] = value
        for name, value in as_mapping(attrs.get("_buffers")).items():
            if isinstance(value, torch.Tensor) and name not in skip:
                out[f"{prefix}{name}"] = value
        on_path.add(id(module))
        stack.append((prefix, module, True))
        children = [(n, m) for n, m in as_mapping(attrs.get("_modules")).items() if is_module(m) and id(m) not in on_path]
        stack.extend((f"{prefix}{n}.", m, False) for n, m in reversed(children))
    return out


def to_plain(obj: Any) -> Any:
    """JSON-like values of a restricted load: placeholders become ``{"__class__": ..., **state}``.

    Tuples and sets become lists, OrderedDicts dicts, dtypes and devices strings; tensors and
    arrays stay. Shared and cyclic references stay shared (the walk is iterative).
    """
    memo: dict[int, Any] = {}
    todo: list[tuple[Any, Any]] = []

    def shell(x: Any) -> Any:
        if id(x) in memo:
            return memo[id(x)]
        if isinstance(x, (Mapping, Placeholder)) and not isinstance(x, type):
            out: Any = {"__class__": qualname_of(x)} if isinstance(x, Placeholder) else {}
        elif isinstance(x, (list, tuple, set, frozenset)):
            out = []
        else:
            return _leaf(x)
        memo[id(x)] = out
        todo.append((x, out))
        return out

    root = shell(obj)
    while todo:
        src, dst = todo.pop()
        if isinstance(dst, list):
            dst.extend(shell(v) for v in src)
            continue
        if isinstance(src, Placeholder):
            attrs = placeholder_attrs(src)
            pairs = list((attrs or {}).items()) + src.setitems
            extra = {"__args__": list(src.args)} if src.args and attrs is None else {}
            if src.state is not None and attrs is None:
                extra["__state__"] = src.state
            if src.items:
                extra["__items__"] = src.items
            pairs += list(extra.items())
        else:
            pairs = list(src.items())
        for key, value in pairs:
            dst[_plain_key(key)] = shell(value)
    return root


def _plain_key(key: Any) -> Any:
    if isinstance(key, tuple):  # flat tuples of scalars read well as text; anything deeper is named
        return repr(key) if len(key) <= 8 and all(_hashable(k) and not isinstance(k, tuple) for k in key) else "tuple"
    return key if _hashable(key) else type(key).__name__


def _leaf(x: Any) -> Any:
    if isinstance(x, (torch.dtype, torch.device, NumpyDtype, Marker, StorageType, Storage)):
        return str(x)
    if isinstance(x, type) and issubclass(x, Placeholder):
        return qualname_of(x)
    return x

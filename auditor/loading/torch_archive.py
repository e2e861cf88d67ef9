"""The container formats of torch files, read without ``torch.load`` or ``torch.jit.load``.

* zip archives (``torch.save``'s default): ``<prefix>/data.pkl`` plus one member per storage;
* TorchScript archives (``torch.jit.save``): the same layout plus ``code/`` and
  ``constants.pkl``; parameters and buffers are named from the module tree in ``data.pkl``
  and the ``__parameters__``/``__buffers__`` lists of the saved code (read as text);
* legacy files (``_use_new_zipfile_serialization=False``): magic, protocol and system pickles,
  the main pickle, the list of storage keys, then each storage as an 8-byte count and its bytes;
* plain pickles (``pickle.dump`` of arrays or tensors).

Every pickle goes through :func:`auditor.loading.safe_pickle.safe_load`. Stored storages are
memory-mapped copy-on-write at their offset, so shapes are known without touching the data
and only the tensors popaudit reads are paged in. Sizes a file declares are checked against
the bytes it holds before anything is allocated.
"""

from __future__ import annotations

import errno
import io
import os
import re
import zipfile
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from auditor.errors import ModelLoadError
from auditor.loading.pickle_rebuild import FileBytes, Storage, StorageType, check_int
from auditor.loading.pickle_scan import BoundedReader, CorruptFileError, PickleScanError, reason, scan_pickle, shown
from auditor.loading.zip_members import (
    BAD_ZIP,
    MAX_DEFLATED,
    ZIP_ERRORS,
    ZipError,
    check_crc,
    data_offset,
    read_member,
    zip_reason,
)
from auditor.loading.safe_pickle import Placeholder, Unpickled, placeholder_attrs, qualname_of, safe_load
from auditor.memory import InflationBudget

MAX_CODE = 64 << 20  # TorchScript code read to name parameters
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001
NOT_TORCH = (
    "it is neither a torch.save zip archive nor a complete pickle (corrupt, truncated, or another format)"
)


@dataclass
class TorchFile:
    """What a torch file holds, read without running code from it."""

    root: Any
    """The unpickled object (placeholders stand for classes popaudit does not import)."""
    kind: str
    """``zip``, ``legacy``, ``pickle`` or ``torchscript``."""
    placeholders: dict[str, int]
    """``module.name`` of every global read as a placeholder -> how often the pickle names it."""
    tensors: dict[str, torch.Tensor] | None = None
    """TorchScript: named parameters, then named buffers."""
    warnings: list[str] = field(default_factory=list)
    storages: dict[str, Storage] = field(default_factory=dict)
    """zip archives: each storage read, by its key (``Storage.key`` names its zip member)."""
    script: tuple[str, str] | None = None
    """TorchScript: the root module's saved ``forward`` and the rest of the model's own code
    (not torch's library classes), as text (:mod:`auditor.loading.script_scoring`)."""
    padding_rows: dict[str, int] = field(default_factory=dict)
    """TorchScript: ``<module>.weight`` -> the ``padding_idx`` its ``nn.Embedding`` records."""

    def storage_of(self, tensor: torch.Tensor) -> Storage | None:
        """The storage ``tensor`` is a view of (every view shares its storage's bytes), or None."""
        pointer = tensor.untyped_storage().data_ptr()
        found = [s for s in self.storages.values() if s.data.numel() and s.data.untyped_storage().data_ptr() == pointer]
        return found[0] if len(found) == 1 else None


def read_torch_file(path: Path, max_memory: int | None = None) -> TorchFile:
    """Read a ``.pt``/``.pth``/pickle file of any of the formats above (ModelLoadError if not).

    Compressed zip members (torch never writes them) are inflated only while all of them
    together fit the memory ceiling (``max_memory``, else half the available memory)."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if fh.read(4) == b"PK\x03\x04":
                return _read_zip(path, fh, size, max_memory)
            fh.seek(0)
            return _read_pickles(path, fh, size)
    except OSError as exc:  # a vanished file, a failing disk: say which file, never Errno text alone
        what = "an offset in it points outside the file (corrupt?)" if exc.errno == errno.EINVAL else reason(exc)
        raise ModelLoadError(f"cannot read {path}: {what}") from exc


def _storage_type(value: Any) -> StorageType:
    if not isinstance(value, StorageType):
        name = shown(qualname_of(value)) if isinstance(value, (Placeholder, type)) else f"a {type(value).__name__}"
        raise ModelLoadError(f"unknown storage type {name}")
    return value


# ------------------------------------------------------------------ zip archives


def _read_zip(path: Path, fh: io.BufferedIOBase, size: int, max_memory: int | None) -> TorchFile:
    try:
        # ZipError: named once by the callers, and final (torch.load under --trust-pickle would inflate it all)
        return _read_zip_members(path, fh, size, InflationBudget("", max_memory, ZipError))
    except ZipError as exc:  # from the members read outside data.pkl; safe_load names data.pkl's own
        raise CorruptFileError(f"cannot read {path}: {exc}") from exc


def _read_zip_members(path: Path, fh: io.BufferedIOBase, size: int, budget: InflationBudget) -> TorchFile:
    try:
        zf = zipfile.ZipFile(fh)
    except ZIP_ERRORS as exc:
        raise ZipError(f"{BAD_ZIP} ({zip_reason(exc)})") from exc
    infos = {i.filename: i for i in zf.infolist()}
    pickles = [n for n in infos if n.count("/") == 1 and n.endswith("/data.pkl")]
    if not pickles:
        raise ZipError("a zip archive without data.pkl is not a torch.save or TorchScript file")
    prefix = pickles[0][: -len("/data.pkl")]
    order = infos.get(f"{prefix}/byteorder")
    if order is not None and read_member(fh, size, zf, order, 16) != b"little":
        raise ZipError("it was written on a big-endian machine; popaudit reads little-endian files")
    budget.plan([(shown(n) if n == pickles[0] else f"storage {shown(n)}", i.file_size, i.compress_size)  # before any inflates
                 for n, i in infos.items()
                 if i.compress_type != zipfile.ZIP_STORED and (n == pickles[0] or n.startswith(f"{prefix}/data/"))])
    files = FileBytes(path, fh, size)
    storages: dict[str, Storage] = {}

    def persistent(pid: Any) -> Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and isinstance(pid[0], str) and pid[0] == "storage"):
            raise ModelLoadError(f"a persistent id is not a torch storage ({type(pid).__name__})")
        stype, key, numel = _storage_type(pid[1]), pid[2], check_int(pid[4], "a storage's size")
        if not isinstance(key, str):
            raise ModelLoadError(f"a storage key is a {type(key).__name__}, not a string")
        if key not in storages:
            name = f"{prefix}/data/{key}"
            if name not in infos:
                raise ModelLoadError(f"it refers to storage {shown(key)}, but the archive has no member {shown(name)}")
            info, nbytes = infos[name], max(numel, 0) * stype.dtype.itemsize
            if nbytes > info.file_size:
                raise ModelLoadError(f"storage {shown(name)} declares {nbytes} bytes but the archive holds {info.file_size}")
            if info.compress_type == zipfile.ZIP_STORED:
                # The whole member, mapped (not read): its CRC-32 covers all of it.
                held = files.tensor(data_offset(fh, size, info), info.file_size)
                check_crc(name, held, info.CRC)
                data = held[:nbytes]
            else:
                budget.admit(f"storage {shown(name)}", info.file_size, info.compress_size)
                raw = bytearray(read_member(fh, size, zf, info, MAX_DEFLATED))
                data = torch.frombuffer(raw, dtype=torch.uint8)[:nbytes] if nbytes else torch.empty(0, dtype=torch.uint8)
            storages[key] = Storage(data, stype.dtype, name)
        return storages[key]  # views of one storage share it, as torch.load does

    if infos[pickles[0]].compress_type != zipfile.ZIP_STORED:
        budget.admit(shown(pickles[0]), infos[pickles[0]].file_size, infos[pickles[0]].compress_size)
    data = read_member(fh, size, zf, infos[pickles[0]], MAX_DEFLATED)
    reader = BoundedReader(io.BytesIO(data), len(data), data)
    loaded = safe_load(reader, len(data), f"cannot read {path}: {shown(pickles[0])}", persistent)
    script = [i for n, i in infos.items() if n.startswith(f"{prefix}/code/")]
    if f"{prefix}/constants.pkl" not in infos and not script:
        return TorchFile(loaded.value, "zip", loaded.placeholders, storages=storages)
    classes = _script_classes(fh, size, zf, script)
    tensors, notes, padding = _script_tensors(loaded, classes)
    root = classes.get(qualname_of(loaded.value)) if isinstance(loaded.value, Placeholder) else None
    own = "\n".join(c.forward for n, c in classes.items() if not n.startswith("__torch__.torch.") and c is not root)
    return TorchFile(loaded.value, "torchscript", loaded.placeholders, tensors, notes,
                     script=(root.forward if root else "", own), padding_rows=padding)


# ------------------------------------------------------------------ legacy files and plain pickles


def _read_pickles(path: Path, fh: io.BufferedIOBase, size: int) -> TorchFile:
    with closing(BoundedReader(fh, size)) as reader:  # unmaps the scan's view of the file
        return _read_pickles_from(path, fh, size, reader)


def _read_pickles_from(path: Path, fh: io.BufferedIOBase, size: int, reader: BoundedReader) -> TorchFile:
    what = f"cannot read {path}"
    try:
        scanned = scan_pickle(reader.view(), 0, size, what)
    except PickleScanError as exc:  # a torch file would have been a zip or a pickle: say which failed
        raise CorruptFileError(f"{what} as a PyTorch file: {NOT_TORCH}: {exc.detail}") from exc
    reader.seek(0)
    first = safe_load(reader, size, what, scanned=scanned)
    if type(first.value) is not int or first.value != LEGACY_MAGIC:
        return TorchFile(first.value, "pickle", first.placeholders)
    what = f"cannot read {path} (a legacy torch.save file)"
    version = safe_load(reader, size, what).value
    if type(version) is not int or version != LEGACY_PROTOCOL:
        shown_version = version if type(version) is int else f"a {type(version).__name__}"
        raise ModelLoadError(f"{what}: its protocol version is {shown_version}, not {LEGACY_PROTOCOL}")
    if isinstance(info := safe_load(reader, size, what).value, dict) and info.get("little_endian") is False:
        raise ModelLoadError(f"{what}: it was written on a big-endian machine; popaudit reads little-endian files")
    main, declared = reader.tell(), dict[str, tuple[torch.dtype, int]]()
    # Pass 1 learns each storage's dtype and size on the meta device (no memory), pass 2 maps them.
    safe_load(reader, size, what, _legacy_ids(declared, lambda key, n: torch.empty(n, dtype=torch.uint8, device="meta")))
    keys = safe_load(reader, size, what).value
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ModelLoadError(f"{what}: the list of storage keys is a {type(keys).__name__}")
    offsets, pos = {}, reader.tell()
    for key in keys:
        if key not in declared:
            raise ModelLoadError(f"{what}: storage {shown(key)} is listed but no tensor refers to it")
        dtype, numel = declared[key]
        fh.seek(pos)
        head = fh.read(8)
        count = int.from_bytes(head, "little", signed=True) if len(head) == 8 else -1
        if count != numel:
            raise CorruptFileError(f"{what}: storage {shown(key)} declares {numel} elements but the file records {count}")
        if pos + 8 + numel * dtype.itemsize > size:
            held = max(size - pos - 8, 0)
            raise CorruptFileError(f"{what}: storage {shown(key)} declares {numel * dtype.itemsize} bytes but the file holds {held}")
        offsets[key], pos = pos + 8, pos + 8 + numel * dtype.itemsize
    if missing := sorted(set(declared) - set(offsets)):
        raise CorruptFileError(f"{what}: the file holds no data for storage {shown(missing[0])}")
    files = FileBytes(path, fh, size)
    reader.seek(main)
    final = safe_load(reader, size, what, _legacy_ids(declared, lambda key, n: files.tensor(offsets[key], n)))
    return TorchFile(final.value, "legacy", final.placeholders)


def _legacy_ids(
    declared: dict[str, tuple[torch.dtype, int]], storage_bytes: Callable[[str, int], torch.Tensor]
) -> Callable[[Any], Any]:
    """persistent_load of legacy files: ``('storage', type, key, location, numel, view)``."""
    storages: dict[str, Storage] = {}

    def load(pid: Any) -> Any:
        kind = pid[0] if isinstance(pid, tuple) and pid and isinstance(pid[0], (str, bytes)) else None
        kind = kind.decode("ascii", "replace") if isinstance(kind, bytes) else kind
        if kind == "module" and len(pid) == 4:
            return pid[1]  # the class of a pickled module: a placeholder, its source is ignored
        if kind != "storage" or len(pid) != 6 or not isinstance(pid[2], str):
            raise ModelLoadError("a persistent id is not a torch storage")
        stype, key, numel = _storage_type(pid[1]), pid[2], check_int(pid[4], "a storage's size")
        if key not in storages:
            dtype, n = declared.setdefault(key, (stype.dtype, max(numel, 0)))
            if n * dtype.itemsize > 1 << 62:
                raise ModelLoadError(f"storage {shown(key)} declares {n} elements")
            storages[key] = Storage(storage_bytes(key, n * dtype.itemsize), dtype, key)
        root, view = storages[key], pid[5]
        if view is None:
            return root
        if not (isinstance(view, tuple) and len(view) == 3 and isinstance(view[0], str)):
            raise ModelLoadError(f"storage {shown(key)} has a malformed view")
        start, length = check_int(view[1], "a view offset"), check_int(view[2], "a view size")
        size = root.dtype.itemsize
        if start < 0 or length < 0 or (start + length) * size > root.data.numel():
            raise ModelLoadError(f"a view of storage {shown(key)} reaches past its end")
        return storages.setdefault(view[0], Storage(root.data[start * size : (start + length) * size], root.dtype, view[0]))

    return load


# ------------------------------------------------------------------ TorchScript names


@dataclass
class _ScriptClass:
    """What the saved code says about one TorchScript class."""

    module: bool
    params: list[str]
    buffers: list[str]
    state_names: list[str | None]
    """For a custom ``__getstate__``: the attribute each slot of its tuple holds."""
    forward: str = ""
    padding_idx: int | None = None
    """An ``nn.Embedding``'s recorded ``padding_idx`` constant (None: none recorded)."""


_CLASS = re.compile(r"^class (\w+)\((\w*)\):", re.M)
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_PADDING = re.compile(r"^  padding_idx : Final\[int\] = (-?\d+)$", re.M)


def _script_classes(fh: io.BufferedIOBase, size: int, zf: zipfile.ZipFile, infos: list[zipfile.ZipInfo]) -> dict[str, _ScriptClass]:
    """Qualified class name -> parameters/buffers, from ``code/__torch__/**.py`` read as text."""
    classes: dict[str, _ScriptClass] = {}
    budget = MAX_CODE
    for info in infos:
        head, _, rest = info.filename.partition("/code/")
        if not (rest.startswith("__torch__") and rest.endswith(".py")) or info.file_size > budget:
            continue
        budget -= info.file_size
        text = read_member(fh, size, zf, info, MAX_CODE).decode("utf-8", "replace")
        module = rest[:-3].replace("/", ".")
        found = list(_CLASS.finditer(text))
        for i, match in enumerate(found):
            body = text[match.end() : found[i + 1].start() if i + 1 < len(found) else len(text)]
            padding = _PADDING.search(body) if match.group(1) == "Embedding" else None
            classes[f"{module}.{match.group(1)}"] = _ScriptClass(
                match.group(2) == "Module", _listed(body, "__parameters__"), _listed(body, "__buffers__"), _state_names(body),
                _method(body, "forward"), int(padding.group(1)) if padding else None,
            )
    return classes


def _listed(body: str, attr: str) -> list[str]:
    found = re.search(rf"^  {attr} = \[(.*)\]$", body, re.M)
    return [n.replace('\\"', '"') for n in _QUOTED.findall(found.group(1))] if found else []


def _method(body: str, name: str) -> str:
    found = re.search(rf"^  def {name}\(.*?(?=^  \S|\Z)", body, re.M | re.S)
    return found.group(0) if found else ""


def _state_names(body: str) -> list[str | None]:
    """Which attribute each slot of a custom ``__getstate__`` tuple holds, from the saved code."""
    getstate = _method(body, "__getstate__")
    local = dict(re.findall(r"^    (\w+) = self\.(\w+)$", getstate, re.M))
    returned = re.search(r"^    return \((.*)\)$", getstate, re.M)
    if returned:
        items = [x.strip() for x in returned.group(1).split(",") if x.strip()]
        return [local.get(x) or (x[5:] if x.startswith("self.") else None) for x in items]
    slots = {int(i): n for n, i in re.findall(r"^    self\.(\w+) = \(state\)\[(\d+)\]$", _method(body, "__setstate__"), re.M)}
    return [slots.get(i) for i in range(max(slots) + 1)] if slots else []


def _script_attrs(module: Placeholder, cls: _ScriptClass | None, notes: list[str]) -> dict[str, Any]:
    attrs = placeholder_attrs(module)
    if attrs is not None:
        return attrs
    state = module.state
    if cls is not None and isinstance(state, (tuple, list)):
        if len(cls.state_names) == len(state):
            return {n: v for n, v in zip(cls.state_names, state) if n}
        tensors = [v for v in state if isinstance(v, torch.Tensor)]
        if len(tensors) == len(cls.params) + len(cls.buffers):  # the usual getstate: tensors in order
            return dict(zip(cls.params + cls.buffers, tensors))
    notes.append(f"TorchScript module {shown(qualname_of(module))} keeps a custom state popaudit cannot name; its tensors are not read")
    return {}


def _script_tensors(
    loaded: Unpickled, classes: dict[str, _ScriptClass]
) -> tuple[dict[str, torch.Tensor], list[str], dict[str, int]]:
    """Named parameters then named buffers, as ``named_parameters()``/``named_buffers()``
    give them, and each Embedding weight's recorded ``padding_idx``."""
    padding: dict[str, int] = {}
    params: dict[str, torch.Tensor] = {}
    buffers: dict[str, torch.Tensor] = {}
    notes: list[str] = []
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [("", loaded.value)]
    while stack:
        prefix, module = stack.pop()
        if not isinstance(module, Placeholder) or id(module) in seen:
            continue
        seen.add(id(module))
        cls = classes.get(qualname_of(module))
        attrs = _script_attrs(module, cls, notes)
        if cls is not None and cls.padding_idx is not None:
            padding[f"{prefix}weight"] = cls.padding_idx
        for name, value in attrs.items():
            if not isinstance(value, torch.Tensor) or id(value) in seen:
                continue
            param = name in cls.params if cls else loaded.requires_grad.get(id(value), False)
            if param or (name in cls.buffers if cls else True):
                (params if param else buffers)[f"{prefix}{name}"] = value
                seen.add(id(value))  # a tensor shared by two modules is named once, as torch does
        kids = [(n, v) for n, v in attrs.items() if isinstance(v, Placeholder) and _script_module(v, classes)]
        stack.extend((f"{prefix}{n}.", v) for n, v in reversed(kids))
    return {**params, **buffers}, notes, padding


def _script_module(obj: Placeholder, classes: dict[str, _ScriptClass]) -> bool:
    cls = classes.get(qualname_of(obj))
    if cls is not None:
        return cls.module
    attrs = placeholder_attrs(obj)
    return qualname_of(obj).startswith("__torch__.") and attrs is not None and "training" in attrs

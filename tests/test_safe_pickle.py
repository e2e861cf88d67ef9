"""The restricted reader: hostile pickles run nothing, sizes are checked against the bytes a
file holds, and tensors, arrays and TorchScript names come back exactly as torch gives them.

"Nothing runs" is checked three ways: the marker file a payload would write does not exist,
the payload is a placeholder recording the exact call, and a Python audit hook sees no event
besides opening and mapping the model file (no exec, import, os.system, subprocess, open of
another path, nor the default ``pickle.find_class``).
"""

from __future__ import annotations

import builtins
import collections
import copyreg
import io
import os
import pickle
import resource
import subprocess
import sys
import time
import tracemalloc
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch

from auditor.errors import ModelLoadError
from auditor.loading import pickle_scan, torch_archive
from auditor.loading.pickle_scan import BoundedReader
from auditor.loading.safe_pickle import (
    Placeholder,
    is_module,
    module_state_dict,
    placeholder_attrs,
    qualname_of,
    safe_load,
    to_plain,
)
from auditor.loading.torch_archive import read_torch_file

# ------------------------------------------------------------------ helpers

_AUDIT: dict[str, Any] = {"on": False, "events": []}


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if _AUDIT["on"]:
        _AUDIT["events"].append((event, args[0] if args else None))


# Codecs and numpy's pickle helpers are imported lazily on first use by pickle itself, not
# by the file; import them before any watch() so only the reader's own events are seen.
"x".encode("raw_unicode_escape").decode("raw_unicode_escape")
"x".encode("latin1").decode("latin1")
pickle.loads(pickle.dumps(np.arange(2), protocol=0))
sys.addaudithook(_hook)  # cannot be removed; it records only inside watch()
QUIET = {"object.__setattr__", "builtins.id", "mmap.__new__"}  # what the reader itself does


@contextmanager
def watch(model: Path | None = None):
    """Record audit events; afterwards only opens of ``model`` and QUIET events are allowed."""
    _AUDIT["events"] = []
    _AUDIT["on"] = True
    try:
        yield
    finally:
        _AUDIT["on"] = False
    bad = [
        (e, a) for e, a in _AUDIT["events"]
        if e not in QUIET and not (e == "open" and model is not None and str(a) == str(model))
    ]  # fmt: skip
    assert not bad, bad


def load(data: bytes, persistent: Any = None) -> Any:
    reader = BoundedReader(io.BytesIO(data), len(data))  # type: ignore[arg-type]
    with watch():
        return safe_load(reader, len(data), "test", persistent).value


class Call:
    """Pickles as a call of ``func(*args)`` (``func`` is pickled by reference)."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, ...]:
        return self.func, self.args


class Ref:
    """Stands for a storage in a hand-made data.pkl."""

    def __init__(self, key: str, numel: int, stype: Any = torch.FloatStorage) -> None:
        self.key, self.numel, self.stype = key, numel, stype


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj: Any) -> Any:
        return ("storage", obj.stype, obj.key, "cpu", obj.numel) if isinstance(obj, Ref) else None


def tensor_call(ref: Ref, size: tuple[int, ...], stride: tuple[int, ...], offset: int = 0) -> Call:
    return Call(torch._utils._rebuild_tensor_v2, ref, offset, size, stride, False, collections.OrderedDict())


def write_archive(path: Path, obj: Any, storages: dict[str, bytes], compress: int = zipfile.ZIP_STORED) -> Path:
    buf = io.BytesIO()
    _Pickler(buf, protocol=2).dump(obj)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", buf.getvalue(), compress_type=compress)
        for key, data in storages.items():
            zf.writestr(f"archive/data/{key}", data)
    return path


def read(path: Path) -> Any:
    with watch(path):
        return read_torch_file(path)


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise KeyError(field)


def _peak_rss_kib() -> Callable[[], int]:
    """Reads of the process's peak RSS, reset first to the current RSS where Linux allows.

    ru_maxrss is the whole process's high-water mark, so a body that grows RSS by 16 MiB goes
    unnoticed after an earlier test peaked higher, and is caught only when RSS happens to sit
    near that peak: a flaky measure. Writing 5 to clear_refs resets VmHWM to the current RSS.
    """
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return lambda: _status_kib("VmHWM")
    except OSError:
        return lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@contextmanager
def bounded(seconds: float = 2.0, megabytes: int = 64, *, file_pages_count: bool = True):
    """Fails when the body takes longer or its Python allocations or RSS grow more.

    With ``file_pages_count=False`` RSS is the anonymous memory the body leaves behind: pages of a
    memory-mapped file that a CRC check touched are page cache, not memory the reader holds.
    """
    peak_rss = _peak_rss_kib()
    rss, anonymous = peak_rss(), _status_kib("RssAnon")
    tracemalloc.start()
    start = time.perf_counter()
    try:
        yield
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert time.perf_counter() - start < seconds
    assert peak < megabytes << 20, peak
    if file_pages_count:
        grown = peak_rss() - rss
    else:
        grown = _status_kib("RssAnon") - anonymous
    assert grown < megabytes << 10, grown  # KiB on Linux


@pytest.fixture(autouse=True)
def _warm(tmp_path_factory):
    """Lazy imports inside torch/numpy happen once, before any recording."""
    path = tmp_path_factory.getbasetemp() / "warm.pt"
    if not path.exists():
        torch.save({"w": torch.ones(2), "a": np.ones(2), "p": torch.nn.Parameter(torch.ones(1))}, path)
        read_torch_file(path)
        torch_archive.read_torch_file(path)


# ------------------------------------------------------------------ hostile pickles

HOSTILE = [
    (Call(os.system, "touch {m}"), "posix.system"),
    (Call(subprocess.check_call, ["touch", "{m}"]), "subprocess.check_call"),
    (Call(builtins.eval, "open({m!r}, 'w')"), "builtins.eval"),
    (Call(builtins.exec, "open({m!r}, 'w')"), "builtins.exec"),
    (Call(builtins.open, "{m}", "w"), "io.open"),
    (Call(builtins.__import__, "os"), "builtins.__import__"),
    (Call(builtins.getattr, Call(builtins.__import__, "os"), "system"), "builtins.getattr"),
]


def _fill(obj: Any, marker: Path) -> Any:
    if isinstance(obj, Call):
        return Call(obj.func, *(_fill(a, marker) for a in obj.args))
    if isinstance(obj, list):
        return [_fill(a, marker) for a in obj]
    return obj.format(m=str(marker)) if isinstance(obj, str) else obj


@pytest.mark.parametrize("protocol", range(6))
@pytest.mark.parametrize(("payload", "name"), HOSTILE, ids=[n for _, n in HOSTILE])
def test_hostile_globals_become_placeholders(tmp_path, protocol, payload, name):
    marker = tmp_path / "ran"
    payload = _fill(payload, marker)
    value = load(pickle.dumps({"x": payload}, protocol=protocol))["x"]
    assert not marker.exists()
    assert isinstance(value, Placeholder) and qualname_of(value) == name
    expected = tuple(a if not isinstance(a, Call) else None for a in payload.args)
    assert tuple(a if not isinstance(a, Placeholder) else None for a in value.args) == expected


def test_reduce_chain_records_every_call_and_runs_none(tmp_path):
    marker = tmp_path / "ran"
    # getattr(__import__('os'), 'system')('touch marker'): one call's result is the next callable.
    text = f"cbuiltins\ngetattr\n(cbuiltins\n__import__\n(Vos\ntRVsystem\ntR(Vtouch {marker}\ntR.".encode()
    value = load(text)
    assert not marker.exists()
    assert qualname_of(value) == "builtins.getattr()"
    assert value.args == (f"touch {marker}",)
    inner = value.func
    assert qualname_of(inner) == "builtins.getattr" and inner.args[1] == "system"
    assert qualname_of(inner.args[0]) == "builtins.__import__" and inner.args[0].args == ("os",)


def test_nested_pickle_loads_payload_stays_bytes(tmp_path):
    marker = tmp_path / "ran"
    inner = pickle.dumps(Call(os.system, f"touch {marker}"))
    data = pickle.dumps(Call(pickle.loads, inner), protocol=2)
    assert b"cpickle\nloads\n" in data  # the pickler names the module it finds loads in, not _pickle
    value = load(data)
    assert not marker.exists()
    assert qualname_of(value) == "pickle.loads" and value.args == (inner,)


def test_importing_is_never_attempted(capsys):
    gone = [m for m in ("antigravity", "this", "no_such_module_xyz") if m not in sys.modules]
    value = load(b"cantigravity\nfly\n)Rcthis\ns\n)Rcno_such_module_xyz\nThing\n)R\x87.")
    # Each is GLOBAL then REDUCE: what the call made is an instance of the placeholder named
    # by the global, whether the file meant a function or a class ("()" marks calls of instances).
    assert [qualname_of(v) for v in value] == ["antigravity.fly", "this.s", "no_such_module_xyz.Thing"]
    assert all(isinstance(v, Placeholder) and v.args == () for v in value)
    assert not [m for m in gone if m in sys.modules]  # importing "this" would print the Zen
    assert capsys.readouterr().out == ""


def test_inst_obj_build_setitems_appends_on_placeholders():
    # INST with args, OBJ, BUILD with (state, slotstate), SETITEMS and APPENDS on the objects.
    data = (
        b"(I1\nVa\nievil\nThing\n"  # INST evil.Thing(1, 'a')
        b"(}Vk\nI2\ns}Vs\nI3\nstb"  # BUILD ({'k': 2}, {'s': 3})
        b"(Vkey\nVvalue\nu"  # SETITEMS
        b"(cevil\nOther\nI5\no"  # OBJ evil.Other(5)
        b"(I7\nI8\ne"  # APPENDS
        b"\x86."
    )
    first, second = load(data)
    assert qualname_of(first) == "evil.Thing" and first.args == (1, "a")
    assert placeholder_attrs(first) == {"k": 2, "s": 3} and first.setitems == [("key", "value")]
    assert qualname_of(second) == "evil.Other" and second.args == (5,) and second.items == [7, 8]


def test_getattr_names_nested_classes_and_returns_nothing_real():
    # getattr(evil.Outer, "Inner") is how protocol 2 names a nested class: it becomes the
    # placeholder class evil.Outer.Inner (NEWOBJ then builds an instance of it). getattr on
    # anything else (an allowed constructor, os.system) is an inert record, never an attribute.
    nested = b"\x80\x02cbuiltins\ngetattr\ncevil\nOuter\nVInner\n\x86R)\x81."
    obj = load(nested)
    assert qualname_of(obj) == "evil.Outer.Inner" and isinstance(obj, Placeholder)
    on_allowed = b"\x80\x02cbuiltins\ngetattr\ncbuiltins\ndict\nV__subclasses__\n\x86R."
    assert qualname_of(load(on_allowed)) == "builtins.getattr"
    on_system = b"\x80\x02cbuiltins\ngetattr\ncos\nsystem\nV__call__\n\x86R(Vtouch /tmp/x\ntR."
    assert qualname_of(load(on_system)) == "os.system.__call__"


def test_newobj_ex_stack_global_and_ext_codes():
    copyreg.add_extension("os", "system", 0xF0)
    try:
        data = (
            b"\x80\x04\x8c\x04evil\x8c\x0bOuter.Inner\x93"  # STACK_GLOBAL with a dotted name
            b"\x4b\x01\x85}\x8c\x01k\x4b\x02s\x92"  # NEWOBJ_EX (1,), {'k': 2}
            b"\x82\xf0\x8c\x02hi\x85R"  # EXT1 0xF0 -> os.system('hi')
            b"\x86."
        )
        obj, call = load(data)
    finally:
        copyreg.remove_extension("os", "system", 0xF0)
    assert qualname_of(obj) == "evil.Outer.Inner" and obj.args == (1,) and obj.kwargs == {"k": 2}
    assert qualname_of(call) == "os.system" and call.args == ("hi",)


def test_python2_names_are_mapped_below_protocol_3_only():
    assert load(b"\x80\x02c__builtin__\nset\n]K\x01a\x85R.") == {1}
    value = load(b"\x80\x03c__builtin__\nset\n]K\x01a\x85R.")
    assert isinstance(value, Placeholder) and qualname_of(value) == "__builtin__.set"


class Plain:
    """A class pickled by protocol 0/1 through copyreg._reconstructor."""

    def __init__(self) -> None:
        self.lr, self.betas = 0.1, (0.9, 0.999)


@pytest.mark.parametrize("protocol", range(6))
def test_custom_objects_keep_their_state(protocol):
    value = load(pickle.dumps({"cfg": Plain()}, protocol=protocol))["cfg"]
    assert qualname_of(value) == f"{Plain.__module__}.Plain"
    assert placeholder_attrs(value) == {"lr": 0.1, "betas": (0.9, 0.999)}
    assert to_plain(value) == {"__class__": f"{Plain.__module__}.Plain", "lr": 0.1, "betas": [0.9, 0.999]}


# ------------------------------------------------------------------ sizes and bombs


def test_storage_declaring_2_40_elements_is_refused_without_allocating(tmp_path):
    path = write_archive(tmp_path / "big.pt", {"w": tensor_call(Ref("0", 2**40), (2**20, 2**20), (2**20, 1))}, {"0": bytes(16)})
    with bounded(), pytest.raises(ModelLoadError, match=f"storage archive/data/0 declares {2**42} bytes but the archive holds 16"):
        read(path)


def test_tensor_reaching_past_its_storage_is_refused(tmp_path):
    path = write_archive(tmp_path / "oob.pt", {"w": tensor_call(Ref("0", 4), (3, 3), (3, 1), offset=1)}, {"0": bytes(16)})
    with pytest.raises(ModelLoadError, match=r"oob\.pt: archive/data\.pkl: a tensor of size \[3, 3\] at offset 1 reaches element 10 of storage archive/data/0, which holds 4$"):
        read(path)


@pytest.mark.parametrize("opcode", [b"\x8e", b"\x96", b"\x8d"], ids=["BINBYTES8", "BYTEARRAY8", "BINUNICODE8"])
def test_huge_counted_opcodes_allocate_nothing(tmp_path, opcode):
    data = b"\x80\x05" + opcode + (2**60).to_bytes(8, "little") + b"abc."
    path = tmp_path / "huge.pkl"
    path.write_bytes(data)
    declared = f"the opcode at byte 2 declares {2**60} bytes but the file holds 4 after it"
    not_torch = "neither a torch.save zip archive nor a complete pickle"
    with bounded(), pytest.raises(ModelLoadError, match=f"{not_torch}.*: {declared}$"):
        read(path)
    with bounded(), pytest.raises(ModelLoadError, match=f"^test: the pickle is truncated or corrupt: {declared}$"):
        load(data)


@pytest.mark.parametrize(
    "data",
    [b"\x80\x02N\x72\xff\xff\xff\x7f.", b"(Vx\np99999999999\n.", b"\x80\x04\x95" + (2**40).to_bytes(8, "little") + b"N."],
    ids=["LONG_BINPUT", "PUT", "FRAME"],
)
def test_memo_and_frame_bombs_are_refused(data):
    refused = "memo index (2147483647|99999999999) at opcode 3|a frame at byte 2 declares 1099511627776 bytes but the file holds 2"
    with bounded(), pytest.raises(ModelLoadError, match=refused):
        load(data)


def test_zip_bomb_data_pkl_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(torch_archive, "MAX_DEFLATED", 1 << 20)
    bomb = tmp_path / "bomb.pt"
    with zipfile.ZipFile(bomb, "w") as zf:
        zf.writestr("archive/data.pkl", b"\x00" * (40 << 20), compress_type=zipfile.ZIP_DEFLATED)
    assert bomb.stat().st_size < 100_000
    with bounded(), pytest.raises(ModelLoadError, match="declares 41943040 bytes from .* compressed bytes"):
        read(bomb)


def test_zip_member_lying_about_its_size_is_refused(tmp_path):
    path = tmp_path / "liar.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps({}, protocol=2), compress_type=zipfile.ZIP_DEFLATED)
    raw = bytearray(path.read_bytes())
    local, central = raw.index(b"PK\x03\x04"), raw.index(b"PK\x01\x02")
    raw[local + 22 : local + 26] = raw[central + 24 : central + 28] = (200 << 20).to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    with bounded(), pytest.raises(ModelLoadError, match=r"declares 209,715,200 bytes of data from \d+ bytes stored .*a decompression bomb"):
        read(path)


def test_100k_nested_lists_and_dicts_are_walked_iteratively():
    n = 100_000
    lists = load(b"\x80\x02" + b"]" * n + b"a" * (n - 1) + b".")
    plain = to_plain(lists)
    depth = 0
    while plain:
        plain, depth = plain[0], depth + 1
    assert depth == n - 1
    array = pickle.dumps(np.arange(3.0), protocol=2)[2:-1]  # its opcodes, without PROTO and STOP
    dicts = load(b"\x80\x02}" + b"X\x01\x00\x00\x00k}" * (n - 1) + b"X\x01\x00\x00\x00k" + array + b"s" * n + b".")
    from auditor.loading.checkpoints import interpret

    raw = interpret(dicts, Path("nested.pt"))
    ((key, tensor),) = raw.tensors.items()
    assert key == ".".join(["k"] * n) and tensor.tolist() == [0.0, 1.0, 2.0]


def test_cyclic_references_are_handled():
    # l = [l]; d = {'self': d}; a module placeholder whose _modules holds itself.
    value = load(b"\x80\x02]q\x00h\x00a}q\x01X\x04\x00\x00\x00selfh\x01s\x86.")
    lst, dct = value
    assert lst[0] is lst and dct["self"] is dct
    plain_list, plain_dict = to_plain(value)
    assert plain_list[0] is plain_list and plain_dict["self"] is plain_dict
    # evil.Net() whose state is {'_parameters': {'w': array}, '_modules': {'me': itself}}. The
    # array's opcodes are spliced in with their memo renumbered past the module's own 0 and 1:
    # sparse memo indices are valid pickle, and the scan accepts them.
    array = pickle.dumps(np.ones(2), protocol=2)[2:-1].replace(b"q\x00", b"q\x10").replace(b"q\x01", b"q\x11")
    module = load(
        b"\x80\x02cevil\nNet\n)\x81q\x00}(X\x0b\x00\x00\x00_parametersq\x01}X\x01\x00\x00\x00w"
        + array
        + b"sX\x08\x00\x00\x00_modules}X\x02\x00\x00\x00meh\x00sub."
    )
    assert is_module(module) and qualname_of(module) == "evil.Net"
    attrs = placeholder_attrs(module)
    assert attrs["_modules"]["me"] is module and attrs["_parameters"]["w"].tolist() == [1.0, 1.0]
    assert list(module_state_dict(module)) == []  # the array is not a tensor; the cycle ends the walk
    plain = to_plain(module)
    assert plain["_modules"]["me"] is plain and plain["__class__"] == "evil.Net"


def test_sparse_memo_indices_are_bounded_by_the_opcodes_so_far():
    slack = pickle_scan.MEMO_SLACK
    # PROTO, NONE, LONG_BINPUT i, STOP: the put is opcode 3, so i < 3 + slack is allowed.
    assert load(b"\x80\x02Nr" + (slack + 2).to_bytes(4, "little") + b".") is None
    with pytest.raises(ModelLoadError, match=f"memo index {slack + 3} at opcode 3 is beyond what a pickler writes"):
        load(b"\x80\x02Nr" + (slack + 3).to_bytes(4, "little") + b".")


# ------------------------------------------------------------------ exactness


def _dtypes() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 5, generator=g)
    out = {str(dt): base.to(dt) for dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64)}
    out.update({str(dt): (base * 100).to(dt) for dt in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)})
    out["bool"] = base > 0
    out["complex64"] = torch.complex(base, -base)
    out["complex128"] = torch.complex(base.double(), base.double() * 2)
    out["view"] = out["torch.float32"][1:, 2:]  # offset and strides into a shared storage
    out["transposed"] = out["torch.float64"].t()
    out["param"] = torch.nn.Parameter(base.clone())
    out["scalar"] = torch.tensor(3.5)
    out["empty"] = torch.zeros(0, 4)
    return out


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes in logical order (0-dim tensors too: view() needs a dimension)."""
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_tensors_round_trip_bit_exactly(tmp_path, legacy):
    tensors = _dtypes()
    path = tmp_path / "all.pt"
    torch.save(tensors, path, _use_new_zipfile_serialization=not legacy)
    expected = torch.load(path, weights_only=True)
    found = read(path)
    assert found.kind == ("legacy" if legacy else "zip") and not found.placeholders
    assert list(found.root) == list(expected)
    for key, want in expected.items():
        got = found.root[key]
        assert type(got) is torch.Tensor and got.dtype == want.dtype, key
        assert got.shape == want.shape and got.stride() == want.stride(), key
        assert got.storage_offset() == want.storage_offset(), key
        assert torch.equal(_bits(got), _bits(want)), key
    view, base = found.root["view"], found.root["torch.float32"]
    assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()


def test_untyped_storage_dtypes_round_trip(tmp_path):
    path = tmp_path / "f8.pt"
    # torch.arange has no uint16 kernel on CPU; a literal exercises the full range instead.
    saved = {
        "f8": torch.randn(7).to(torch.float8_e4m3fn),
        "u16": torch.tensor([0, 1, 255, 256, 4660, 65535], dtype=torch.uint16),
        "u32": torch.tensor([0, 1, 2**31, 2**32 - 1], dtype=torch.uint32),
    }
    torch.save(saved, path)
    want = torch.load(path, weights_only=True)
    got = read(path).root
    assert list(got) == list(saved)
    for key in saved:
        assert got[key].dtype == want[key].dtype == saved[key].dtype, key
        assert torch.equal(_bits(got[key]), _bits(want[key])) and torch.equal(_bits(got[key]), _bits(saved[key])), key


def test_storages_are_memory_mapped_not_read(tmp_path):
    path = tmp_path / "big.pt"
    torch.save({"table": torch.zeros(4096, 1024), "small": torch.ones(3)}, path)  # 16 MiB
    with bounded(megabytes=8, file_pages_count=False):
        found = read(path)
        assert found.root["table"].shape == (4096, 1024)
    assert found.root["small"].tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("protocol", range(6))
def test_plain_pickles_of_numpy_arrays(tmp_path, protocol):
    want = {
        "f32": np.arange(12, dtype=np.float32).reshape(3, 4),
        "f64_fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        "big_endian": np.arange(4, dtype=">i4"),
        "bool": np.array([True, False]),
        "c128": np.array([1 + 2j]),
        "scalar": np.float64(2.5),
        "int": np.int64(7),
    }
    path = tmp_path / "arrays.pkl"
    path.write_bytes(pickle.dumps(want, protocol=protocol))
    found = read(path)
    unpickled = pickle.loads(path.read_bytes())  # the reference: what numpy itself rebuilds
    assert found.kind == "pickle" and not found.placeholders
    for key in ("f32", "f64_fortran", "big_endian", "bool", "c128"):
        got = found.root[key]
        assert got.dtype == unpickled[key].dtype and got.shape == want[key].shape, key
        assert got.tobytes() == unpickled[key].tobytes() and np.array_equal(got, want[key]), key
    # numpy byte-swaps non-native arrays while unpickling, except protocol 5's _frombuffer.
    assert found.root["big_endian"].dtype == (np.dtype(">i4") if protocol == 5 else np.dtype("int32"))
    assert found.root["f64_fortran"].flags.f_contiguous
    assert found.root["scalar"] == 2.5 and found.root["int"] == 7


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_numpy_text_and_datetime_values_are_read(tmp_path, protocol):
    """Loaders F6: np.str_/np.bytes_/datetime64 scalars (cornac ids, hparams) refused the whole
    file; they are inert data: read as str, bytes and ISO text, and such arrays as arrays."""
    want = {"dataset": np.str_("ml-1m"), "raw": np.bytes_(b"ab"), "day": np.datetime64("2024-01-02"),
            "span": np.timedelta64(5, "s"), "stamp": np.datetime64("2024-01-02T03:04:05.123456789", "ns"),
            "ids": np.array(["i7", "i2", "i10"]), "days": np.array(["2024-01-02", "2025-03-04"], dtype="M8[D]")}
    path = tmp_path / "values.pkl"
    path.write_bytes(pickle.dumps(want, protocol=protocol))
    root = read(path).root
    assert root["dataset"] == "ml-1m" and type(root["dataset"]) is str
    assert root["raw"] == b"ab" and type(root["raw"]) is bytes
    assert root["day"] == "2024-01-02" and root["span"] == "5 seconds"
    assert root["stamp"] == "2024-01-02T03:04:05.123456789"
    assert root["ids"].tolist() == ["i7", "i2", "i10"]
    assert np.array_equal(root["days"], want["days"])


def test_a_numpy_scalar_of_an_unread_dtype_names_it():
    with pytest.raises(ModelLoadError, match=r"a numpy scalar of numpy\.dtype\(V4\), a dtype popaudit does not "
                                             r"rebuild"):
        load(pickle.dumps(np.void(b"abcd"), protocol=2))


def test_object_arrays_are_left_unread():
    value = load(pickle.dumps(np.array(["a", None], dtype=object), protocol=2))
    assert value.unread and value.size == 0


# ------------------------------------------------------------------ modules and TorchScript


class Tower(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.item_embedding = torch.nn.Embedding(5, 3)
        self.user_embedding = torch.nn.Embedding(4, 3)
        self.register_buffer("scale", torch.ones(3))
        self.register_buffer("scratch", torch.zeros(2), persistent=False)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU(), torch.nn.BatchNorm1d(2))

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.user_embedding(users) * self.item_embedding(items) * self.scale)


def test_pickled_module_flattens_like_state_dict(tmp_path):
    model = Tower()
    path = tmp_path / "full.pt"
    torch.save(model, path)
    found = read(path)
    assert is_module(found.root) and qualname_of(found.root) == f"{Tower.__module__}.Tower"
    got, want = module_state_dict(found.root), model.state_dict()
    assert list(got) == list(want)
    assert all(torch.equal(got[k], want[k]) for k in want)


def _names(module: torch.nn.Module) -> list[str]:
    return [n for n, _ in module.named_parameters()] + [n for n, _ in module.named_buffers()]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("make", ["script", "trace"])
def test_torchscript_names_equal_named_parameters(tmp_path, make):
    model = Tower().eval()
    scripted = torch.jit.script(model) if make == "script" else torch.jit.trace(model, (torch.tensor([0, 1]), torch.tensor([2, 3])))
    path = tmp_path / "scripted.pt"
    torch.jit.save(scripted, str(path))
    found = read(path)
    assert found.kind == "torchscript"
    loaded = torch.jit.load(str(path))
    assert list(found.tensors) == _names(loaded)
    want = dict(loaded.named_parameters()) | dict(loaded.named_buffers())
    assert all(torch.equal(found.tensors[k], want[k].detach()) for k in want)


class Evil(torch.nn.Module):
    """A TorchScript module whose __setstate__ creates a file (torch.from_file with shared=True)."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 3))
        self.register_buffer("counts", torch.arange(4))
        self.marker = marker

    @torch.jit.export
    def __getstate__(self) -> tuple[torch.Tensor, torch.Tensor, str, bool]:
        return (self.weight, self.counts, self.marker, self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, torch.Tensor, str, bool]) -> None:
        written = torch.from_file(state[2], shared=True, size=16, dtype=torch.uint8)
        written.fill_(65)
        self.weight = state[0]
        self.counts = state[1] + written[:4].long() * 0
        self.marker = state[2]
        self.training = state[3]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.t()


class Outer(torch.nn.Module):
    def __init__(self, marker: str) -> None:
        super().__init__()
        self.inner = Evil(marker)
        self.item_embedding = torch.nn.Embedding(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_malicious_torchscript_setstate_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    model = Outer(str(marker))
    path = tmp_path / "evil.pt"
    torch.jit.save(torch.jit.script(model), str(path))
    found = read(path)
    assert not marker.exists()
    assert list(found.tensors) == ["inner.weight", "item_embedding.weight", "inner.counts"]
    assert torch.equal(found.tensors["inner.weight"], model.inner.weight.detach())
    assert torch.equal(found.tensors["inner.counts"], model.inner.counts)
    assert torch.equal(found.tensors["item_embedding.weight"], model.item_embedding.weight.detach())
    loaded = torch.jit.load(str(path))  # the payload is real: torch.jit.load runs it
    assert marker.read_bytes() == b"A" * 16
    assert list(found.tensors) == _names(loaded)


# ------------------------------------------------------------------ malformed archives


def test_unknown_storage_type_and_missing_member(tmp_path):
    good = write_archive(tmp_path / "a.pt", {"w": tensor_call(Ref("0", 4), (4,), (1,))}, {"0": bytes(16)})
    bad = tmp_path / "unknown.pt"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:  # rename the class in data.pkl
        pkl = src.read("archive/data.pkl")
        assert b"torch\nFloatStorage\n" in pkl
        dst.writestr("archive/data.pkl", pkl.replace(b"torch\nFloatStorage\n", b"torch\nFooStorage\n"))
        dst.writestr("archive/data/0", bytes(16))
    with pytest.raises(ModelLoadError, match=r"unknown\.pt: archive/data\.pkl: unknown storage type torch\.FooStorage$"):
        read(bad)
    missing = write_archive(tmp_path / "missing.pt", {"w": tensor_call(Ref("7", 4), (4,), (1,))}, {"0": bytes(16)})
    with pytest.raises(ModelLoadError, match="missing.pt: archive/data.pkl: it refers to storage 7, but the archive has no member archive/data/7$"):
        read(missing)


def test_truncated_and_corrupt_files(tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"w": torch.randn(100, 8)}, path)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ModelLoadError) as err:
        read(path)
    assert str(err.value) == f"cannot read {path}: it starts like a zip archive but is not a valid one (File is not a zip file)"
    torch.save({"w": torch.randn(100, 8)}, path, _use_new_zipfile_serialization=False)
    whole = path.read_bytes()
    path.write_bytes(whole[:-100])
    with pytest.raises(ModelLoadError, match=r"legacy torch.save file\): storage \d+ declares 3200 bytes but the file holds 3100$"):
        read(path)
    path.write_bytes(whole[:40])
    cut = r"the pickle is truncated or corrupt: the opcode at byte 27 declares 16 bytes but the file holds 8 after it$"
    with pytest.raises(ModelLoadError, match=r"legacy torch.save file\): " + cut):
        read(path)
    path.write_bytes(b"\x80\x02}q\x00")
    with pytest.raises(ModelLoadError) as err:
        read(path)
    assert str(err.value) == (
        f"cannot read {path} as a PyTorch file: it is neither a torch.save zip archive nor a complete pickle "
        "(corrupt, truncated, or another format): it ends at byte 5 before its STOP opcode (truncated?)"
    )


def test_corrupt_zip_directory_names_the_fault_not_errno(tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"w": torch.ones(3)}, path)
    raw = bytearray(path.read_bytes())
    record = raw.rindex(b"PK\x06\x06")  # torch writes zip64 records; bytes 48-56 locate the directory
    offset = int.from_bytes(raw[record + 48 : record + 56], "little")
    raw[record + 48 : record + 56] = (offset + 10**6).to_bytes(8, "little")  # every member offset < 0
    path.write_bytes(bytes(raw))
    with pytest.raises(ModelLoadError) as err:
        read(path)
    assert str(err.value) == (
        f"cannot read {path}: it starts like a zip archive but is not a valid one "
        "(its directory places member m/byteorder outside the file)"
    )


def test_messages_never_quote_the_file(tmp_path):
    # Storage keys, class names and values are text the file chose: a message names them only
    # when they are plain identifiers, so a crafted file cannot write into a terminal or report.
    odd = "0\x1b[2J; rm -rf ~"
    path = write_archive(tmp_path / "k.pt", {"w": tensor_call(Ref(odd, 4), (4,), (1,))}, {"0": bytes(16)})
    with pytest.raises(ModelLoadError, match=r"it refers to storage \(a name with unusual characters\), but the archive"):
        read(path)
    path = write_archive(tmp_path / "t.pt", {"w": tensor_call(Ref("0", 4, Call(os.system, "x")), (4,), (1,))}, {"0": bytes(16)})
    with pytest.raises(ModelLoadError, match=r"t\.pt: archive/data\.pkl: unknown storage type posix\.system$"):
        read(path)
    path = tmp_path / "number.pkl"
    for data, words in [
        (b"Lsecret\n.", "invalid literal for int() with base 10: ..."),  # LONG and FLOAT quote their text
        (b"F\x1b]0;secret\n.", "could not convert string to float: ..."),
    ]:
        path.write_bytes(data)
        with pytest.raises(ModelLoadError) as err:
            read(path)
        assert str(err.value) == f"cannot read {path}: the pickle is malformed (ValueError: {words})"


def test_legacy_version_that_is_text_is_not_quoted(tmp_path):
    path = tmp_path / "v.pt"
    path.write_bytes(pickle.dumps(torch_archive.LEGACY_MAGIC, protocol=2) + pickle.dumps("\x1b[31mowned", protocol=2))
    with pytest.raises(ModelLoadError, match=r"legacy torch.save file\): its protocol version is a str, not 1001$"):
        read(path)


class _CountedBytes(io.BytesIO):
    """Counts the reads the unpickler makes through the bounded reader."""

    reads = 0

    def read(self, n: int | None = -1) -> bytes:
        self.reads += 1
        return super().read(n)


@pytest.mark.parametrize("backed", ["buffer", "file"])
def test_the_unpickler_reads_ahead_through_peek_never_past_the_end(backed: str) -> None:
    """An unframed (protocol 2, as torch writes) list of 50,000 ids: with ``peek`` the C
    unpickler takes 128 KiB at a time instead of one read per opcode; the value is
    pickle's own, and a peek never shows a byte beyond the reader's end."""
    ids = list(range(50_000))
    data = pickle.dumps({"item_ids": ids, "name": "x"}, protocol=2) + b"TRAILING BYTES"
    end = len(data) - len(b"TRAILING BYTES")
    fh = _CountedBytes(data)
    reader = BoundedReader(fh, end, data if backed == "buffer" else None)  # type: ignore[arg-type]
    with watch():
        value = safe_load(reader, end, "test").value
    assert value == {"item_ids": ids, "name": "x"}
    assert fh.reads < 20  # was 1 per opcode: about 50,000
    assert fh.tell() == end  # consumed exactly the pickle
    fh.seek(end - 5)
    assert reader.peek(1 << 20) == data[end - 5 : end] and fh.tell() == end - 5
    assert reader.peek(3) == data[end - 5 : end - 2]

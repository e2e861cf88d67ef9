"""Hostile storage: files that point outside themselves (HDF5 external storage, virtual
datasets, external links) or declare far more data than they hold (compressed HDF5
chunks, zip and .npz members, Parquet pages and dictionaries, tensor views whose strides
repeat their storage). Each is refused before a byte of what it points at is read or a
byte of what it declares is allocated (issue #23, items 1 and 2)."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from .corpus import (
    EXIT_ERROR,
    EXIT_OK,
    FAST,
    Built,
    Case,
    check_args,
    fifo,
    log,
    params,
    run_case,
    standard,
    table,
)

GB = 1 << 30
PEAK = GB
"""The most memory a refused bomb may cost (torch alone takes a few hundred MB)."""
OUTSIDE = r"popaudit reads only what the model file itself holds"
BOMB = r"more than any compression yields \(at most 1100:1\): the file is corrupt or a decompression bomb"


def _no_h5py() -> str | None:
    try:
        import h5py  # noqa: F401
    except ImportError:
        return "the keras extra (h5py) is not installed"
    return None


# ---------------------------------------------------------------------------- HDF5


def _keras3(d: Path, name: str, make: Any) -> None:
    """Keras 3's weights layout (layers/embedding/vars/0) with the table made by ``make(vars_group, file)``."""
    import h5py

    with h5py.File(d / name, "w") as h5:
        group = h5.create_group("layers/embedding/vars")
        group.attrs["name"] = "item_embedding"
        make(group, h5)


def _h5(make: Any, *extra: str, name: str = "model.weights.h5", setup: Any = None, ok: bool = False) -> Any:
    def build(d: Path) -> Built:
        log(d)
        if setup is not None:
            setup(d)
        _keras3(d, name, make)
        return Built(check_args(name, *extra), outputs=("r.json",) if ok else ())

    return build


def _external(target: str, size: int = 160) -> Any:
    return lambda g, h5: g.create_dataset("0", shape=(size // 16, 4), dtype="<f4", external=[(target, 0, size)])


def _legacy_external(d: Path) -> Built:
    """Keras 2's save_weights layout (layer_names, weight_names) over external storage."""
    import h5py

    log(d)
    with h5py.File(d / "model.h5", "w") as h5:
        h5.attrs["layer_names"] = [b"item_embedding"]
        layer = h5.create_group("item_embedding")
        layer.attrs["weight_names"] = [b"item_embedding/embeddings:0"]
        layer.create_dataset("item_embedding/embeddings:0", shape=(10, 4), dtype="<f4",
                             external=[("/etc/passwd", 0, 160)])
    return Built(check_args("model.h5"))


def _legacy_link(d: Path) -> Built:
    """Keras 2's layout whose layer group is an external link to another file."""
    import h5py

    log(d)
    with h5py.File(d / "other.h5", "w") as other:
        other.create_dataset("w/embeddings:0", data=np.ones((10, 4), np.float32))
    with h5py.File(d / "model.h5", "w") as h5:
        h5.attrs["layer_names"] = [b"item_embedding"]
        h5["item_embedding"] = h5py.ExternalLink("other.h5", "/w")
    return Built(check_args("model.h5"))


def _keras_archive_external(d: Path) -> Built:
    """A .keras archive whose model.weights.h5 reads /etc/passwd through external storage."""
    log(d)
    _keras3(d, "w.h5", _external("/etc/passwd"))
    with zipfile.ZipFile(d / "model.keras", "w") as zf:
        zf.writestr("config.json", '{"class_name": "Functional", "config": {"layers": []}}')
        zf.write(d / "w.h5", "model.weights.h5")
    (d / "w.h5").unlink()
    return Built(check_args("model.keras"))


def _virtual(g: Any, h5: Any) -> None:
    import h5py

    layout = h5py.VirtualLayout(shape=(10, 4), dtype="f4")
    layout[:] = h5py.VirtualSource("/etc/passwd", "x", shape=(10, 4))
    g.create_virtual_dataset("0", layout)


def _external_link(g: Any, h5: Any) -> None:
    import h5py

    g["0"] = h5py.ExternalLink("other.h5", "/x")


def _other_h5(d: Path) -> None:
    import h5py

    with h5py.File(d / "other.h5", "w") as other:
        other.create_dataset("x", data=np.ones((10, 4), np.float32))


def _soft_cycle(g: Any, h5: Any) -> None:
    import h5py

    g.create_dataset("0", data=np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32))
    h5["layers/embedding/up"] = h5py.SoftLink("/layers")  # a link to an ancestor: an endless walk


def _hard_cycle(g: Any, h5: Any) -> None:
    g.create_dataset("0", data=np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32))
    h5["layers/embedding/again"] = h5["layers"]  # the group hard-linked inside itself


def _gzip_bomb(g: Any, h5: Any) -> None:
    """2**20 x 1024 float32 (4 GiB) gzip-compressed into about 4 MB: each 4 MiB chunk of
    zeros deflates to 4 KB, written directly so the test never holds the 4 GiB."""
    ds = g.create_dataset("0", shape=(1 << 20, 1024), dtype="<f4", chunks=(1024, 1024), compression="gzip")
    chunk = zlib.compress(bytes(4 << 20), 9)
    for i in range(1024):
        ds.id.write_direct_chunk((i * 1024, 0), chunk)


def _unwritten(g: Any, h5: Any) -> None:
    g.create_dataset("0", shape=(1 << 20, 1024), dtype="<f4", chunks=(1024, 1024))  # no chunk ever written


def _huge_chunk(g: Any, h5: Any) -> None:
    """A 10 x 4 table in one 256 MiB chunk (chunks may exceed a resizable dataset), deflated to
    about 256 KB: reading any row inflates the whole chunk."""
    ds = g.create_dataset("0", shape=(10, 4), maxshape=(None, 4), dtype="<f4", chunks=(1 << 24, 4),
                          compression="gzip")
    zipper, zero = zlib.compressobj(9), bytes(1 << 20)
    data = b"".join(zipper.compress(zero) for _ in range(256)) + zipper.flush()
    ds.id.write_direct_chunk((0, 0), data)


def _fifo_target(d: Path) -> None:
    fifo(d, "pipe")


H5 = dict(skip=_no_h5py)
CASES = [
    Case("h5-external-etc-passwd", _h5(_external("/etc/passwd")), EXIT_ERROR,
         r"cannot read model\.weights\.h5: dataset /layers/embedding/vars/0 keeps its data in 1 file\(s\) outside "
         r"the model \(HDF5 external storage\); " + OUTSIDE, absent=r"root:", **H5),
    Case("h5-external-proc-environ", _h5(_external("/proc/self/environ", 1 << 16)), EXIT_ERROR,
         r"HDF5 external storage", absent=r"PATH=", **H5),
    Case("h5-external-dotdot", _h5(_external("../../../../../../../../etc/passwd")), EXIT_ERROR,
         r"HDF5 external storage", absent=r"root:", **H5),
    Case("h5-external-fifo", _h5(_external("pipe"), setup=_fifo_target), EXIT_ERROR, r"HDF5 external storage",
         process=True, timeout=30, **H5),
    Case("h5-external-several-files", _h5(lambda g, h5: g.create_dataset(
        "0", shape=(10, 4), dtype="<f4", external=[("/etc/hostname", 0, 80), ("/etc/passwd", 0, 80)])),
         EXIT_ERROR, r"keeps its data in 2 file\(s\) outside the model", **H5),
    Case("h5-legacy-layout-external", _legacy_external, EXIT_ERROR,
         r"cannot read model\.h5: dataset .*embeddings:0 keeps its data .*HDF5 external storage", **H5),
    Case("keras-archive-external", _keras_archive_external, EXIT_ERROR, r"model\.keras: .*HDF5 external storage",
         absent=r"root:", **H5),
    Case("h5-virtual-dataset", _h5(_virtual), EXIT_ERROR,
         r"dataset /layers/embedding/vars/0 is an HDF5 virtual dataset, whose data comes from other files; " + OUTSIDE,
         **H5),
    Case("h5-external-link", _h5(_external_link, setup=_other_h5), EXIT_ERROR,
         r"cannot read model\.weights\.h5: /layers/embedding/vars/0 is an HDF5 external link to another file; "
         + OUTSIDE, **H5),
    Case("h5-legacy-external-link", _legacy_link, EXIT_ERROR, r"/item_embedding is an HDF5 external link", **H5),
    Case("h5-soft-link-cycle", _h5(_soft_cycle, "--json", "r.json", ok=True), EXIT_OK, None, timeout=60, **H5),
    Case("h5-hard-link-cycle", _h5(_hard_cycle, "--json", "r.json", ok=True), EXIT_OK, None, timeout=60, **H5),
    Case("h5-gzip-bomb-4GiB", _h5(_gzip_bomb, "--max-memory", "512M"), EXIT_ERROR,
         r"dataset item_embedding\.embeddings of shape \[1048576, 1024\] declares 4,294,967,296 bytes of data "
         r"\(4,\d{3},\d{3} stored in the file\), more than --max-memory \(536,870,912 bytes\)",
         peak_memory=PEAK, timeout=60, slow=True, **H5),
    Case("h5-unwritten-chunks-4GiB", _h5(_unwritten), EXIT_ERROR,
         r"declares 4,294,967,296 bytes of data from 0 bytes stored in the file, " + BOMB,
         timeout=60, **H5),
    Case("h5-one-huge-chunk", _h5(_huge_chunk, "--max-memory", "128M"), EXIT_ERROR,
         r"of shape \[10, 4\] declares 268,435,456 bytes of data .*more than --max-memory",
         timeout=60, **H5),
]


# ---------------------------------------------------------------------------- zip and .npz members


def _patch_zip_size(path: Path, member: str, size: int) -> None:
    """Make the zip directory (and the member's local header) declare ``size`` uncompressed bytes."""
    data = bytearray(path.read_bytes())
    name = member.encode()
    local = data.find(b"PK\x03\x04" + data[4:4])  # first local header
    while local != -1:
        if data[local + 30 : local + 30 + len(name)] == name:
            struct.pack_into("<I", data, local + 22, size)
        local = data.find(b"PK\x03\x04", local + 4)
    central = data.find(b"PK\x01\x02")
    while central != -1:
        if data[central + 46 : central + 46 + len(name)] == name:
            struct.pack_into("<I", data, central + 24, size)
        central = data.find(b"PK\x01\x02", central + 4)
    path.write_bytes(bytes(data))


def _npz(d: Path, members: dict[str, bytes], lie: dict[str, int] | None = None) -> None:
    with zipfile.ZipFile(d / "model.npz", "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for member, content in members.items():
            zf.writestr(member, content)
    for member, size in (lie or {}).items():
        _patch_zip_size(d / "model.npz", member, size)


def _npy_bytes(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def _npy_header(shape: tuple[int, ...]) -> bytes:
    """A .npy file whose header declares ``shape`` of float32 and holds 64 bytes of data."""
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return out.getvalue() + bytes(64)


def _npz_case(members: Any, *extra: str, lie: dict[str, int] | None = None) -> Any:
    def build(d: Path) -> Built:
        log(d)
        _npz(d, members() if callable(members) else members, lie)
        return Built(check_args("model.npz", *extra))

    return build


def _table_bytes() -> bytes:
    return _npy_bytes(np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32))


def _npz_zero_bomb() -> dict[str, bytes]:
    """64 MiB of float32 zeros (really deflated, to about 64 KB) beside a valid table."""
    return {"item_factors.npy": _table_bytes(), "user_factors.npy": _npy_bytes(np.zeros((1 << 22, 4), np.float32))}


def _keras_member_lie(d: Path) -> Built:
    """A .keras archive whose deflated model.weights.h5 claims 4 GB in the zip directory."""
    log(d)
    _keras3(d, "w.h5", lambda g, h5: g.create_dataset("0", data=np.ones((10, 4), np.float32)))
    with zipfile.ZipFile(d / "model.keras", "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("config.json", "{}")
        zf.write(d / "w.h5", "model.weights.h5")
    (d / "w.h5").unlink()
    _patch_zip_size(d / "model.keras", "model.weights.h5", 4_000_000_000)
    return Built(check_args("model.keras"))


CASES += [
    Case("npz-member-declares-4GB", _npz_case({"item_factors.npy": _table_bytes()},
                                              lie={"item_factors.npy": 4_000_000_000}), EXIT_ERROR,
         r"cannot read model\.npz: member item_factors\.npy declares 4,000,000,000 bytes of data from \d+ bytes "
         r"stored in the file, " + BOMB),
    Case("npz-text-member-declares-4GB", _npz_case(lambda: {"item_factors.npy": _table_bytes(), "notes.txt": b"x" * 1000},
                                                   lie={"notes.txt": 4_000_000_000}), EXIT_ERROR,
         r"member notes\.txt declares 4,000,000,000 bytes of data from [\d,]+ bytes stored in the file, " + BOMB),
    Case("npz-zero-bomb-over-ceiling", _npz_case(_npz_zero_bomb, "--max-memory", "16M"), EXIT_ERROR,
         r"compressed members declare 67,109,\d{3} bytes of data in all \(2 members, the largest member "
         r"user_factors\.npy of 67,108,992; [\d,]+ bytes stored in the file\), more than --max-memory \(16,777,216 bytes\)"
         r".*pass --max-memory 129M", peak_memory=PEAK),
    Case("npz-header-shape-1e15", _npz_case(lambda: {"item_factors.npy": _npy_header((10**9, 10**6))}), EXIT_ERROR,
         r"member item_factors\.npy declares shape \[1000000000, 1000000\] \(4,000,000,000,000,000 bytes\) but "
         r"holds \d+ bytes"),
    Case("npz-header-shape-negative", _npz_case(lambda: {"item_factors.npy": _npy_header((-1, 4))}), EXIT_ERROR,
         r"cannot read model\.npz"),
    Case("npz-header-shape-huge-stored", _npz_case(lambda: {"item_factors.npy": _npy_header((2**40, 4))}),
         EXIT_ERROR, r"member item_factors\.npy declares shape \[1099511627776, 4\]"),
    Case("keras-weights-member-declares-4GB", _keras_member_lie, EXIT_ERROR,
         r"model\.keras: zip member model\.weights\.h5 declares 4,000,000,000 bytes of data from [\d,]+ bytes stored "
         r"in the file, " + BOMB, **H5),
]


# ---------------------------------------------------------------------------- tensor views


def _torch_file(make: Any, name: str = "model.pt", *extra: str, legacy: bool = False) -> Any:
    def build(d: Path) -> Built:
        log(d)
        torch.save(make(), d / name, _use_new_zipfile_serialization=not legacy)
        return Built(check_args(name, *extra))

    return build


def _stride_zero_rows() -> dict[str, torch.Tensor]:
    """size [10**6, 1000], stride [0, 1] over 1,000 floats: 4 KB on disk, 4 GB as a table."""
    return {"item.weight": torch.randn(1000).expand(10**6, 1000)}


def _stride_zero_columns() -> dict[str, torch.Tensor]:
    return {"item.weight": torch.randn(10, 1).expand(10, 4)}


def _overlapping_rows() -> dict[str, torch.Tensor]:
    """1000 rows of 1000 floats, each row one float further on: 10**6 elements over a
    storage of 10**6 (so no more than the file holds), every row overlapping the next."""
    return {"item.weight": torch.randn(10**6).as_strided((1000, 1000), (1, 1))}


def _expanded_buffer_beside_table() -> dict[str, torch.Tensor]:
    return {"item.weight": torch.randn(10, 4), "position_bias": torch.zeros(1).expand(10**7)}


def _torch_with_stride(stride: bytes) -> Any:
    """A torch zip archive of one 10 x 4 tensor whose pickled stride is replaced by ``stride``
    (pickle opcodes of a 2-tuple)."""

    def build(d: Path) -> Built:
        log(d)
        torch.save({"item.weight": torch.randn(10, 4)}, d / "orig.pt")
        with zipfile.ZipFile(d / "orig.pt") as src, zipfile.ZipFile(d / "model.pt", "w") as dst:
            for info in src.infolist():
                data = src.read(info)
                if info.filename.endswith("data.pkl"):
                    assert data.count(b"K\x04K\x01\x86") == 1, data
                    data = data.replace(b"K\x04K\x01\x86", stride)
                dst.writestr(info, data)
        (d / "orig.pt").unlink()
        return Built(check_args("model.pt"))

    return build


def _int32(value: int) -> bytes:
    return b"J" + struct.pack("<i", value)


ALIAS = r"its elements alias each other \(zero or overlapping strides\)"
CASES += [
    Case("pt-stride-zero-rows-4GB", _torch_file(_stride_zero_rows), EXIT_ERROR,
         r"model\.pt: .*a tensor of size \[1000000, 1000\] and stride \[0, 1\] has 1,000,000,000 elements but "
         r"storage .* holds 1,000 from offset 0: " + ALIAS, peak_memory=PEAK),
    Case("pt-stride-zero-rows-legacy", _torch_file(_stride_zero_rows, legacy=True), EXIT_ERROR,
         r"cannot read model\.pt \(a legacy torch\.save file\): .*size \[1000000, 1000\] and stride \[0, 1\] .*" + ALIAS),
    Case("pt-stride-zero-columns", _torch_file(_stride_zero_columns), EXIT_ERROR,
         r"size \[10, 4\] and stride \[1, 0\] has 40 elements but storage .* holds 10 .*" + ALIAS),
    Case("pt-overlapping-rows", _torch_file(_overlapping_rows), EXIT_ERROR,
         r"item table 'item\.weight' of size \[1000, 1000\] has stride \[1, 1\]: its rows share memory "
         r"\(zero or overlapping strides\), so it is no table of separate item vectors"),
    Case("pt-expanded-buffer-beside-table", _torch_file(_expanded_buffer_beside_table), EXIT_ERROR,
         r"size \[10000000\] and stride \[0\] has 10,000,000 elements but storage .* holds 1 .*" + ALIAS),
    Case("pt-negative-stride", _torch_with_stride(_int32(-4) + b"K\x01\x86"), EXIT_ERROR,
         r"model\.pt: .*a tensor has size \[10, 4\], stride \[-4, 1\] and offset 0"),
    Case("pt-stride-past-storage", _torch_with_stride(_int32(4000) + b"K\x01\x86"), EXIT_ERROR,
         r"a tensor of size \[10, 4\] at offset 0 reaches element 36004 of storage .* which holds 40"),
    Case("pt-stride-zero-hand-made", _torch_with_stride(b"K\x00K\x01\x86"), EXIT_ERROR,
         r"size \[10, 4\] and stride \[0, 1\] has 40 elements but storage .* holds 40" r"|" r"rows share memory"),
]


# ---------------------------------------------------------------------------- Parquet


def _page_bomb_log(d: Path, name: str = "bomb.parquet") -> str:
    """2**22 rows of zeros in plain, zstd-compressed pages: about 30 KB for 64 MiB."""
    zeros = pa.array(np.zeros(1 << 22, np.int64))
    pq.write_table(pa.table({"user_id": zeros, "item_id": zeros}), d / name, compression="zstd",
                   use_dictionary=False, write_statistics=False)
    return name


def _text_dictionary_bomb(d: Path, name: str = "bomb.parquet", column: str = "item_id", rows: int = 20_000) -> str:
    """Every row's id is one 1 MiB string, stored once in the dictionary page: ~50 KB for 20 GB."""
    ids = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), pa.array(["x" * (1 << 20)]))
    pq.write_table(pa.table({"user_id": pa.array(np.arange(rows) % 5), column: ids}), d / name)
    return name


def _user_dictionary_bomb(d: Path) -> str:
    rows = 20_000
    users = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), pa.array(["u" * (1 << 20)]))
    pq.write_table(pa.table({"user_id": users, "item_id": pa.array(np.arange(rows) % 10)}), d / "bomb.parquet")
    return "bomb.parquet"


def _log_case(make: Any, flag: str = "--interactions", *extra: str) -> Any:
    def build(d: Path) -> Built:
        standard(d)
        name = make(d)
        args = check_args("items.npy", interactions=None) if flag != "--interactions" else check_args(
            "items.npy", interactions=name)
        if flag != "--interactions":
            args += [flag, name] + (["--interactions", "log.parquet"] if flag in ("--holdout", "--item-ids") else [])
        return Built([*args, *extra])

    return build


def _vector_dictionary_bomb(d: Path) -> Built:
    """An item table of 2**20 identical rows of 16 floats, dictionary- and run-length-encoded
    into a few kilobytes: 64 MiB of values the file never paid for."""
    log(d)
    values = pa.array(np.tile(np.arange(16, dtype=np.float32), 1 << 20))
    vectors = pa.FixedSizeListArray.from_arrays(values, 16)
    pq.write_table(pa.table({"item_id": pa.array(np.zeros(1 << 20, np.int64)), "embedding": vectors}),
                   d / "items.parquet", use_dictionary=True, compression="zstd")
    return Built(check_args("items.parquet"))


def _table_with_text_id_bomb(d: Path) -> Built:
    log(d)
    rows = 20_000
    ids = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), pa.array(["i" * (1 << 20)]))
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(np.random.default_rng(0).normal(size=rows * 4), pa.float32()), 4)
    pq.write_table(pa.table({"item_id": ids, "embedding": vectors}), d / "items.parquet")
    return Built(check_args("items.parquet"))


def _manifest_bomb(d: Path) -> Built:
    table(d)
    log(d)
    rows = 20_000
    models = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), pa.array(["m" * (1 << 20)]))
    pq.write_table(pa.table({"model": models}), d / "m.parquet")
    return Built(["batch", "m.parquet", "-o", "r.parquet", "--interactions", "log.parquet", *FAST])


def _frequencies_bomb(d: Path) -> str:
    zeros = pa.array(np.zeros(1 << 22, np.int64))
    pq.write_table(pa.table({"item_id": zeros, "count": zeros}), d / "counts.parquet", compression="zstd",
                   use_dictionary=False, write_statistics=False)
    return "counts.parquet"


def _ids_bomb(d: Path) -> str:
    rows = 20_000
    ids = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), pa.array(["i" * (1 << 20)]))
    pq.write_table(pa.table({"item_id": ids}), d / "ids.parquet")
    return "ids.parquet"


CASES += [
    Case("parquet-log-page-bomb", _log_case(_page_bomb_log), EXIT_ERROR,
         r"bomb\.parquet: column '(user|item)_id' \(row group 0\) declares 8,\d{3},\d{3} bytes of data from "
         r"[\d,]+ bytes stored in the file, " + BOMB, peak_memory=PEAK),
    Case("parquet-log-text-dictionary-bomb", _log_case(_text_dictionary_bomb), EXIT_ERROR,
         r"bomb\.parquet: column 'item_id' \(dictionary-encoded text, 20,000 rows\) declares 20,971,520,000 "
         r"bytes of data from [\d,]+ bytes stored in the file, " + BOMB),
    Case("parquet-user-text-dictionary-bomb", _log_case(_user_dictionary_bomb), EXIT_ERROR,
         r"bomb\.parquet: column 'user_id' \(dictionary-encoded text, 20,000 rows\) declares"),
    Case("parquet-holdout-page-bomb", _log_case(_page_bomb_log, "--holdout"), EXIT_ERROR,
         r"bomb\.parquet: column '(user|item)_id' \(row group 0\) declares .*" + BOMB),
    Case("parquet-frequencies-page-bomb", _log_case(_frequencies_bomb, "--frequencies"), EXIT_ERROR,
         r"counts\.parquet: column '(item_id|count)' \(row group 0\) declares .*" + BOMB),
    Case("parquet-item-ids-dictionary-bomb", _log_case(_ids_bomb, "--item-ids"), EXIT_ERROR,
         r"ids\.parquet: column 'item_id' \(dictionary-encoded text, 20,000 rows\) declares 20,971,520,000"),
    Case("parquet-table-vector-dictionary-bomb", _vector_dictionary_bomb, EXIT_ERROR,
         r"items\.parquet: column 'embedding' \(1,048,576 rows\) declares 67,108,864 bytes of data from [\d,]+ "
         r"bytes stored in the file, " + BOMB),
    Case("parquet-table-text-id-bomb", _table_with_text_id_bomb, EXIT_ERROR,
         r"items\.parquet: column 'item_id' \(dictionary-encoded text, 20,000 rows\) declares 20,971,520,000"),
    Case("parquet-manifest-dictionary-bomb", _manifest_bomb, EXIT_ERROR,
         r"m\.parquet: column 'model' \(dictionary-encoded text, 20,000 rows\) declares 20,971,520,000 bytes"),
]

PRODUCT_FAILURES: list[Case] = []


@pytest.mark.parametrize("case", params(CASES, PRODUCT_FAILURES))
def test_hostile_storage(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)


def test_corpus_size() -> None:
    assert len(CASES) + len(PRODUCT_FAILURES) >= 35

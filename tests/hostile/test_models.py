"""Hostile model files given to ``popaudit check MODEL``: broken, lying, malicious, special."""

from __future__ import annotations

import builtins
import io
import os
import pickle
import re
import struct
import subprocess
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from .corpus import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    Built,
    Case,
    Outcome,
    check_args,
    fifo,
    log,
    params,
    parquet,
    run_case,
    standard,
    strict_json,
    symlink,
    write,
)

PICKLE_REFUSED = r"holds a pickled .* without running code from the file.*--trust-pickle"


# ---------------------------------------------------------------------------- payloads


class _Reduce:
    """Pickles as ``func(*args)``: what a malicious pickle runs when loaded."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.func, self.args


class _Dtype:
    """Pickles as ``numpy.dtype(spec, False, True)`` with BUILD ``state``: any dtype record."""

    def __init__(self, spec: str, state: tuple[Any, ...]) -> None:
        self.spec, self.state = spec, state

    def __reduce__(self) -> tuple[Any, ...]:
        return np.dtype, (self.spec, False, True), self.state


def _checkpoint_with_scalar(dtype: Any, data: bytes) -> bytes:
    """A plain-pickle checkpoint whose hparams hold ``numpy scalar(dtype, data)``."""
    from numpy._core.multiarray import scalar  # type: ignore[attr-defined]

    table = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32)
    return pickle.dumps({"state_dict": {"item_emb.weight": table}, "hparams": {"tag": _Reduce(scalar, dtype, data)}},
                        protocol=2)


def _marker(d: Path) -> Path:
    return d / "PWNED"


def _pickle_case(name: str, payload: Any) -> Any:
    """A file holding ``payload(marker)`` pickled; running it would create the marker."""

    def build(d: Path) -> Built:
        log(d)
        marker = _marker(d)
        data = payload(marker) if callable(payload) else payload
        write(d, name, data if isinstance(data, bytes) else pickle.dumps(data, protocol=2))
        return Built(check_args(name), markers=[marker])

    return build


def _touch_cmd(marker: Path) -> str:
    return f"touch {marker}"


def _chain(marker: Path) -> bytes:
    """getattr(__import__('os'), 'system')('touch MARKER'): a chain of REDUCE opcodes."""
    return (b"c__builtin__\ngetattr\n(c__builtin__\n__import__\n(S'os'\ntRS'system'\ntR(S'"
            + _touch_cmd(marker).encode() + b"'\ntR.")


def _protocol0(marker: Path) -> bytes:
    return b"cos\nsystem\n(S'" + _touch_cmd(marker).encode() + b"'\ntR."


def _nested(marker: Path) -> Any:
    inner = pickle.dumps(_Reduce(os.system, _touch_cmd(marker)), protocol=2)
    return _Reduce(pickle.loads, inner)


def _torch_zip_evil(d: Path) -> Built:
    """A real torch.save zip archive whose data.pkl calls os.system."""
    log(d)
    marker = _marker(d)
    torch.save(_Reduce(os.system, _touch_cmd(marker)), d / "model.pt")
    return Built(check_args("model.pt"), markers=[marker])


def _state_dict_with_evil(d: Path) -> Built:
    """A usable state dict plus one object that would run code: the table is audited
    from the tensors alone, and the object's code never runs."""
    log(d)
    marker = _marker(d)
    torch.save({"item.weight": torch.randn(10, 4), "extra": _Reduce(os.system, _touch_cmd(marker))}, d / "model.pt")
    return Built(check_args("model.pt"), markers=[marker])


class Tripwire(torch.nn.Module):
    """A pickled module whose unpickling (``__setstate__``) writes a marker file."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.items = torch.nn.Embedding(10, 4)
        self.marker = marker

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)  # type: ignore[no-untyped-call]
        Path(self.marker).write_text("unpickled\n")


def _pickled_module(d: Path) -> Built:
    log(d)
    marker = _marker(d)
    torch.save(Tripwire(str(marker)), d / "model.pt")
    return Built(check_args("model.pt"), markers=[marker])


class _ScriptHook(torch.nn.Module):
    """A TorchScript submodule whose scripted ``__setstate__`` (run by torch.jit.load)
    creates the file named in its state (torch.from_file with shared=True creates it)."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    @torch.jit.export
    def __getstate__(self) -> tuple[str, bool]:
        return (self.marker, self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[str, bool]) -> None:
        self.marker = state[0]
        written = torch.from_file(state[0], shared=True, size=4, dtype=torch.uint8)
        self.training = bool(int(written.fill_(65).sum()) > 0) and state[1]


class _ScriptModel(torch.nn.Module):
    def __init__(self, marker: str) -> None:
        super().__init__()
        self.item_embedding = torch.nn.Embedding(10, 4)
        self.hook = _ScriptHook(marker)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.hook(self.item_embedding(x))
        return out


def _torchscript_setstate(d: Path) -> Built:
    log(d)
    marker = _marker(d)
    torch.jit.save(torch.jit.script(_ScriptModel(str(marker))), str(d / "scripted.pt"))
    assert not marker.exists()  # saving runs nothing; torch.jit.load would create it
    return Built(check_args("scripted.pt", "--json", "r.json"), outputs=["r.json"], must_exist=["r.json"],
                 markers=[marker])


class _RecBoleConfig:
    """Pickled under RecBole's name (recbole.config.configurator.Config); unpickling it for
    real would run ``__setstate__``, which writes a marker file."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        Path(state["marker"]).write_text("unpickled\n")


def _recbole_like(settings: dict[str, Any], evil: bool = False, log_rows: int = 10) -> Any:
    """A checkpoint laid out as RecBole's trainer saves it (config object, state_dict with
    padding row 0, optimizer state), its .inter log, and optionally an os.system payload
    inside the config's BUILD state."""

    def build(d: Path) -> Built:
        import sys
        import types

        marker = _marker(d)
        final = {"model": "BPR", "learner": "sgd", "learning_rate": 0.05, "USER_ID_FIELD": "user_id",
                 "ITEM_ID_FIELD": "item_id", "TIME_FIELD": "timestamp",
                 "load_col": {"inter": ["user_id", "item_id", "timestamp"]},
                 "eval_args": {"split": {"RS": [0.8, 0.1, 0.1]}, "order": "TO", "group_by": "user", "mode": "full"},
                 **settings}  # fmt: skip
        config = _RecBoleConfig()
        config.__dict__.update(final_config_dict=final, model="BPR", marker=str(marker))
        if evil:
            config.__dict__["hook"] = _Reduce(os.system, _touch_cmd(marker))
        g = torch.Generator().manual_seed(0)
        state = {"user_embedding.weight": torch.randn(4, 4, generator=g), "item_embedding.weight": torch.randn(9, 4, generator=g)}
        optimizer = torch.optim.SGD([torch.nn.Parameter(t.clone()) for t in state.values()], lr=0.05).state_dict()
        fake = types.ModuleType("recbole.config.configurator")
        fake.Config = _RecBoleConfig  # type: ignore[attr-defined]
        saved = (_RecBoleConfig.__module__, _RecBoleConfig.__qualname__)
        _RecBoleConfig.__module__, _RecBoleConfig.__qualname__ = fake.__name__, "Config"
        names = ("recbole", "recbole.config", fake.__name__)
        # Only while saving: pickle imports the class's module by name.
        sys.modules.update({n: fake if n == fake.__name__ else types.ModuleType(n) for n in names})
        try:
            torch.save({"config": config, "epoch": 3, "state_dict": state, "optimizer": optimizer}, d / "BPR.pth",
                       pickle_protocol=4)
        finally:
            for name in names:
                del sys.modules[name]
            _RecBoleConfig.__module__, _RecBoleConfig.__qualname__ = saved
        items = [f"i{k}" for k in (3, 1, 4, 1, 5, 9, 2, 6, 8, 3)][:log_rows]  # 8 distinct items, 3 users
        rows = "".join(f"u{n % 3}\t{item}\t{n}\n" for n, item in enumerate(items))
        write(d, "x.inter", "user_id:token\titem_id:token\ttimestamp:float\n" + rows)
        return Built(check_args("BPR.pth", "--json", "r.json", interactions="x.inter"), outputs=["r.json"],
                     markers=[marker], check=_recbole_ok if log_rows == 10 and not settings else None)

    return build


def _recbole_ok(d: Path, outcome: Outcome) -> None:
    report = strict_json(d / "r.json")
    assert report["inputs"]["format"] == "recbole" and report["inputs"]["n_items"] == 8  # padding row dropped
    assert "RecBole's own rule" in report["inputs"]["item_id_mapping"]
    assert report["conditions"]["C4"]["status"] == "violated"


# ---------------------------------------------------------------------------- broken files


def _torch_bytes() -> bytes:
    buffer = io.BytesIO()
    torch.save({"item.weight": torch.randn(10, 4, generator=torch.Generator().manual_seed(0))}, buffer)
    return buffer.getvalue()


def _truncated_pt(d: Path) -> Built:
    log(d)
    data = _torch_bytes()
    write(d, "model.pt", data[: len(data) // 2])
    return Built(check_args("model.pt"))


def _zip_without_end(d: Path) -> Built:
    log(d)
    write(d, "model.pt", _torch_bytes()[:-30])  # the end-of-central-directory record is gone
    return Built(check_args("model.pt"))


def _zip_bad_crc(d: Path) -> Built:
    """A torch.save archive with one byte of the tensor data flipped: its CRC-32 no
    longer matches, so the table read from it is not the one that was saved."""
    log(d)
    data = bytearray(_torch_bytes())
    archive = zipfile.ZipFile(io.BytesIO(bytes(data)))
    info = next(i for i in archive.infolist() if i.filename.endswith("/data/0"))
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26: info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len
    data[start + 5] ^= 0xFF
    write(d, "model.pt", bytes(data))
    return Built(check_args("model.pt"))


def _lying_storage(d: Path) -> Built:
    """A torch.save archive whose data.pkl declares a 10^12-element storage (4 TB) and a
    [2.5e11, 4] tensor over the 160 bytes of data/0."""
    log(d)
    archive = zipfile.ZipFile(io.BytesIO(_torch_bytes()))
    name = next(n for n in archive.namelist() if n.endswith("/data.pkl"))
    pkl = archive.read(name)

    def long1(value: int) -> bytes:
        data = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
        return b"\x8a" + bytes([len(data)]) + data

    numel = pkl.index(b"K\x28", pkl.index(b"cpu"))  # BININT1 40 (the storage's numel) follows the device
    size = pkl.index(b"K\x0aK\x04\x86", numel)  # the size tuple (10, 4)
    lying = pkl[:numel] + long1(10**12) + pkl[numel + 2:size] + long1(250_000_000_000) + pkl[size + 2:]
    with zipfile.ZipFile(d / "model.pt", "w", zipfile.ZIP_STORED) as out:
        for entry in archive.namelist():
            out.writestr(entry, lying if entry == name else archive.read(entry))
    return Built(check_args("model.pt"))


def _lying_npy(d: Path) -> Built:
    """A .npy header claiming 3e18 x 1 float32 (12 EB, ~3 EiB rows) over 64 bytes of data."""
    log(d)
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (3000000000000000000, 1), }"
    header = header.ljust(117) + "\n"
    write(d, "lie.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + b"\0" * 64)
    return Built(check_args("lie.npy"))


def _npy(name: str, array: np.ndarray, *extra: str, outputs: tuple[str, ...] = (), check: Any = None) -> Any:
    def build(d: Path) -> Built:
        log(d)
        np.save(d / name, array, allow_pickle=array.dtype == object)
        return Built(check_args(name, *extra), outputs=outputs, must_exist=outputs, check=check)

    return build


def _nan_weight_pt(d: Path) -> Built:
    log(d)
    weight = torch.randn(10, 4)
    weight[3, 1] = float("nan")
    torch.save({"item.weight": weight}, d / "model.pt")
    return Built(check_args("model.pt"))


def _nan_user_pt(row: int, check: Callable[[Path, Outcome], None] | None = None) -> Any:
    """A two-tower state dict whose user row ``row`` holds a NaN; the log's users are 0..4."""
    def build(d: Path) -> Built:
        log(d)
        users = torch.randn(8, 4)
        users[row, 2] = float("nan")
        torch.save({"user_embedding.weight": users, "item_embedding.weight": torch.randn(10, 4)}, d / "model.pt")
        extra = () if check is None else ("--json", "r.json")
        return Built(check_args("model.pt", *extra), outputs=("r.json",) if check else (), check=check)

    return build


def _zero_user_pt(rows: list[int], check: Callable[[Path, Outcome], None] | None = None) -> Any:
    """A two-tower state dict whose user rows ``rows`` are zero; the log's users are 0..4."""
    def build(d: Path) -> Built:
        log(d)
        users = torch.randn(8, 4)
        users[rows] = 0
        torch.save({"user_embedding.weight": users, "item_embedding.weight": torch.randn(10, 4)}, d / "model.pt")
        extra = () if check is None else ("--json", "r.json")
        return Built(check_args("model.pt", *extra), outputs=("r.json",) if check else (), check=check)

    return build


def _zero_user_1_served_nothing(d: Path, outcome: Outcome) -> None:
    """Trained user 1's zero vector is not queried, yet the user stays in the population (QA harms F1)."""
    report = strict_json(d / "r.json")
    assert report["retrieval"]["n_queries"] == 4 and report["retrieval"]["n_zero_queries"] == 1
    assert any(w.startswith("1 of 5 query vectors are zero") and "count in their user group" in w
               for w in report["warnings"])
    assert "of 5 users" in report["retrieval"]["definitions"]["user_group_sizes"]


def _warned_of_user_row_6(d: Path, outcome: Outcome) -> None:
    """An untrained NaN row (user 6 is not in the log) is warned about; the audit runs."""
    warnings = strict_json(d / "r.json")["warnings"]
    assert any(re.search(r"model\.pt has 1 row with NaN or infinite values \(rows 6\): no figure uses", w) for w in warnings)


def _unnamed_linear_pt(d: Path) -> Built:
    """QA accuracy misc (d): a bare ``item_tower.weight`` of shape dim × items beside a user
    table of that dim. Its columns may be one-hot items or item features (the shapes cannot
    tell): refused saying so, not as a bare dimension mismatch of 10 against 4."""
    log(d)
    torch.save({"user_embedding.weight": torch.randn(5, 4), "item_tower.weight": torch.randn(4, 10)}, d / "model.pt")
    return Built(check_args("model.pt"))


def _nan_item_bias_pt(d: Path) -> Built:
    """A textbook MF state dict whose item bias (served with the table) holds a NaN and an inf."""
    log(d)
    bias = torch.zeros(10, 1)
    bias[2, 0], bias[7, 0] = float("nan"), float("inf")
    torch.save({"user_emb.weight": torch.randn(5, 4), "item_emb.weight": torch.randn(10, 4),
                "item_bias.weight": bias}, d / "model.pt")
    return Built(check_args("model.pt"))


def _safetensors_item_bias(d: Path) -> Built:
    """mitigate of a safetensors MF with an item bias: check serves [i, b_i], which a
    rescaled item table alone would not give, so it is refused (no output written)."""
    from safetensors.torch import save_file

    log(d)
    save_file({"user_emb.weight": torch.randn(5, 4), "item_emb.weight": torch.randn(10, 4),
               "item_bias.weight": torch.arange(10.0).reshape(10, 1)}, str(d / "mf.safetensors"))
    return Built(["mitigate", "mf.safetensors", "--alpha", "0.5", "-o", "o.safetensors"])


def _record_array_pickle_mitigate(d: Path) -> Built:
    """mitigate of a plain pickle that keeps a numpy record array beside its tables: the
    reader leaves such an array empty, so writing the tree back would have replaced it by
    an empty array (the output silently lost it); it is refused, nothing written."""
    log(d)
    record = np.array([(1, 2.0), (3, 4.0)], dtype=[("epoch", "i4"), ("loss", "f8")])
    with open(d / "m.pkl", "wb") as fh:
        pickle.dump({"item_embeddings": np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32),
                     "history": record}, fh, protocol=2)
    return Built(["mitigate", "m.pkl", "--alpha", "0.5", "--interactions", "log.parquet", "-o", "o.pkl"])


def _scalars_pt(d: Path) -> Built:
    log(d)
    torch.save({"step": torch.tensor(3), "lr": 0.1}, d / "model.pt")
    return Built(check_args("model.pt"))


def _unread_item_table(layout: str) -> Any:
    """A user table and an item table saved sparse or quantized: read as nothing, the item
    table was reported absent; it is named with its layout instead."""

    def build(d: Path) -> Built:
        log(d)
        items = torch.randn(10, 4)
        with warnings.catch_warnings():  # torch deprecates its quantized tensors; files of them exist
            warnings.simplefilter("ignore", UserWarning)
            table = items.to_sparse() if layout == "sparse" else torch.quantize_per_tensor(items, 0.1, 0, torch.qint8)
        torch.save({"user_emb.weight": torch.randn(5, 4), "item_emb.weight": table}, d / "model.pt")
        return Built(check_args("model.pt"))

    return build


def _report_ok(constant_norms: bool) -> Any:
    def check(d: Path, outcome: Outcome) -> None:
        report = strict_json(d / "r.json")
        rho = report["frequency_norm"]["spearman"]
        if constant_norms:
            assert rho is None
            assert any("same norm" in w for w in report["warnings"]), report["warnings"]
        else:
            assert rho is not None and -1 <= rho <= 1

    return check


def _tiny_catalogue(rows: int) -> Any:
    """A 1- or 2-item table (.npy) and its log: audited, the correlations null with the reason."""

    def build(d: Path) -> Built:
        log(d, rows=rows)
        np.save(d / "tiny.npy", np.random.default_rng(rows).normal(size=(rows, 4)).astype(np.float32))

        def check(folder: Path, outcome: Outcome) -> None:
            report = strict_json(folder / "r.json")
            section = report["frequency_norm"]
            assert section["spearman"] is None and section["pearson_log"] is None
            items = "1 item" if rows == 1 else f"{rows} items"
            assert f"the table has only {items}; a rank correlation needs at least 3" in section["undefined_reason"]
            assert report["retrieval"]["at"][str(rows)]["dot"]["coverage"] is not None

        return Built(check_args("tiny.npy", "-k", str(rows), "--json", "r.json"), outputs=("r.json",),
                     must_exist=("r.json",), check=check)

    return build


def _huge_values() -> np.ndarray:
    values = (np.random.default_rng(1).uniform(-1, 1, (10, 4)) * 3e38).astype(np.float32)
    values[0] = [3e38, -3e38, 3e38, -3e38]
    return values


def _safetensors_lying_header(d: Path) -> Built:
    log(d)
    write(d, "model.safetensors", struct.pack("<Q", 2**62) + b'{"item.weight": {}}')
    return Built(check_args("model.safetensors"))


def _special_model(path: str) -> Any:
    def build(d: Path) -> Built:
        log(d)
        return Built(check_args(path))

    return build


def _fifo_model(d: Path) -> Built:
    log(d)
    fifo(d, "model.pt")
    return Built(check_args("model.pt"))


def _folder_model(d: Path) -> Built:
    log(d)
    (d / "model.pt").mkdir()
    return Built(check_args("model.pt"))


def _loop(d: Path) -> Built:
    log(d)
    symlink(d, "a.pt", "b.pt")
    symlink(d, "b.pt", "a.pt")
    return Built(check_args("a.pt"))


def _dangling(d: Path) -> Built:
    log(d)
    symlink(d, "model.pt", "gone/model.pt")
    return Built(check_args("model.pt"))


def _no_vector_parquet(d: Path) -> Built:
    log(d)
    parquet(d, "items.parquet", {"id": [0, 1, 2], "name": ["a", "b", "c"], "score": [1.0, 2.0, 3.0]})
    return Built(check_args("items.parquet"))


def _simple(name: str, content: bytes | str) -> Any:
    def build(d: Path) -> Built:
        log(d)
        write(d, name, content)
        return Built(check_args(name))

    return build


def _zeros(d: Path) -> Built:
    log(d)
    np.save(d / "zeros.npy", np.zeros((10, 4), np.float32))
    return Built(check_args("zeros.npy"))


def _symlink_to_table(d: Path) -> Built:
    """A valid table reached through two links: audited as the file it names."""
    standard(d)
    symlink(d, "link1.npy", "items.npy")
    symlink(d, "link2.npy", "link1.npy")
    return Built(check_args("link2.npy", "--json", "r.json"), outputs=["r.json"], must_exist=["r.json"])


# ---------------------------------------------------------------------------- other frameworks' files


def _no_h5py() -> str | None:
    try:
        import h5py  # noqa: F401
    except ImportError:
        return "the keras extra (h5py) is not installed"
    return None


def _no_onnx() -> str | None:
    try:
        import onnx  # noqa: F401
    except ImportError:
        return "the onnx extra is not installed"
    return None


def _keras_weights(d: Path, name: str, tables: bool) -> None:
    """Keras 3's save_weights layout: layers/<auto name>/vars/<i>, the layer's name as an attribute."""
    import h5py

    with h5py.File(d / name, "w") as h5:
        group = h5.create_group("layers/embedding/vars")
        group.attrs["name"] = "item_embedding"
        group.create_dataset("0", data=np.random.default_rng(0).normal(size=(10, 4)) if tables else np.ones(4))


def _truncated_h5(d: Path) -> Built:
    log(d)
    _keras_weights(d, "full.weights.h5", tables=True)
    data = (d / "full.weights.h5").read_bytes()
    (d / "full.weights.h5").unlink()
    write(d, "model.weights.h5", data[: len(data) // 2])
    return Built(check_args("model.weights.h5"))


def _h5_without_table(d: Path) -> Built:
    log(d)
    _keras_weights(d, "model.weights.h5", tables=False)
    return Built(check_args("model.weights.h5"))


def _npz_objects(d: Path) -> Built:
    """An .npz whose member would run os.system if np.load unpickled it."""
    log(d)
    marker = _marker(d)
    evil = np.array([_Reduce(os.system, _touch_cmd(marker))], dtype=object)
    np.savez(d / "model.npz", item_factors=evil, user_factors=np.ones((5, 4), np.float32))
    return Built(check_args("model.npz"), markers=[marker])


class _LightFMLike:
    """Pickled under LightFM's name (lightfm.lightfm.LightFM), with an os.system payload in its state."""


def _lightfm_with_payload(d: Path) -> Built:
    """A LightFM-style pickle: the arrays are read from its BUILD state, the payload stays inert."""
    import sys
    import types

    log(d)
    marker = _marker(d)
    rng = np.random.default_rng(0)
    model = _LightFMLike()
    model.__dict__.update(item_embeddings=rng.normal(size=(10, 4)).astype(np.float32),
                          item_biases=np.arange(10, dtype=np.float32), loss="warp",
                          user_embeddings=rng.normal(size=(5, 4)).astype(np.float32),
                          hook=_Reduce(os.system, _touch_cmd(marker)))  # fmt: skip
    fake = types.ModuleType("lightfm.lightfm")
    fake.LightFM = _LightFMLike  # type: ignore[attr-defined]
    saved = (_LightFMLike.__module__, _LightFMLike.__qualname__)
    _LightFMLike.__module__, _LightFMLike.__qualname__ = fake.__name__, "LightFM"
    sys.modules.update({"lightfm": types.ModuleType("lightfm"), fake.__name__: fake})
    try:  # only while saving: pickle looks the class up by name
        write(d, "model.pkl", pickle.dumps(model, protocol=4))
    finally:
        del sys.modules["lightfm"], sys.modules[fake.__name__]
        _LightFMLike.__module__, _LightFMLike.__qualname__ = saved

    def check(folder: Path, outcome: Outcome) -> None:
        report = strict_json(folder / "r.json")
        assert report["inputs"]["format"] == "lightfm" and report["inputs"]["item_table"] == "item_embeddings"
        assert any("item bias term (10 values" in w for w in report["warnings"]), report["warnings"]

    return Built(check_args("model.pkl", "--json", "r.json"), outputs=["r.json"], must_exist=["r.json"],
                 markers=[marker], check=check)


def _onnx_without_table(d: Path) -> Built:
    import onnx
    from onnx import helper, numpy_helper

    log(d)
    graph = helper.make_graph([], "g", [], [], [numpy_helper.from_array(np.ones(4, np.float32), "bias")])
    onnx.save(helper.make_model(graph), str(d / "model.onnx"))
    return Built(check_args("model.onnx"))


def _onnx_text_axes(d: Path) -> Built:
    """An item side x / ReduceL2(x, axes) whose axes Constant holds text: no normalisation
    is recognised (the tables stand in, warned), never a traceback."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    log(d)
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gather", ["item_embedding.weight", "item_id"], ["i"]),
             helper.make_node("Gather", ["user_embedding.weight", "user_id"], ["u"]),
             helper.make_node("Constant", [], ["ax"], value=numpy_helper.from_array(np.array(["last"], dtype=object))),
             helper.make_node("ReduceL2", ["i", "ax"], ["n"]), helper.make_node("Div", ["i", "n"], ["k"]),
             helper.make_node("Mul", ["u", "k"], ["score"])]
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, [None]) for n in ("user_id", "item_id")]
    inits = [numpy_helper.from_array(rng.normal(size=(10, 4)).astype(np.float32), "item_embedding.weight"),
             numpy_helper.from_array(rng.normal(size=(5, 4)).astype(np.float32), "user_embedding.weight")]
    graph = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("score", TensorProto.FLOAT, [None])],
                              inits)  # fmt: skip
    onnx.save(helper.make_model(graph), str(d / "model.onnx"))
    return Built(check_args("model.onnx"))


def _keras_h5_config(text: str) -> Callable[[Path], Built]:
    """A full-model Keras .h5 whose model_config root attribute is ``text``."""
    def build(d: Path) -> Built:
        import h5py

        log(d)
        with h5py.File(d / "model.h5", "w") as h5:
            h5.create_dataset("model_weights/item_embedding/item_embedding/embeddings", data=np.ones((10, 4)))
            h5["model_weights/item_embedding"].attrs["weight_names"] = [b"item_embedding/embeddings"]
            h5["model_weights"].attrs["layer_names"] = [b"item_embedding"]
            h5.attrs["model_config"] = text
        return Built(check_args("model.h5"))
    return build


def _onnx_all_items(*extra: str) -> Callable[[Path], Built]:
    """forward(user_id) = user_embedding(user_id) @ item_embedding.weight.T as torch.onnx
    exports it: the item table is a transposed [4, 10] initializer a MatMul reads whole."""
    def build(d: Path) -> Built:
        import onnx
        from onnx import TensorProto, helper, numpy_helper

        log(d)
        rng = np.random.default_rng(0)
        nodes = [helper.make_node("Gather", ["user_embedding.weight", "user_id"], ["u"]),
                 helper.make_node("MatMul", ["u", "onnx::MatMul_6"], ["scores"])]
        inits = [numpy_helper.from_array(rng.normal(size=(5, 4)).astype(np.float32), "user_embedding.weight"),
                 numpy_helper.from_array(rng.normal(size=(4, 10)).astype(np.float32), "onnx::MatMul_6")]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("user_id", TensorProto.INT64, [None])],
                                  [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, 10])], inits)
        onnx.save(helper.make_model(graph), str(d / "model.onnx"))
        return Built(check_args("model.onnx", *extra))
    return build


def _keras_archive_deep_config(d: Path) -> Built:
    """A .keras archive whose config.json nests 100,000 lists."""
    import h5py

    log(d)
    weights = io.BytesIO()
    with h5py.File(weights, "w") as h5:
        h5.create_dataset("layers/embedding/vars/0", data=np.ones((10, 4), np.float32))
        h5["layers/embedding/vars"].attrs["name"] = "item_embedding"
    with zipfile.ZipFile(d / "model.keras", "w") as archive:
        archive.writestr("config.json", "[" * 100_000 + "]" * 100_000)
        archive.writestr("model.weights.h5", weights.getvalue())
    return Built(check_args("model.keras"))


def _only_bias_columns(d: Path) -> Built:
    """Two (n, 1) item tensors and no wider item table: no bias is taken for a table silently."""
    log(d)
    torch.save({"item_bias.weight": torch.randn(10, 1), "item_pop.weight": torch.randn(10, 1)}, d / "model.pt")
    return Built(check_args("model.pt"))


def _padding_out_of_range(d: Path) -> Built:
    """A pickled module whose nn.Embedding records padding_idx=999 over 20 rows (Loaders F3):
    the file contradicts itself, so no row is dropped silently."""
    log(d)
    module = torch.nn.Module()
    module.item_embedding = torch.nn.Embedding(20, 4)
    module.item_embedding.padding_idx = 999
    torch.save(module, d / "model.pt")
    return Built(check_args("model.pt"))


def _key_leaving_the_bias(*options: str) -> Callable[[Path], Built]:
    """QA12 Loaders F4: a state dict with an (n, 1) item bias beside the tables, and a key
    option that leaves (``--user-key`` on the item table) or names it as the item table: refused
    naming both tensors (it read "user table ... has dimension 4 but the item table has 1")."""
    def build(d: Path) -> Built:
        log(d)
        g = torch.Generator().manual_seed(0)
        torch.save({"user_embedding.weight": torch.randn(5, 4, generator=g), "item_embedding.weight": torch.randn(
            10, 4, generator=g), "item_bias.weight": torch.randn(10, 1, generator=g)}, d / "model.pt")
        return Built(check_args("model.pt", *options))
    return build


CASES = [
    Case("padding-idx-beyond-the-table", _padding_out_of_range, EXIT_ERROR,
         r"model\.pt: the pickled module records nn\.Embedding\(padding_idx=999\) for `item_embedding`, but the item "
         r"table `item_embedding\.weight` has no row 999 \(it has 20 rows\)"),
    Case("empty-pt", _simple("model.pt", b""), EXIT_ERROR, r"model\.pt.*the file is empty \(0 bytes\)"),
    Case("empty-npy", _simple("items.npy", b""), EXIT_ERROR, r"items\.npy.*the file is empty \(0 bytes\)"),
    Case("empty-safetensors", _simple("m.safetensors", b""), EXIT_ERROR, r"m\.safetensors.*the file is empty"),
    Case("truncated-pt", _truncated_pt, EXIT_ERROR, r"cannot read model\.pt: .*(zip|truncated|corrupt)"),
    Case("zip-without-end-record", _zip_without_end, EXIT_ERROR, r"cannot read model\.pt: .*(zip|truncated|corrupt)"),
    Case("garbage-pt", _simple("model.pt", bytes(range(7, 256)) * 8), EXIT_ERROR,
         r"model\.pt.*neither a torch\.save zip archive nor a complete pickle", absent=r"--trust-pickle"),
    Case("garbage-bin", _simple("model.bin", np.random.default_rng(3).bytes(100)), EXIT_ERROR,
         r"cannot read model\.bin .*(corrupt|not a model file)"),
    Case("pickle-os-system", _pickle_case("evil.pt", lambda m: _Reduce(os.system, _touch_cmd(m))), EXIT_ERROR,
         r"evil\.pt " + PICKLE_REFUSED),
    Case("pickle-eval", _pickle_case("evil.pt", lambda m: _Reduce(builtins.eval, f"open({str(m)!r}, 'w')")),
         EXIT_ERROR, r"evil\.pt " + PICKLE_REFUSED),
    Case("pickle-exec", _pickle_case("evil.pkl", lambda m: _Reduce(builtins.exec, f"open({str(m)!r}, 'w')")),
         EXIT_ERROR, r"evil\.pkl " + PICKLE_REFUSED),
    Case("pickle-subprocess", _pickle_case("evil.pt", lambda m: _Reduce(subprocess.check_call, ["touch", str(m)])),
         EXIT_ERROR, r"evil\.pt .*subprocess.*--trust-pickle"),
    Case("pickle-reduce-chain", _pickle_case("evil.pt", _chain), EXIT_ERROR, r"evil\.pt " + PICKLE_REFUSED),
    Case("pickle-protocol-0", _pickle_case("evil.pkl", _protocol0), EXIT_ERROR, r"evil\.pkl .*os\.system.*--trust-pickle"),
    Case("pickle-nested-loads", _pickle_case("evil.pt", _nested), EXIT_ERROR, r"evil\.pt .*loads.*--trust-pickle"),
    Case("torch-zip-os-system", _torch_zip_evil, EXIT_ERROR, r"model\.pt " + PICKLE_REFUSED),
    # Read without unpickling: the tensors are rebuilt, Tripwire.__setstate__ never runs.
    Case("pickled-module-tripwire", _pickled_module, EXIT_OK, None),
    Case("state-dict-with-evil-object", _state_dict_with_evil, EXIT_OK, None),
    Case("torchscript-setstate-writes-file", _torchscript_setstate, EXIT_OK, None),
    Case("pt-storage-claims-4TB", _lying_storage, EXIT_ERROR,
         r"model\.pt: .*data\.pkl: storage .*data/0 declares 4000000000000 bytes but the archive holds 160"),
    Case("npy-lying-header-3EiB", _lying_npy, EXIT_ERROR,
         r"lie\.npy.*header declares shape \[3000000000000000000, 1\].*truncated or corrupt"),
    Case("npy-object-dtype", _npy("obj.npy", np.array([[1, 2], [3, "x"]], dtype=object)), EXIT_ERROR,
         r"obj\.npy.*Python objects.*never unpickled"),
    Case("npy-all-nan", _npy("nan.npy", np.full((10, 4), np.nan, np.float32)), EXIT_ERROR,
         r"nan\.npy has 10 rows with NaN or infinite values"),
    Case("npy-some-inf", _npy("inf.npy", np.where(np.eye(10, 4) > 0, np.inf, 1.0).astype(np.float32)), EXIT_ERROR,
         r"inf\.npy has 4 rows with NaN or infinite values \(rows 0, 1, 2, 3\)"),
    Case("pt-unnamed-linear-item-layer", _unnamed_linear_pt, EXIT_ERROR,
         r"the item table 'item_tower\.weight' of .*model\.pt has shape \[4, 10\]: read as 4 item rows of dimension "
         r"10, it does not match the user table 'user_embedding\.weight' \[5, 4\] \(dimension 4\), but its 4 rows do: "
         r"it looks like a linear layer .*save its transpose \(10 × 4\) as the item table",
         absent=r"has dimension 4 but the item table has 10"),
    Case("pt-nan-weight", _nan_weight_pt, EXIT_ERROR, r"model\.pt has 1 row with NaN or infinite values \(rows 3\)"),
    Case("pt-nan-queried-user", _nan_user_pt(2), EXIT_ERROR, r"user table user_embedding\.weight in model\.pt holds NaN or infinite values \(first at row 2, "
         r"which is queried\)"),
    Case("pt-nan-untrained-user", _nan_user_pt(6, _warned_of_user_row_6), EXIT_OK, None),
    Case("pt-zero-trained-user", _zero_user_pt([1], _zero_user_1_served_nothing), EXIT_OK, None),
    Case("pt-every-trained-user-zero", _zero_user_pt([0, 1, 2, 3, 4]), EXIT_ERROR,
         r"all 5 query vectors are zero; nothing can be retrieved"),
    Case("safetensors-item-bias-mitigate", _safetensors_item_bias, EXIT_ERROR,
         r"mf\.safetensors adds the item bias `item_bias\.weight` to every score.*PyTorch files only"),
    Case("pickle-record-array-mitigate", _record_array_pickle_mitigate, EXIT_ERROR,
         r"cannot write m\.pkl back faithfully.*a numpy array of dtype numpy\.dtype\(V12\).*--tensors-only"),
    Case("pt-nan-item-bias", _nan_item_bias_pt, EXIT_ERROR,
         r"model\.pt: the item bias `item_bias\.weight` holds 2 non-finite values \(NaN or inf; rows 2, 7\)"),
    Case("npy-constant-table", _npy("const.npy", np.ones((10, 4), np.float32), "--json", "r.json",
                                    outputs=("r.json",), check=_report_ok(constant_norms=True)), EXIT_OK, None),
    Case("npy-plus-minus-3e38", _npy("huge.npy", _huge_values(), "--json", "r.json", outputs=("r.json",),
                                     check=_report_ok(constant_norms=False)), EXIT_OK, None),
    Case("npy-one-item", _tiny_catalogue(1), EXIT_OK, None),
    Case("npy-two-items", _tiny_catalogue(2), EXIT_OK, None),
    Case("npy-zero-rows", _npy("none.npy", np.zeros((0, 4), np.float32)), EXIT_ERROR, r"none\.npy is empty \(0 rows\)"),
    Case("npy-1d", _npy("flat.npy", np.arange(10.0)), EXIT_ERROR, r"flat\.npy.*must be 2-D"),
    Case("pt-no-float-table", _scalars_pt, EXIT_ERROR, r"no item embedding table in model\.pt"),
    *(Case(f"pt-{layout}-item-table", _unread_item_table(layout), EXIT_ERROR,
           rf"the item table of model\.pt is in a form popaudit does not read \(item_emb\.weight is a {what}\): it "
           r"reads dense floating-point tensors, so save it dense .*--item-key")
      for layout, what in (("sparse", "sparse tensor"), ("qint8", "quantized tensor"))),
    Case("safetensors-garbage", _simple("m.safetensors", "not safetensors at all\n"), EXIT_ERROR,
         r"m\.safetensors as safetensors"),
    Case("safetensors-lying-header", _safetensors_lying_header, EXIT_ERROR, r"model\.safetensors as safetensors"),
    Case("parquet-no-vector-column", _no_vector_parquet, EXIT_ERROR,
         r"items\.parquet has no list-of-float column.*id \(int64\), name \(string\), score \(double\)"),
    Case("parquet-garbage", _simple("items.parquet", b"PAR1garbagePAR1"), EXIT_ERROR, r"items\.parquet as Parquet"),
    Case("fifo-model", _fifo_model, EXIT_ERROR, r"model\.pt is a FIFO \(named pipe\), not a regular file",
         process=True, timeout=30),
    Case("dev-zero-model", _special_model("/dev/zero"), EXIT_ERROR, r"/dev/zero is a character device",
         process=True, timeout=30),
    Case("folder-model", _folder_model, EXIT_USAGE, r"'\[MODEL\]'.*model\.pt.*is a directory"),
    Case("symlink-loop-model", _loop, EXIT_ERROR, r"a\.pt.*(Too many levels of symbolic links|symlink loop)"),
    Case("dangling-symlink-model", _dangling, EXIT_ERROR, r"not found: model\.pt"),
    Case("symlink-chain-to-table", _symlink_to_table, EXIT_OK, None),
    Case("zip-bad-crc", _zip_bad_crc, EXIT_ERROR, r"model\.pt.*archive/data/0 fails its CRC-32 check.*corrupt"),
    Case("npy-all-zero-table", _zeros, EXIT_ERROR, r"zeros\.npy is all zeros: every one of its 10 item vectors is zero",
         absent=r"query vectors"),
    Case("h5-truncated", _truncated_h5, EXIT_ERROR, r"cannot read model\.weights\.h5 as HDF5 .*truncated or corrupt",
         skip=_no_h5py),
    Case("h5-no-embedding", _h5_without_table, EXIT_ERROR,
         r"no item embedding table in model\.weights\.h5: it holds no 2-D floating-point weights", skip=_no_h5py),
    Case("npz-object-arrays", _npz_objects, EXIT_ERROR,
         r"cannot read model\.npz: member item_factors\.npy holds Python objects .*never unpickled"),
    Case("lightfm-pickle-with-os-system", _lightfm_with_payload, EXIT_OK, None),
    Case("onnx-no-2d-initializer", _onnx_without_table, EXIT_ERROR,
         r"no item embedding table in model\.onnx: .*no 2-D floating-point initializer \(initializers: bias \[4\]\)",
         skip=_no_onnx),
    Case("keras-h5-model-config-not-json", _keras_h5_config("{'layers': ["), EXIT_ERROR,
         r"cannot read model\.h5: its `model_config` attribute is no JSON model config", skip=_no_h5py),
    Case("keras-h5-model-config-a-list", _keras_h5_config('[{"class_name": "Embedding"}]'), EXIT_ERROR,
         r"cannot read model\.h5: its `model_config` attribute is no JSON model config \(a JSON list, where Keras "
         r"writes an object\)", skip=_no_h5py),
    Case("keras-h5-model-config-nested-1e5", _keras_h5_config("[" * 100_000 + "]" * 100_000), EXIT_ERROR,
         r"cannot read model\.h5: its `model_config` attribute nests deeper than any model config", skip=_no_h5py),
    Case("keras-archive-config-nested-1e5", _keras_archive_deep_config, EXIT_ERROR,
         r"cannot read model\.keras as a \.keras archive: its config\.json nests deeper than any model config",
         skip=_no_h5py, absent=r"RecursionError|plugin 'builtin:loading' failed"),
    Case("state-dict-only-one-column-item-tensors", _only_bias_columns, EXIT_ERROR,
         r"several tensors in model\.pt could be the item table \(item_bias\.weight, item_pop\.weight\); pass "
         r"--item-key"),
    Case("onnx-item-table-multiplied-whole", _onnx_all_items(), EXIT_ERROR,
         r"no item embedding table in model\.onnx: popaudit reads item tables as the 2-D initializers a Gather looks "
         r"rows up in \(here user_embedding\.weight \[5, 4\], none of them the item table\), and no Gather reads "
         r"onnx::MatMul_6 \[4, 10\] \(read by MatMul\): an item table the graph multiplies whole", skip=_no_onnx,
         absent=r"no 2-D floating tensor"),
    Case("onnx-item-key-names-ungathered-initializer", _onnx_all_items("--item-key", "onnx::MatMul_6"), EXIT_ERROR,
         r"--item-key 'onnx::MatMul_6' names an initializer of model\.onnx that no Gather looks rows up in: .*no "
         r"Gather reads onnx::MatMul_6 \[4, 10\]", skip=_no_onnx, absent=r"is not a tensor"),
    Case("onnx-reduce-l2-text-axes-constant", _onnx_text_axes, EXIT_OK, None, skip=_no_onnx),
    Case("numpy-str-scalar-short-of-its-width", _pickle_case("model.pt", _checkpoint_with_scalar(
        np.dtype("<U5"), b"abc")), EXIT_ERROR, r"model\.pt.*numpy scalar of dtype <U5 with arguments torch and numpy "
                                               r"never write"),
    Case("numpy-str-scalar-1e8-characters", _pickle_case("model.pt", _checkpoint_with_scalar(
        _Dtype("U99999999", (3, "<", None, None, None, -1, -1, 8)), b"ab")), EXIT_ERROR,
         r"model\.pt.*a numpy scalar of numpy\.dtype\(U99999999\), a dtype popaudit does not rebuild"),
    Case("numpy-datetime-scalar-unknown-unit", _pickle_case("model.pt", _checkpoint_with_scalar(
        _Dtype("M8", (4, "<", None, None, None, -1, -1, 0, (None, (b"zz", 1, 1, 1)))), b"\0" * 8)), EXIT_ERROR,
         r"model\.pt.*a numpy scalar of numpy\.dtype\(M8\), a dtype popaudit does not rebuild"),
    Case("numpy-str-scalar-in-hparams", _pickle_case("model.pt", _checkpoint_with_scalar(
        np.dtype("<U5"), "ml-1m".encode("utf-32-le"))), EXIT_OK, None),
    Case("pickle-protocol-5-os-system", _pickle_case("evil.pt", lambda m: pickle.dumps(
        _Reduce(os.system, _touch_cmd(m)), protocol=5)), EXIT_ERROR, r"evil\.pt " + PICKLE_REFUSED),
    Case("recbole-config-build-os-system", _recbole_like({}, evil=True), EXIT_OK, None),
    Case("recbole-filtered-needs-item-ids", _recbole_like({"item_inter_num_interval": "[5,inf)"}), EXIT_ERROR,
         r"BPR\.pth was trained by RecBole .*item_inter_num_interval='\[5,inf\)'.*--item-ids FILE"),
    Case("user-key-leaving-the-item-bias-as-the-item-table", _key_leaving_the_bias("--user-key", "item_embedding.weight"),
         EXIT_ERROR, r"the item table of model\.pt would be item_bias\.weight \[10, 1\] \(the best candidate left once "
         r"--user-key took 'item_embedding\.weight'\): one value per row, .*an item bias, not an embedding table.*"
         r"Pass --item-key with the item table", absent=r"has dimension"),
    Case("item-key-naming-the-item-bias", _key_leaving_the_bias("--item-key", "item_bias.weight"), EXIT_ERROR,
         r"item_bias\.weight \[10, 1\] \(named by --item-key\).*beside the user table user_embedding\.weight \[5, 4\]",
         absent=r"has dimension"),
    Case("recbole-log-of-other-ids", _recbole_like({}, log_rows=6), EXIT_ERROR,
         r"x\.inter holds 5 distinct item ids .* BPR\.pth has 8 rows after its padding row.*--item-ids FILE"),
]

PRODUCT_FAILURES: list[Case] = []


@pytest.mark.parametrize("case", params(CASES, PRODUCT_FAILURES))
def test_hostile_model_file(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)


def test_corpus_size() -> None:
    assert len(CASES) + len(PRODUCT_FAILURES) >= 30

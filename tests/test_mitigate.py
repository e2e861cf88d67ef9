"""`popaudit mitigate`: the rescaled table in every format, the rule's known answers, the
ranking it serves, the sidecar, and `check` on what it writes."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import save_file

from auditor.cli import cli
from auditor.errors import NoClearGainError, InputError
from auditor.loading.builtin import detect_kind
from auditor.mitigation.auto import recommended_alpha
from auditor.mitigation.run import SUFFIX_KINDS
from auditor.mitigation.sidecar import sidecar_path
from auditor.mitigation.rescale import rescale_rows

N_ITEMS, DIM, N_QUERIES, K = 50, 6, 20, 10
ZERO_ROW = 7


def table(dtype: Any = np.float32, seed: int = 0) -> np.ndarray:
    """Item vectors whose norms grow with the row's frequency (row i seen i + 1 times); row 7 all zero."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(N_ITEMS, DIM))
    rows *= (np.arange(1, N_ITEMS + 1) ** 0.5 / np.linalg.norm(rows, axis=1))[:, None]
    rows[ZERO_ROW] = 0
    return rows.astype(dtype)


def write_log(folder: Path) -> Path:
    items = np.repeat(np.arange(N_ITEMS), np.arange(1, N_ITEMS + 1))
    pq.write_table(pa.table({"user_id": np.arange(items.size) % 9, "item_id": items}), folder / "log.parquet")
    return folder / "log.parquet"


def run(*args: Any) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args])


def mitigate(model: Path, alpha: float, out: Path, *extra: Any, code: int = 0) -> Any:
    result = run("mitigate", model, "--alpha", alpha, "-o", out, "-q", *extra)
    assert result.exit_code == code, result.output
    return result


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def reference_topk(original: np.ndarray, queries: np.ndarray, alpha: float) -> np.ndarray:
    """Top-K rows by (q . k) * |k|^(alpha - 1) over the original table (ties: lower row)."""
    rows = np.asarray(original, dtype=np.float64)
    norms = np.linalg.norm(rows, axis=1)
    factor = np.zeros_like(norms)
    np.power(norms, alpha - 1, out=factor, where=norms > 0)
    return np.argsort(-(queries @ rows.T) * factor, axis=1, kind="stable")[:, :K]


def dot_topk(rescaled: np.ndarray, queries: np.ndarray) -> np.ndarray:
    return np.argsort(-(queries @ np.asarray(rescaled, dtype=np.float64).T), axis=1, kind="stable")[:, :K]


def check_rescaled(original: np.ndarray, rescaled: np.ndarray, alpha: float, rtol: float) -> None:
    """Norms are |k|^alpha, directions kept, zero rows zero, and dot top-K serves alpha_A."""
    original64, rescaled64 = np.asarray(original, np.float64), np.asarray(rescaled, np.float64)
    assert rescaled.shape == original.shape and rescaled.dtype == original.dtype
    norms = np.linalg.norm(original64, axis=1)
    np.testing.assert_allclose(np.linalg.norm(rescaled64, axis=1), norms**alpha * (norms > 0), rtol=rtol)
    assert not rescaled64[norms == 0].any()
    live = norms > 0
    cos = np.einsum("ij,ij->i", original64[live], rescaled64[live]) / (norms[live] * np.linalg.norm(rescaled64[live], axis=1))
    np.testing.assert_allclose(cos, 1.0, rtol=rtol)
    queries = np.random.default_rng(1).normal(size=(N_QUERIES, original.shape[1]))
    np.testing.assert_array_equal(dot_topk(rescaled, queries), reference_topk(original, queries, alpha))


# ------------------------------------------------------------------ the rule, known answers


def test_rule_on_hand_checked_rows() -> None:
    rows = np.array([[3.0, 4.0], [0.0, 0.0], [0.0, -2.0]])
    np.testing.assert_allclose(rescale_rows(rows, 0.5), [[3 / 5**0.5, 4 / 5**0.5], [0, 0], [0, -2**0.5]])
    np.testing.assert_array_equal(rescale_rows(rows, 0.0), [[0.6, 0.8], [0, 0], [0, -1]])
    assert rescale_rows(rows, 1.0) is rows  # alpha = 1: the rows themselves, bit for bit


def test_rule_is_overflow_and_underflow_safe() -> None:
    huge = np.array([[1e300, 1e300], [5e-324, 0.0]])  # |k|^2 overflows; 1/|k| overflows
    out = rescale_rows(huge, 0.0)
    np.testing.assert_allclose(out, [[2**-0.5, 2**-0.5], [1.0, 0.0]])
    half = rescale_rows(huge[:1], 0.5)
    np.testing.assert_allclose(np.linalg.norm(half / 1e150), np.sqrt(np.sqrt(2) * 1e300) / 1e150)


def test_suffix_kinds_agree_with_the_loader(tmp_path: Path) -> None:
    for suffix, kind in SUFFIX_KINDS.items():
        (tmp_path / f"x{suffix}").write_bytes(b"x")
        assert detect_kind(tmp_path / f"x{suffix}") == kind, suffix


# ------------------------------------------------------------------ .npy


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("alpha", [0.0, 0.25, 0.5, 1.0])
def test_npy_round_trip(tmp_path: Path, dtype: Any, alpha: float) -> None:
    original = table(dtype)
    np.save(tmp_path / "items.npy", original)
    before = sha256(tmp_path / "items.npy")
    mitigate(tmp_path / "items.npy", alpha, tmp_path / "out.npy")
    rescaled = np.load(tmp_path / "out.npy")
    assert sha256(tmp_path / "items.npy") == before
    if alpha == 1.0:
        assert rescaled.tobytes() == original.tobytes()
        return
    rtol = {np.float16: 2e-3, np.float32: 2e-6, np.float64: 1e-12}[dtype]
    if dtype is np.float16:  # float16 rounding moves near-ties; the norms and directions still hold
        np.testing.assert_allclose(np.linalg.norm(rescaled.astype(float), axis=1),
                                   np.linalg.norm(original.astype(float), axis=1) ** alpha * (np.arange(N_ITEMS) != ZERO_ROW), rtol=rtol)
    else:
        check_rescaled(original, rescaled, alpha, rtol)
    if alpha == 0.0:
        norms = np.linalg.norm(rescaled.astype(np.float64), axis=1)
        np.testing.assert_allclose(np.delete(norms, ZERO_ROW), 1.0, rtol=rtol)


def test_npy_fortran_order_is_kept(tmp_path: Path) -> None:
    original = np.asfortranarray(table(np.float64))
    np.save(tmp_path / "items.npy", original)
    mitigate(tmp_path / "items.npy", 0.5, tmp_path / "out.npy")
    rescaled = np.load(tmp_path / "out.npy")
    assert np.isfortran(rescaled)
    check_rescaled(original, rescaled, 0.5, 1e-12)


def test_blocks_and_max_memory_give_the_same_table(tmp_path: Path) -> None:
    """3000 rows in blocks of 512 (a 64K ceiling) equal the rule applied to the whole table."""
    rows = np.random.default_rng(3).normal(size=(3000, 4)).astype(np.float32)
    np.save(tmp_path / "items.npy", rows)
    mitigate(tmp_path / "items.npy", 0.3, tmp_path / "out.npy", "--max-memory", "64K")
    expected = rescale_rows(rows.astype(np.float64), 0.3).astype(np.float32)
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), expected)


# ------------------------------------------------------------------ Parquet


@pytest.mark.parametrize("vector_type", [pa.list_(pa.float32()), pa.large_list(pa.float64()),
                                         pa.list_(pa.float32(), DIM)])
def test_parquet_round_trip_keeps_other_columns(tmp_path: Path, vector_type: pa.DataType) -> None:
    dtype = np.float64 if vector_type.value_type == pa.float64() else np.float32
    original = table(dtype)
    ids = np.arange(100, 100 + N_ITEMS)
    source = pa.table({
        "item_id": pa.array(ids),
        "embedding": pa.array(list(original), type=vector_type),
        "title": pa.array([f"item {i}" for i in ids]),
        "price": pa.array(np.linspace(1, 2, N_ITEMS)),
    }).replace_schema_metadata({"owner": "tests"})
    pq.write_table(source, tmp_path / "items.parquet", row_group_size=16, compression="zstd")
    mitigate(tmp_path / "items.parquet", 0.5, tmp_path / "out.parquet")
    out_file = pq.ParquetFile(tmp_path / "out.parquet")
    out, source = out_file.read(), pq.read_table(tmp_path / "items.parquet")
    assert out.schema.equals(source.schema, check_metadata=True)
    assert out_file.metadata.num_row_groups == 4
    assert out_file.metadata.row_group(0).column(0).compression == "ZSTD"
    for name in ("item_id", "title", "price"):
        assert out.column(name).equals(source.column(name)), name
    rescaled = np.array(out.column("embedding").to_pylist(), dtype=dtype)
    check_rescaled(original, rescaled, 0.5, 2e-6 if dtype is np.float32 else 1e-12)


# ------------------------------------------------------------------ safetensors


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_safetensors_keeps_every_other_byte(tmp_path: Path, dtype: torch.dtype) -> None:
    item = torch.from_numpy(table()).to(dtype)
    tensors = {
        "tower.item_embedding.weight": item,
        "tower.user_embedding.weight": torch.ones(9, DIM, dtype=dtype),
        "tower.mlp.bias": torch.arange(3, dtype=torch.float32),
    }
    save_file(tensors, str(tmp_path / "m.safetensors"), metadata={"trained_by": "tests"})
    mitigate(tmp_path / "m.safetensors", 0.5, tmp_path / "out.safetensors")
    src, out = (tmp_path / "m.safetensors").read_bytes(), (tmp_path / "out.safetensors").read_bytes()
    header = 8 + int.from_bytes(src[:8], "little")
    entry = json.loads(src[8:header])["tower.item_embedding.weight"]
    begin, end = (header + o for o in entry["data_offsets"])
    assert len(out) == len(src) and out[:begin] == src[:begin] and out[end:] == src[end:]
    from safetensors import safe_open

    with safe_open(str(tmp_path / "out.safetensors"), "pt") as fh:
        assert fh.metadata() == {"trained_by": "tests"}
        rescaled = fh.get_tensor("tower.item_embedding.weight")
    assert rescaled.dtype == dtype
    if dtype == torch.float32:
        check_rescaled(item.numpy(), rescaled.numpy(), 0.5, 2e-6)
    else:  # bfloat16: 8 bits of mantissa
        norms = item.double().norm(dim=1)
        torch.testing.assert_close(rescaled.double().norm(dim=1), norms**0.5 * (norms > 0), rtol=1e-2, atol=0)


# ------------------------------------------------------------------ PyTorch files


@dataclass
class Settings:
    """A class of the test module: pickled by reference, read back as an inert placeholder."""

    lr: float = 0.1


def state_dict(item: torch.Tensor) -> dict[str, Any]:
    return {
        "item_embedding.weight": item,
        "user_embedding.weight": torch.randn(9, DIM, generator=torch.Generator().manual_seed(2)),
        "mlp.0.weight": torch.randn(3, DIM, dtype=torch.float64, generator=torch.Generator().manual_seed(3)),
        "step": torch.tensor(17),
    }


def assert_same_except(original: dict[str, Any], written: dict[str, Any], key: str) -> None:
    """Every key but ``key`` holds the same value (tensors: same dtype, shape and bytes)."""
    assert list(written) == list(original)
    for name, value in original.items():
        if name == key:
            continue
        if isinstance(value, torch.Tensor):
            assert written[name].dtype == value.dtype and written[name].shape == value.shape, name
            assert written[name].numpy().tobytes() == value.numpy().tobytes(), name
        elif isinstance(value, dict):
            assert_same_except(value, written[name], key)
        else:
            assert written[name] == value, name


@pytest.mark.parametrize("legacy", [False, True])
def test_torch_checkpoint_keeps_every_other_key(tmp_path: Path, legacy: bool) -> None:
    item = torch.from_numpy(table())
    checkpoint = {
        "model_state_dict": state_dict(item),
        "optimizer_state_dict": {"state": {}, "param_groups": [{"lr": 0.05, "momentum": 0.0, "params": [0, 1]}]},
        "config": {"loss": "infonce-cos", "dims": (DIM, 3)},
        "epoch": 3,
    }
    torch.save(checkpoint, tmp_path / "m.pt", _use_new_zipfile_serialization=not legacy)
    before = sha256(tmp_path / "m.pt")
    mitigate(tmp_path / "m.pt", 0.25, tmp_path / "out.pt")
    assert sha256(tmp_path / "m.pt") == before
    written = torch.load(tmp_path / "out.pt", weights_only=True)
    with open(tmp_path / "out.pt", "rb") as fh:
        assert (fh.read(2) == b"PK") is not legacy  # the same container
    assert_same_except(checkpoint, written, "item_embedding.weight")
    check_rescaled(item.numpy(), written["model_state_dict"]["item_embedding.weight"].numpy(), 0.25, 2e-6)
    side = json.loads(sidecar_path(tmp_path / "out.pt").read_text())
    assert side["item_key"] == "item_embedding.weight" and side["source"]["format"] == "checkpoint"


def test_tied_weights_stay_tied_and_alpha_one_changes_nothing(tmp_path: Path) -> None:
    item = torch.from_numpy(table())
    sd = state_dict(item)
    sd["output.item_weight_tied"] = item  # the same tensor under two keys
    torch.save(sd, tmp_path / "m.pt")
    mitigate(tmp_path / "m.pt", 0.5, tmp_path / "out.pt", "--item-key", "item_embedding.weight")
    written = torch.load(tmp_path / "out.pt", weights_only=True)
    tied = written["output.item_weight_tied"]
    assert tied.untyped_storage().data_ptr() == written["item_embedding.weight"].untyped_storage().data_ptr()
    mitigate(tmp_path / "m.pt", 1.0, tmp_path / "same.pt", "--item-key", "item_embedding.weight")
    same = torch.load(tmp_path / "same.pt", weights_only=True)
    assert same["item_embedding.weight"].numpy().tobytes() == item.numpy().tobytes()


def test_a_view_of_the_table_is_refused(tmp_path: Path) -> None:
    item = torch.from_numpy(table())
    sd = state_dict(item)
    sd["first_rows"] = item[:5]  # shares the table's storage: it could not stay a view of the new table
    torch.save(sd, tmp_path / "m.pt")
    result = mitigate(tmp_path / "m.pt", 0.5, tmp_path / "out.pt", code=1)
    assert "other tensors in the file (1) are views of its storage" in result.output and not (tmp_path / "out.pt").exists()


def test_pickled_objects_are_refused_unless_tensors_only(tmp_path: Path) -> None:
    item = torch.from_numpy(table())
    torch.save({"state_dict": state_dict(item), "hyper_parameters": Settings()}, tmp_path / "m.ckpt")
    refused = mitigate(tmp_path / "m.ckpt", 0.5, tmp_path / "out.ckpt", code=1)
    assert "test_mitigate.Settings" in refused.output and "--tensors-only" in refused.output
    assert list(tmp_path.iterdir()) == [tmp_path / "m.ckpt"]
    mitigate(tmp_path / "m.ckpt", 0.5, tmp_path / "out.ckpt", "--tensors-only")
    written = torch.load(tmp_path / "out.ckpt", weights_only=True)
    assert set(written) == set(state_dict(item))
    check_rescaled(item.numpy(), written["item_embedding.weight"].numpy(), 0.5, 2e-6)
    side = json.loads(sidecar_path(tmp_path / "out.ckpt").read_text())
    assert any("--tensors-only" in w for w in side["warnings"]) and side["output"]["format"] == "state_dict"


def test_torchscript_needs_tensors_only(tmp_path: Path) -> None:
    class Towers(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.item_embedding = torch.nn.Embedding(N_ITEMS, DIM)
            self.user_embedding = torch.nn.Embedding(9, DIM)

        def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
            return (self.user_embedding(users) * self.item_embedding(items)).sum(-1)

    towers = Towers()
    with torch.no_grad():
        towers.item_embedding.weight.copy_(torch.from_numpy(table()))
    torch.jit.save(torch.jit.script(towers), str(tmp_path / "m.pt"))
    refused = mitigate(tmp_path / "m.pt", 0.5, tmp_path / "out.pt", code=1)
    assert "TorchScript" in refused.output
    mitigate(tmp_path / "m.pt", 0.5, tmp_path / "out.pt", "--tensors-only")
    written = torch.load(tmp_path / "out.pt", weights_only=True)
    check_rescaled(table(), written["item_embedding.weight"].numpy(), 0.5, 2e-6)


def test_numpy_arrays_in_a_torch_file_and_plain_pickles(tmp_path: Path) -> None:
    original = table()
    users = np.ones((9, DIM), dtype=np.float32)
    torch.save({"item_embeddings": original, "user_embeddings": users, "meta": {"n": 3}}, tmp_path / "m.pt")
    mitigate(tmp_path / "m.pt", 0.5, tmp_path / "out.pt")
    written = torch.load(tmp_path / "out.pt", weights_only=False)  # our own test file
    assert type(written["item_embeddings"]) is np.ndarray and written["meta"] == {"n": 3}
    assert written["user_embeddings"].tobytes() == users.tobytes()
    check_rescaled(original, written["item_embeddings"], 0.5, 2e-6)
    with open(tmp_path / "m.pkl", "wb") as fh:
        pickle.dump({"item_embeddings": original, "user_embeddings": users}, fh, protocol=2)
    mitigate(tmp_path / "m.pkl", 0.5, tmp_path / "out.pkl")
    with open(tmp_path / "out.pkl", "rb") as fh:
        plain = pickle.load(fh)  # our own test file
    check_rescaled(original, plain["item_embeddings"], 0.5, 2e-6)


def test_popaudit_checkpoint_uses_its_recorded_frequencies(tmp_path: Path) -> None:
    item = torch.from_numpy(table())
    checkpoint = {
        "popaudit_checkpoint": 1,
        "state_dict": {"item_tower.weight": torch.randn(N_ITEMS, DIM)},
        "item_embeddings": item,
        "user_embeddings": torch.randn(9, DIM),
        "item_ids": list(range(N_ITEMS)),
        "user_ids": list(range(9)),
        "item_frequencies": torch.arange(1, N_ITEMS + 1),
    }
    torch.save(checkpoint, tmp_path / "m.pt")
    mitigate(tmp_path / "m.pt", 0.5, tmp_path / "out.pt")
    written = torch.load(tmp_path / "out.pt", weights_only=True)
    assert_same_except(checkpoint, written, "item_embeddings")
    check_rescaled(item.numpy(), written["item_embeddings"].numpy(), 0.5, 2e-6)
    side = json.loads(sidecar_path(tmp_path / "out.pt").read_text())
    fn = side["frequency_norm"]
    assert fn["frequencies"] == "the checkpoint's record"
    # row i seen i + 1 times, |k_i| = sqrt(i + 1) except the zero row: rho over ranks, slope 0.5 -> 0.25
    assert fn["before"]["loglog_slope"] == pytest.approx(0.5, abs=0.02)
    assert fn["after"]["loglog_slope"] == pytest.approx(0.25, abs=0.01)
    assert "spearman" not in fn["before"] and "cannot move it" in fn["note"]  # rescaling cannot change rho
    assert any("item encoder" in w for w in side["warnings"])


# ------------------------------------------------------------------ sidecar, summary, check OUT


def test_sidecar_records_the_run(tmp_path: Path) -> None:
    original = table()
    np.save(tmp_path / "items.npy", original)
    log = write_log(tmp_path)
    result = run("mitigate", tmp_path / "items.npy", "--alpha", "0.5", "-o", tmp_path / "new" / "out.npy",
                 "--interactions", log)
    assert result.exit_code == 0, result.output
    assert f"Next: popaudit check {tmp_path / 'new' / 'out.npy'} --interactions {log}\n" in result.output
    side = json.loads((tmp_path / "new" / "out.npy.popaudit.json").read_text())
    assert side["popaudit_mitigation"] == 1 and side["alpha"] == 0.5 and side["alpha_source"] == "given"
    assert side["source"]["sha256"] == sha256(tmp_path / "items.npy")
    assert side["output"]["sha256"] == sha256(tmp_path / "new" / "out.npy")
    assert side["item_key"] is None and side["n_items"] == N_ITEMS and side["dim"] == DIM
    assert side["dtype"] == "float32" and "||k||^(alpha - 1)" in side["rule"]
    norms = np.linalg.norm(original.astype(np.float64), axis=1)
    assert side["norms"]["before"]["max"] == pytest.approx(norms.max())
    assert side["norms"]["before"]["median"] == pytest.approx(np.median(norms))
    assert side["norms"]["after"]["mean"] == pytest.approx(np.mean(norms**0.5), rel=1e-6)
    assert side["norms"]["after"]["n_zero_rows"] == 1
    fn = side["frequency_norm"]
    # Only what the rescaling changes: the slope scales by alpha; rho (order of norms) is not reported.
    assert set(fn["before"]) == set(fn["after"]) == {"loglog_slope"}
    assert fn["after"]["loglog_slope"] == pytest.approx(0.5 * fn["before"]["loglog_slope"], rel=1e-6)
    assert side["tradeoff"] is None and "Spearman" not in result.output and "rho" not in result.output


def test_alpha_zero_leaves_no_slope(tmp_path: Path) -> None:
    np.save(tmp_path / "items.npy", np.delete(table(), ZERO_ROW, axis=0)[: N_ITEMS - 1])
    items = np.repeat(np.arange(N_ITEMS - 1), np.arange(1, N_ITEMS))
    pq.write_table(pa.table({"user_id": items % 5, "item_id": items}), tmp_path / "log.parquet")
    mitigate(tmp_path / "items.npy", 0, tmp_path / "out.npy", "--interactions", tmp_path / "log.parquet")
    fn = json.loads(sidecar_path(tmp_path / "out.npy").read_text())["frequency_norm"]
    assert fn["before"]["loglog_slope"] == pytest.approx(0.5, abs=0.02)  # norms sqrt(1..49) on frequencies 1..49
    assert fn["after"]["loglog_slope"] is None and "every norm 1" in fn["note"]


@pytest.mark.parametrize("fmt", ["npy", "pt", "safetensors", "parquet"])
def test_check_reads_the_output(tmp_path: Path, fmt: str) -> None:
    original = table()
    model = tmp_path / f"m.{fmt}"
    if fmt == "npy":
        np.save(model, original)
    elif fmt == "pt":
        torch.save(state_dict(torch.from_numpy(original)), model)
    elif fmt == "safetensors":
        save_file({"item_embedding.weight": torch.from_numpy(original)}, str(model))
    else:
        pq.write_table(pa.table({"item_id": np.arange(N_ITEMS), "emb": list(original)}), model)
    log = write_log(tmp_path)
    mitigate(model, 0.5, tmp_path / f"out.{fmt}")
    report = tmp_path / "report.json"
    result = run("check", tmp_path / f"out.{fmt}", "--interactions", log, "--no-probes", "--bootstrap", "0",
                 "-q", "--json", report)
    assert result.exit_code == 0, result.output
    checked = json.loads(report.read_text())
    side = json.loads(sidecar_path(tmp_path / f"out.{fmt}").read_text())
    assert checked["inputs"]["n_items"] == N_ITEMS
    assert checked["inputs"]["item_table"] == side["item_key"]
    slope = checked["frequency_norm"]["loglog_slope"]
    assert slope == pytest.approx(0.25, abs=1e-3)  # sqrt(f) norms -> f^0.25 after alpha 0.5


def test_output_must_not_be_an_input(tmp_path: Path) -> None:
    np.save(tmp_path / "items.npy", table())
    (tmp_path / "ids.txt").write_text("".join(f"{i}\n" for i in range(N_ITEMS)))
    os.symlink(tmp_path / "ids.txt", tmp_path / "o.npy.popaudit.json")
    before = sha256(tmp_path / "ids.txt")
    result = mitigate(tmp_path / "items.npy", 0.5, tmp_path / "o.npy", "--item-ids", tmp_path / "ids.txt", code=1)
    assert "sidecar of -o" in result.output and "never overwrites an input" in result.output
    (tmp_path / "plugin.py").write_text("")  # third-party plugin code: the run goes to a child, the same refusal
    result = mitigate(tmp_path / "items.npy", 0.5, tmp_path / "o.npy", "--item-ids", tmp_path / "ids.txt", "--plugin",
                      tmp_path / "plugin.py", code=1)
    assert "sidecar of -o" in result.output and "never overwrites an input" in result.output
    assert sha256(tmp_path / "ids.txt") == before and not (tmp_path / "o.npy").exists()
    other = mitigate(tmp_path / "items.npy", 0.5, tmp_path / "o.pt", code=1)
    assert "names a PyTorch file but" in other.output


def test_large_torch_table_spills_and_cleans_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond --max-memory the new table lives in a temporary file, removed afterwards."""
    rows = torch.from_numpy(np.random.default_rng(4).normal(size=(3000, 8)).astype(np.float32))
    torch.save({"item_embedding.weight": rows}, tmp_path / "m.pt")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    mitigate(tmp_path / "m.pt", 0.5, tmp_path / "out.pt", "--max-memory", "80K")
    assert list(scratch.iterdir()) == []
    written = torch.load(tmp_path / "out.pt", weights_only=True)["item_embedding.weight"]
    expected = rescale_rows(rows.numpy().astype(np.float64), 0.5).astype(np.float32)
    np.testing.assert_array_equal(written.numpy(), expected)


# ------------------------------------------------------------------ --alpha auto


@dataclass
class _Accuracy:
    recommended: str | None
    recommendation: str = ""
    best_alternative: str | None = None
    changes: Any = None
    at: Any = None
    tolerance: float = 0.98
    quoted_k: int | None = None

    def __post_init__(self) -> None:
        self.changes = self.changes or {}
        self.at = self.at or {}


@dataclass
class _Result:
    accuracy: Any = None
    not_measured: Any = None
    inputs: Any = field(default_factory=lambda: SimpleNamespace(rescaled_alpha=None))  # not a mitigate output


def test_recommended_alpha_reads_the_trade_off() -> None:
    kept = "At K=10, no serving change is clearly better than dot: the best alternative, alpha_0.75, keeps ..."
    with pytest.raises(NoClearGainError, match=r"wrote nothing: the trade-off keeps dot-product serving\. At K=10, "
                       r"no serving change .* the best available is alpha 0\.75 \(alpha_0\.75\): pass it"):
        recommended_alpha(_Result(_Accuracy("dot", kept, "alpha_0.75")))
    assert recommended_alpha(_Result(_Accuracy("cosine"))) == 0.0
    assert recommended_alpha(_Result(_Accuracy("alpha_0.25"))) == 0.25
    with pytest.raises(InputError, match=r"accuracy was not measured \(no held-out log\)"):
        recommended_alpha(_Result(None, {"accuracy": "no held-out log"}))
    with pytest.raises(InputError, match="no α to serve with"):
        recommended_alpha(_Result(_Accuracy(None, "dot-product accuracy was not measured")))


def test_alpha_auto_needs_a_holdout(tmp_path: Path) -> None:
    np.save(tmp_path / "items.npy", table())
    result = mitigate(tmp_path / "items.npy", "auto", tmp_path / "out.npy", code=1)
    assert "--alpha auto takes the α the accuracy trade-off recommends, but accuracy was not measured" in result.output
    assert not (tmp_path / "out.npy").exists()


def test_dot_serving_of_the_output_is_alpha_serving_of_the_original(tmp_path: Path) -> None:
    """check's alpha_0.5 lists of MODEL and its dot lists of OUT: every exposure and accuracy
    measure equal (the same top-K lists), with held-out users as queries (--keep-seen: in this
    log every user has seen most items)."""
    rng = np.random.default_rng(7)
    original = table()
    users = rng.normal(size=(9, DIM)).astype(np.float32)
    torch.save({"item_embedding.weight": torch.from_numpy(original), "user_embedding.weight": torch.from_numpy(users)},
               tmp_path / "m.pt")
    log = write_log(tmp_path)
    held = rng.integers(0, N_ITEMS, size=(60, 2))
    pq.write_table(pa.table({"user_id": held[:, 0] % 9, "item_id": held[:, 1]}), tmp_path / "held.parquet")
    mitigate(tmp_path / "m.pt", 0.5, tmp_path / "out.pt")
    reports = {}
    for name, extra in (("m.pt", ["--alpha", "0.5"]), ("out.pt", [])):
        result = run("check", tmp_path / name, "--interactions", log, "--holdout", tmp_path / "held.parquet",
                     "--keep-seen", "--no-probes", "--bootstrap", "0", "-q", "-k", "5", "-k", "10", "--json", tmp_path / f"{name}.json",
                     *extra)
        assert result.exit_code == 0, result.output
        reports[name] = json.loads((tmp_path / f"{name}.json").read_text())
    for k in ("5", "10"):
        assert reports["out.pt"]["retrieval"]["at"][k]["dot"] == reports["m.pt"]["retrieval"]["at"][k]["alpha_0.5"]
        assert reports["out.pt"]["accuracy"]["at"][k]["dot"] == reports["m.pt"]["accuracy"]["at"][k]["alpha_0.5"]
    out_dot, model_dot = reports["out.pt"]["retrieval"]["at"]["5"]["dot"], reports["m.pt"]["retrieval"]["at"]["5"]["dot"]
    assert out_dot["arp"] < model_dot["arp"]  # and they are not dot's lists: less popular items served


def test_help_says_what_the_sidecar_records() -> None:
    """The sidecar records the log-log slope, never Spearman's rho (the rescaling keeps the
    norms' order); --help said it recorded rho with --interactions."""
    from click.testing import CliRunner

    from auditor.cli import cli

    text = " ".join(CliRunner().invoke(cli, ["mitigate", "--help"]).output.split())
    assert "the log-log slope of norm on frequency" in text
    assert "Spearman rho is not recorded" in text and "(and Spearman rho with --interactions)" not in text
    assert "--plugin-timeout" in text


def test_the_severity_gate_evaluates_on_a_cosine_rescaled_table(tmp_path: Path) -> None:
    """mitigate --alpha 0 writes unit rows: check of the output finds rho undefined (equal
    norms) and, every user having trained on the top-1% items (rows 0 and 1 of 200), no
    top-1% slot under dot or cosine; dot serves cosine's lists (overlap 1). The gate check
    suggests, severity_level>=1, evaluates to level 0 and passes (it was 'nothing graded
    the severity', exit 1, on the fixed model)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from click.testing import CliRunner

    from auditor.cli import cli

    rng = np.random.default_rng(5)
    rows = rng.normal(size=(200, 8)) * np.linspace(3.0, 0.5, 200)[:, None]
    np.save(tmp_path / "items.npy", rows.astype(np.float32))
    users = np.repeat(np.arange(60), 6)
    items = np.concatenate([[0, 1, *rng.choice(np.arange(2, 200), size=4, replace=False)] for _ in range(60)])
    pq.write_table(pa.table({"user_id": users, "item_id": items}), tmp_path / "log.parquet")
    runner = CliRunner()
    wrote = runner.invoke(cli, ["mitigate", str(tmp_path / "items.npy"), "--alpha", "0", "-o", str(tmp_path / "u.npy"),
                                "-q"])
    assert wrote.exit_code == 0, wrote.output
    gated = runner.invoke(cli, ["check", str(tmp_path / "u.npy"), "--interactions", str(tmp_path / "log.parquet"),
                                "--no-probes", "--bootstrap", "0", "--fail-on", "severity_level>=1", "--json",
                                str(tmp_path / "r.json"), "-q"])
    assert gated.exit_code == 0, gated.output
    verdict = json.loads((tmp_path / "r.json").read_text())["verdict"]
    assert (verdict["severity"], verdict["assessed"]) == ("none", True)
    assert "serves the same items as cosine at every K (overlap 1)" in verdict["summary"]


def test_alpha_zero_says_its_zero_rows_are_served_by_dot(tmp_path: Path) -> None:
    """Cosine never serves a zero row; a dot-product index over the unit rows alpha 0 writes
    scores it 0, above a negative candidate: query (1, 0) over rows (1, 0), (0, 0), (-1, 0.1)
    serves rows {0, 2} by cosine at K=2 but {0, 1} by dot over the output. The sidecar says
    so at alpha 0 (counting the zero rows) and only there; check of the output warns too."""
    original = np.array([[1.0, 0.0], [0.0, 0.0], [-1.0, 0.1]], dtype=np.float32)
    np.save(tmp_path / "m.npy", original)
    mitigate(tmp_path / "m.npy", 0, tmp_path / "out0.npy")
    out = np.load(tmp_path / "out0.npy").astype(np.float64)
    assert np.argsort(-(out @ np.array([1.0, 0.0])), kind="stable")[:2].tolist() == [0, 1]
    warnings = json.loads(sidecar_path(tmp_path / "out0.npy").read_text())["warnings"]
    assert sum("1 item rows are zero: a table written at alpha 0" in w for w in warnings) == 1, warnings
    mitigate(tmp_path / "m.npy", 0.5, tmp_path / "out5.npy")
    assert not any("rows are zero" in w for w in json.loads(sidecar_path(tmp_path / "out5.npy").read_text())["warnings"])
    np.save(tmp_path / "q.npy", np.array([[1.0, 0.0]], dtype=np.float32))
    checked = run("check", tmp_path / "out0.npy", "--queries", tmp_path / "q.npy", "-k", "2", "--no-probes",
                  "--format", "json", "-o", tmp_path / "r.json", "-q")
    assert checked.exit_code == 0, checked.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert any("has 1 all-zero row (rows 1)" in w and "mitigate writes at alpha 0" in w for w in report["warnings"])

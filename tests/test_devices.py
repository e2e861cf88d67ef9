"""``--device``: where the one-pass kernel and the probes run. CPU is the default and the
tested path; ``cuda`` without a CUDA device is a clear error; on a machine with CUDA the
kernel's lists equal the CPU's up to float32 near-ties (that test runs only there)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli
from auditor.config import AuditConfig
from auditor.devices import resolve_device
from auditor.errors import InputError, PluginError
from auditor.model import ModelBundle
from auditor.probes import run_probes
from auditor.probes.live_contract import LiveCodeFailure, _on_device
from auditor.retrieval.device_scan import TOP_BIT, device_blocks, device_keys
from auditor.retrieval.scoring_blocks import encode, exclude_entries
from auditor.retrieval.scorings import multi_scoring_topk


def test_cpu_resolves_without_asking_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom() -> bool:
        raise AssertionError("cpu must not ask torch.cuda")

    monkeypatch.setattr(torch.cuda, "is_available", boom)
    assert resolve_device("cpu") == "cpu"


@pytest.mark.parametrize(("available", "auto"), [(False, "cpu"), (True, "cuda")])
def test_auto_follows_what_torch_sees(monkeypatch: pytest.MonkeyPatch, available: bool, auto: str) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    assert resolve_device("auto") == auto


def test_cuda_without_a_device_is_an_error_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(InputError, match=r"^device cuda: torch .* sees no CUDA device; use device cpu or auto$"):
        resolve_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("cuda") == "cuda"


def test_unknown_device_is_refused_by_the_config() -> None:
    with pytest.raises(InputError, match=r"device must be one of cpu, auto, cuda, got 'tpu'"):
        AuditConfig(model=Path("m.pt"), device="tpu")
    with pytest.raises(InputError, match=r"must be one of cpu, auto, cuda"):
        resolve_device("gpu")
    assert AuditConfig.__dataclass_fields__["device"].default == "cpu"  # CPU stays the default


def test_check_with_cuda_and_no_device_exits_1_before_any_work(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    model = tmp_path / "items.npy"
    np.save(model, np.eye(4, dtype=np.float32))
    result = CliRunner().invoke(cli, ["check", str(model), "--device", "cuda"])
    assert result.exit_code == 1, result.output
    assert "Error: --device cuda: torch" in result.stderr and "use --device cpu or auto" in result.stderr


def test_exclude_entries_sets_the_entries_to_minus_infinity() -> None:
    scores = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    exclude_entries(scores, np.array([0, 2, 2]), np.array([1, 0, 3]))
    expected = np.arange(12, dtype=np.float32).reshape(3, 4)
    expected[[0, 2, 2], [1, 0, 3]] = -np.inf
    np.testing.assert_array_equal(scores.numpy(), expected)


def _problem(seed: int = 3) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    table = (rng.standard_normal((3000, 16)) * rng.lognormal(0, 1, (3000, 1))).astype(np.float32)
    table[[5, 17]] = 0.0  # zero rows: cosine never serves them
    queries = rng.standard_normal((300, 16)).astype(np.float32)
    counts = rng.integers(0, 6, 300)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    rows = np.concatenate([np.sort(rng.choice(3000, c, replace=False)) for c in counts]).astype(np.int64)
    return queries, table, (indptr, rows)


def test_explicit_cpu_device_is_the_default_path() -> None:
    queries, table, exclude = _problem()
    default = multi_scoring_topk(queries, table, 20, (1.0, 0.5, 0.0), exclude=exclude, threads=1)
    cpu = multi_scoring_topk(queries, table, 20, (1.0, 0.5, 0.0), exclude=exclude, threads=1, device="cpu")
    for a in default:
        np.testing.assert_array_equal(default[a][1], cpu[a][1])
        np.testing.assert_array_equal(default[a][0], cpu[a][0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (GPU path untested here)")
def test_cuda_lists_equal_the_cpu_lists_up_to_float32_near_ties() -> None:
    queries, table, exclude = _problem()
    cpu = multi_scoring_topk(queries, table, 20, (1.0, 0.5, 0.0), exclude=exclude)
    gpu = multi_scoring_topk(queries, table, 20, (1.0, 0.5, 0.0), exclude=exclude, device="cuda")
    for a in cpu:
        scores_cpu, rows_cpu = cpu[a]
        scores_gpu, rows_gpu = gpu[a]
        differ = rows_cpu != rows_gpu
        # Where lists differ, the two scores are float32 near-ties (a few ulps apart).
        np.testing.assert_allclose(scores_gpu, scores_cpu, rtol=1e-5, atol=1e-6)
        assert differ.mean() < 0.01, (a, differ.mean())
        excluded = set(zip(np.repeat(np.arange(300), np.diff(exclude[0])).tolist(), exclude[1].tolist()))
        assert not any((q, r) in excluded for q, row in enumerate(rows_gpu) for r in row)


def _probe_model() -> tuple[Any, ModelBundle]:
    from live_towers import TinyLive, Towers

    live = TinyLive(Towers(40, 30, 8))
    table = live.encode_items(live.module, torch.arange(40)).detach().numpy()
    user_table = live.module.user_emb.weight.detach().numpy()
    return live, ModelBundle(source=Path("m.pt"), format="popaudit", item_table=table, live=live,  # type: ignore[arg-type]
                                user_table=user_table)


def test_probes_on_the_explicit_cpu_device_are_the_default_probes() -> None:
    live, bundle = _probe_model()
    default = run_probes(live, bundle, None, seed=5, batch_size=16).to_dict()
    cpu = run_probes(live, bundle, None, seed=5, batch_size=16, device="cpu").to_dict()
    assert default == cpu and "errors" not in cpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (GPU path untested here)")
def test_probes_on_cuda_agree_with_the_cpu() -> None:
    live, bundle = _probe_model()
    cpu = run_probes(live, bundle, None, seed=5, batch_size=16).to_dict()
    gpu = run_probes(live, bundle, None, seed=5, batch_size=16, device="cuda").to_dict()
    assert "errors" not in gpu, gpu.get("errors")
    assert gpu["update_angles"]["median"] == pytest.approx(cpu["update_angles"]["median"], abs=1e-6)
    assert gpu["c3_cross_jacobian"]["max_offdiag_relative"] == cpu["c3_cross_jacobian"]["max_offdiag_relative"] == 0.0


def test_device_keys_are_the_host_keys_with_the_top_bit_flipped() -> None:
    """The device orders signed int64 keys; flipping the top bit gives the host's uint64
    keys (encode) exactly, so both order scores, then lower rows, the same way."""
    scores = np.array([-np.inf, -3.0e38, -2.5, -1e-45, -0.0, 0.0, 1e-45, 1.0, 1.0, 3.0e38], dtype=np.float32)
    rows = np.array([7, 0, 4, 1, 9, 8, 2, 6, 3, 5], dtype=np.int64)
    low = torch.from_numpy((np.int64((1 << 32) - 1) - rows).astype(np.int64))
    device = device_keys(torch.from_numpy(scores.copy())[None, :], low[None, :])[0].numpy()
    np.testing.assert_array_equal(device.view(np.uint64) ^ TOP_BIT, encode(scores, rows))
    order = np.argsort(device, kind="stable")[::-1]  # as int64: score descending, then row ascending
    np.testing.assert_array_equal(rows[order], [5, 3, 6, 2, 8, 9, 1, 4, 0, 7])  # -0.0 ties with 0.0


def test_device_tiles_fit_a_sixth_of_the_free_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    assert device_blocks("cpu", 300) == (300, 2048)  # torch's CPU (the tests): 2**20 entries
    assert device_blocks("cpu", 100_000) == (4096, 256)  # 4,096 x 256 = 2**20
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (140 << 30, 141 << 30))
    assert device_blocks("cuda", 10_000) == (4096, 65536)  # 2**28 entries: the ceiling
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (6 << 30, 8 << 30))
    q, i = device_blocks("cuda", 10_000)  # 6 GiB free: at most 1 GiB / 48 bytes = 22.4M entries
    assert (q, i) == (4096, 4096) and q * i * 48 <= (6 << 30) // 6


def test_a_raise_on_an_accelerator_names_the_likely_cause() -> None:
    failure = LiveCodeFailure("loss", "raised RuntimeError: Expected all tensors to be on the same device")
    failure.__cause__ = RuntimeError("Expected all tensors to be on the same device")
    said = str(_on_device(failure, torch.device("cuda")))
    assert said.startswith("the live model's loss raised RuntimeError: Expected all tensors")
    # The library names the setting; the CLI (spelled_as) its flag, --device.
    assert "(the probes ran it on cuda (device cuda): its methods get their tensors there" in said
    assert "torch.arange(n, device=users.device); device cpu runs the code as written)" in said
    assert _on_device(failure, torch.device("cpu")) is failure  # on the CPU nothing is added
    plugin = PluginError("tower.py: its live model's loss returned a float, not a tensor")
    assert _on_device(plugin, torch.device("cuda")) is plugin  # wrong output, no raise: no device cause


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (GPU path untested here)")
def test_probes_on_cuda_name_a_target_made_on_the_cpu() -> None:
    from live_towers import TinyLive

    class CpuTarget(TinyLive):
        def loss(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(users @ items.T, torch.arange(len(users)))

    live, bundle = _probe_model()
    cpu_target = CpuTarget(live.module)
    with pytest.raises(LiveCodeFailure, match=r"loss raised .*\(the probes ran it on cuda \(device cuda\)"):
        run_probes(cpu_target, bundle, None, seed=5, batch_size=16, device="cuda")
    assert "errors" not in run_probes(cpu_target, bundle, None, seed=5, batch_size=16).to_dict()

"""Compressed members of one archive are bounded together by the memory ceiling (Loaders F3):
a .pt or .npz of many members, each under the ceiling, no longer inflates past it in all."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from auditor.errors import InputError, ModelLoadError
from auditor.loading.mf_models import read_npz
from auditor.config import LoadOptions
from auditor.loading.torch_archive import read_torch_file
from auditor.memory import InflationBudget

MB = 1_000_000
RNG = np.random.default_rng(0)
ITEMS = RNG.normal(size=(10, 4)).astype(np.float32)
USERS = RNG.normal(size=(5, 4)).astype(np.float32)


def _deflated_pt(path: Path, n_extra: int, floats: int) -> None:
    """A state dict with ``n_extra`` 1-D zero tensors (optimizer state), re-zipped deflated."""
    state = {"user_embedding.weight": torch.from_numpy(USERS), "item_embedding.weight": torch.from_numpy(ITEMS)}
    for k in range(n_extra):
        state[f"optimizer_state.{k}.exp_avg"] = torch.zeros(floats)
    saved = io.BytesIO()
    torch.save(state, saved)
    with zipfile.ZipFile(saved) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as target:
        for name in source.namelist():
            target.writestr(name, source.read(name))


def _compressed_total(path: Path, torch_data: bool = False) -> tuple[int, int]:
    """The declared total and count of the compressed members that inflate (of a .pt: its
    data.pkl and storages; its version or byteorder record is read capped, never counted)."""
    with zipfile.ZipFile(path) as zf:
        sizes = [i.file_size for i in zf.infolist() if i.compress_type != zipfile.ZIP_STORED
                 and (not torch_data or i.filename == "archive/data.pkl" or i.filename.startswith("archive/data/"))]
    return sum(sizes), len(sizes)


def test_pt_members_each_under_the_ceiling_are_refused_in_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Loaders 3 N1: refused on the directory's declared total of every compressed member
    (data.pkl and 6 storages), before any is inflated, naming a ceiling that reads it (the
    refusal named the total up to the member that crossed, then the next one, and so on)."""
    from auditor.loading import torch_archive
    from auditor.config import format_size

    path = tmp_path / "bomb.pt"
    _deflated_pt(path, n_extra=4, floats=MB)  # 4 x 4 MB of zeros, about 16 KB on disk
    total, members = _compressed_total(path, torch_data=True)
    assert members == 7 and total > 4 * 4 * MB
    inflated: list[str] = []
    real = torch_archive.read_member
    monkeypatch.setattr(torch_archive, "read_member", lambda fh, size, zf, info, cap: (
        inflated.append(info.filename) if info.compress_type != zipfile.ZIP_STORED else None, real(fh, size, zf, info, cap))[1])
    advice = format_size(total * 2)
    with pytest.raises(ModelLoadError, match=rf"cannot read .*bomb\.pt: its compressed members declare {total:,} bytes of "
                                             rf"data in all \(7 members, .*max_memory \(10,485,760 bytes\).*{advice} if "):
        read_torch_file(path, 10 << 20)
    assert inflated == ["archive/byteorder"]  # 16 bytes at most (read capped), no data member
    from auditor.config import parse_memory_size

    state = read_torch_file(path, parse_memory_size(advice)).root  # following the advice reads it
    assert float(state["optimizer_state.3.exp_avg"].abs().sum()) == 0.0


def test_pt_members_within_the_ceiling_are_read(tmp_path: Path) -> None:
    path = tmp_path / "ok.pt"
    _deflated_pt(path, n_extra=4, floats=MB)
    state = read_torch_file(path, 64 << 20).root
    np.testing.assert_array_equal(state["item_embedding.weight"].numpy(), ITEMS)
    assert float(state["optimizer_state.3.exp_avg"].abs().sum()) == 0.0


def test_npz_members_each_under_the_ceiling_are_refused_in_all(tmp_path: Path) -> None:
    from auditor.config import format_size

    path = tmp_path / "many.npz"
    extra = {f"optim_state_{k}": np.zeros(MB, np.float32) for k in range(4)}
    np.savez_compressed(path, item_embedding=ITEMS, user_embedding=USERS, **extra)
    total, members = _compressed_total(path)
    assert members == 6
    with pytest.raises(ModelLoadError, match=rf"many\.npz: its compressed members declare {total:,} "
                                             rf"bytes of data in all \(6 members, .*{format_size(total * 2)} if "):
        read_npz(path, LoadOptions(max_memory=10 << 20))
    assert read_npz(path, LoadOptions(max_memory=64 << 20)).item_table.shape == (10, 4)


def test_members_under_a_mib_add_up() -> None:
    """Members of at most a MiB each skip the ceiling alone (a MiB always fits); not in all."""
    budget = InflationBudget("cannot read x.npz", 3 << 20)
    for _ in range(3):
        budget.admit("member m.npy", 1 << 20, 1024)
    with pytest.raises(InputError, match=r"x\.npz: its compressed members declare 4,194,304 bytes .*\(4 members"):
        budget.admit("member m.npy", 1 << 20, 1024)

"""Hostile model archives (Loaders F3, F4): unreadable HDF5 weights, in a .weights.h5 or as a
.keras member, exit 1 with the one message (never a crash at exit), and compressed members
of a .pt or .npz inflate to no more than the memory ceiling in all."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.hostile.corpus import EXIT_ERROR, EXIT_OK, Built, Case, check_args, log, params, run_case, write

H5_ERROR = r"cannot read model\.(weights\.h5|keras) as HDF5 \(Keras weights\): OSError: .*\(truncated or corrupt\?\)\s*$"


def _no_h5py() -> str | None:
    try:
        import h5py  # noqa: F401
    except ImportError:
        return "the keras extra (h5py) is not installed"
    return None


def _weights() -> bytes:
    """Keras 3's save_weights layout with one 10 x 4 item table, as bytes."""
    import h5py

    out = io.BytesIO()
    with h5py.File(out, "w") as h5:
        h5.create_dataset("layers/embedding/vars/0", data=np.random.default_rng(0).normal(size=(10, 4)))
        h5["layers/embedding/vars"].attrs["name"] = "item_embedding"
    return out.getvalue()


def _weights_file(content: Callable[[], bytes]) -> Callable[[Path], Built]:
    def build(d: Path) -> Built:
        log(d)
        write(d, "model.weights.h5", content())
        return Built(check_args("model.weights.h5"))
    return build


def _keras_archive(member: Callable[[], bytes], how: int = zipfile.ZIP_STORED, symlink: bool = False) -> Callable[[Path], Built]:
    """A .keras archive whose model.weights.h5 member is ``member()`` (a symlink entry: its target text)."""
    def build(d: Path) -> Built:
        log(d)
        with zipfile.ZipFile(d / "model.keras", "w") as archive:
            archive.writestr("config.json", '{"class_name": "Functional", "config": {"layers": []}}')
            info = zipfile.ZipInfo("model.weights.h5")
            info.compress_type = how
            if symlink:
                info.external_attr = (0o120777 << 16) | 0x20  # S_IFLNK: unzip would make a link
            archive.writestr(info, member())
        return Built(check_args("model.keras"))
    return build


def _half() -> bytes:
    data = _weights()
    return data[: len(data) // 2]


def _deflated_pt(d: Path) -> None:
    """QA's bomb6.pt, scaled down: a state dict plus four 1-D optimizer tensors of 4 MB of
    zeros, re-zipped deflated (about 17 KB); each member fits --max-memory 10M, all do not."""
    log(d)
    rng = np.random.default_rng(0)
    state = {"user_embedding.weight": torch.tensor(rng.normal(size=(5, 4)), dtype=torch.float32),
             "item_embedding.weight": torch.tensor(rng.normal(size=(10, 4)), dtype=torch.float32),
             **{f"optimizer_state.{k}.exp_avg": torch.zeros(1_000_000) for k in range(4)}}
    saved = io.BytesIO()
    torch.save(state, saved)
    with zipfile.ZipFile(saved) as source, zipfile.ZipFile(d / "model.pt", "w", zipfile.ZIP_DEFLATED) as target:
        for name in source.namelist():
            target.writestr(name, source.read(name))


def _pt_bomb(max_memory: str) -> Callable[[Path], Built]:
    def build(d: Path) -> Built:
        _deflated_pt(d)
        return Built(check_args("model.pt", "--max-memory", max_memory))
    return build


def _npz_many(d: Path) -> Built:
    """QA's many.npz, scaled down: four 4 MB zero members, savez_compressed (about 16 KB)."""
    log(d)
    rng = np.random.default_rng(0)
    np.savez_compressed(d / "model.npz", item_embedding=rng.normal(size=(10, 4)).astype(np.float32),
                        **{f"optim_state_{k}": np.zeros(1_000_000, np.float32) for k in range(4)})
    return Built(check_args("model.npz", "--max-memory", "10M"))


def _padded_ids(n_ids: int) -> Callable[[Path], Built]:
    """A TorchScript Embedding(11, 4, padding_idx=0) with an ``item_ids`` buffer of ``n_ids`` ids
    (Loaders F5: 10, the real rows', are read; 9 name no row set)."""
    def build(d: Path) -> Built:
        log(d)
        module = torch.nn.Module()
        module.item_embedding = torch.nn.Embedding(11, 4, padding_idx=0)
        module.register_buffer("item_ids", torch.arange(n_ids))
        torch.jit.script(module).save(str(d / "model.pt"))
        return Built(check_args("model.pt"))
    return build


GARBAGE = b"not hdf5\n" * 10
CASES = [
    # Loaders F4: each of these printed its Error: line, then segfaulted at exit (139, not 1).
    Case("h5-garbage-process", _weights_file(lambda: GARBAGE), EXIT_ERROR, H5_ERROR, process=True, skip=_no_h5py),
    Case("h5-truncated-process", _weights_file(_half), EXIT_ERROR, H5_ERROR, process=True, skip=_no_h5py),
    Case("keras-garbage-stored-member", _keras_archive(lambda: GARBAGE), EXIT_ERROR, H5_ERROR,
         process=True, skip=_no_h5py),
    Case("keras-garbage-deflated-member", _keras_archive(lambda: GARBAGE, zipfile.ZIP_DEFLATED), EXIT_ERROR, H5_ERROR,
         process=True, skip=_no_h5py),
    Case("keras-truncated-member", _keras_archive(_half), EXIT_ERROR, H5_ERROR, process=True, skip=_no_h5py),
    Case("keras-symlink-member", _keras_archive(lambda: b"/etc/passwd", symlink=True), EXIT_ERROR, H5_ERROR,
         process=True, skip=_no_h5py, absent=r"root:"),
    # Loaders F3: members each under the ceiling were inflated whatever their total.
    Case("pt-deflated-members-past-the-ceiling-in-all", _pt_bomb("10M"), EXIT_ERROR,
         r"cannot read model\.pt: its compressed members declare 16,000,\d{3} bytes of data in all \(7 members, .*more "
         r"than --max-memory \(10,485,760 bytes\).*pass --max-memory 31M "),
    # Loaders 3 N1: the advice is the declared total of every compressed member (it was the total up to the
    # member that crossed, so following it led to the next refusal): followed, the file is read.
    Case("pt-deflated-members-at-the-advised-ceiling", _pt_bomb("31M"), EXIT_OK, None),
    Case("pt-deflated-members-within-the-ceiling", _pt_bomb("64M"), EXIT_OK, None),
    Case("npz-compressed-members-past-the-ceiling-in-all", _npz_many, EXIT_ERROR,
         r"cannot read model\.npz: its compressed members declare 16,000,\d{3} bytes of data in all \(5 members, "
         r".*more than --max-memory \(10,485,760 bytes\).*pass --max-memory 31M "),
    Case("torchscript-padded-ids-of-the-real-rows", _padded_ids(10), EXIT_OK, None),
    Case("torchscript-padded-ids-of-no-row-set", _padded_ids(9), EXIT_ERROR,
         r"model\.pt \(`item_ids`\) is named as the raw item id of each row, but it holds 9 ids for the 11 rows of "
         r"the item table \(10 besides its padding row 0\); pass --item-ids FILE"),
]

PRODUCT_FAILURES: list[Case] = []


@pytest.mark.parametrize("case", params(CASES, PRODUCT_FAILURES))
def test_hostile_model_archive(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)

"""Rescaled RecBole checkpoints (issue #21 item 3): RecBole evaluates them to popaudit's α figures.

tests/data/recbole/make_eval.py wrote BPR-eval.pth rescaled by this writer at α = 0.5 and
α = 0, loaded each in RecBole 1.2.1 (``torch.load(weights_only=False)``, ``load_state_dict``)
and recorded RecBole's test metrics and the file's sha256. Here the writer runs again:
the same bytes, so RecBole's recorded evaluation is the evaluation of this output.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zipfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from auditor.config import LoadOptions
from auditor.errors import ModelLoadError
from auditor.loading import load_model
from auditor.loading.recbole_split import recbole_split
from auditor.loading.torch_archive import read_torch_file
from auditor.mitigation.recbole_file import write_recbole, write_served_table
from auditor.retrieval.scorings import multi_scoring_topk

from recbole_helpers import accuracy, assert_recboles, write_checkpoint

DATA = Path(__file__).parent / "data" / "recbole"
SOURCE = DATA / "BPR-eval.pth"
KEY = "item_embedding.weight"
RECORD = json.loads((DATA / "eval.json").read_text(encoding="utf-8"))


def _member(path: Path) -> tuple[zipfile.ZipInfo, int]:
    """The item table's zip member and where its bytes start."""
    found = read_torch_file(path)
    storage = found.storage_of(found.root["state_dict"][KEY])
    assert storage is not None
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(storage.key)
    with open(path, "rb") as fh:
        fh.seek(info.header_offset + 26)
        name, extra = struct.unpack("<HH", fh.read(4))
    return info, info.header_offset + 30 + name + extra


@pytest.mark.parametrize("alpha", [0.5, 0.0])
def test_recbole_evaluates_the_output_to_popaudits_alpha_figures(tmp_path: Path, alpha: float) -> None:
    out = tmp_path / "out.pth"
    written = write_recbole(SOURCE, out, KEY, alpha)
    recorded = RECORD["mitigated"][f"{alpha:g}"]
    assert hashlib.sha256(out.read_bytes()).hexdigest() == recorded["sha256"]  # the file RecBole evaluated
    bundle = load_model(SOURCE, LoadOptions())
    assert bundle.config is not None and bundle.user_table is not None
    split = recbole_split(bundle.config, DATA / "eval.inter")
    # popaudit's alpha_<a> scoring over the original tables, as check measures it
    assert_recboles(accuracy(bundle.user_table, bundle.item_table, split, alpha), recorded)
    assert len(written.norms.before) == bundle.n_items == 120  # the padding row is not an item
    np.testing.assert_allclose(written.norms.after, written.norms.before**alpha, rtol=1e-6)


def _crc_fields(path: Path, info: zipfile.ZipInfo, start: int) -> set[int]:
    """Byte positions of the member's CRC-32 fields: data descriptor, central directory, local header."""
    data = path.read_bytes()
    end = start + info.file_size
    descriptor = end + (4 if data[end : end + 4] == b"PK\x07\x08" else 0)
    with zipfile.ZipFile(path) as zf:
        at = zf.start_dir
    name = info.filename.encode()
    while data[at : at + 4] == b"PK\x01\x02":
        lengths = struct.unpack("<HHH", data[at + 28 : at + 34])
        if data[at + 46 : at + 46 + lengths[0]] == name:
            break
        at += 46 + sum(lengths)
    local = info.header_offset + 14
    return {p + k for p in (descriptor, at + 16, local) for k in range(4)}


def test_only_the_item_member_changes(tmp_path: Path) -> None:
    """Every byte outside the table's rows after padding row 0, and the member's CRC-32
    fields, is the input's; zipfile verifies every member's CRC; popaudit reads it."""
    out = tmp_path / "out.pth"
    write_recbole(SOURCE, out, KEY, 0.5)
    before, after = SOURCE.read_bytes(), out.read_bytes()
    assert len(before) == len(after)
    info, start = _member(SOURCE)
    rows = set(range(start + 16 * 4, start + info.file_size))  # after padding row 0 (16 float32)
    changed = {int(i) for i in np.flatnonzero(np.frombuffer(before, np.uint8) != np.frombuffer(after, np.uint8))}
    assert changed <= rows | _crc_fields(SOURCE, info, start)
    assert len(changed & rows) > len(rows) // 2 and changed - rows  # the rows and their CRC changed
    with zipfile.ZipFile(out) as zf:
        assert zf.testzip() is None  # every member's CRC-32 holds
    reread = load_model(out, LoadOptions())
    original = load_model(SOURCE, LoadOptions())
    assert reread.format == "recbole" and reread.config == original.config
    assert reread.user_table is not None and original.user_table is not None
    assert np.array_equal(reread.user_table, original.user_table)
    state = read_torch_file(out).root["state_dict"][KEY]
    assert torch.equal(state[0], read_torch_file(SOURCE).root["state_dict"][KEY][0])  # padding row as stored


def test_alpha_one_writes_the_input(tmp_path: Path) -> None:
    out = tmp_path / "out.pth"
    write_recbole(SOURCE, out, KEY, 1.0)
    assert out.read_bytes() == SOURCE.read_bytes()


def test_graph_models_are_refused_with_the_table_route(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"RecBole LightGCN checkpoint: the model scores with the mean of layers.*"
                                             r"rescaled served item vectors as a plain table.*\.npy or \.parquet name"):
        write_recbole(DATA / "LightGCN-eval.pth", tmp_path / "out.pth", KEY, 0.5)
    assert not (tmp_path / "out.pth").exists()


@pytest.mark.parametrize(
    ("model", "said"),
    [
        ("SimpleX", r"scores with the cosine .*: its serving ignores item norms already, so rescaling them changes nothing"),
        ("NeuMF", r"scores with an MLP .*, not with dot products of its tables"),
        ("NGCF", r"scores with vectors its forward\(\) computes .* a \.npy or \.parquet name"),
    ],
)
def test_models_not_served_by_their_tables_are_refused(tmp_path: Path, model: str, said: str) -> None:
    path = tmp_path / "model.pth"
    write_checkpoint(path, model, {}, 5, 6)
    with pytest.raises(ModelLoadError, match=said):
        write_recbole(path, tmp_path / "out.pth", KEY, 0.5)


def test_a_cached_restore_item_e_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cached.pth"
    write_checkpoint(path, "BPR", {}, 5, 6, other_parameter={"restore_user_e": torch.zeros(6, 4),
                                                             "restore_item_e": torch.zeros(7, 4)})  # fmt: skip
    with pytest.raises(ModelLoadError, match=r"caches served item vectors \(other_parameter restore_item_e\)"):
        write_recbole(path, tmp_path / "out.pth", KEY, 0.5)


def test_other_files_are_refused(tmp_path: Path) -> None:
    plain = tmp_path / "plain.pth"
    torch.save({"state_dict": {KEY: torch.ones(3, 2)}}, plain)
    with pytest.raises(ModelLoadError, match="is not a RecBole checkpoint: it holds no pickled RecBole Config"):
        write_recbole(plain, tmp_path / "out.pth", KEY, 0.5)
    with pytest.raises(ModelLoadError, match=r"not a RecBole checkpoint \(a torch zip archive with state_dict\['nope'\]\)"):
        write_recbole(SOURCE, tmp_path / "out.pth", "nope", 0.5)
    legacy = tmp_path / "legacy.pth"
    torch.save({"state_dict": {KEY: torch.ones(3, 2)}}, legacy, _use_new_zipfile_serialization=False)
    with pytest.raises(ModelLoadError, match="not a RecBole checkpoint"):
        write_recbole(legacy, tmp_path / "out.pth", KEY, 0.5)


def test_a_table_sharing_its_storage_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "shared.pth"
    write_checkpoint(path, "BPR", {}, 5, 6, item_view="item_tail")
    with pytest.raises(ModelLoadError, match=r"another tensor shares the storage of 'item_embedding.weight'"):
        write_recbole(path, tmp_path / "out.pth", KEY, 0.5)


@pytest.mark.parametrize("fmt", ["npy", "parquet"])
def test_served_vectors_written_as_a_plain_table(tmp_path: Path, fmt: str) -> None:
    """LightGCN's served items rescaled: dot products over the output rank as alpha_<a>
    over the served vectors."""
    from auditor.loading.served import read_cache

    cache = read_cache(DATA / "LightGCN-eval.pth")
    assert cache is not None
    out = tmp_path / f"served.{fmt}"
    ids = np.arange(1001, 1121)
    written = write_served_table(cache.items, out, 0.5, fmt, item_ids=ids)
    assert "served item vectors" in written.notes[0]
    if fmt == "npy":
        table = np.load(out, allow_pickle=False)
    else:
        read = pq.read_table(out)
        assert read.column("item_id").to_pylist() == ids.tolist()
        table = np.asarray(read.column("embedding").combine_chunks().flatten().to_numpy()).reshape(-1, 16)
    np.testing.assert_allclose(np.linalg.norm(table, axis=1), np.linalg.norm(cache.items, axis=1) ** 0.5, rtol=1e-6)
    found = multi_scoring_topk(cache.users[:20], cache.items, 10, [0.5])[0.5][1]
    dot = multi_scoring_topk(cache.users[:20], table, 10, [1.0])[1.0][1]
    assert np.array_equal(found, dot)
    with pytest.raises(ValueError, match="npy or parquet"):
        write_served_table(cache.items, out, 0.5, "pth")

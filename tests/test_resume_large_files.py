"""``batch --resume`` and input files too large to hash whole (QA scale F2): a 73 MiB table
rewritten with its rows reversed (same size) and its old modification time put back kept
its stale row (spearman 0.9186 where a fresh check gave -0.7747). Over HASH_LIMIT a file
is now identified by its size, modification and change times, inode and a hash of three
1 MiB blocks; HASH_LIMIT is lowered here so that small files take that route."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from scipy.stats import spearmanr

from auditor.batch import provenance
from auditor.batch.provenance import FileStates, change, row_provenance
from auditor.cli import cli
from auditor.config import AuditConfig
from auditor.io import SAMPLE_BLOCK, sampled_sha256

N_ITEMS = 400
FAST = ["--no-retrieval", "--no-probes", "--bootstrap", "0", "-q"]


def _inputs(d: Path) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    counts = rng.integers(1, 60, N_ITEMS)
    items = np.repeat(np.arange(N_ITEMS), counts)
    pq.write_table(pa.table({"user_id": rng.integers(0, 50, items.shape[0]), "item_id": items}), d / "log.parquet")
    table = (rng.standard_normal((N_ITEMS, 8)) * np.log1p(counts)[:, None]).astype(np.float32)
    np.save(d / "items.npy", table)
    (d / "m.csv").write_text("model,label\nitems.npy,big\n")
    return counts, table


def _batch(d: Path, *extra: str) -> tuple[int, str, float]:
    done = CliRunner().invoke(cli, ["batch", str(d / "m.csv"), "-o", str(d / "r.parquet"),
                                    "--interactions", str(d / "log.parquet"), *FAST, *extra])
    return done.exit_code, done.stderr, float(pq.read_table(d / "r.parquet")["spearman"][0].as_py())


def test_a_large_file_rewritten_with_its_old_mtime_is_audited_again(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provenance, "HASH_LIMIT", 1024)  # items.npy (12.9 kB) is "too large to hash whole"
    counts, table = _inputs(tmp_path)
    norms = np.linalg.norm(table.astype(np.float64), axis=1)
    rc, _, first = _batch(tmp_path)
    assert rc == 0 and first == pytest.approx(spearmanr(counts, norms).statistic, abs=1e-9)
    recorded = json.loads(pq.read_table(tmp_path / "r.parquet")["provenance"][0].as_py())["files"]["model"]
    assert recorded["sha256"] is None and {"inode", "ctime_ns", "sampled_sha256"} <= set(recorded)
    # The QA's edit: rows reversed (same size), the old modification time put back.
    before = os.stat(tmp_path / "items.npy")
    np.save(tmp_path / "items.npy", table[::-1].copy())
    os.utime(tmp_path / "items.npy", ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(tmp_path / "items.npy").st_size == before.st_size
    rc, stderr, resumed = _batch(tmp_path, "--resume")
    assert rc == 0
    assert "its model file" in stderr and "too large to hash whole" in " ".join(stderr.split())
    assert resumed == pytest.approx(spearmanr(counts, norms[::-1]).statistic, abs=1e-9)  # not the stale figure
    assert resumed != pytest.approx(first)
    # Nothing changed since: the row is kept.
    rc, stderr, again = _batch(tmp_path, "--resume")
    assert rc == 0 and "audited again" not in stderr and again == resumed


def test_the_sampled_hash_reads_the_first_middle_and_last_blocks(tmp_path: Path) -> None:
    size = 5 * SAMPLE_BLOCK
    data = bytearray(np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8).tobytes())
    path = tmp_path / "big.bin"
    path.write_bytes(bytes(data))
    middle = size // 2 - SAMPLE_BLOCK // 2
    expected = hashlib.sha256(str(size).encode())
    for offset in (0, middle, size - SAMPLE_BLOCK):
        expected.update(bytes(data[offset:offset + SAMPLE_BLOCK]))
    assert sampled_sha256(path, size) == expected.hexdigest()
    for offset, moves in ((0, True), (middle + 10, True), (size - 1, True), (SAMPLE_BLOCK + 5, False)):
        edited = bytearray(data)
        edited[offset] ^= 0xFF
        path.write_bytes(bytes(edited))
        assert (sampled_sha256(path, size) != expected.hexdigest()) == moves, offset


def test_the_reasons_for_a_large_file(tmp_path: Path) -> None:
    (tmp_path / "t.npy").write_bytes(b"x" * 4096)
    config = AuditConfig(model=tmp_path / "t.npy")
    now = row_provenance(config, FileStates(hash_limit=1024))
    state = now["files"]["model"]
    for key, said in (("sampled_sha256", "content, sampled"), ("ctime_ns", "change time"), ("inode", "inode")):
        old = {**now, "files": {"model": {**state, key: "other"}}}
        reason = change(json.dumps(old), now)
        assert reason is not None and f"({said}" in reason and "too large to hash whole" in reason, reason
    # A provenance recorded before these keys existed (size and mtime only) is not trusted,
    # and said as what it is (QA scale N2: it read "changed (content, sampled; ...)").
    legacy = {**now, "files": {"model": {k: state[k] for k in ("path", "size", "mtime_ns", "sha256")}}}
    assert change(json.dumps(legacy), now) == (
        f"recorded by an older popaudit without a sampled hash of its model file {tmp_path / 't.npy'}")
    # ... unless what it did record says the file changed.
    moved = {**legacy, "files": {"model": {**legacy["files"]["model"], "mtime_ns": state["mtime_ns"] - 1}}}
    assert change(json.dumps(moved), now) == (
        f"its model file {tmp_path / 't.npy'} changed (modification time; too large to hash whole)")
    grown = {**legacy, "files": {"model": {**legacy["files"]["model"], "size": 4095}}}
    assert change(json.dumps(grown), now) == f"its model file {tmp_path / 't.npy'} changed (size)"
    assert change(json.dumps(now), now) is None


def test_a_row_recorded_by_an_older_popaudit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA scale N2: a row whose big files were recorded without inode, change time and
    sampled hash is audited again once, said as recorded by an older popaudit (the log is
    untouched, so "its interactions file changed (content, sampled)" sent the user looking
    for who rewrote it), then kept."""
    monkeypatch.setattr(provenance, "HASH_LIMIT", 1024)
    counts, table = _inputs(tmp_path)
    norms = np.linalg.norm(table.astype(np.float64), axis=1)
    rc, _, first = _batch(tmp_path)
    results = pq.read_table(tmp_path / "r.parquet")
    recorded = json.loads(results["provenance"][0].as_py())
    for state in recorded["files"].values():
        for key in ("inode", "ctime_ns", "sampled_sha256"):
            state.pop(key)
    column = results.schema.get_field_index("provenance")
    pq.write_table(results.set_column(column, "provenance", pa.array([json.dumps(recorded)])), tmp_path / "r.parquet")
    rc, stderr, resumed = _batch(tmp_path, "--resume")
    said = " ".join(stderr.split())
    assert rc == 0 and ("row 0: recorded by an older popaudit without a sampled hash of its interactions file "
                        f"{tmp_path / 'log.parquet'})") in said, said
    assert "content" not in said
    assert resumed == first == pytest.approx(spearmanr(counts, norms).statistic, abs=1e-9)
    rc, stderr, again = _batch(tmp_path, "--resume")
    assert rc == 0 and "audited again" not in stderr and again == first

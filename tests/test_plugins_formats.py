"""A model format from a plugin (``popaudit_model_formats``): read by ``load_model`` and
``check``, written by ``popaudit mitigate``, refused clearly when malformed."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.config import LoadOptions
from auditor.errors import PluginError
from auditor.loading import load_model
from auditor.loading.formats import BUILTIN_FORMATS, detect_format
from auditor.mitigation.sidecar import sidecar_path
from auditor.plugins import get_plugin_manager
from auditor.loading.plugin_formats import model_formats

N_ITEMS, DIM = 40, 4

TOY = '''
"""A toy format: b"TOY1", rows and dim as uint32, then float32 rows."""
import numpy as np
from auditor.hookspecs import hookimpl
from auditor.plugin_api import ModelFormat
from auditor.mitigation.rescale import numpy_io, rescale_blocks
from auditor.plugin_api import Written
from auditor.model import ModelBundle

def _table(path):
    data = path.read_bytes()
    rows, dim = np.frombuffer(data[4:12], dtype="<u4")
    return np.frombuffer(data[12:], dtype="<f4").reshape(int(rows), int(dim))

def read(path, options):
    return ModelBundle(source=path, format="toy", item_table=_table(path).copy())

def write(job):
    table = _table(job.source)
    out = np.empty_like(table)
    norms = rescale_blocks(table.shape[0], table.shape[1], job.alpha, *numpy_io(table, out),
                           max_memory=job.max_memory, progress=job.progress)
    with open(job.target, "wb") as fh:
        fh.write(b"TOY1" + np.array(table.shape, dtype="<u4").tobytes() + out.astype("<f4").tobytes())
    return Written(norms, "float32", notes=["written by the toy plugin"])

@hookimpl
def popaudit_model_formats():
    return [ModelFormat("toy", "toy tables (.toy)", (".toy",), (b"TOY1",), read=read, write=WRITE)]
'''


def toy_plugin(folder: Path, write: str = "write", extra: str = "") -> Path:
    path = folder / "toy_format.py"
    path.write_text(TOY.replace("WRITE", write) + textwrap.dedent(extra))
    return path


def toy_table(seed: int = 0) -> np.ndarray:
    """Rows whose norms grow with the row (row i seen i + 1 times in :func:`toy_log`)."""
    rows = np.random.default_rng(seed).normal(size=(N_ITEMS, DIM))
    rows *= (np.arange(1, N_ITEMS + 1) ** 0.5 / np.linalg.norm(rows, axis=1))[:, None]
    return rows.astype(np.float32)


def write_toy(path: Path, table: np.ndarray) -> Path:
    path.write_bytes(b"TOY1" + np.array(table.shape, dtype="<u4").tobytes() + table.astype("<f4").tobytes())
    return path


def toy_log(folder: Path) -> Path:
    items = np.repeat(np.arange(N_ITEMS), np.arange(1, N_ITEMS + 1))
    pq.write_table(pa.table({"user_id": np.arange(items.size) % 7, "item_id": items}), folder / "log.parquet")
    return folder / "log.parquet"


def read_toy(path: Path) -> np.ndarray:
    data = path.read_bytes()
    assert data[:4] == b"TOY1"
    rows, dim = np.frombuffer(data[4:12], dtype="<u4")
    return np.frombuffer(data[12:], dtype="<f4").reshape(int(rows), int(dim))


def run(*args: Any) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_a_plugin_format_is_in_the_table_and_read_by_suffix_or_magic(tmp_path: Path) -> None:
    pm = get_plugin_manager([toy_plugin(tmp_path)], entry_points=False)
    table = model_formats(pm)
    assert [f.name for f in table] == ["toy", *(f.name for f in BUILTIN_FORMATS)]
    original = toy_table()
    for name in ("items.toy", "items.dat"):  # by suffix; by its magic bytes under an unknown suffix
        path = write_toy(tmp_path / name, original)
        assert detect_format(path, table) is table[0]
        bundle = load_model(path, LoadOptions(), pm)
        assert bundle.format == "toy" and bundle.replaced_globals is None
        np.testing.assert_array_equal(bundle.item_table, original)
    np.save(tmp_path / "items.npy", original)  # the built-in formats still read their files
    assert load_model(tmp_path / "items.npy", LoadOptions(), pm).format == "npy"


def test_check_audits_and_mitigate_writes_a_plugin_format(tmp_path: Path) -> None:
    plugin, log = toy_plugin(tmp_path), toy_log(tmp_path)
    original = toy_table()
    model = write_toy(tmp_path / "items.toy", original)
    before = model.read_bytes()
    result = run("mitigate", model, "--alpha", 0.5, "-o", tmp_path / "out.toy", "--interactions", log,
                 "--plugin", plugin, "-q")
    assert result.exit_code == 0, result.output
    assert model.read_bytes() == before
    rescaled = read_toy(tmp_path / "out.toy")
    norms = np.linalg.norm(original.astype(np.float64), axis=1)
    np.testing.assert_allclose(np.linalg.norm(rescaled.astype(np.float64), axis=1), norms**0.5, rtol=2e-6)
    cosines = np.einsum("ij,ij->i", original, rescaled) / (norms * np.linalg.norm(rescaled, axis=1))
    np.testing.assert_allclose(cosines, 1.0, rtol=2e-6)
    side = json.loads(sidecar_path(tmp_path / "out.toy").read_text())
    assert side["source"]["format"] == side["output"]["format"] == "toy"
    assert side["n_items"] == N_ITEMS and side["dim"] == DIM and "written by the toy plugin" in side["warnings"]
    assert side["frequency_norm"]["before"]["loglog_slope"] == pytest.approx(0.5, abs=1e-3)  # norms sqrt(f)
    assert side["frequency_norm"]["after"]["loglog_slope"] == pytest.approx(0.25, abs=1e-3)
    report = tmp_path / "report.json"
    checked = run("check", tmp_path / "out.toy", "--interactions", log, "--plugin", plugin, "--no-probes",
                  "--bootstrap", "0", "-q", "--json", report)
    assert checked.exit_code == 0, checked.output
    audit = json.loads(report.read_text())
    assert audit["inputs"]["n_items"] == N_ITEMS
    assert audit["frequency_norm"]["loglog_slope"] == pytest.approx(0.25, abs=1e-3)


def test_mitigate_refusals_for_plugin_formats(tmp_path: Path) -> None:
    model = write_toy(tmp_path / "items.toy", toy_table())
    other = run("mitigate", model, "--alpha", 0.5, "-o", tmp_path / "out.npy", "--plugin", toy_plugin(tmp_path))
    assert other.exit_code == 1 and "names a .npy table but" in other.output and "give the output a .toy name" in other.output
    no_writer = run("mitigate", model, "--alpha", 0.5, "-o", tmp_path / "out.toy", "--plugin",
                    toy_plugin(tmp_path, write="None"))
    assert no_writer.exit_code == 1 and "is not a model file popaudit mitigate writes" in no_writer.output
    failing = toy_plugin(tmp_path, write="boom", extra="""
    def boom(job):
        raise RuntimeError("disk on fire")
    """)
    broken = run("mitigate", model, "--alpha", 0.5, "-o", tmp_path / "out.toy", "--plugin", failing)
    assert broken.exit_code == 1, broken.output
    # plugins QA F11: the writer, its format and the file are named, not the hook that registered the format
    assert (f"plugin 'file:{failing}', format 'toy': its writer (write) failed rescaling {model}: "
            "RuntimeError: disk on fire") in broken.output
    assert not (tmp_path / "out.toy").exists() and not sidecar_path(tmp_path / "out.toy").exists()
    bad = toy_plugin(tmp_path, extra="""
    write = lambda job: "not written"
    """)
    wrong = run("mitigate", model, "--alpha", 0.5, "-o", tmp_path / "out.toy", "--plugin", bad)
    assert wrong.exit_code == 1 and "returned str, not an auditor.loading.formats.Written" in wrong.output


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ('[ModelFormat("npy", "mine", (".mine",), read=read)]', r"two model formats are named 'npy': one from popaudit \(built-in\)"),
        ('[ModelFormat("mine", "mine", (".mine",))]', r"it has no reader \(read\)"),
        ('[ModelFormat("mine", "mine", read=read)]', r"nothing tells its files apart"),
        ('[ModelFormat("mine", "mine", (".MINE",), read=read)]', r"suffixes must be lower case and start with a dot"),
        ('["toy"]', r"it is not an auditor.loading.formats.ModelFormat"),
        ('ModelFormat("mine", "mine", (".mine",), read=read)', r"expected a list"),
    ],
)
def test_malformed_formats_name_the_plugin(tmp_path: Path, body: str, said: str) -> None:
    path = tmp_path / "bad_format.py"
    path.write_text(textwrap.dedent(f"""
        from auditor.hookspecs import hookimpl
        from auditor.plugin_api import ModelFormat

        def read(path, options):
            return None

        @hookimpl
        def popaudit_model_formats():
            return {body}
    """))
    np.save(tmp_path / "items.npy", toy_table())
    pm = get_plugin_manager([path], entry_points=False)
    with pytest.raises(PluginError, match=said) as caught:
        load_model(tmp_path / "items.npy", LoadOptions(), pm)
    assert "bad_format.py" in str(caught.value)

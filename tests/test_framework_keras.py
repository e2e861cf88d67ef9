"""Keras / TensorFlow Recommenders two-tower models read with h5py, no TensorFlow or Keras:
files made by Keras 3 itself (tests/data/keras/make_models.py, torch backend) and a Keras 2
(tf.keras) weights file written here in Keras 2's documented HDF5 layout."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.config import LoadOptions
from auditor.errors import ModelLoadError
from auditor.loading import load_model

h5py = pytest.importorskip("h5py", reason="the keras extra (h5py) is not installed")

DATA = Path(__file__).resolve().parent / "data" / "keras"
EXPECTED: dict[str, Any] = json.loads((DATA / "expected.json").read_text())


def check(model: Path, tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / "r.json"
    result = CliRunner().invoke(
        cli,
        ["check", str(model), "--interactions", str(DATA / "interactions.csv"), "--json", str(out),
         "--no-probes", "--bootstrap", "0", "-q"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def test_keras_archive_functional_two_tower(tmp_path: Path) -> None:
    want = EXPECTED["two_tower"]
    report = check(DATA / "two_tower.keras", tmp_path)
    inputs = report["inputs"]
    assert inputs["format"] == "keras"
    assert inputs["item_table"] == "item_embedding.embeddings" and inputs["user_table"] == "user_embedding.embeddings"
    assert [inputs["n_items"], inputs["dim"]] == want["shape"] == [80, 8]
    assert report["frequency_norm"]["spearman"] == pytest.approx(want["spearman"], abs=1e-9)
    # compile_config in config.json: SGD(0.5), no momentum, weight_decay None (no decay).
    c1 = report["conditions"]["C1"]
    assert c1["status"] == "holds" and c1["details"]["lr"] == 0.5 and c1["details"]["weight_decay"] == 0.0
    bundle = load_model(DATA / "two_tower.keras", LoadOptions())
    np.testing.assert_array_equal(bundle.item_table[0], np.float32(want["row0"]))


def test_weights_h5_of_a_subclassed_retrieval_model(tmp_path: Path) -> None:
    want = EXPECTED["retrieval"]
    report = check(DATA / "retrieval.weights.h5", tmp_path)
    inputs = report["inputs"]
    # No config: the Embedding layers are found by their auto names, the towers by attribute names.
    assert inputs["item_table"] == "candidate_model.embedding_1.embeddings"
    assert inputs["user_table"] == "query_model.embedding.embeddings"
    assert [inputs["n_items"], inputs["dim"]] == want["shape"]
    assert report["frequency_norm"]["spearman"] == pytest.approx(want["spearman"], abs=1e-9)
    assert report["conditions"]["C2"]["status"] == "holds"  # the optimizer's slots are not tower weights
    bundle = load_model(DATA / "retrieval.weights.h5", LoadOptions())
    np.testing.assert_array_equal(bundle.item_table[0], np.float32(want["row0"]))


def write_keras2(path: Path, item: np.ndarray, user: np.ndarray, dense: np.ndarray) -> None:
    """tf.keras 2 ``save_weights('x.h5')``: root ``layer_names``, each layer's ``weight_names``."""
    layers = {
        "query_tower": {"query_tower/user_lookup/embeddings:0": user},
        "candidate_tower": {"candidate_tower/movie_lookup/embeddings:0": item,
                            "candidate_tower/dense/kernel:0": dense},
        "retrieval": {},
    }
    with h5py.File(path, "w") as h5:
        h5.attrs["layer_names"] = np.array([n.encode() for n in layers])
        h5.attrs["backend"], h5.attrs["keras_version"] = b"tensorflow", b"2.15.0"
        for layer, weights in layers.items():
            group = h5.create_group(layer)
            group.attrs["weight_names"] = np.array([w.encode() for w in weights])
            for name, value in weights.items():
                group.create_dataset(name, data=value)


def test_keras2_h5_layout(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    item, user = rng.normal(size=(12, 4)).astype(np.float32), rng.normal(size=(5, 4)).astype(np.float32)
    path = tmp_path / "tfrs.h5"
    write_keras2(path, item, user, rng.normal(size=(4, 4)).astype(np.float32))
    bundle = load_model(path, LoadOptions())
    assert bundle.item_key == "candidate_tower.movie_lookup.embeddings"
    assert bundle.user_key == "query_tower.user_lookup.embeddings"
    np.testing.assert_array_equal(bundle.item_table, item)
    assert any("has weights besides its embedding table (candidate_tower.dense.kernel)" in w for w in bundle.warnings)


def test_missing_h5py_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "h5py", None)  # import h5py now raises ImportError
    with pytest.raises(ModelLoadError, match=r'needs h5py: pip install "popaudit\[keras\]"'):
        load_model(DATA / "retrieval.weights.h5", LoadOptions())


def test_deflated_keras_archive(tmp_path: Path) -> None:
    """tf.keras and zip tools may compress the members: read through zipfile, same table."""
    import zipfile

    path = tmp_path / "deflated.keras"
    with zipfile.ZipFile(DATA / "two_tower.keras") as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for info in src.infolist():
            out.writestr(info.filename, src.read(info))
    bundle = load_model(path, LoadOptions())
    assert bundle.item_key == "item_embedding.embeddings"
    np.testing.assert_array_equal(bundle.item_table[0], np.float32(EXPECTED["two_tower"]["row0"]))

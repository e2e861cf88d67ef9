"""ONNX models: embedding initializers read with the onnx package (the graph is never run).
A real export by torch.onnx.export (tests/data/onnx/make_model.py, external weights file)
and graphs built here with onnx.helper."""

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

onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "onnx"
EXPECTED: dict[str, Any] = json.loads((DATA / "expected.json").read_text())


def test_torch_export_with_external_data(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = CliRunner().invoke(
        cli,
        ["check", str(DATA / "two_tower.onnx"), "--interactions", str(DATA / "interactions.csv"), "--json", str(out),
         "--no-probes", "--bootstrap", "0", "-q"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    inputs = report["inputs"]
    assert inputs["format"] == "onnx"
    assert inputs["item_table"] == "item_embedding.weight" and inputs["user_table"] == "user_embedding.weight"
    assert [inputs["n_items"], inputs["dim"]] == EXPECTED["shape"] == [80, 8]
    assert report["frequency_norm"]["spearman"] == pytest.approx(EXPECTED["spearman"], abs=1e-9)
    bundle = load_model(DATA / "two_tower.onnx", LoadOptions())
    np.testing.assert_array_equal(bundle.item_table[0], np.float32(EXPECTED["row0"]))


def two_tower_graph(path: Path, item: np.ndarray, user: np.ndarray, extra: list[Any] | None = None) -> None:
    """Generic initializer names (W0, W1): only the Gathers' id inputs say which is which."""
    nodes = [
        helper.make_node("Cast", ["item_id"], ["item_rows"], to=TensorProto.INT64),  # ids traced back through it
        helper.make_node("Gather", ["W0", "item_rows"], ["item_vec"]),
        helper.make_node("Gather", ["W1", "user_id"], ["user_vec"]),
        helper.make_node("Mul", ["item_vec", "user_vec"], ["score"]),
    ]
    graph = helper.make_graph(
        nodes, "two_tower",
        [helper.make_tensor_value_info("item_id", TensorProto.INT64, [None]),
         helper.make_tensor_value_info("user_id", TensorProto.INT64, [None])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, [None, item.shape[1]])],
        [numpy_helper.from_array(item, "W0"), numpy_helper.from_array(user, "W1"), *(extra or [])],
    )  # fmt: skip
    onnx.save(helper.make_model(graph), str(path))


def test_tables_named_by_the_ids_they_gather(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    item, user = rng.normal(size=(10, 4)).astype(np.float32), rng.normal(size=(6, 4)).astype(np.float32)
    path = tmp_path / "m.onnx"
    two_tower_graph(path, item, user)
    bundle = load_model(path, LoadOptions())
    assert bundle.item_key == "item_id/W0" and bundle.user_key == "user_id/W1"
    np.testing.assert_array_equal(bundle.item_table, item)
    np.testing.assert_array_equal(bundle.user_table, user)  # type: ignore[arg-type]
    assert load_model(path, LoadOptions(item_key="W1")).item_table.shape == (6, 4)


def test_external_data_outside_the_folder_is_refused(tmp_path: Path) -> None:
    item = np.ones((10, 4), np.float32)
    tensor = numpy_helper.from_array(item, "item_embedding.weight")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "../secret.bin"), ("offset", "0"), ("length", "160")):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    (tmp_path / "secret.bin").write_bytes(bytes(160))
    folder = tmp_path / "model"
    folder.mkdir()
    graph = helper.make_graph([], "g", [], [], [tensor])
    onnx.save(helper.make_model(graph), str(folder / "m.onnx"))
    with pytest.raises(ModelLoadError, match=r"keeps its data in \.\./secret\.bin, which is not a regular file inside"):
        load_model(folder / "m.onnx", LoadOptions())


def test_missing_onnx_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ModelLoadError, match=r'needs the onnx package: pip install "popaudit\[onnx\]"'):
        load_model(DATA / "two_tower.onnx", LoadOptions())

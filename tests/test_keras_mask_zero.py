"""Keras ``Embedding(mask_zero=True)`` (QA formats #10): row 0 is the mask index, not an
item; the ids fed to the model are 1..n with row = id. Built from the project's Keras 3
fixture the way such a model is saved: ``input_dim`` one larger, ``mask_zero`` true in
``config.json``, a never-trained (not zeroed) row 0 on top of each table, the log's ids
plus one. Known answer: with the mask row left out the rows and their frequencies are the
fixture's, so ρ is the fixture's −0.3171 (the mask row counted as a cold item gave
−0.2688, the advised ``--id-offset 1`` −0.1599)."""

from __future__ import annotations

import csv
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.errors import IdMappingError
from auditor.id_shifts import offset_signals
from auditor.idmap import check_mapped_shift
from auditor.loading.keras_mask import masked_layers
from auditor.values import RowIdPolicy

h5py = pytest.importorskip("h5py", reason="the keras extra (h5py) is not installed")

DATA = Path(__file__).resolve().parent / "data" / "keras"
TABLES = ("layers/embedding/vars/0", "layers/embedding_1/vars/0")


def _masked_archive(target: Path) -> None:
    src = zipfile.ZipFile(DATA / "two_tower.keras")
    config = json.loads(src.read("config.json"))
    for layer in config["config"]["layers"]:
        if layer["class_name"] == "Embedding":
            layer["config"]["mask_zero"], layer["config"]["input_dim"] = True, layer["config"]["input_dim"] + 1
    rng, buf = np.random.default_rng(0), io.BytesIO()
    with h5py.File(io.BytesIO(src.read("model.weights.h5")), "r") as old, h5py.File(buf, "w") as new:
        def copy(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset):
                data = obj[...]
                if name in TABLES:
                    data = np.vstack([rng.uniform(-0.05, 0.05, size=(1, data.shape[1])).astype(data.dtype), data])
                made = new.create_dataset(name, data=data)
            else:
                made = new.require_group(name)
            made.attrs.update(dict(obj.attrs))
        old.visititems(copy)
        new.attrs.update(dict(old.attrs))
    with zipfile.ZipFile(target, "w") as out:
        for name in src.namelist():
            payload = json.dumps(config) if name == "config.json" else buf.getvalue() if name == "model.weights.h5" \
                else src.read(name)
            out.writestr(name, payload)


def _audit(model: Path, log: Path, *extra: str) -> tuple[int, str, dict[str, Any] | None]:
    out = model.parent / "r.json"
    ran = CliRunner().invoke(cli, ["check", str(model), "--interactions", str(log), "--no-probes", "--bootstrap", "0",
                                   "-q", "-k", "5", *extra, "--format", "json", "-o", str(out)])  # fmt: skip
    return ran.exit_code, " ".join(ran.output.split()), json.loads(out.read_text()) if ran.exit_code == 0 else None


def test_the_mask_row_is_left_out(tmp_path: Path) -> None:
    model, log = tmp_path / "mask.keras", tmp_path / "log.csv"
    _masked_archive(model)
    rows = list(csv.DictReader((DATA / "interactions.csv").open()))
    log.write_text("user_id,item_id\n" + "".join(f"{int(r['user_id']) + 1},{int(r['item_id']) + 1}\n" for r in rows))
    code, _, report = _audit(model, log)
    assert code == 0 and report is not None
    assert report["frequency_norm"]["spearman"] == pytest.approx(-0.3171088710908308, abs=1e-9)
    assert report["inputs"]["n_items"] == 80 and report["retrieval"]["population"]["n_user_rows"] == 60
    assert report["inputs"]["item_id_mapping"] == ("item rows mapped through Keras's mask_zero=True on layer "
                                                   "`item_embedding` (row = id; row 0, the mask index, left out) (the "
                                                   "rows audited hold the ids 1..80 in order: row = raw item id − 1)")
    assert not any("--id-offset" in w for w in report["warnings"])  # the advice that shifted every item
    code, output, _ = _audit(model, log, "--id-offset", "1")
    assert code == 1 and "mapped through Keras's mask_zero=True on layer `item_embedding`" in output


def _masked_full_h5(target: Path, normalize: bool) -> None:
    """The masked fixture as Keras's ``model.save("m.h5")`` writes it (no config.json):
    ``model_weights/<layer>/<layer>/embeddings`` and the JSON root attributes
    ``model_config`` (mask_zero, the Dot layer) and ``training_config`` (its SGD, lr 0.5)."""
    archive = tmp = target.with_suffix(".keras")
    _masked_archive(archive)
    src = zipfile.ZipFile(archive)
    config = json.loads(src.read("config.json"))
    compiled = config.pop("compile_config")
    for layer in config["config"]["layers"]:
        if layer["class_name"] == "Dot":
            layer["config"]["normalize"] = normalize
    with h5py.File(io.BytesIO(src.read("model.weights.h5")), "r") as weights, h5py.File(target, "w") as h5:
        names = []
        for table in TABLES:
            name = weights[table.rsplit("/", 1)[0]].attrs["name"]
            h5.create_dataset(f"model_weights/{name}/{name}/embeddings", data=weights[table][...])
            h5[f"model_weights/{name}"].attrs["weight_names"] = [f"{name}/embeddings".encode()]
            names.append(name.encode())
        h5["model_weights"].attrs["layer_names"] = names
        h5.attrs["model_config"] = json.dumps(config)
        h5.attrs["training_config"] = json.dumps({"loss": compiled["loss"], "optimizer_config": compiled["optimizer"]})
    tmp.unlink()


@pytest.mark.parametrize("normalize", [False, True])
def test_a_full_model_h5_reads_its_model_config(tmp_path: Path, normalize: bool) -> None:
    """Loaders F5: the .h5 Keras writes for model.save keeps config.json's content in its root
    attributes; it was ignored (the mask row audited as a cold item: 81 items, ρ −0.2688; no
    cosine scoring, C1/C4/C5 unknown), so the same model audited unlike its .keras."""
    model, archive, log = tmp_path / "m.h5", tmp_path / "mask.keras", tmp_path / "log.csv"
    _masked_full_h5(model, normalize)
    _masked_archive(archive)
    rows = list(csv.DictReader((DATA / "interactions.csv").open()))
    log.write_text("user_id,item_id\n" + "".join(f"{int(r['user_id']) + 1},{int(r['item_id']) + 1}\n" for r in rows))
    code, output, report = _audit(model, log)
    assert code == 0 and report is not None, output
    assert report["frequency_norm"]["spearman"] == pytest.approx(-0.3171088710908308, abs=1e-9)
    assert report["inputs"]["n_items"] == 80 and "mask_zero=True on layer `item_embedding`" in \
        report["inputs"]["item_id_mapping"]
    c1 = report["conditions"]["C1"]
    assert c1["status"] != "unknown" and "0.5" in json.dumps(c1), c1  # SGD at lr 0.5 from training_config
    served = report["served_vectors"]
    if normalize:
        assert served is not None and served["scoring"] == "cosine"
        assert report["conditions"]["C4"]["status"] == "holds"
        assert "Dot(normalize=True) in the .h5's model_config" in report["conditions"]["C4"]["evidence"]
    else:  # the same figures as the .keras archive of the same model
        _, _, keras_report = _audit(archive, log)
        assert keras_report is not None
        for key in ("C1", "C4", "C5"):
            assert report["conditions"][key]["status"] == keras_report["conditions"][key]["status"]


def test_a_zero_based_log_against_the_masked_rows_is_refused(tmp_path: Path) -> None:
    """The fixture's own 0-based log: id 0 is the mask index, and every other id would land
    on its neighbour's row; refused, since every id plus 1 has a row."""
    model = tmp_path / "mask.keras"
    _masked_archive(model)
    code, output, _ = _audit(model, DATA / "interactions.csv")
    assert code == 1
    assert ("Error: 1 of the 80 distinct item ids in " in output and "have no row under Keras's mask_zero=True on "
            "layer `item_embedding`" in output and "while every id plus 1 has one" in output)
    assert _audit(model, DATA / "interactions.csv", "--assume-row-ids")[0] == 0


def test_check_mapped_shift_needs_a_dense_shift() -> None:
    rows = np.arange(1, 11)
    with pytest.raises(IdMappingError, match=r"1 of the 10 distinct item ids in log \(7 interactions\) have no row "
                                             r"under m, while every id plus 1 has one"):
        check_mapped_shift(np.arange(10), np.full(10, 7), rows, RowIdPolicy(), "item", "log", "m")
    with pytest.raises(IdMappingError, match="every id minus 1 has one"):
        check_mapped_shift(np.arange(2, 12), np.ones(10), rows, RowIdPolicy(), "item", "log", "m")
    check_mapped_shift(np.arange(1, 11), np.ones(10), rows, RowIdPolicy(), "item", "log", "m")  # all mapped
    check_mapped_shift(np.array([0, 1, 2]), np.ones(3), rows, RowIdPolicy(), "item", "log", "m")  # 30% of rows
    check_mapped_shift(np.r_[0, 2:12], np.ones(11), rows, RowIdPolicy(), "item", "log", "m")  # no one shift fits
    check_mapped_shift(np.arange(10), np.ones(10), rows, RowIdPolicy(assume_row_ids=True), "item", "log", "m")
    check_mapped_shift(np.arange(10), np.ones(10), rows.astype(str), RowIdPolicy(), "item", "log", "m")
    # One rare new id past the numbering where row id 0 occurs (a log of 0..100 against ids
    # 0..99, 3 of 2,003 interactions on the new 100): no shift places every id, so a new item.
    counts = np.r_[np.full(100, 2000 / 100), 3.0]
    check_mapped_shift(np.arange(0, 101), counts, np.arange(100), RowIdPolicy(), "item", "log", "m")
    # Row id 0 never occurring and every id minus 1 having a row is the shift rows taken as
    # ids are refused for, however few interactions the id past the numbering carries
    # (QA12 Loaders F3; it was let through under 1% of the interactions).
    with pytest.raises(IdMappingError, match=r"while every id minus 1 has one: the ids look shifted: if the rows are "
                                             r"the ids minus 1 \(1-based ids\)"):
        check_mapped_shift(np.arange(1, 101), np.r_[np.full(99, 2000 / 99), 3.0], np.arange(100), RowIdPolicy(),
                           "item", "log", "m")


def test_masked_layers_reads_nested_configs() -> None:
    config = {"config": {"layers": [
        {"class_name": "Embedding", "config": {"name": "a", "mask_zero": True}},
        {"class_name": "Embedding", "config": {"name": "b", "mask_zero": False}},
        {"class_name": "Functional", "config": {"name": "tower", "layers": [
            {"class_name": "Embedding", "config": {"name": "c", "mask_zero": True}},
            {"class_name": "Dense", "config": {"name": "d", "mask_zero": True}}]}}]}}
    assert masked_layers(config) == {"a", "c"}
    assert masked_layers(None) == set()


def test_without_the_config_the_advice_names_mask_zero() -> None:
    """A weights file alone does not record mask_zero: the 1-based-ids advice says when it is wrong."""
    [keras] = offset_signals(np.arange(1, 10), 10, RowIdPolicy(), "item", "log.csv", np.ones(4), "keras")
    assert keras.endswith("unless the layer is an Embedding(mask_zero=True), whose row 0 is the mask index and whose "
                          "rows are the ids (this file does not record mask_zero; a .keras archive does)")
    [plain] = offset_signals(np.arange(1, 10), 10, RowIdPolicy(), "item", "log.csv", np.ones(4))
    assert "mask_zero" not in plain


def test_the_one_config_walk_is_bounded_and_never_recurses(monkeypatch: pytest.MonkeyPatch) -> None:
    """masked_layers, layer_classes and the score layer read config.json through one walk:
    a nesting far deeper than Python's recursion limit is walked, and no more than
    MAX_NODES nodes are visited (the list itself, then 9 of its 20 dicts)."""
    from auditor.loading import keras_config

    deep: Any = {"class_name": "Embedding", "config": {"name": "deep", "mask_zero": True}}
    for _ in range(50_000):
        deep = [deep]
    assert masked_layers(deep) == {"deep"} and keras_config.layer_classes(deep) == {"deep": "Embedding"}
    monkeypatch.setattr(keras_config, "MAX_NODES", 10)
    assert len(list(keras_config.config_nodes([{} for _ in range(20)]))) == 9
    records = [{"class_name": "Dense", "config": {"name": "x"}}, {"class_name": "Embedding", "config": {"name": "x"}}]
    monkeypatch.setattr(keras_config, "MAX_NODES", 1_000_000)
    assert keras_config.layer_classes(records) == {"x": "Embedding"}  # a stack: the last record is met first


def test_a_variable_length_model_config_past_the_bound_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA Loaders N1: Keras stores model_config as a variable-length string, whose storage
    size is a 16-byte reference whatever its length, so the bound never tripped (an 80 MiB
    config was parsed in full). The text's own length is measured too."""
    import h5py

    from auditor.config import LoadOptions
    from auditor.errors import ModelLoadError
    from auditor.loading import keras_h5

    model = tmp_path / "m.h5"
    _masked_full_h5(model, normalize=False)
    with h5py.File(model, "r") as h5:
        size = len(h5.attrs["model_config"])
    assert size > 100  # the text, not the 16-byte reference that get_storage_size gives
    monkeypatch.setattr(keras_h5, "MAX_CONFIG", size - 1)
    with pytest.raises(ModelLoadError, match=rf"its `model_config` attribute holds {size:,} bytes, more than"):
        keras_h5.read_keras(model, LoadOptions())
    monkeypatch.setattr(keras_h5, "MAX_CONFIG", size)
    assert keras_h5.read_keras(model, LoadOptions()).item_table.shape[0] == 80  # at the bound: read (mask row left out)

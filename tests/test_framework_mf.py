"""Matrix-factorisation models saved by implicit, LightFM and cornac themselves (files made
by tests/data/<library>/make_models.py, numbers recorded there from the library's own
in-memory model), audited with ``popaudit check`` without the library installed."""

from __future__ import annotations

import json
import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.config import LoadOptions
from auditor.loading import load_model
from auditor.loading.mf_models import names_library

DATA = Path(__file__).resolve().parent / "data"


def check(model: Path, log: Path, tmp_path: Path, *extra: str) -> dict[str, Any]:
    out = tmp_path / "report.json"
    result = CliRunner().invoke(
        cli,
        ["check", str(model), "--interactions", str(log), "--json", str(out), "--no-probes", "--bootstrap", "0",
         "-q", *extra],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def expected(library: str) -> dict[str, Any]:
    values: dict[str, Any] = json.loads((DATA / library / "expected.json").read_text())
    return values


def test_implicit_bpr_npz_splits_off_the_bias_column(tmp_path: Path) -> None:
    want = expected("implicit")["bpr"]
    report = check(DATA / "implicit" / "bpr.npz", DATA / "implicit" / "interactions.csv", tmp_path)
    assert report["inputs"]["format"] == "implicit"
    assert report["inputs"]["item_table"] == "item_factors" and report["inputs"]["user_table"] == "user_factors"
    assert [report["inputs"]["n_items"], report["inputs"]["dim"]] == want["shape"] == [80, 8]
    assert report["frequency_norm"]["spearman"] == pytest.approx(want["spearman"], abs=1e-9)
    assert any("item bias term (80 values, from `item_factors[:, 8]`)" in w for w in report["warnings"])
    bundle = load_model(DATA / "implicit" / "bpr.npz", LoadOptions())
    np.testing.assert_allclose(bundle.item_table[0], want["row0"], rtol=1e-6)
    assert bundle.item_biases is not None and bundle.item_biases[0] == pytest.approx(want["bias0"], rel=1e-6)
    assert bundle.item_ids is None  # implicit keeps no ids: rows are the matrix's item columns
    assert bundle.config is not None and bundle.config["loss"] == "bpr" and bundle.config["factors"] == 8


def test_implicit_als_pickle(tmp_path: Path) -> None:
    want = expected("implicit")["als"]
    report = check(DATA / "implicit" / "als.pkl", DATA / "implicit" / "interactions.csv", tmp_path)
    assert report["inputs"]["format"] == "implicit" and report["inputs"]["item_table"] == "item_factors"
    assert [report["inputs"]["n_items"], report["inputs"]["dim"]] == want["shape"]
    assert report["frequency_norm"]["spearman"] == pytest.approx(want["spearman"], abs=1e-9)
    assert not any("bias" in w for w in report["warnings"])  # ALS has no bias term
    bundle = load_model(DATA / "implicit" / "als.pkl", LoadOptions())
    np.testing.assert_allclose(bundle.item_table[0], want["row0"], rtol=1e-6)
    assert bundle.item_biases is None and bundle.config is not None
    assert bundle.config["model_class"] == "implicit.cpu.als.AlternatingLeastSquares"
    # ALS solves least squares in closed form: C4's loss name says dot products.
    assert report["conditions"]["C4"]["status"] == "violated"
    assert report["conditions"]["C4"]["details"]["loss"] == "als"


def test_lightfm_pickle_with_item_biases(tmp_path: Path) -> None:
    want = expected("lightfm")
    report = check(DATA / "lightfm" / "lightfm_warp.pkl", DATA / "lightfm" / "interactions.csv", tmp_path)
    assert report["inputs"]["format"] == "lightfm"
    assert report["inputs"]["item_table"] == "item_embeddings" and report["inputs"]["user_table"] == "user_embeddings"
    assert [report["inputs"]["n_items"], report["inputs"]["dim"]] == want["shape"] == [80, 8]
    assert report["frequency_norm"]["spearman"] == pytest.approx(want["spearman"], abs=1e-9)
    assert any("item bias term (80 values, from `item_biases`)" in w for w in report["warnings"])
    bundle = load_model(DATA / "lightfm" / "lightfm_warp.pkl", LoadOptions())
    np.testing.assert_allclose(bundle.item_table[0], want["row0"], rtol=1e-6)
    assert bundle.item_biases is not None and bundle.item_biases[0] == pytest.approx(want["bias0"], rel=1e-6)
    assert bundle.config is not None and bundle.config["optimizer"] == "adagrad"


def test_cornac_saved_model_maps_raw_ids(tmp_path: Path) -> None:
    want = expected("cornac")
    report = check(DATA / "cornac" / "BPR.pkl", DATA / "cornac" / "interactions.csv", tmp_path)
    inputs = report["inputs"]
    assert inputs["format"] == "cornac" and inputs["item_table"] == "i_factors"
    assert [inputs["n_items"], inputs["dim"]] == want["shape"] == [80, 8]
    assert inputs["n_unmapped_interactions"] == 0 and "iid_map" in inputs["item_id_mapping"]
    assert report["frequency_norm"]["spearman"] == pytest.approx(want["spearman"], abs=1e-9)
    bundle = load_model(DATA / "cornac" / "BPR.pkl", LoadOptions())
    assert list(bundle.item_ids[:5]) == want["first_ids"]  # type: ignore[index]
    np.testing.assert_allclose(bundle.item_table[0], want["row0"], rtol=1e-6)
    assert bundle.item_biases is not None and bundle.item_biases[0] == pytest.approx(want["bias0"], rel=1e-6)


def test_cornac_ids_fit_as_numpy_strings_map_the_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Loaders F6: cornac fit on a numpy string array keeps np.str_ keys in iid_map, pickled as
    numpy scalars of dtype <U..; the file was refused ("numpy never write"). Known answer:
    item i is trained i + 1 times and its row (at PERM position) has norm i + 1, so ρ = 1
    only through the stored ids (rows as ids: scrambled)."""
    import sys
    import types

    perm = np.array([3, 0, 5, 1, 4, 2])
    module = types.ModuleType("cornac")  # the library's name is what marks its pickles

    class BPR:  # what cornac's Recommender.save pickles: the model object's attributes
        pass

    BPR.__module__, BPR.__qualname__ = module.__name__, "BPR"
    module.BPR = BPR  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    model = BPR()
    directions = np.random.default_rng(0).normal(size=(6, 3))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    model.__dict__.update(
        i_factors=(directions * (perm + 1)[:, None]).astype(np.float32), u_factors=np.ones((4, 3), np.float32),
        iid_map={np.str_(f"item{p}"): row for row, p in enumerate(perm)},
        uid_map={np.str_(f"u{u}"): u for u in range(4)}, name=np.str_("BPR"),
    )  # fmt: skip
    path = tmp_path / "bpr.pkl"
    path.write_bytes(pickle.dumps(model, protocol=4))
    monkeypatch.delitem(sys.modules, module.__name__)  # read without cornac, as users do
    items = np.repeat(np.arange(6), np.arange(1, 7))
    log = tmp_path / "log.csv"
    log.write_text("user_id,item_id\n" + "".join(f"u{n % 4},item{i}\n" for n, i in enumerate(items)))
    report = check(path, log, tmp_path)
    assert report["inputs"]["format"] == "cornac" and "iid_map" in report["inputs"]["item_id_mapping"]
    assert report["frequency_norm"]["spearman"] == pytest.approx(1.0)
    bundle = load_model(path, LoadOptions())
    assert list(bundle.item_ids) == [f"item{p}" for p in perm]  # type: ignore[arg-type]


def test_pickles_of_other_libraries_are_not_sniffed(tmp_path: Path) -> None:
    plain = tmp_path / "plain.pkl"
    plain.write_bytes(pickle.dumps({"implicit": "lightfm.cornac", "item_embeddings": [1.0]}))
    assert not names_library(plain)  # strings are not module names of a global
    assert names_library(DATA / "cornac" / "BPR.pkl") and names_library(DATA / "implicit" / "als.pkl")


def test_npz_of_arrays_and_object_members(tmp_path: Path) -> None:
    path = tmp_path / "tables.npz"
    rng = np.random.default_rng(0)
    items, users = rng.normal(size=(10, 4)).astype(np.float32), rng.normal(size=(6, 4)).astype(np.float32)
    np.savez(path, item_embeddings=items, user_embeddings=users, step=np.int64(3))
    bundle = load_model(path, LoadOptions())
    assert bundle.format == "npz" and bundle.item_key == "item_embeddings" and bundle.user_key == "user_embeddings"
    np.testing.assert_array_equal(bundle.item_table, items)
    with zipfile.ZipFile(path, "a") as zf:  # a member np.load would only read by unpickling
        with zf.open("names.npy", "w") as member:
            np.save(member, np.array(["a", None], dtype=object), allow_pickle=True)
    with pytest.raises(Exception, match=r"tables\.npz: member names\.npy holds Python objects"):
        load_model(path, LoadOptions())


def test_implicit_lmf_bias_columns(tmp_path: Path) -> None:
    """implicit's LogisticMatrixFactorization (0.7.3) keeps factors + 2 columns: the users'
    second to last column is 1 (it multiplies the item bias), the items' last is 1 (the user bias)."""
    rng = np.random.default_rng(0)
    item, user = rng.normal(size=(7, 6)).astype(np.float32), rng.normal(size=(5, 6)).astype(np.float32)
    user[:, 4], item[:, 5] = 1.0, 1.0
    path = tmp_path / "lmf.npz"
    np.savez(path, item_factors=item, user_factors=user, factors=np.int64(4), learning_rate=np.float64(1.0),
             neg_prop=np.int64(30))
    bundle = load_model(path, LoadOptions())
    np.testing.assert_array_equal(bundle.item_table, item[:, :4])
    np.testing.assert_array_equal(bundle.item_biases, item[:, 4])  # type: ignore[arg-type]
    assert bundle.user_table is not None and bundle.user_table.shape == (5, 4)
    assert bundle.config is not None and bundle.config["loss"] == "logistic"

"""Ids a model file stores beside its tables map its rows (QA formats #3), and an id file
that contradicts them stops the audit (QA formats #13).

Known answer: item id i is trained i + 1 times and its vector has norm i + 1, so the
frequency–norm Spearman is exactly 1 through the right ids; the rows are stored in a
shuffled id order, so taking rows as ids scrambles it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli
from auditor.errors import IdMappingError
from auditor.loading.stored_ids import given_over_stored

N, DIM = 12, 4
PERM = np.array([7, 2, 11, 0, 5, 9, 1, 10, 3, 8, 6, 4])
"""Row r holds raw item id PERM[r]."""
FAST = ("--no-probes", "--bootstrap", "0", "-q", "--no-retrieval")


def _table() -> np.ndarray:
    """Row r: the vector of item PERM[r], norm PERM[r] + 1."""
    directions = np.random.default_rng(0).normal(size=(N, DIM))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    return (directions * (PERM + 1)[:, None]).astype(np.float32)


def _log(folder: Path) -> Path:
    """Item i seen i + 1 times, by users 0..4."""
    items = np.repeat(np.arange(N), np.arange(1, N + 1))
    path = folder / "log.parquet"
    pq.write_table(pa.table({"user_id": np.arange(items.size) % 5, "item_id": items}), path)
    return path


def _audit(model: Path, log: Path, *extra: object) -> tuple[int, str, dict | None]:
    out = model.parent / "r.json"
    ran = CliRunner().invoke(cli, ["check", str(model), "--interactions", str(log), *FAST, *map(str, extra),
                                   "--format", "json", "-o", str(out)])  # fmt: skip
    report = json.loads(out.read_text()) if ran.exit_code == 0 else None
    out.unlink(missing_ok=True)
    return ran.exit_code, " ".join(ran.output.split()), report


def test_npz_item_ids_member_maps_the_rows(tmp_path: Path) -> None:
    model = tmp_path / "model.npz"
    np.savez(model, item_embeddings=_table(), item_ids=PERM.astype(np.int64))
    code, _, report = _audit(model, _log(tmp_path))
    assert code == 0 and report is not None
    assert report["frequency_norm"]["spearman"] == pytest.approx(1.0)  # rows as ids gave 0.014
    assert report["inputs"]["item_id_mapping"] == f"item rows mapped through the item ids stored in {model} (`item_ids`)"
    assert report["warnings"] == []


def test_text_ids_in_an_npz_map_the_rows(tmp_path: Path) -> None:
    model = tmp_path / "model.npz"
    np.savez(model, item_embeddings=_table(), item_ids=np.array([f"i{p}" for p in PERM]))
    log = tmp_path / "log.parquet"
    items = np.repeat(np.arange(N), np.arange(1, N + 1))
    pq.write_table(pa.table({"user_id": np.arange(items.size) % 5, "item_id": [f"i{i}" for i in items]}), log)
    code, _, report = _audit(model, log)
    assert code == 0 and report is not None and report["frequency_norm"]["spearman"] == pytest.approx(1.0)


def test_an_item_factors_table_is_no_proof_of_implicit(tmp_path: Path) -> None:
    """Loaders F1: ``item_factors`` without implicit's settings is any .npz: its ids map the
    rows and its item bias is served (both were dropped: ρ 0.014, the bias unread)."""
    log = _log(tmp_path)
    model = tmp_path / "factors.npz"
    np.savez(model, item_factors=_table(), user_factors=np.ones((5, DIM), np.float32), item_ids=PERM)
    code, _, report = _audit(model, log)
    assert code == 0 and report is not None and report["inputs"]["format"] == "npz"
    assert report["frequency_norm"]["spearman"] == pytest.approx(1.0)
    biased = tmp_path / "biased.npz"
    np.savez(biased, item_factors=_table(), user_factors=np.ones((5, DIM), np.float32), item_ids=PERM,
             item_bias=-PERM.astype(np.float32))  # fmt: skip
    code, _, report = _audit(biased, log)
    assert code == 0 and report is not None
    assert report["served_vectors"]["source"] == "bias"
    assert report["measures"]["item_bias_spearman"] == pytest.approx(-1.0)  # bias falls as the id's count rises


def test_ids_beside_an_implicit_save_map_the_rows(tmp_path: Path) -> None:
    model = tmp_path / "implicit.npz"
    np.savez(model, item_factors=_table(), user_factors=np.ones((5, DIM), np.float32), factors=np.int64(DIM),
             regularization=np.float64(0.01), dtype=np.str_("float32"), item_ids=PERM)  # fmt: skip
    code, _, report = _audit(model, _log(tmp_path))
    assert code == 0 and report is not None and report["inputs"]["format"] == "implicit"
    assert report["frequency_norm"]["spearman"] == pytest.approx(1.0)
    assert "(`item_ids`)" in report["inputs"]["item_id_mapping"]


def test_state_dict_buffer_maps_the_rows_and_is_no_encoder(tmp_path: Path) -> None:
    model = tmp_path / "model.pt"
    torch.save({"model.item_embedding.weight": torch.from_numpy(_table()), "model.item_ids": torch.from_numpy(PERM),
                "model.user_embedding.weight": torch.ones(5, DIM)}, model)  # fmt: skip
    code, _, report = _audit(model, _log(tmp_path))
    assert code == 0 and report is not None
    assert report["frequency_norm"]["spearman"] == pytest.approx(1.0)
    assert "(`model.item_ids`)" in report["inputs"]["item_id_mapping"]
    assert not any("item_ids" in w for w in report["warnings"])  # no "item encoder ... plugin" advice
    assert report["served_vectors"] is None


def test_ids_kept_beside_model_state_dict_map_the_rows(tmp_path: Path) -> None:
    """Loaders F2: ids saved next to the weights, not inside them, were dropped (ρ 0.014)."""
    log = _log(tmp_path)
    weights = {"item_embedding.weight": torch.from_numpy(_table()), "user_embedding.weight": torch.ones(5, DIM)}
    model = tmp_path / "ckpt.pt"
    torch.save({"model_state_dict": weights, "item_ids": torch.from_numpy(PERM), "epoch": 5}, model)
    code, _, report = _audit(model, log)
    assert code == 0 and report is not None
    assert report["frequency_norm"]["spearman"] == pytest.approx(1.0)
    assert report["inputs"]["item_id_mapping"] == f"item rows mapped through the item ids stored in {model} (`item_ids`)"
    text = tmp_path / "text.pt"  # text ids as a list beside a Lightning-style state_dict: a log of text ids
    torch.save({"state_dict": weights, "item_ids": [f"i{p}" for p in PERM]}, text)
    items = np.repeat(np.arange(N), np.arange(1, N + 1))
    text_log = tmp_path / "text_log.parquet"
    pq.write_table(pa.table({"user_id": np.arange(items.size) % 5, "item_id": [f"i{i}" for i in items]}), text_log)
    code, _, report = _audit(text, text_log)
    assert code == 0 and report is not None and report["frequency_norm"]["spearman"] == pytest.approx(1.0)
    same = tmp_path / "same.pt"  # the same ids inside and beside the weights: one map
    torch.save({"model_state_dict": {**weights, "item_ids": torch.from_numpy(PERM)}, "item_ids": PERM.tolist()}, same)
    code, _, report = _audit(same, log)
    assert code == 0 and report is not None and report["frequency_norm"]["spearman"] == pytest.approx(1.0)


def test_identical_ids_in_a_lightning_buffer_and_beside_the_weights_are_one_record(tmp_path: Path) -> None:
    """Loaders F4: `model.item_ids` inside a Lightning state_dict and the same ids beside it
    were refused ("2 members carry that name"); they are one map (ρ 1.0 through PERM)."""
    log = _log(tmp_path)
    weights = {"model.item_embedding.weight": torch.from_numpy(_table()), "model.user_embedding.weight": torch.ones(5, DIM),
               "model.item_ids": torch.from_numpy(PERM)}  # fmt: skip
    model = tmp_path / "agree.ckpt"
    torch.save({"state_dict": weights, "pytorch-lightning_version": "2.4.0", "item_ids": PERM.tolist()}, model)
    code, output, report = _audit(model, log)
    assert code == 0 and report is not None, output
    assert report["frequency_norm"]["spearman"] == pytest.approx(1.0)
    assert report["inputs"]["item_id_mapping"] == f"item rows mapped through the item ids stored in {model} (`model.item_ids`)"
    differ = tmp_path / "differ.ckpt"
    torch.save({"state_dict": weights, "pytorch-lightning_version": "2.4.0", "item_ids": PERM[::-1].tolist()}, differ)
    code, output, _ = _audit(differ, log)
    assert code == 1 and "inside it (`model.item_ids`), with different values" in output, output


def test_a_member_that_is_no_id_map_is_refused_unless_an_id_file_replaces_it(tmp_path: Path) -> None:
    model = tmp_path / "model.npz"
    np.savez(model, item_embeddings=_table(), item_ids=np.arange(N - 2))
    log = _log(tmp_path)
    code, output, _ = _audit(model, log)
    assert code == 1
    assert (f"Error: {model} (`item_ids`) is named as the raw item id of each row, but it holds 10 ids for the 12 rows "
            "of the item table; pass --item-ids FILE with the raw item id of each item-table row") in output
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(map(str, PERM)))
    code, _, report = _audit(model, log, "--item-ids", ids)
    assert code == 0 and report is not None and report["frequency_norm"]["spearman"] == pytest.approx(1.0)
    assert any("(`item_ids`) is not one item id per row" in w for w in report["warnings"])


def test_an_id_file_that_agrees_is_silent_and_one_that_contradicts_stops(tmp_path: Path) -> None:
    table = tmp_path / "items.parquet"
    pq.write_table(pa.table({"item_id": PERM, "embedding": pa.array(list(_table()), pa.list_(pa.float32()))}), table)
    log = _log(tmp_path)
    agree, rows_order = tmp_path / "agree.txt", tmp_path / "rows.txt"
    agree.write_text("\n".join(map(str, PERM)))
    rows_order.write_text("\n".join(map(str, range(N))))
    code, _, report = _audit(table, log, "--item-ids", agree)
    assert code == 0 and report is not None and report["warnings"] == []
    assert report["frequency_norm"]["spearman"] == pytest.approx(1.0)
    code, output, _ = _audit(table, log, "--item-ids", rows_order)  # used to pass with the wrong rows
    assert code == 1
    assert (f"Error: --item-ids {rows_order} contradicts the item ids stored in {table}: 12 of the 12 rows differ, "
            f"12 of them given an id that {table} stores on another row (row 0: 0 given, 7 stored; 0 is stored on "
            "row 3)") in output


def test_given_over_stored_counts_the_rows() -> None:
    stored = np.array([10, 11, 12, 13])
    assert given_over_stored(stored, np.array(["10", "11", "12", "13"]), "item", Path("f"), "m") is None
    note = given_over_stored(stored, np.array(["a", "b", "12", "13"]), "item", Path("f"), "m")
    assert note == ("item_ids f replaces the item ids stored in m: it names 2 of the 4 rows by ids the file does "
                    "not hold, and the log is matched against the given ids")
    with pytest.raises(IdMappingError, match=r"2 of the 4 rows differ, 2 of them given an id that m stores on "
                                             r"another row \(row 2: 13 given, 12 stored; 13 is stored on row 3\)"):
        given_over_stored(stored, np.array([10, 11, 13, 12]), "item", Path("f"), "m")

"""Table discovery, table files (.npy, Parquet), --item-ids files and table validation."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from auditor.config import LoadOptions
from auditor.errors import AmbiguousTableError, EmbeddingTableError, IdMappingError, InputError, ModelLoadError
from auditor.loading import load_model, validate_item_table
from auditor.loading.discovery import table_role
from auditor.loading.npy import read_npy_table
from auditor.plugins import get_plugin_manager


@pytest.fixture(scope="module")
def pm():
    return get_plugin_manager(entry_points=False)


def _save(tmp_path, tensors, name="m.pt"):
    path = tmp_path / name
    torch.save(tensors, path)
    return path


def _load(path, pm, **opts):
    return load_model(path, LoadOptions(**opts), pm)


# ---------------------------------------------------------------- discovery


@pytest.mark.parametrize(
    "key,role",
    [
        ("item_tower.item_embedding.weight", "item"),
        ("movie_emb.weight", "item"),
        ("productEmbeddings", "item"),
        ("candidate_tower.0.weight", "item"),
        ("query_encoder.layers.0.linear1.weight", "user"),
        ("customer_factors", "user"),
        ("user_tower.item_embedding.weight", "item"),  # the innermost name decides
        ("user_item_matrix", "both"),
        ("checkpoint_point.weight", None),  # "poi" only as a whole word
        ("encoder.weight", None),
    ],
)
def test_table_role(key, role):
    assert table_role(key) == role


def test_embedding_wins_over_tower_mlp_and_positional(tmp_path, pm):
    g = torch.Generator().manual_seed(0)
    sd = {
        "item_tower.embedding.weight": torch.randn(30, 8, generator=g),
        "item_tower.mlp.0.weight": torch.randn(16, 8, generator=g),
        "item_tower.mlp.0.bias": torch.randn(16, generator=g),
        "user_tower.embedding.weight": torch.randn(9, 8, generator=g),
        "user_tower.pos_embedding.weight": torch.randn(20, 8, generator=g),
        "user_tower.proj.weight": torch.randn(8, 8, generator=g),
        "step": torch.tensor(3),
    }
    bundle = _load(_save(tmp_path, sd), pm)
    assert bundle.item_key == "item_tower.embedding.weight"
    assert bundle.user_key == "user_tower.embedding.weight"
    assert bundle.warnings == []


def test_an_attention_query_projection_is_no_user_table(tmp_path, pm):
    """A sequence model's state dict (SASRec's names): its attention's ``query.weight`` is a
    (d, d) layer of the query side, not a table of user vectors; taken as one, every log user
    id past row d was refused as unmapped. No user table: history queries stand in."""
    g = torch.Generator().manual_seed(0)
    sd = {
        "item_embedding.weight": torch.randn(30, 8, generator=g),
        "position_embedding.weight": torch.randn(50, 8, generator=g),
        "trm_encoder.layer.0.multi_head_attention.query.weight": torch.randn(8, 8, generator=g),
        "trm_encoder.layer.0.multi_head_attention.key.weight": torch.randn(8, 8, generator=g),
        "trm_encoder.layer.0.self_attn.query_proj.weight": torch.randn(8, 8, generator=g),
        "trm_encoder.layer.0.feed_forward.dense_1.weight": torch.randn(32, 8, generator=g),
    }
    bundle = _load(_save(tmp_path, sd), pm)
    assert (bundle.item_key, bundle.user_key) == ("item_embedding.weight", None)


def test_torchrec_embedding_bags(tmp_path, pm):
    sd = {
        "sparse_arch.embedding_bag_collection.embedding_bags.t_movie_id.weight": torch.randn(40, 6),
        "sparse_arch.embedding_bag_collection.embedding_bags.t_user_id.weight": torch.randn(25, 6),
        "over_arch.layers.0.weight": torch.randn(6, 12),
    }
    bundle = _load(_save(tmp_path, sd), pm)
    assert bundle.item_key.endswith("t_movie_id.weight") and bundle.item_table.shape == (40, 6)
    assert bundle.user_key.endswith("t_user_id.weight") and bundle.user_table.shape == (25, 6)


def test_onehot_linear_weight_is_transposed(tmp_path, pm):
    weight = torch.randn(8, 200)  # nn.Linear(200 one-hot ids -> 8)
    sd = {"item_tower.linear.weight": weight, "item_tower.linear.bias": torch.randn(8)}
    bundle = _load(_save(tmp_path, sd), pm)
    assert bundle.item_table.shape == (200, 8)
    assert bundle.item_table.flags.c_contiguous
    np.testing.assert_array_equal(bundle.item_table, weight.numpy().T)
    assert any("transposed to [200, 8]" in w and "one-hot" in w for w in bundle.warnings)


def test_square_linear_is_not_transposed(tmp_path, pm):
    sd = {"item_emb.weight": torch.randn(50, 8), "item_fc.weight": torch.randn(8, 8)}
    bundle = _load(_save(tmp_path, sd), pm)
    assert bundle.item_key == "item_emb.weight" and bundle.item_table.shape == (50, 8)


def test_equal_scores_are_ambiguous_and_list_every_candidate(tmp_path, pm):
    sd = {
        "item_embedding.weight": torch.randn(10, 4),
        "item_tower.item_embedding.weight": torch.randn(12, 4),
        "user_embedding.weight": torch.randn(5, 4),
        "head.weight": torch.randn(3, 4),
    }
    with pytest.raises(AmbiguousTableError) as err:
        _load(_save(tmp_path, sd), pm)
    msg = str(err.value)
    assert "item_key" in msg
    for key, shape in [
        ("item_embedding.weight", "[10, 4]"),
        ("item_tower.item_embedding.weight", "[12, 4]"),
        ("user_embedding.weight", "[5, 4]"),
        ("head.weight", "[3, 4]"),
    ]:
        assert f"{key} {shape}" in msg


def test_unnamed_tensors_are_ambiguous(tmp_path, pm):
    sd = {"emb.weight": torch.randn(10, 4), "fc.weight": torch.randn(4, 4)}
    with pytest.raises(AmbiguousTableError) as err:
        _load(_save(tmp_path, sd), pm)
    msg = str(err.value)
    assert "no name says item" in msg and "emb.weight [10, 4]" in msg and "fc.weight [4, 4]" in msg
    assert "item_key" in msg


def test_single_unnamed_tensor_is_item_table_with_warning(tmp_path, pm):
    bundle = _load(_save(tmp_path, {"weight": torch.randn(10, 4), "bias": torch.randn(4)}), pm)
    assert bundle.item_key == "weight" and bundle.item_table.shape == (10, 4)
    assert any("no tensor name" in w and "weight [10, 4]" in w for w in bundle.warnings)


def test_ambiguous_user_table_names_user_key(tmp_path, pm):
    sd = {"item_emb.weight": torch.randn(10, 4), "user_emb.weight": torch.randn(5, 4), "query_emb.weight": torch.randn(6, 4)}
    path = _save(tmp_path, sd)
    with pytest.raises(AmbiguousTableError, match="could be the user table.*user_key"):
        _load(path, pm)
    assert _load(path, pm, user_key="query_emb.weight").user_table.shape == (6, 4)


def test_key_override_exact_and_suffix(tmp_path, pm):
    sd = {
        "towers.item_embedding.weight": torch.randn(10, 4),
        "towers.item_embedding_v2.weight": torch.randn(11, 4),
        "towers.user_embedding.weight": torch.randn(5, 4),
    }
    path = _save(tmp_path, sd)
    assert _load(path, pm, item_key="towers.item_embedding_v2.weight").n_items == 11
    assert _load(path, pm, item_key="item_embedding.weight").n_items == 10  # suffix at a dot
    bundle = _load(path, pm, item_key="item_embedding_v2.weight", user_key="user_embedding.weight")
    assert bundle.user_key == "towers.user_embedding.weight"


def test_unknown_key_lists_available_tables(tmp_path, pm):
    sd = {"item_emb.weight": torch.randn(10, 4), "user_emb.weight": torch.randn(5, 4), "b": torch.zeros(3)}
    with pytest.raises(ModelLoadError) as err:
        _load(_save(tmp_path, sd), pm, item_key="items.weight")
    msg = str(err.value)
    assert "item_key 'items.weight' is not a tensor" in msg
    assert "item_emb.weight [10, 4]" in msg and "user_emb.weight [5, 4]" in msg


def test_integer_tensor_key_is_refused(tmp_path, pm):
    sd = {"item_emb.weight": torch.randn(10, 4), "item_ids_table": torch.zeros(10, 2, dtype=torch.int64)}
    with pytest.raises(ModelLoadError, match="holds torch.int64 values"):
        _load(_save(tmp_path, sd), pm, item_key="item_ids_table")


# ---------------------------------------------------------------- validation


def test_validate_empty_table():
    with pytest.raises(EmbeddingTableError, match=r"item table in src is empty \(0 rows\)"):
        validate_item_table(np.zeros((0, 4), np.float32), "src")


@pytest.mark.parametrize("rows", [1, 2])
def test_validate_accepts_one_or_two_items(rows):
    # Retrieval and accuracy are defined; the correlations are null with their reason
    # (docs/measures.md), not a refusal of the whole audit (Measures F3).
    assert validate_item_table(np.ones((rows, 4), np.float32), "src") == []


def test_validate_not_2d():
    with pytest.raises(EmbeddingTableError, match=r"must be 2-D \(items x dim\), got shape \[5\]"):
        validate_item_table(np.ones(5, np.float32), "src")


def test_validate_nan_and_inf_rows():
    table = np.ones((10, 3), np.float32)
    table[4, 1] = np.nan
    table[7, 0] = np.inf
    with pytest.raises(EmbeddingTableError, match=r"has 2 rows with NaN or infinite values \(rows 4, 7\)"):
        validate_item_table(table, "src")


def test_validate_many_bad_rows_lists_first_five():
    table = np.ones((20, 3), np.float32)
    table[[2, 3, 5, 8, 13, 17], 0] = -np.inf
    with pytest.raises(EmbeddingTableError, match=r"has 6 rows .* \(rows 2, 3, 5, 8, 13, \.\.\.\)"):
        validate_item_table(table, "src")


def test_validate_all_zero_rows_warn():
    table = np.ones((6, 3), np.float32)
    table[[0, 3]] = 0
    (warning,) = validate_item_table(table, "src")
    assert "2 all-zero rows (rows 0, 3)" in warning
    assert validate_item_table(np.ones((3, 2), np.float32), "src") == []


def test_validation_runs_for_every_loader(tmp_path, pm):
    path = _save(tmp_path, {"item_emb.weight": torch.tensor([[1.0, 0.0], [float("nan"), 1.0], [0.0, 0.0]])})
    with pytest.raises(EmbeddingTableError, match="1 row with NaN"):
        _load(path, pm)


def test_user_table_dimension_mismatch(tmp_path, pm):
    path = _save(tmp_path, {"item_emb.weight": torch.randn(5, 4), "user_emb.weight": torch.randn(3, 6)})
    with pytest.raises(EmbeddingTableError, match="user table .* dimension 6 but the item table has 4"):
        _load(path, pm)


# ---------------------------------------------------------------- .npy tables


def test_npy_table(tmp_path, pm):
    table = np.arange(12, dtype=np.float64).reshape(4, 3)
    path = tmp_path / "items.npy"
    np.save(path, table)
    bundle = _load(path, pm)
    assert bundle.format == "npy" and bundle.item_table.dtype == np.float32
    np.testing.assert_array_equal(bundle.item_table, table)


def test_large_npy_is_memory_mapped(tmp_path):
    path = tmp_path / "items.npy"
    np.save(path, np.ones((5, 2), np.float32))
    table, _ = read_npy_table(path, mmap_threshold=0)
    assert isinstance(table, np.memmap) and table.shape == (5, 2)


def test_npy_object_array_refused(tmp_path, pm):
    path = tmp_path / "obj.npy"
    np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(ModelLoadError, match="cannot read .*obj.npy as a numeric .npy table"):
        _load(path, pm)


def test_npy_empty_and_single_row(tmp_path, pm):
    path = tmp_path / "e.npy"
    np.save(path, np.zeros((0, 8), np.float32))
    with pytest.raises(EmbeddingTableError, match="empty"):
        _load(path, pm)
    np.save(path, np.ones((1, 8), np.float32))
    assert _load(path, pm).item_table.shape == (1, 8)


# ---------------------------------------------------------------- Parquet tables


def _vectors(n, d, seed=0):
    return np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)


@pytest.mark.parametrize("kind", ["fixed", "list", "large_list"])
def test_parquet_table_layouts(tmp_path, pm, kind):
    n, d = 23, 5
    vecs = _vectors(n, d)
    flat = pa.array(vecs.ravel())
    if kind == "fixed":
        col = pa.FixedSizeListArray.from_arrays(flat, d)
    elif kind == "list":
        col = pa.ListArray.from_arrays(pa.array(np.arange(0, n * d + 1, d, dtype=np.int32)), flat)
    else:
        col = pa.LargeListArray.from_arrays(pa.array(np.arange(0, n * d + 1, d, dtype=np.int64)), flat)
    ids = pa.array([f"sku{i}" for i in range(n)])
    path = tmp_path / "items.parquet"
    pq.write_table(pa.table({"sku": ids, "vector": col}), path, row_group_size=4)
    bundle = _load(path, pm)
    assert bundle.format == "parquet" and bundle.item_key == "vector"
    np.testing.assert_array_equal(bundle.item_table, vecs)
    assert bundle.item_ids.tolist() == [f"sku{i}" for i in range(n)]


def test_parquet_table_float64_lists_and_named_id_column(tmp_path, pm):
    vecs = _vectors(6, 3).astype(np.float64)
    table = pa.table(
        {
            "item_id": pa.array([10, 11, 12, 13, 14, 15]),
            "category": pa.array([1, 1, 2, 2, 3, 3]),
            "emb": pa.array(list(vecs)),
        }
    )
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    bundle = _load(path, pm)
    assert bundle.item_ids.dtype == np.int64 and bundle.item_ids.tolist() == [10, 11, 12, 13, 14, 15]
    np.testing.assert_allclose(bundle.item_table, vecs, rtol=1e-6)


def test_parquet_table_ragged_vectors(tmp_path, pm):
    path = tmp_path / "ragged.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "v": [[1.0, 2.0], [1.0, 2.0], [3.0]]}), path)
    with pytest.raises(EmbeddingTableError, match="different lengths .*row 2 has 1"):
        _load(path, pm)


def test_parquet_table_two_vector_columns(tmp_path, pm):
    path = tmp_path / "two.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "a": [[1.0], [2.0], [3.0]], "b": [[1.0], [2.0], [4.0]]}), path)
    with pytest.raises(AmbiguousTableError, match="a, b; pass item_key"):
        _load(path, pm)
    assert _load(path, pm, item_key="b").item_table[:, 0].tolist() == [1.0, 2.0, 4.0]


def test_parquet_table_without_vectors(tmp_path, pm):
    path = tmp_path / "novec.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "x": [1.0, 2.0, 3.0]}), path)
    with pytest.raises(ModelLoadError, match=r"no list-of-float column .*id \(int64\), x \(double\)"):
        _load(path, pm)


def test_parquet_table_duplicate_ids(tmp_path, pm):
    path = tmp_path / "dup.parquet"
    pq.write_table(pa.table({"id": [5, 6, 5, 7], "v": [[1.0], [2.0], [3.0], [4.0]]}), path)
    with pytest.raises(IdMappingError, match=r"duplicate item id 5 .*\(rows 0, 2\)"):
        _load(path, pm)


# ---------------------------------------------------------------- --item-ids files


@pytest.fixture
def npy_table(tmp_path):
    path = tmp_path / "items.npy"
    np.save(path, _vectors(5, 3))
    return path


@pytest.mark.parametrize(
    "name,content,expected",
    [
        ("ids.txt", "50\n40\n30\n20\n10\n", [50, 40, 30, 20, 10]),
        ("ids.txt", "b\na\nc\nd\ne\n", ["b", "a", "c", "d", "e"]),
        ("ids.csv", "item_id\n7\n8\n9\n10\n11\n", [7, 8, 9, 10, 11]),
        ("ids.csv", "7,x\n8,y\n9,z\n10,w\n11,v\n", [7, 8, 9, 10, 11]),
    ],
)
def test_item_ids_text_files(tmp_path, pm, npy_table, name, content, expected):
    ids = tmp_path / name
    ids.write_text(content)
    bundle = _load(npy_table, pm, item_ids=ids)
    assert bundle.item_ids.tolist() == expected


def test_item_ids_npy_and_parquet(tmp_path, pm, npy_table):
    npy = tmp_path / "ids.npy"
    np.save(npy, np.array([3, 1, 4, 15, 9], dtype=np.int32))
    bundle = _load(npy_table, pm, item_ids=npy)
    assert bundle.item_ids.dtype == np.int64 and bundle.item_ids.tolist() == [3, 1, 4, 15, 9]
    par = tmp_path / "ids.parquet"
    pq.write_table(pa.table({"raw": ["a", "b", "c", "d", "e"], "other": [1, 2, 3, 4, 5]}), par)
    assert _load(npy_table, pm, item_ids=par).item_ids.tolist() == ["a", "b", "c", "d", "e"]


def test_item_ids_wrong_length(tmp_path, pm, npy_table):
    ids = tmp_path / "ids.txt"
    ids.write_text("1\n2\n3\n4\n")
    with pytest.raises(IdMappingError, match="has 4 ids but the item table in .* has 5 rows"):
        _load(npy_table, pm, item_ids=ids)


def test_item_ids_duplicates(tmp_path, pm, npy_table):
    ids = tmp_path / "ids.txt"
    ids.write_text("1\n7\n3\n7\n7\n")
    with pytest.raises(IdMappingError, match=r"duplicate item id 7 in .*ids.txt \(rows 1, 3, 4\)"):
        _load(npy_table, pm, item_ids=ids)


def test_item_ids_missing_file(tmp_path, pm, npy_table):
    with pytest.raises(InputError, match="file not found: .*nothere.txt"):
        _load(npy_table, pm, item_ids=tmp_path / "nothere.txt")


def test_an_all_zero_item_table_is_refused_naming_its_source():
    with pytest.raises(EmbeddingTableError, match=r"item table in src is all zeros: every one of its 4 item vectors"):
        validate_item_table(np.zeros((4, 3), np.float32), "src")


def test_the_fallback_item_table_is_the_only_one_besides_the_user_side() -> None:
    """No name says item: the one unnamed 2-D tensor is the item table; the warning does not
    call it the only 2-D tensor when the user side has one too."""
    from pathlib import Path

    from auditor.loading.discovery import TensorInfo, choose_tables

    infos = [TensorInfo("query_encoder.emb.weight", (100, 8), True), TensorInfo("cand_encoder.emb.weight", (120, 8), True)]
    choice = choose_tables(infos, Path("tt.pt"))
    assert choice.item.key == "cand_encoder.emb.weight" and choice.user is not None
    assert choice.warnings == ["no tensor name in tt.pt says 'item'; using cand_encoder.emb.weight [120, 8] as the "
                               "item table: the only 2-D tensor besides the user side's query_encoder.emb.weight [100, 8]"]
    alone = choose_tables(infos[1:], Path("t.pt"))
    assert alone.warnings == ["no tensor name in t.pt says 'item'; using cand_encoder.emb.weight [120, 8] as the item "
                              "table: the only 2-D tensor"]

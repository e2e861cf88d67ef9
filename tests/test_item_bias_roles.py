"""An item bias is served wherever a loader meets one (one policy, auditor/loading/item_bias.py):
named without ``item`` when the tables' rows tell the towers apart, in a Keras weights file,
in an ONNX graph that adds it to the score; where its role cannot be established the stored
table stands in, said, and the served figures' gates are not measured (docs/measures.md).

The hand model (tests/test_item_bias_serving.py's): 20 unit-norm items, 10 users along x;
item 0 points away from every user but carries a bias of 5. Served as u·i + b_i, item 0 is
the first slot of the 5 users who did not train on it: head_share_1pct@1 = 5/10 = 0.5,
@2 = 5/20 = 0.25; by the factors alone it scores lowest and is never served (0.0).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli

USERS = np.concatenate([np.arange(5), np.arange(10)])
TRAINED = np.concatenate([np.zeros(5, np.int64), np.arange(1, 11)])


def hand_arrays(n_users: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(users, items, bias): the hand model's tables (module docstring); users beyond the
    first 10 are rows no log user trains (to make the tables' rows equal)."""
    angles = np.linspace(-1.4, 1.4, 19)
    items = np.vstack([[-1.0, 0.0], np.column_stack([np.cos(angles), np.sin(angles)])]).astype(np.float32)
    users = np.zeros((n_users, 2), np.float32)
    users[:, 0] = 0.1
    bias = np.zeros(20, np.float32)
    bias[0] = 5.0
    return users, items, bias


def write_log(tmp_path: Path) -> Path:
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": pa.array(USERS, pa.int64()), "item_id": pa.array(TRAINED, pa.int64())}), path)
    return path


def run(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    return result.exit_code, result.output


def check(model: Path, log: Path, tmp_path: Path, *extra: str) -> dict[str, Any]:
    out = tmp_path / "report.json"
    code, output = run(["check", str(model), "--interactions", str(log), "--json", str(out), "--no-probes",
                        "--bootstrap", "0", "-q", "-k", "1", "-k", "2", *extra])
    assert code == 0, output
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def assert_served_with_bias(report: dict[str, Any], key: str) -> None:
    """The hand model's figures served as u·i + b_i (module docstring), the bias named."""
    assert report["retrieval"]["at"]["1"]["dot"]["head_share_1pct"] == pytest.approx(0.5)
    assert report["retrieval"]["at"]["2"]["dot"]["head_share_1pct"] == pytest.approx(0.25)
    served = report["served_vectors"]
    assert served["source"] == "bias" and served["as_served"] is True, served
    assert f"`{key}`" in served["description"]
    assert any(f"item bias term (20 values, from `{key}`)" in w for w in report["warnings"]), report["warnings"]


def gate(model: Path, log: Path, expression: str) -> tuple[int, str]:
    return run(["check", str(model), "--interactions", str(log), "--no-probes", "--bootstrap", "0", "-q",
                "-k", "1", "--fail-on", expression])


# ---------------------------------------------------------------------------- state dicts (F3)


def test_a_bias_named_without_item_is_served_when_the_rows_tell_the_towers_apart(tmp_path: Path) -> None:
    """`bias_i.weight` (20, 1) beside 20 items and 10 users can only be the items' bias
    (it was dropped silently: 0.0, verdict none)."""
    users, items, bias = hand_arrays()
    state = {"user_emb.weight": torch.from_numpy(users), "item_emb.weight": torch.from_numpy(items),
             "user_bias.weight": torch.zeros(10, 1), "bias_i.weight": torch.from_numpy(bias[:, None].copy())}
    torch.save(state, tmp_path / "mf.pt")
    report = check(tmp_path / "mf.pt", write_log(tmp_path), tmp_path)
    assert_served_with_bias(report, "bias_i.weight")
    evidence = report["conditions"]["C3"]["evidence"]  # it read "the only item-side tensor is the embedding table"
    assert "the per-item bias `bias_i.weight` served with it: each item owns its row and its bias" in evidence, evidence


def test_an_unattributable_per_item_tensor_makes_the_table_stand_in(tmp_path: Path) -> None:
    """20 users and 20 items: `bias_i.weight` could be either tower's, so it is not served;
    the stored table stands in, said first, and served_spearman is not measured (exit 1)."""
    users, items, bias = hand_arrays(n_users=20)
    state = {"user_emb.weight": torch.from_numpy(users), "item_emb.weight": torch.from_numpy(items),
             "bias_i.weight": torch.from_numpy(bias[:, None].copy())}
    torch.save(state, tmp_path / "mf.pt")
    log = write_log(tmp_path)
    report = check(tmp_path / "mf.pt", log, tmp_path)
    served = report["served_vectors"]
    assert served["source"] == "tables" and served["as_served"] is False
    assert report["warnings"][0].startswith("audited the stored id table `item_emb.weight` only")
    assert "`bias_i.weight`" in report["warnings"][0]
    code, output = gate(tmp_path / "mf.pt", log, "served_spearman>0.5")
    assert code == 1 and "stand in" in output, output


# ---------------------------------------------------------------------------- Keras (F2)


def test_a_keras_item_bias_layer_is_served(tmp_path: Path) -> None:
    """A Keras 3 weights file with an `item_bias` layer (20, 1) beside the item Embedding:
    served as u·i + b_i as the state dict is (it was dropped, and C2 claimed the table was
    the only item-side tensor)."""
    h5py = pytest.importorskip("h5py")
    users, items, bias = hand_arrays()
    with h5py.File(tmp_path / "mf.weights.h5", "w") as f:
        f.create_dataset("layers/user_embedding/vars/0", data=users)
        f.create_dataset("layers/item_embedding/vars/0", data=items)
        f.create_dataset("layers/item_bias/vars/0", data=bias[:, None])
    report = check(tmp_path / "mf.weights.h5", write_log(tmp_path), tmp_path)
    assert_served_with_bias(report, "item_bias.var0")
    c2 = report["conditions"]["C2"]  # served with the table: a per-item parameter, not a tower tensor
    assert c2["status"] == "holds" and "the per-item bias `item_bias.var0` served with it" in c2["evidence"], c2


@pytest.mark.parametrize("layout", ["weights.h5", "h5"])
def test_a_keras_bias_embedding_is_no_rival_table(tmp_path: Path, layout: str) -> None:
    """Loaders F4: Keras's own layouts name every Embedding's variable `embeddings`, so
    `item_bias.embeddings` [20, 1] tied with `item_embedding.embeddings` (exit 1 asking for
    --item-key); a (n, 1) tensor beside a wider table is its bias, served (user bias: no table)."""
    h5py = pytest.importorskip("h5py")
    users, items, bias = hand_arrays()
    layers = {"user_embedding": users, "item_embedding": items, "item_bias": bias[:, None],
              "user_bias": np.ones((10, 1), np.float32)}  # fmt: skip
    path = tmp_path / f"mf.{layout}"
    with h5py.File(path, "w") as f:
        for n, (name, values) in enumerate(layers.items()):
            if layout == "weights.h5":  # Keras 3 save_weights: layers/<class name>/vars/<i>, the layer's name as attribute
                group = f.create_group(f"layers/embedding{'_' + str(n) if n else ''}/vars")
                group.attrs["name"] = name
                group.create_dataset("0", data=values)
            else:  # Keras model.save(".h5"): model_weights/<layer>/<layer>/embeddings
                f.create_dataset(f"model_weights/{name}/{name}/embeddings", data=values)
                f[f"model_weights/{name}"].attrs["weight_names"] = [f"{name}/embeddings".encode()]
        if layout == "h5":
            f["model_weights"].attrs["layer_names"] = [name.encode() for name in layers]
    report = check(path, write_log(tmp_path), tmp_path)
    assert report["inputs"]["item_table"] == "item_embedding.embeddings"
    assert report["inputs"]["user_table"] == "user_embedding.embeddings"
    assert_served_with_bias(report, "item_bias.embeddings")


def test_a_keras_weight_beside_the_tables_is_kept_for_the_conditions(tmp_path: Path) -> None:
    """An item-side Dense kernel the table choice passed over stays in the state dict: the
    table stands in, said (it vanished, and C2 held on the table alone)."""
    h5py = pytest.importorskip("h5py")
    users, items, _ = hand_arrays()
    with h5py.File(tmp_path / "tower.weights.h5", "w") as f:
        f.create_dataset("layers/user_embedding/vars/0", data=users)
        f.create_dataset("layers/item_embedding/vars/0", data=items)
        f.create_dataset("layers/item_dense/vars/0", data=np.eye(2, dtype=np.float32))
    report = check(tmp_path / "tower.weights.h5", write_log(tmp_path), tmp_path)
    assert report["served_vectors"]["as_served"] is False
    assert "`item_dense.var0`" in report["warnings"][0], report["warnings"]
    assert report["conditions"]["C2"]["status"] != "holds"


# ---------------------------------------------------------------------------- ONNX (F1)


def onnx_model(path: Path, bias_name: str = "item_bias", combine: str = "Add", column: bool = False,
               tables: tuple[str, str] = ("user_table", "item_table")) -> Path:
    """The hand model as an ONNX scorer of (user_id, item_id) pairs: Σ(u ⊙ i), then the
    bias looked up by the item ids (as (n,) or (n, 1) and squeezed) and ``combine``d."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    users, items, bias = hand_arrays()
    user_table, item_table = tables
    inits = [numpy_helper.from_array(users, user_table), numpy_helper.from_array(items, item_table),
             numpy_helper.from_array(np.array([1], np.int64), "axis"),
             numpy_helper.from_array(bias[:, None].copy() if column else bias, bias_name)]
    nodes = [helper.make_node("Gather", [user_table, "user_id"], ["u"]),
             helper.make_node("Gather", [item_table, "item_id"], ["i"]),
             helper.make_node("Mul", ["u", "i"], ["p"]),
             helper.make_node("ReduceSum", ["p", "axis"], ["dot"], keepdims=0),
             helper.make_node("Gather", [bias_name, "item_id"], ["b"])]
    if column:
        nodes.append(helper.make_node("Squeeze", ["b", "axis"], ["b1"]))
    nodes.append(helper.make_node(combine, ["dot", "b1" if column else "b"], ["score"]))
    ids = [helper.make_tensor_value_info(n, TensorProto.INT64, ["N"]) for n in ("user_id", "item_id")]
    graph = helper.make_graph(nodes, "mf", ids, [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["N"])],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


@pytest.mark.parametrize("column", [False, True])
def test_an_onnx_bias_added_to_the_score_is_served(tmp_path: Path, column: bool) -> None:
    """`Gather(item_bias, item_id)` added to the dot product: served as u·i + b_i (it was
    ignored without a word: 0.0, verdict none)."""
    model = onnx_model(tmp_path / "mf.onnx", column=column)
    report = check(model, write_log(tmp_path), tmp_path)
    assert_served_with_bias(report, "item_bias")
    c2 = report["conditions"]["C2"]  # the bias is served with the table, not counted as a tower tensor
    assert c2["status"] == "holds" and "the per-item bias `item_bias` served with it" in c2["evidence"], c2


def test_an_onnx_bias_is_known_by_its_place_in_the_graph_not_its_name(tmp_path: Path) -> None:
    model = onnx_model(tmp_path / "mf.onnx", bias_name="w7")
    assert_served_with_bias(check(model, write_log(tmp_path), tmp_path), "w7")


def test_an_onnx_bias_column_with_neutral_names_is_no_rival_table(tmp_path: Path) -> None:
    """Loaders F4: `e2` [20, 4] and the bias `c` [20, 1], both named by the item_id input,
    tied as the item table (exit 1 asking for --item-key); a (n, 1) tensor is a bias."""
    model = onnx_model(tmp_path / "mf.onnx", bias_name="c", column=True, tables=("e1", "e2"))
    assert_served_with_bias(check(model, write_log(tmp_path), tmp_path), "c")


def test_an_onnx_per_item_initializer_multiplied_into_the_score_makes_the_table_stand_in(tmp_path: Path) -> None:
    """Σ(u ⊙ i) · b_i is no bias popaudit serves: the table stands in, said first, and a gate
    on the served ρ is not measured (exit 1)."""
    model = onnx_model(tmp_path / "mf.onnx", combine="Mul")
    log = write_log(tmp_path)
    report = check(model, log, tmp_path)
    assert report["served_vectors"]["as_served"] is False
    assert report["warnings"][0].startswith("audited the stored id table `item_table` only")
    assert "`item_bias` looked up by the item ids and combined by Mul" in report["warnings"][0]
    code, output = gate(model, log, "served_spearman>0.5")
    assert code == 1 and "stand in" in output, output


# ---------------------------------------------------------------------------- mitigate (F3)


def test_mitigate_rescales_a_bias_named_without_item_with_the_rows(tmp_path: Path) -> None:
    """`bias_i.weight` is served, so it is rescaled with the rows: each served row [i, b_i]
    becomes [i, b_i]·‖[i, b_i]‖^(α−1) (it was left as it was while the factors shrank: the
    output served more popularity than the input)."""
    users, items, bias = hand_arrays()
    state = {"user_emb.weight": torch.from_numpy(users), "item_emb.weight": torch.from_numpy(items),
             "bias_i.weight": torch.from_numpy(bias[:, None].copy())}
    torch.save(state, tmp_path / "mf.pt")
    code, output = run(["mitigate", str(tmp_path / "mf.pt"), "--alpha", "0.5", "-o", str(tmp_path / "out.pt"), "-q"])
    assert code == 0, output
    written = torch.load(tmp_path / "out.pt", weights_only=True)
    # item 0: [-1, 0, 5] of norm √26 → scaled by 26^(−1/4); the others: unit rows with bias 0 stay
    assert written["bias_i.weight"][0, 0].item() == pytest.approx(5 * 26 ** -0.25, rel=1e-6)
    assert written["item_emb.weight"][0, 0].item() == pytest.approx(-(26 ** -0.25), rel=1e-6)
    assert torch.equal(written["bias_i.weight"][1:], torch.zeros(19, 1))


def test_mitigate_says_when_the_table_it_rescales_is_not_what_the_model_serves(tmp_path: Path) -> None:
    users, items, bias = hand_arrays(n_users=20)
    state = {"user_emb.weight": torch.from_numpy(users), "item_emb.weight": torch.from_numpy(items),
             "bias_i.weight": torch.from_numpy(bias[:, None].copy())}
    torch.save(state, tmp_path / "mf.pt")
    code, output = run(["mitigate", str(tmp_path / "mf.pt"), "--alpha", "0.5", "-o", str(tmp_path / "out.pt")])
    assert code == 0, output
    sidecar = json.loads((tmp_path / "out.pt.popaudit.json").read_text())
    assert any("`bias_i.weight` are ignored" in w for w in sidecar["warnings"]), sidecar["warnings"]
    assert any("dot serving of the rescaled table is not what out.pt serves" in w for w in sidecar["warnings"])


def test_a_parquet_bias_column_beside_the_vectors_is_said(tmp_path: Path) -> None:
    """A Parquet item table with an `item_bias` column: the vectors are served alone, said
    (it was read without it and without a word)."""
    _, items, bias = hand_arrays()
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(items.reshape(-1)), 2)
    pq.write_table(pa.table({"item_id": pa.array(np.arange(20)), "embedding": vectors, "item_bias": bias}),
                   tmp_path / "items.parquet")
    report = check(tmp_path / "items.parquet", write_log(tmp_path), tmp_path)
    assert any("numeric columns beside the item vectors that popaudit does not read (`item_bias`)" in w
               for w in report["warnings"]), report["warnings"]


def test_a_linear_item_bias_weight_beside_a_linear_item_layer_is_served(tmp_path: Path) -> None:
    """Loaders F6: `item_linear.weight` (dim × n, a Linear over one-hot ids, read transposed)
    and `item_bias.weight` (1, n), the weight of a Linear(n, 1): the bias was offered as a
    rival item table (exit 1), then ignored; it is the per-item bias, served u·i + b_i."""
    users, items, bias = hand_arrays()
    model = tmp_path / "linear.pt"
    torch.save({"user_embedding.weight": torch.from_numpy(users), "item_linear.weight": torch.from_numpy(items.T.copy()),
                "item_bias.weight": torch.from_numpy(bias[None, :].copy())}, model)
    report = check(model, write_log(tmp_path), tmp_path)
    assert_served_with_bias(report, "item_bias.weight")
    out = tmp_path / "out.pt"  # mitigate rescales the (1, n) bias with the rows, in its own shape
    code, output = run(["mitigate", str(model), "--alpha", "0.5", "-o", str(out), "-q"])
    assert code == 0, output
    written = torch.load(out, weights_only=True)
    assert tuple(written["item_bias.weight"].shape) == (1, 20)  # item 0's [-1, 0, 5] scaled by 26^(−1/4)
    assert written["item_bias.weight"][0, 0].item() == pytest.approx(5 * 26 ** -0.25, rel=1e-6)
    assert written["item_linear.weight"][0, 0].item() == pytest.approx(-(26 ** -0.25), rel=1e-6)

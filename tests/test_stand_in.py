"""The stored tables standing in for towers popaudit cannot run, and models that score by
cosine: a user tower with a projection (state dict), ONNX graphs with nodes after a table's
Gather, a Keras ``Dot(normalize=True)`` score layer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from auditor import AuditConfig, run_audit
from auditor.result import AuditResult
from scoring_samples import DIM, N_ITEMS, N_USERS, zipf_log




def _tables() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.normal(size=(N_USERS, DIM)).astype(np.float32), rng.normal(size=(N_ITEMS, DIM)).astype(np.float32)


def _audit(model: Path, log: Path, **extra: Any) -> AuditResult:
    return run_audit(AuditConfig(model=model, interactions=log, ks=(5,), bootstrap=0, probes=False, **extra))


def test_a_user_tower_with_a_projection_is_said_to_be_queried_raw(tmp_path: Path) -> None:
    users, items = _tables()
    state = {"user_tower.embedding.weight": torch.tensor(users), "user_tower.proj.weight": torch.eye(DIM),
             "user_tower.proj.bias": torch.ones(DIM), "item_tower.embedding.weight": torch.tensor(items)}
    torch.save({"model_state_dict": state}, tmp_path / "tt.pt")
    result = _audit(tmp_path / "tt.pt", zipf_log(tmp_path))
    served = result.served_vectors
    assert served is not None and not served.as_served and served.source == "tables"
    assert served.description == "the stored tables, queried by the raw rows of the user table `user_tower.embedding.weight`"
    assert result.warnings[0] == served.not_served == (
        "queried the raw rows of the user table `user_tower.embedding.weight`: the checkpoint's user-side tensors "
        "`user_tower.proj.weight`, `user_tower.proj.bias` are ignored, so these are not the queries the model in "
        "tt.pt serves with; to audit those, save its user tower's output for every user row as the user table of a "
        "file without the tower's other tensors, or give a plugin that loads the model (plugins)"
    )
    assert result.verdict.summary.startswith(
        "This audit is of the stored tables, queried by the raw rows of the user table")


def test_rank_neutral_user_tensors_and_history_queries_leave_the_tables_served(tmp_path: Path) -> None:
    """A per-user bias shifts each user's scores alike (it ranks nothing), an id map is no
    weight; history queries never use the user tower: no stand-in either way."""
    users, items = _tables()
    log = zipf_log(tmp_path)
    biased = {"user_emb.weight": torch.tensor(users), "user_bias.weight": torch.ones(N_USERS, 1),
              "user_ids": torch.arange(N_USERS), "item_emb.weight": torch.tensor(items)}
    torch.save(biased, tmp_path / "bias.pt")
    assert _audit(tmp_path / "bias.pt", log).served_vectors is None
    projected = {"user_emb.weight": torch.tensor(users), "user_proj.weight": torch.eye(DIM),
                 "item_emb.weight": torch.tensor(items)}
    torch.save(projected, tmp_path / "proj.pt")
    assert _audit(tmp_path / "proj.pt", log, queries="history").served_vectors is None
    both = {**projected, "item_proj.weight": torch.eye(DIM)}
    torch.save(both, tmp_path / "both.pt")
    result = _audit(tmp_path / "both.pt", log)
    assert result.served_vectors is not None and result.served_vectors.description == (
        "the stored id table `item_emb.weight`, queried by the raw rows of the user table `user_emb.weight`")
    assert result.warnings[0].startswith("audited the stored id table `item_emb.weight` only: the checkpoint's "
                                         "item-side tensors `item_proj.weight` are ignored")
    assert result.warnings[1].startswith("queried the raw rows of the user table `user_emb.weight`: the "
                                         "checkpoint's user-side tensors `user_proj.weight` are ignored")


def _onnx_two_tower(path: Path, users: np.ndarray, items: np.ndarray, user_nodes: list[Any],
                    item_nodes: list[Any], extra: dict[str, np.ndarray], u: str = "u", i: str = "i") -> None:
    """score = ReduceSum(u' * i') with u' = user_nodes(Gather(user table)), i' likewise."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    inits = {"user_embedding.weight": users, "item_embedding.weight": items, "axes": np.array([1], np.int64), **extra}
    nodes = [helper.make_node("Gather", ["user_embedding.weight", "user_id"], ["u"]),
             helper.make_node("Gather", ["item_embedding.weight", "item_id"], ["i"]), *user_nodes, *item_nodes,
             helper.make_node("Mul", [u, i], ["p"]), helper.make_node("ReduceSum", ["p", "axes"], ["score"], keepdims=0)]
    graph = helper.make_graph(nodes, "tt", [helper.make_tensor_value_info("user_id", TensorProto.INT64, [None]),
                                            helper.make_tensor_value_info("item_id", TensorProto.INT64, [None])],
                              [helper.make_tensor_value_info("score", TensorProto.FLOAT, [None])],
                              initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_onnx_nodes_after_a_gather_make_the_tables_stand_in(tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    from onnx import helper

    users, items = _tables()
    log = zipf_log(tmp_path)
    eye = np.eye(DIM, dtype=np.float32)
    _onnx_two_tower(tmp_path / "uproj.onnx", users, items, [helper.make_node("MatMul", ["u", "W"], ["uw"]),
                    helper.make_node("Add", ["uw", "b"], ["q"])], [], {"W": eye, "b": np.ones(DIM, np.float32)}, u="q")
    result = _audit(tmp_path / "uproj.onnx", log)
    assert result.warnings[0].startswith(
        "queried the raw rows of the user table `user_embedding.weight`: the graph's nodes between the user table's "
        "Gather and the score (MatMul with `W`, Add with `b`) are ignored")
    assert result.served_vectors is not None and not result.served_vectors.as_served
    _onnx_two_tower(tmp_path / "iproj.onnx", users, items, [], [helper.make_node("Relu", ["i"], ["k"])], {}, i="k")
    result = _audit(tmp_path / "iproj.onnx", log)
    assert result.warnings[0].startswith(
        "audited the stored id table `item_embedding.weight` only: the graph's nodes between the item table's Gather "
        "and the score (Relu) are ignored")
    # Shape-only nodes change no vector; a user-side L2 normalisation ranks nothing: the tables are served by dot.
    _onnx_two_tower(tmp_path / "plain.onnx", users, items,
                    [helper.make_node("LpNormalization", ["u"], ["un"], axis=1, p=2)],
                    [helper.make_node("Identity", ["i"], ["k"])], {}, u="un", i="k")
    assert _audit(tmp_path / "plain.onnx", log).served_vectors is None


def test_an_onnx_graph_that_normalises_the_items_scores_by_cosine(tmp_path: Path) -> None:
    """F.normalize as torch.onnx exports it (x / Expand(Clip(ReduceL2(x)))) on the item side:
    the model's lists are the cosine lists, which the 'cosine' column measures (numpy's here)."""
    pytest.importorskip("onnx")
    from onnx import helper

    users, items = _tables()
    log = zipf_log(tmp_path)
    nodes = [helper.make_node("ReduceL2", ["i", "axes"], ["n"], keepdims=1),
             helper.make_node("Clip", ["n", "eps"], ["nc"]), helper.make_node("Div", ["i", "nc"], ["k"])]
    _onnx_two_tower(tmp_path / "cos.onnx", users, items, [], nodes, {"eps": np.array(1e-12, np.float32)}, i="k")
    result = _audit(tmp_path / "cos.onnx", log)
    served = result.served_vectors
    assert served is not None and served.as_served and served.scoring == "cosine"
    assert served.description == ("the stored tables, compared by cosine (its graph L2-normalises the item vectors "
                                  "before the score)")
    assert result.warnings[0].startswith("the model in cos.onnx scores by cosine: its own lists are the 'cosine' "
                                         "scoring")
    assert result.verdict.recommendations[0].startswith(
        "Keep serving by cosine: the model in cos.onnx already scores by cosine")
    # The cosine column is the model's own top-5: numpy's, training items excluded (rows = ids here).
    table = pq.read_table(log).to_pydict()
    scores = users @ (items / np.linalg.norm(items, axis=1, keepdims=True)).T
    scores[table["user_id"], table["item_id"]] = -np.inf
    top = np.argsort(-scores, axis=1, kind="stable")[:, :5]
    freq = np.bincount(table["item_id"], minlength=N_ITEMS)
    mine = freq[top].mean()
    assert result.retrieval is not None
    arp = result.retrieval.at[5].cosine["arp"]
    assert arp == pytest.approx(mine, rel=1e-9) and mine != pytest.approx(result.retrieval.at[5].dot["arp"])


@pytest.mark.parametrize("axes", ["value", "value_ints"])
def test_reduce_l2_axes_from_a_constant_node_as_torch_exports_them(tmp_path: Path, axes: str) -> None:
    """Loaders F3: from opset 18 torch.onnx feeds ReduceL2's axes from a Constant node, not an
    initializer; the normalisation was missed (the tables stood in, a served gate could not run)."""
    pytest.importorskip("onnx")
    from onnx import helper, numpy_helper

    users, items = _tables()
    log = zipf_log(tmp_path)
    constant = (helper.make_node("Constant", [], ["l2axes"], value=numpy_helper.from_array(np.array([-1], np.int64)))
                if axes == "value" else helper.make_node("Constant", [], ["l2axes"], value_ints=[-1]))
    nodes = [constant, helper.make_node("ReduceL2", ["i", "l2axes"], ["n"], keepdims=1),
             helper.make_node("Clip", ["n", "eps"], ["nc"]), helper.make_node("Expand", ["nc", "shape"], ["ne"]),
             helper.make_node("Div", ["i", "ne"], ["k"])]
    _onnx_two_tower(tmp_path / "cos.onnx", users, items, [], nodes, {"eps": np.array(1e-12, np.float32),
                    "shape": np.array([1, DIM], np.int64)}, i="k")  # fmt: skip
    result = _audit(tmp_path / "cos.onnx", log)
    served = result.served_vectors
    assert served is not None and served.as_served and served.scoring == "cosine"
    table = pq.read_table(log).to_pydict()
    scores = users @ (items / np.linalg.norm(items, axis=1, keepdims=True)).T
    scores[table["user_id"], table["item_id"]] = -np.inf
    top = np.argsort(-scores, axis=1, kind="stable")[:, :5]
    freq = np.bincount(table["item_id"], minlength=N_ITEMS)
    assert result.retrieval is not None
    assert result.retrieval.at[5].cosine["arp"] == pytest.approx(freq[top].mean(), rel=1e-9)


def test_keras_dot_normalize_scores_by_cosine_and_c4_holds(tmp_path: Path) -> None:
    """A .keras archive whose score layer is Dot(normalize=True): C4 holds from config.json,
    the model serves by cosine and the verdict does not tell it to switch to cosine."""
    pytest.importorskip("h5py")
    import json
    import zipfile

    data = Path(__file__).resolve().parent / "data" / "keras"
    path = tmp_path / "cosine.keras"
    with zipfile.ZipFile(data / "two_tower.keras") as src, zipfile.ZipFile(path, "w") as out:
        for info in src.infolist():
            body = src.read(info.filename)
            if info.filename == "config.json":
                config = json.loads(body)
                for layer in config["config"]["layers"]:
                    if layer["class_name"] == "Dot":
                        layer["config"]["normalize"] = True
                body = json.dumps(config).encode()
            out.writestr(info, body)
    result = run_audit(AuditConfig(model=path, interactions=data / "interactions.csv", ks=(10,), bootstrap=0, probes=False))
    assert result.conditions is not None
    c4 = result.conditions["C4"]
    assert c4.status == "holds"
    assert c4.evidence == ("its score layer `score` is Dot(normalize=True) in config.json: the model's scores are "
                           "cosines (direction only); the recorded loss 'BinaryCrossentropy' is taken on them")
    served = result.served_vectors
    assert served is not None and served.as_served and served.scoring == "cosine"
    assert not any(r.startswith("Serve with cosine") for r in result.verdict.recommendations)
    assert (" scores by cosine, so its own lists are the cosine lists; the severity grades what serving its vectors by "
            "dot product (an inner-product index) would do.") in result.verdict.summary
    assert "scores by cosine" not in run_audit(AuditConfig(
        model=data / "two_tower.keras", interactions=data / "interactions.csv", ks=(10,), bootstrap=0,
        probes=False)).verdict.summary
    plain = run_audit(AuditConfig(model=data / "two_tower.keras", interactions=data / "interactions.csv", ks=(10,),
                                  bootstrap=0, probes=False))
    assert plain.conditions is not None and plain.served_vectors is None
    assert plain.conditions["C4"].status == "unknown"


def test_only_a_last_normalisation_over_the_vector_axis_makes_a_direction() -> None:
    """An L2 normalisation counts as cosine scoring only as the tower's last vector-changing
    node, over the vector axis: one over axis 0 is a change like any other, and one before
    a projection leaves the projected vectors' norms to the score."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from auditor.loading.onnx_graph import tower_of

    def tower(*nodes: Any) -> Any:
        inits = {"T": np.eye(3, 2, dtype=np.float32), "W": np.eye(2, dtype=np.float32)}
        graph = helper.make_graph(
            [helper.make_node("Gather", ["T", "ids"], ["i"]), *nodes], "g",
            [helper.make_tensor_value_info("ids", TensorProto.INT64, [None])],
            [helper.make_tensor_value_info("k", TensorProto.FLOAT, [None, 2])],
            initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
        return tower_of(graph, "T")

    norm = {"p": 2}
    assert tower(helper.make_node("LpNormalization", ["i"], ["k"], axis=-1, **norm)).normalised
    assert not tower(helper.make_node("LpNormalization", ["i"], ["k"], axis=0, **norm)).normalised
    before = tower(helper.make_node("LpNormalization", ["i"], ["n"], axis=-1, **norm),
                   helper.make_node("MatMul", ["n", "W"], ["k"]))
    assert not before.normalised and before.ops == ("MatMul with `W`",)
    after = tower(helper.make_node("MatMul", ["i", "W"], ["m"]), helper.make_node("LpNormalization", ["m"], ["k"], axis=1, **norm))
    assert after.normalised and after.ops == ("MatMul with `W`",)


def test_an_integer_item_side_buffer_is_no_weight_as_on_the_user_side(tmp_path: Path) -> None:
    """An integer `item_index` buffer beside the item table computes nothing from its rows:
    the table is served as stored, as a `user_index` buffer leaves the user rows (it made
    the item table stand in, the same buffer on the user side did not)."""
    users, items = _tables()
    state = {"user_emb.weight": torch.tensor(users), "item_emb.weight": torch.tensor(items),
             "item_index": torch.arange(N_ITEMS), "user_index": torch.arange(N_USERS)}
    torch.save(state, tmp_path / "idx.pt")
    assert _audit(tmp_path / "idx.pt", zipf_log(tmp_path)).served_vectors is None

"""Loaders F1: a model that scores by cosine and adds an item bias ranks by cos(u,i) + b_i,
exactly the dot product of [u/|u|, 1] and [i/|i|, b_i] (auditor/loading/item_bias.py): those
are served, described as such. It was served as u·i + b_i and called the model's own scores.

Known answer: the mean training frequency of the top-5 (ARP@5, training items excluded) by
numpy's own ranking of the model's score, for a Keras ``Dot(normalize=True)`` + ``Add`` of a
bias ``Embedding`` (a full-model .h5) and an ONNX graph that normalises both sides (or the
item side only: u·i/|i| + b_i) before adding the bias.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from auditor import AuditConfig, AuditResult, run_audit
from auditor.report.markdown import render_audit_markdown
from scoring_samples import DIM, N_ITEMS, N_USERS, arp_at_5, audit_at_5, write_keras_h5, zipf_log




def _model() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Users, items (norms 0.2..5, so dot and cosine rank apart) and a bias on a cosine's scale."""
    rng = np.random.default_rng(1)
    users = (rng.normal(size=(N_USERS, DIM)) * rng.uniform(0.2, 5, size=(N_USERS, 1))).astype(np.float32)
    items = (rng.normal(size=(N_ITEMS, DIM)) * rng.uniform(0.2, 5, size=(N_ITEMS, 1))).astype(np.float32)
    return users, items, rng.normal(scale=0.5, size=N_ITEMS).astype(np.float32)


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)




def _onnx(path: Path, users: np.ndarray, items: np.ndarray, bias: np.ndarray, user_side: bool,
          item_side: bool = True) -> Path:
    """score = Σ(n(u) ⊙ n(i)) + bias[item_id], n = F.normalize as torch.onnx exports it."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    def normalise(x: str, out: str) -> list[Any]:
        return [helper.make_node("ReduceL2", [x, "axes"], [f"{x}n"], keepdims=1),
                helper.make_node("Clip", [f"{x}n", "eps"], [f"{x}c"]), helper.make_node("Div", [x, f"{x}c"], [out])]

    inits = {"user_embedding.weight": users, "item_embedding.weight": items, "item_bias.weight": bias[:, None],
             "axes": np.array([1], np.int64), "eps": np.array(1e-12, np.float32)}
    nodes = [helper.make_node("Gather", ["user_embedding.weight", "user_id"], ["u"]),
             helper.make_node("Gather", ["item_embedding.weight", "item_id"], ["i"]),
             *(normalise("u", "uu") if user_side else [helper.make_node("Identity", ["u"], ["uu"])]),
             *(normalise("i", "ii") if item_side else [helper.make_node("Identity", ["i"], ["ii"])]),
             helper.make_node("Mul", ["uu", "ii"], ["p"]),
             helper.make_node("ReduceSum", ["p", "axes"], ["cos"], keepdims=0),
             helper.make_node("Gather", ["item_bias.weight", "item_id"], ["b"]),
             helper.make_node("Squeeze", ["b", "axes"], ["b1"]), helper.make_node("Add", ["cos", "b1"], ["score"])]
    ids = [helper.make_tensor_value_info(n, TensorProto.INT64, [None]) for n in ("user_id", "item_id")]
    graph = helper.make_graph(nodes, "cosb", ids, [helper.make_tensor_value_info("score", TensorProto.FLOAT, [None])],
                              initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _keras_h5(path: Path, users: np.ndarray, items: np.ndarray, bias: np.ndarray) -> Path:
    """Keras's model.save("m.h5") of Dot(normalize=True)([user, item]) + Add(item_bias)."""
    pytest.importorskip("h5py")
    layers = {"user_embedding": users, "item_embedding": items, "item_bias": bias[:, None]}
    config = {"class_name": "Functional", "config": {"name": "cosb", "layers": [
        *({"class_name": "Embedding", "name": n, "config": {"name": n, "input_dim": int(v.shape[0]),
                                                             "output_dim": int(v.shape[1])}} for n, v in layers.items()),
        {"class_name": "Dot", "name": "score", "config": {"name": "score", "axes": 1, "normalize": True}},
        {"class_name": "Add", "name": "add", "config": {"name": "add"}}]}}
    write_keras_h5(path, layers, config)
    return path


def _assert_served(result: AuditResult, expected: float, log: Path, other: float, score: str) -> None:
    served = result.served_vectors
    assert served is not None and served.as_served and served.source == "bias" and served.scoring == "dot"
    assert served.description.endswith(f"dot products of these are the model's own scores, {score}"), served.description
    assert any(f"retrieval serves as the model scores, " in w and f"({score})" in w for w in result.warnings), result.warnings
    # The report's words name the same score: the JSON field, the verdict and the served-vectors note.
    assert served.score == score and f"(the 'dot' lists, {score})" in result.verdict.summary, result.verdict.summary
    assert result.to_dict()["served_vectors"]["score"] == score
    assert f"'dot' lists rank {score} as the model does" in " ".join(render_audit_markdown(result).replace("\\|", "|").split())
    assert result.retrieval is not None
    arp = result.retrieval.at[5].dot["arp"]
    assert arp == pytest.approx(expected, rel=1e-9) and expected != pytest.approx(other)


@pytest.mark.parametrize("fmt", ["onnx", "keras"])
def test_cosine_plus_item_bias_is_served_as_the_model_scores(tmp_path: Path, fmt: str) -> None:
    users, items, bias = _model()
    log = zipf_log(tmp_path)
    model = (_onnx(tmp_path / "cosb.onnx", users, items, bias, user_side=True) if fmt == "onnx"
             else _keras_h5(tmp_path / "cosb.h5", users, items, bias))
    mine = arp_at_5(_unit(users) @ _unit(items).T + bias, log)
    old = arp_at_5(users @ items.T + bias, log)  # what was served: u·i + b_i
    result = audit_at_5(model, log)
    _assert_served(result, mine, log, old, "cos(u,i) + b_i")
    assert "L2-normalised" in result.served_vectors.description  # type: ignore[union-attr]


def test_an_item_side_normalisation_plus_bias_keeps_the_users_norm(tmp_path: Path) -> None:
    """Only the item side normalised: u·i/|i| + b_i (the user's norm weighs the factors
    against the bias, so the queries are not normalised)."""
    users, items, bias = _model()
    log = zipf_log(tmp_path)
    mine = arp_at_5(users @ _unit(items).T + bias, log)
    result = audit_at_5(_onnx(tmp_path / "ib.onnx", users, items, bias, user_side=False), log)
    _assert_served(result, mine, log, arp_at_5(_unit(users) @ _unit(items).T + bias, log), "u·i/|i| + b_i")


def test_a_user_side_normalisation_plus_bias_normalises_the_queries(tmp_path: Path) -> None:
    """Only the user side normalised: dot ranking without a bias, but u·i/|u| + b_i with one
    (the user's norm weighs the factors against the bias): [q/|q|, 1] against [i, b_i]."""
    users, items, bias = _model()
    log = zipf_log(tmp_path)
    mine = arp_at_5(_unit(users) @ items.T + bias, log)
    result = audit_at_5(_onnx(tmp_path / "ub.onnx", users, items, bias, user_side=True, item_side=False), log)
    _assert_served(result, mine, log, arp_at_5(users @ items.T + bias, log), "u·i/|u| + b_i")


def test_history_queries_of_a_cosine_bias_model_are_normalised(tmp_path: Path) -> None:
    """History queries q (the mean of the user's training item rows) meet [i/|i|, b_i] as
    [q/|q|, 1]: numpy's cos(q, i) + b_i."""
    users, items, bias = _model()
    log = zipf_log(tmp_path)
    model = _onnx(tmp_path / "cosb.onnx", users, items, bias, user_side=True)
    table = pq.read_table(log).to_pydict()
    sums = np.zeros((N_USERS, DIM))
    np.add.at(sums, table["user_id"], items[table["item_id"]].astype(np.float64))
    mine = arp_at_5(_unit(sums) @ _unit(items).T + bias, log)
    result = run_audit(AuditConfig(model=model, interactions=log, ks=(5,), bootstrap=0, probes=False, queries="history"))
    _assert_served(result, mine, log, arp_at_5(sums @ _unit(items).T + bias, log), "cos(u,i) + b_i")

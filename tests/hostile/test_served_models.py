"""Hostile model files whose served vectors popaudit cannot rebuild: a per-item tensor whose
role in the score no name or graph establishes, a checkpoint that records a graph model.
The stored tables stand in, said; a gate on a served figure is not measured (exit 1), never
passed on the stored tables' figures; no input changes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from .corpus import EXIT_ERROR, EXIT_GATE, EXIT_OK, Built, Case, Outcome, check_args, log, params, run_case, strict_json, write

NOT_MEASURED = r"served_spearman.*stored tables stand in"


def _ambiguous_bias(d: Path) -> Built:
    """10 users, 10 items and `bias_i.weight` (10, 1): either tower's bias, so not served."""
    log(d)
    g = torch.Generator().manual_seed(0)
    torch.save({"user_emb.weight": torch.randn(10, 4, generator=g), "item_emb.weight": torch.randn(10, 4, generator=g),
                "bias_i.weight": torch.arange(10.0).reshape(10, 1)}, d / "model.pt")
    return Built(check_args("model.pt", "--fail-on", "served_spearman>0.5"))


def _centred_item_bias(d: Path) -> Built:
    """Unit-norm factors and an item bias that rises with popularity, centred (rare items
    negative): ‖[i, b_i]‖ is U-shaped in b_i, so a served-norm ρ reads ≈0 (QA measures F3)."""
    log(d)
    g = torch.Generator().manual_seed(0)
    items = torch.nn.functional.normalize(torch.randn(10, 4, generator=g), dim=1)
    bias = torch.log1p(torch.arange(1.0, 11.0))  # the log's item i is seen i + 1 times
    torch.save({"user_embedding.weight": torch.randn(5, 4, generator=g), "item_embedding.weight": items,
                "item_bias.weight": (2 * (bias - bias.mean())).reshape(10, 1)}, d / "model.pt")
    return Built(check_args("model.pt", "--fail-on", "served_spearman>0.3"))


def _keras_item_dense(d: Path) -> Built:
    """A Keras weights file whose item tower has a Dense kernel beside its Embedding: the
    table stands in (the kernel was dropped and the table audited as served)."""
    import h5py

    log(d)
    g = np.random.default_rng(0)
    with h5py.File(d / "model.weights.h5", "w") as f:
        f.create_dataset("layers/user_embedding/vars/0", data=g.normal(size=(5, 4)).astype(np.float32))
        f.create_dataset("layers/item_embedding/vars/0", data=g.normal(size=(10, 4)).astype(np.float32))
        f.create_dataset("layers/item_dense/vars/0", data=np.eye(4, dtype=np.float32))
    return Built(check_args("model.weights.h5", "--fail-on", "served_spearman>0.5"))


def _keras_h5(d: Path, layers: list[dict[str, object]], weights: dict[str, np.ndarray]) -> None:
    import json

    import h5py

    with h5py.File(d / "model.h5", "w") as f:
        for name, values in weights.items():
            f.create_dataset(f"model_weights/{name}/{name}/embeddings", data=values)
            f[f"model_weights/{name}"].attrs["weight_names"] = [f"{name}/embeddings".encode()]
        f["model_weights"].attrs["layer_names"] = [n.encode() for n in weights]
        f.attrs["model_config"] = json.dumps({"class_name": "Functional", "config": {"layers": layers}})


def _keras_masked_table_short_bias(d: Path) -> Built:
    """Loaders 2 N4: an Embedding(mask_zero=True) item table of 11 rows beside a bias of 10:
    the rows do not line up with the ids, so the bias is left out, said (it was paired)."""
    log(d, ids=list(range(1, 11)))
    g = np.random.default_rng(0)
    layers: list[dict[str, object]] = [{"class_name": "Embedding", "config": {"name": "item_embedding", "mask_zero": True}}]
    _keras_h5(d, layers, {"user_embedding": g.normal(size=(5, 4)).astype(np.float32),
                          "item_embedding": g.normal(size=(11, 4)).astype(np.float32),
                          "item_bias": np.arange(10.0, dtype=np.float32).reshape(10, 1)})
    return Built(check_args("model.h5", "--fail-on", "served_spearman>0.5"))


def _keras_lambda(d: Path) -> Built:
    """Loaders 2 (F2): a Lambda layer (bytecode, never run) may transform the vectors: the
    tables stand in, said (it was audited as plain dot)."""
    log(d)
    g = np.random.default_rng(0)
    layers: list[dict[str, object]] = [{"class_name": "Lambda", "config": {"name": "l2i", "function": "4wEAAA=="}}]
    _keras_h5(d, layers, {"user_embedding": g.normal(size=(5, 4)).astype(np.float32),
                          "item_embedding": g.normal(size=(10, 4)).astype(np.float32)})
    return Built(check_args("model.h5", "--fail-on", "served_spearman>0.5"))


def _onnx_multiplied_bias(d: Path) -> Built:
    """An ONNX scorer that multiplies the dot product by a per-item initializer looked up by
    the item ids: no bias popaudit serves, so the table stands in (it was audited as served)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    log(d)
    g = np.random.default_rng(0)
    inits = [numpy_helper.from_array(g.normal(size=(5, 4)).astype(np.float32), "user_table"),
             numpy_helper.from_array(g.normal(size=(10, 4)).astype(np.float32), "item_table"),
             numpy_helper.from_array(np.arange(1.0, 11.0, dtype=np.float32), "item_weight"),
             numpy_helper.from_array(np.array([1], np.int64), "axis")]
    nodes = [helper.make_node("Gather", ["user_table", "user_id"], ["u"]),
             helper.make_node("Gather", ["item_table", "item_id"], ["i"]),
             helper.make_node("Mul", ["u", "i"], ["p"]), helper.make_node("ReduceSum", ["p", "axis"], ["s"], keepdims=0),
             helper.make_node("Gather", ["item_weight", "item_id"], ["w"]), helper.make_node("Mul", ["s", "w"], ["score"])]
    ids = [helper.make_tensor_value_info(n, TensorProto.INT64, ["N"]) for n in ("user_id", "item_id")]
    out = [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["N"])]
    model = helper.make_model(helper.make_graph(nodes, "mf", ids, out, inits), opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, str(d / "model.onnx"))
    return Built(check_args("model.onnx", "--fail-on", "served_spearman>0.5"))


class _FlaggedBiasMF(torch.nn.Module):
    """u·i + b_i with one recorded bool attribute (pickled: its forward() is not in the file)."""

    def __init__(self, flag: str) -> None:
        super().__init__()
        setattr(self, flag, True)
        g = torch.Generator().manual_seed(0)
        self.user_embedding = torch.nn.Embedding.from_pretrained(torch.randn(5, 4, generator=g))
        self.item_embedding = torch.nn.Embedding.from_pretrained(torch.randn(10, 4, generator=g))
        self.item_bias = torch.nn.Embedding.from_pretrained(torch.arange(10.0).reshape(10, 1))


def _pickled_bias_module(flag: str, *gates: str) -> Callable[[Path], Built]:
    """Loaders 3 N2: a pickled bias module recording ``flag`` = True. A schedule's name
    (``cos_lr_schedule``) says nothing about scoring: u·i + b_i served, the bias gate trips;
    ``use_cosine`` casts doubt, and u·i + b_i stands in, the bias kept (both were bare
    tables, the bias left out, and a served gate not measured)."""
    def build(d: Path) -> Built:
        log(d)
        torch.save(_FlaggedBiasMF(flag), d / "model.pt")
        return Built(check_args("model.pt", "--fail-on", "item_bias_spearman>0.9", *gates))
    return build


def _lightning_lightgcn(d: Path) -> Built:
    """A Lightning checkpoint whose hyper-parameters record LightGCN: its layer-0 tables are
    not what it serves, so a served gate is not measured (it passed on the stored ρ)."""
    return _lightning(d, {"model": "LightGCN", "n_layers": 3}, False, "served_spearman>0.3")


def _lightning(d: Path, hyper: dict[str, object], biased: bool, gate: str) -> Built:
    """A Lightning checkpoint recording ``hyper`` (``biased``: with an item bias) checked with ``gate``."""
    log(d)
    g = torch.Generator().manual_seed(0)
    state = {"embedding_user.weight": torch.randn(5, 4, generator=g), "embedding_item.weight": torch.randn(10, 4, generator=g)}
    if biased:
        state["item_bias.weight"] = torch.arange(10.0).reshape(10, 1)
    torch.save({"state_dict": state, "hyper_parameters": hyper}, d / "model.ckpt")
    return Built(check_args("model.ckpt", "-k", "3", "--fail-on", gate))


def _lightning_cosine(biased: bool, gate: str) -> Callable[[Path], Built]:
    """QA12 Loaders F2: a Lightning checkpoint recording ``use_cosine: True``: its tables
    stand in (a served gate was evaluated on them), with a bias u·i + b_i does (was as served)."""
    return lambda d: _lightning(d, {"use_cosine": True, "lr": 0.01}, biased, gate)


def _lightning_recorded(hyper: dict[str, object], biased: bool, gate: str) -> Callable[[Path], Built]:
    """QA12 Loaders N3: a Lightning checkpoint recording its scoring as text (``similarity:
    "cosine"``): its tables stand in as for ``use_cosine: True`` (a served gate was evaluated
    on them); a schedule's ``"cosine"`` (``lr_scheduler_type``) leaves the bias model served."""
    return lambda d: _lightning(d, hyper, biased, gate)


def _lightning_doubt(value: str, said: str) -> Callable[[Path], Built]:
    """QA12 Loaders verify-2 B: a recorded ``similarity`` text is shown in the doubt as printable
    text (spaces allowed; it was "(a name with unusual characters)"), a control or
    direction-changing character never: the value is then said to be unusual, out of quotes."""

    def build(d: Path) -> Built:
        _lightning(d, {"similarity": value}, True, "arp_dot@3>0")

        def check(folder: Path, outcome: Outcome) -> None:
            report = strict_json(folder / "r.json")
            assert said in report["warnings"][0] and said in report["served_vectors"]["not_served"], report["warnings"]

        return Built(check_args("model.ckpt", "-k", "3", "--json", "r.json"), outputs=["r.json"], must_exist=["r.json"],
                     check=check)

    return build


def _lightning_lightgcn_bias(d: Path) -> Built:
    """QA12 Loaders F1: the same with an item bias: u·i + b_i stands in (it was "as served"),
    so a list gate's line says so."""
    return _lightning(d, {"model": "LightGCN", "n_layers": 3}, True, "arp_dot@3>0")


def _mitigate_unreproducible_split(d: Path) -> Built:
    """mitigate of a RecBole checkpoint whose split (random order) popaudit cannot reproduce:
    written all the same, its sidecar's slopes said to count the whole .inter file."""
    from .test_models import _recbole_like

    order = {"eval_args": {"split": {"RS": [0.8, 0.1, 0.1]}, "order": "RO", "group_by": "user", "mode": "full"}}
    _recbole_like(order)(d)
    return Built(["mitigate", "BPR.pth", "--interactions", "x.inter", "--alpha", "0.5", "-o", "o.pth"],
                 outputs=["o.pth", "o.pth.popaudit.json"], must_exist=["o.pth", "o.pth.popaudit.json"])


def _diff_of_other_served_vectors(d: Path) -> Built:
    """Two reports of one RecBole LightGCN checkpoint: its propagated vectors, and its stored
    tables standing in (id files given): a diff gate on a retrieval change is not measured
    (it compared them figure by figure and tripped, exit 3)."""
    import json

    from auditor.audit import run_audit
    from auditor.config import AuditConfig
    from recbole_helpers import write_checkpoint, write_inter

    write_inter(d / "x.inter", 12, 15, per_user=6, seed=3)
    write_checkpoint(d / "LightGCN.pth", "LightGCN", {"n_layers": 2}, 12, 15, dim=4, seed=1)
    write(d, "items.txt", "\n".join(["[PAD]"] + [f"i{k}" for k in range(15)]) + "\n")
    write(d, "users.txt", "\n".join(["[PAD]"] + [f"u{k}" for k in range(12)]) + "\n")
    ids = {"item_ids": d / "items.txt", "user_ids": d / "users.txt"}
    for name, extra in (("a.json", {}), ("b.json", ids)):
        config = AuditConfig(model=d / "LightGCN.pth", interactions=d / "x.inter", ks=(5,), probes=False, bootstrap=0,
                             **extra)
        (d / name).write_text(json.dumps(run_audit(config).to_dict(), allow_nan=False))
    return Built(["diff", "a.json", "b.json", "-q", "--fail-on", "gini_dot@5.delta>0.02"])


def _users_of_row_less_items(d: Path) -> Built:
    """A log whose user u5 trained only on an item the table has no row for: its row is not
    called untrained (it was, beside the two rows of users never in the log)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    g = np.random.default_rng(0)
    np.savez(d / "model.npz", user_embeddings=g.normal(size=(8, 3)).astype(np.float32),
             item_embeddings=g.normal(size=(10, 3)).astype(np.float32),
             user_ids=np.array([f"u{k}" for k in range(8)]), item_ids=np.array([f"i{k}" for k in range(10)]))
    users = [f"u{k}" for k in range(5) for _ in range(3)] + ["u5", "u5"]
    items = [f"i{(k + j) % 10}" for k in range(5) for j in range(3)] + ["iX", "iX"]
    pq.write_table(pa.table({"user_id": users, "item_id": items}), d / "log.parquet")
    return Built(check_args("model.npz", "-k", "2", "--json", "r.json"), outputs=["r.json"], check=_row_less_ok)


def _row_less_ok(d: Path, outcome: Outcome) -> None:
    report = strict_json(d / "r.json")
    population = report["retrieval"]["population"]
    assert population["n_untrained_user_rows"] == 2  # u6, u7 (it said 3, u5 among them)
    assert population["description"].endswith("for the 5 users in the training log log.parquet (1 more user of it "
                                               "has no interaction on a table row)"), population["description"]
    assert any(w.startswith("1 user-table row belongs to users of the training log") and "trained vectors" in w
               for w in report["warnings"]), report["warnings"]
    assert any(w.startswith("2 user-table rows belong to users who never appear") for w in report["warnings"])


def _no_onnx() -> str | None:
    try:
        import onnx  # noqa: F401
    except ImportError:
        return "the onnx extra is not installed"
    return None


def _no_h5py() -> str | None:
    try:
        import h5py  # noqa: F401
    except ImportError:
        return "the keras extra (h5py) is not installed"
    return None


CASES: list[Case] = [
    Case("pt-per-item-tensor-of-no-known-role-gate", _ambiguous_bias, EXIT_ERROR, NOT_MEASURED),
    Case("item-bias-served-spearman-gate-not-comparable", _centred_item_bias, EXIT_ERROR,
         r"served_spearman>0\.3: served_spearman is not comparable for a model that adds an item bias.*gate "
         r"item_bias_spearman \(the bias against training frequency, ρ = 1\.000 here\)"),
    Case("keras-item-dense-beside-the-table-gate", _keras_item_dense, EXIT_ERROR, NOT_MEASURED, skip=_no_h5py),
    Case("mitigate-recbole-split-not-reproducible", _mitigate_unreproducible_split, EXIT_OK, None,
         stderr=r"the log-log slopes count the whole x\.inter, not RecBole's training part: .*order 'RO'"),
    Case("diff-of-propagated-against-stood-in-tables-gate", _diff_of_other_served_vectors, EXIT_ERROR,
         r'gini_dot@5\.delta>0\.02: not comparable: served_vectors\.source differs \("propagated" vs "tables"\)'),
    Case("log-user-of-row-less-items-only", _users_of_row_less_items, EXIT_OK, None),
    Case("lightning-checkpoint-recording-lightgcn-gate", _lightning_lightgcn, EXIT_ERROR, NOT_MEASURED),
    Case("lightning-checkpoint-recording-use-cosine-gate", _lightning_cosine(False, "served_spearman>0.3"), EXIT_ERROR,
         NOT_MEASURED),
    Case("lightning-checkpoint-recording-use-cosine-with-a-bias-gate", _lightning_cosine(True, "arp_dot@3>0"), EXIT_GATE,
         None, stderr=r"arp_dot@3>0: [\d.]+ \(TRIPPED\), of the stored tables\s+standing in"),
    Case("lightning-checkpoint-recording-similarity-cosine-gate",
         _lightning_recorded({"similarity": "cosine"}, False, "served_spearman>0.3"), EXIT_ERROR, NOT_MEASURED),
    # QA12 Loaders verify-2 B: the recorded value is shown as text (spaces allowed), never a
    # control or direction-changing character (said as what it is, out of quotes).
    Case("lightning-checkpoint-recording-similarity-with-a-space",
         _lightning_doubt("cosine similarity", '`similarity` = "cosine similarity", and'), EXIT_OK, None),
    Case("lightning-checkpoint-recording-similarity-with-a-direction-override",
         _lightning_doubt("cosine\u202esimilarity", "`similarity` = (a value with unusual characters), and"), EXIT_OK,
         None, absent="\u202e"),
    Case("lightning-checkpoint-recording-metric-cosine-with-a-bias-gate",
         _lightning_recorded({"metric": "cosine"}, True, "arp_dot@3>0"), EXIT_GATE, None,
         stderr=r"arp_dot@3>0: [\d.]+ \(TRIPPED\), of the stored tables\s+standing in"),
    Case("lightning-checkpoint-recording-a-cosine-lr-schedule-with-a-bias-gate",
         _lightning_recorded({"lr_scheduler_type": "cosine"}, True, "arp_dot@3>0"), EXIT_GATE, None,
         stderr=r"arp_dot@3>0: [\d.]+ \(TRIPPED\)(?!.*standing in)"),
    Case("lightning-checkpoint-recording-lightgcn-with-a-bias-gate", _lightning_lightgcn_bias, EXIT_GATE, None,
         stderr=r"arp_dot@3>0: [\d.]+ \(TRIPPED\), of the stored tables\s+standing in"),
    Case("keras-masked-table-beside-a-short-bias-gate", _keras_masked_table_short_bias, EXIT_ERROR, NOT_MEASURED,
         skip=_no_h5py),
    Case("keras-lambda-layer-gate", _keras_lambda, EXIT_ERROR, NOT_MEASURED, skip=_no_h5py),
    Case("pickled-bias-module-with-a-schedule-flag-gate", _pickled_bias_module("cos_lr_schedule"), EXIT_GATE, None,
         stderr=r"gate item_bias_spearman>0\.9: 1(\.0+)? \(TRIPPED\)"),
    Case("pickled-bias-module-recording-use-cosine-gate", _pickled_bias_module(
        "use_cosine", "-k", "3", "--fail-on", "arp_dot@3>0"), EXIT_GATE, None,
         stderr=r"item_bias_spearman>0\.9: 1(\.0+)? \(TRIPPED\).*arp_dot@3>0: [\d.]+ \(TRIPPED\), of the stored tables\s+standing in"),
    Case("onnx-per-item-initializer-multiplied-gate", _onnx_multiplied_bias, EXIT_ERROR, NOT_MEASURED, skip=_no_onnx),
]


@pytest.mark.parametrize("case", params(CASES))
def test_hostile_served_model(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)

"""Served vectors of RecBole models and held-out accuracy as RecBole measures it (issue #21
items 1 and 2).

References made by RecBole 1.2.1 (tests/data/recbole/make_eval.py): the test metrics its
Trainer printed for BPR, LightGCN and SimpleX checkpoints, LightGCN's ``forward()`` for the
saved weights, and SimpleX's ``get_UI_aggregation`` of every user. popaudit reproduces them
with its own functions: the split (auditor.loading.recbole_split), the served vectors
(auditor.loading.served), exact top-K with exclusions (multi_scoring_topk) and RecBole's
accuracy definitions (auditor.metrics.accuracy).
"""

from __future__ import annotations

import dataclasses
import re
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from auditor.config import LoadOptions
from auditor.loading import load_model
from auditor.loading.recbole_models import CACHED, OTHER, PROPAGATED, SIMPLEX, TABLES, serving_of
from auditor.loading.recbole_split import RecBoleSplit, recbole_split
from auditor.loading.served import (
    CachedVectors,
    normalised_adjacency,
    propagated_embeddings,
    read_cache,
    served_vectors,
    simplex_users,
)
from auditor.model import ModelBundle
from recbole_helpers import accuracy, assert_recboles

DATA = Path(__file__).parent / "data" / "recbole"
INTER = DATA / "eval.inter"
RECORD = json.loads((DATA / "eval.json").read_text(encoding="utf-8"))
FLOAT32_SUMS = 1e-6
"""Largest difference allowed between popaudit's float32 propagation and RecBole's: each
layer entry is a float32 sum of at most a user's or item's degree of terms, added in
another order (scipy's CSR loop, torch's sparse mm), so results differ by a few units in
the last place of entries up to about 1.1 (ulp 1.2e-7); a wrong weight or layer would
differ by 1e-2 and more."""


@pytest.fixture(scope="module")
def bundles() -> dict[str, ModelBundle]:
    return {name: load_model(DATA / f"{name}-eval.pth", LoadOptions()) for name in ("BPR", "LightGCN", "SimpleX")}


@pytest.fixture(scope="module")
def split(bundles: dict[str, ModelBundle]) -> RecBoleSplit:
    config = bundles["BPR"].config
    assert config is not None
    return recbole_split(config, INTER)


# ---------------------------------------------------------------------------- accuracy


def test_bpr_accuracy_equals_recboles(bundles: dict[str, ModelBundle], split: RecBoleSplit) -> None:
    served = served_vectors(bundles["BPR"], (split.train.users, split.train.items), read_cache(DATA / "BPR-eval.pth"))
    assert (served.source, served.scoring, served.warnings, served.as_served) == ("tables", "dot", [], True)
    assert served.users is not None
    assert_recboles(accuracy(served.users, served.items, split, 1.0), RECORD["runs"]["BPR"])


def test_lightgcn_accuracy_equals_recboles_from_the_cache(bundles: dict[str, ModelBundle], split: RecBoleSplit) -> None:
    """The checkpoint caches restore_user_e/restore_item_e (what RecBole's test served):
    used, and said; popaudit's own propagation agrees with it, so no warning."""
    cache = read_cache(DATA / "LightGCN-eval.pth")
    assert cache is not None and cache.users.shape == (160, 16) and cache.items.shape == (120, 16)
    served = served_vectors(bundles["LightGCN"], (split.train.users, split.train.items), cache)
    assert served.source == "cache" and "restore_user_e/restore_item_e" in served.description
    assert served.warnings == [] and served.as_served and served.users is not None
    assert_recboles(accuracy(served.users, served.items, split, 1.0), RECORD["runs"]["LightGCN"])


def test_lightgcn_accuracy_equals_recboles_from_the_propagation(bundles: dict[str, ModelBundle], split: RecBoleSplit) -> None:
    """Without the cache popaudit propagates the stored tables itself: the same figures.
    The stored tables alone (what a table audit sees) give other figures."""
    served = served_vectors(bundles["LightGCN"], (split.train.users, split.train.items), None)
    assert served.source == "propagated" and "n_layers=2" in served.description and served.users is not None
    assert_recboles(accuracy(served.users, served.items, split, 1.0), RECORD["runs"]["LightGCN"])
    tables = bundles["LightGCN"]
    assert tables.user_table is not None
    stored = accuracy(tables.user_table, tables.item_table, split, 1.0)
    assert abs(stored["ndcg@10"] - RECORD["runs"]["LightGCN"]["test_exact"]["ndcg@10"]) > 0.01


def test_simplex_accuracy_equals_recboles(bundles: dict[str, ModelBundle], split: RecBoleSplit) -> None:
    served = served_vectors(bundles["SimpleX"], (split.train.users, split.train.items), read_cache(DATA / "SimpleX-eval.pth"))
    assert (served.source, served.scoring, served.warnings) == ("simplex", "cosine", [])
    assert served.users is not None
    assert_recboles(accuracy(served.users, served.items, split, 0.0), RECORD["runs"]["SimpleX"])


# ---------------------------------------------------------------------------- served vectors


def test_propagation_equals_recboles_forward(bundles: dict[str, ModelBundle], split: RecBoleSplit) -> None:
    forward = np.load(DATA / "LightGCN-eval.forward.npz")
    bundle = bundles["LightGCN"]
    assert bundle.user_table is not None
    users, items = propagated_embeddings(bundle.user_table, bundle.item_table, split.train.users, split.train.items, 2)
    assert users.dtype == np.float32 and users.shape == (160, 16) and items.shape == (120, 16)
    np.testing.assert_allclose(users, forward["user"][1:], rtol=0, atol=FLOAT32_SUMS)
    np.testing.assert_allclose(items, forward["item"][1:], rtol=0, atol=FLOAT32_SUMS)
    cache = read_cache(DATA / "LightGCN-eval.pth")
    assert cache is not None  # the cache is forward() at the last evaluation, bit for bit
    assert np.array_equal(cache.users, forward["user"][1:]) and np.array_equal(cache.items, forward["item"][1:])
    assert RECORD["runs"]["LightGCN"]["cache_minus_forward_max_abs"] == 0.0


def test_simplex_users_equal_recboles_aggregation(bundles: dict[str, ModelBundle], split: RecBoleSplit) -> None:
    recorded = np.load(DATA / "SimpleX-eval.served.npz")
    served = served_vectors(bundles["SimpleX"], (split.train.users, split.train.items), None)
    assert served.users is not None
    np.testing.assert_allclose(served.users, recorded["user"][1:], rtol=0, atol=FLOAT32_SUMS)
    counts = np.bincount(split.train.users, minlength=160)
    assert np.array_equal(counts, recorded["history_len"][1:])  # the history is the training part, repeats included


def _dense_light_graph(users: np.ndarray, items: np.ndarray, u: np.ndarray, i: np.ndarray, layers: int,
                       counted: bool, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The definition, densely in float64: A over users then items, D^-1/2 A D^-1/2, mean of layers."""
    n_u, n_i = u.shape[0], i.shape[0]
    a = np.zeros((n_u + n_i, n_u + n_i))
    for user, item in zip(users, items):
        a[user, n_u + item] = a[user, n_u + item] + 1 if counted else 1
        a[n_u + item, user] = a[user, n_u + item]
    degree = a.sum(axis=1)
    scale = np.where(degree > 0, degree, np.inf) ** -0.5
    norm = scale[:, None] * a * scale[None, :]
    layer = np.vstack([u, i]).astype(np.float64)
    total = layer.copy() if first == 0 else np.zeros_like(layer)
    for _ in range(layers):
        layer = norm @ layer
        total += layer
    total /= layers + 1 - first
    return total[:n_u], total[n_u:]


@pytest.mark.parametrize(("adjacency", "counted", "first"), [("lightgcn", False, 0), ("sgl", True, 0), ("pyg", True, 1)])
def test_propagation_by_definition(adjacency: str, counted: bool, first: int) -> None:
    """Three users, four items, a pair trained twice and an item nobody trained: each
    adjacency against the dense definition (binary or counted), layers from 0 or 1."""
    rng = np.random.default_rng(3)
    u, i = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(4, 4)).astype(np.float32)
    users, items = np.array([0, 0, 1, 2, 2, 0]), np.array([0, 1, 1, 2, 0, 0])
    got = propagated_embeddings(u, i, users, items, 3, adjacency=adjacency, first_layer=first)
    want = _dense_light_graph(users, items, u, i, 3, counted, first)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=2e-6)
    if first == 0:  # item 3 has no edge: its served vector is its row over the layer count
        np.testing.assert_allclose(got[1][3], i[3] / 4, rtol=1e-6)


def test_adjacency_weights_by_hand() -> None:
    """User 0 trained item 0 twice and item 1 once; user 1 trained item 1."""
    users, items = np.array([0, 0, 0, 1]), np.array([0, 0, 1, 1])
    binary = normalised_adjacency(users, items, 2, 2, "lightgcn").toarray()
    np.testing.assert_allclose(binary, [[1 / np.sqrt(2 * 1), 1 / np.sqrt(2 * 2)], [0, 1 / np.sqrt(1 * 2)]], rtol=1e-6)
    counted = normalised_adjacency(users, items, 2, 2, "sgl").toarray()  # degrees 3, 1 (users), 2, 2 (items)
    np.testing.assert_allclose(counted, [[2 / np.sqrt(3 * 2), 1 / np.sqrt(3 * 2)], [0, 1 / np.sqrt(1 * 2)]], rtol=1e-6)
    assert binary.dtype == counted.dtype == np.float32
    with pytest.raises(ValueError, match="unknown adjacency"):
        normalised_adjacency(users, items, 2, 2, "gcn")


def test_simplex_by_hand() -> None:
    """gamma·user + (1 − gamma)·(mean of history rows) W^T, padding rows counted in the sum."""
    user = np.array([[1.0, 0.0], [0.0, 2.0]], dtype=np.float32)
    item = np.array([[1.0, 1.0], [3.0, -1.0]], dtype=np.float32)
    ui_map = np.array([[2.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    got = simplex_users(user, item, np.array([0, 0, 0]), np.array([0, 1, 1]), ui_map, 0.25, 5,
                        padding=np.array([0.0, 0.0]))  # fmt: skip
    mean0 = (item[0] + 2 * item[1]) / 3  # user 1 has no history: mean 0
    np.testing.assert_allclose(got, [0.25 * user[0] + 0.75 * (ui_map @ mean0), 0.25 * user[1]], rtol=1e-6)
    padded = simplex_users(user, item, np.array([0, 0, 0, 1]), np.array([0, 1, 1, 0]), ui_map, 0.0, 5,
                           padding=np.array([6.0, 6.0]))  # fmt: skip
    np.testing.assert_allclose(padded[1], ui_map @ ((item[0] + 2 * np.array([6.0, 6.0])) / 1), rtol=1e-6)
    with pytest.raises(ValueError, match=r"1 users have more than history_len=2 .* random subset"):
        simplex_users(user, item, np.array([0, 0, 0]), np.array([0, 1, 1]), ui_map, 0.5, 2)


# ---------------------------------------------------------------------------- what is said


def test_registry() -> None:
    assert serving_of({"model": "BPR"}).kind == TABLES
    for name in ("LightGCN", "NCL"):
        assert (serving_of({"model": name}).kind, serving_of({"model": name}).adjacency) == (PROPAGATED, "lightgcn")
    assert serving_of({"model": "SGL"}).adjacency == "sgl"
    assert serving_of({"model": "SimpleX"}).kind == SIMPLEX and serving_of({"model": "SimpleX"}).scoring == "cosine"
    for name in ("NGCF", "DGCF", "SpectralCF"):
        assert serving_of({"model": name}).kind == CACHED
    for name in ("NeuMF", "ENMF", "MultiVAE", "NoSuchModel"):
        assert serving_of({"model": name}).kind == OTHER
    gnn = serving_of({"model": "LightGCN", "model_class": "recbole_gnn.model.general_recommender.lightgcn.LightGCN"})
    assert (gnn.adjacency, gnn.first_layer) == ("pyg", 0)
    assert (serving_of({"model": "SimGCL"}).adjacency, serving_of({"model": "XSimGCL"}).first_layer) == ("pyg", 1)
    assert serving_of({"model": "NGCF", "model_class": "recbole_gnn.model.general_recommender.ngcf.NGCF"}).kind == CACHED


def test_the_reason_no_split_is_reproduced_is_the_one_that_stopped_it(
    bundles: dict[str, ModelBundle], tmp_path: Path
) -> None:
    """reproduces_split and no_split_reason read one list: the checkpoint with its .inter and
    nothing else takes the split (no reason); a checkpoint without its config is said to lack
    it (never that the .inter file is not one); each of the user's own choices is named; a
    log of another format is said not to be a .inter file."""
    from auditor.config import AuditConfig
    from auditor.loading.recbole_eval import THE_USERS_CHOICE, no_split_reason, reproduces_split

    bpr = bundles["BPR"]
    plain = AuditConfig(model=DATA / "BPR-eval.pth", interactions=INTER)
    assert reproduces_split(bpr, plain) and no_split_reason(bpr, plain) is None
    bare = dataclasses.replace(bpr, config=None)
    why = no_split_reason(bare, plain)
    assert not reproduces_split(bare, plain) and why is not None
    assert why.startswith(f"RecBole checkpoint {bpr.source} records no settings") and ".inter file" not in why
    assert THE_USERS_CHOICE == ("holdout", "item_ids", "user_ids", "frequencies")
    for name in ("holdout", "item_ids", "user_ids"):
        chosen = dataclasses.replace(plain, **{name: INTER})
        said = no_split_reason(bpr, chosen)
        assert not reproduces_split(bpr, chosen) and said is not None and said.startswith(f"with {name} popaudit")
    counts = AuditConfig(model=DATA / "BPR-eval.pth", frequencies=INTER)
    assert not reproduces_split(bpr, counts) and no_split_reason(bpr, counts) is None  # no log: the plain reason
    (tmp_path / "log.csv").write_text("user_id,item_id\n1,2\n2,3\n")
    csv = dataclasses.replace(plain, interactions=tmp_path / "log.csv")
    assert not reproduces_split(bpr, csv)
    assert no_split_reason(bpr, csv) == ("interactions log.csv is not a RecBole .inter file, so popaudit reproduces "
                                         "no RecBole split to compute them over")


def _as(bundle: ModelBundle, model: str) -> ModelBundle:
    return dataclasses.replace(bundle, config={**(bundle.config or {}), "model": model, "model_class": None})


@pytest.mark.parametrize(
    ("model", "cache", "train", "said"),
    [
        ("LightGCN", False, False, r"audited the stored tables by their dot products; the model \(LightGCN\) scores with "
                                   r"the mean of layers 0..n_layers .* no training log was given"),
        ("NGCF", False, True, r"the model \(NGCF\) scores with vectors its forward\(\) computes through learned "
                              r"bi-interaction GNN layers .* caches no restore_user_e"),
        ("NeuMF", True, True, r"the model \(NeuMF\) scores with an MLP over concatenated user and item embeddings"),
        ("Mystery", False, True, r"the model \(Mystery\) scores with whatever RecBole model Mystery scores with"),
        ("SimpleX", False, False, r"the model \(SimpleX\) scores with the cosine .* no training log was given"),
    ],
)
def test_what_is_not_served_is_named(bundles: dict[str, ModelBundle], split: RecBoleSplit, model: str, cache: bool,
                                     train: bool, said: str) -> None:
    """Never silent: an audit of the stored tables of a model that scores otherwise says so."""
    served = served_vectors(_as(bundles["BPR"], model), (split.train.users, split.train.items) if train else None,
                            read_cache(DATA / "LightGCN-eval.pth") if cache else None)  # fmt: skip
    assert served.source == "tables" and not served.as_served
    assert len(served.warnings) == 1
    assert re.search(said, served.warnings[0]), served.warnings[0]


def test_ngcf_cache_is_served(bundles: dict[str, ModelBundle], split: RecBoleSplit) -> None:
    cache = read_cache(DATA / "LightGCN-eval.pth")
    assert cache is not None
    served = served_vectors(_as(bundles["LightGCN"], "NGCF"), (split.train.users, split.train.items), cache)
    assert served.source == "cache" and served.warnings == [] and served.items is cache.items


def test_a_stale_cache_is_served_and_flagged(bundles: dict[str, ModelBundle], split: RecBoleSplit) -> None:
    cache = read_cache(DATA / "LightGCN-eval.pth")
    assert cache is not None
    stale = CachedVectors(cache.users, cache.items * 1.5)
    served = served_vectors(bundles["LightGCN"], (split.train.users, split.train.items), stale)
    assert served.source == "cache" and served.items is stale.items
    assert len(served.warnings) == 1 and "differ from popaudit's propagation" in served.warnings[0]


def test_simplex_truncated_history_falls_back_and_says_why(bundles: dict[str, ModelBundle], split: RecBoleSplit) -> None:
    short = dataclasses.replace(bundles["SimpleX"], config={**(bundles["SimpleX"].config or {}), "history_len": 10})
    served = served_vectors(short, (split.train.users, split.train.items), None)
    assert served.source == "tables" and "more than history_len=10" in served.warnings[0]
    attention = dataclasses.replace(bundles["SimpleX"], config={**(bundles["SimpleX"].config or {}), "aggregator": "self_attention"})
    assert "aggregator 'self_attention' is not 'mean'" in served_vectors(attention, (split.train.users, split.train.items)).warnings[0]


def test_no_cache_in_a_bpr_checkpoint(tmp_path: Path) -> None:
    assert read_cache(DATA / "BPR-eval.pth") is None
    path = tmp_path / "odd.pth"
    torch.save({"state_dict": {}, "other_parameter": {"restore_user_e": torch.zeros(3, 2), "restore_item_e": None}}, path)
    assert read_cache(path) is None


@pytest.mark.parametrize("layers", [10**9, 65, -1])
def test_a_recorded_layer_count_out_of_range_is_not_propagated(bundles: dict[str, ModelBundle], split: RecBoleSplit,
                                                               layers: int) -> None:
    """A file recording n_layers = 10^9 hung check (one pass over the training interactions
    per layer): above MAX_LAYERS (64) it is unusable, as a negative count is, and the stored
    tables stand in, said; with its cache, the cache is served without a check against
    a propagation that cannot run."""
    bundle = bundles["LightGCN"]
    hostile = dataclasses.replace(bundle, config={**(bundle.config or {}), "n_layers": layers})
    served = served_vectors(hostile, (split.train.users, split.train.items), None)
    assert served.source == "tables" and not served.as_served
    assert any(f"its n_layers setting {layers!r} is unusable (popaudit propagates 0 to 64 layers)" in w
               for w in served.warnings), served.warnings
    cached = served_vectors(hostile, (split.train.users, split.train.items), read_cache(DATA / "LightGCN-eval.pth"))
    assert cached.source == "cache" and cached.warnings == []


def test_the_holdout_route_says_why_nothing_is_propagated(bundles: dict[str, ModelBundle]) -> None:
    """With --holdout the log is given but no split is reproduced: the warning says so and
    what propagates (never that no training log was given)."""
    from auditor.config import AuditConfig
    from auditor.loading.recbole_eval import served_of

    config = AuditConfig(model=DATA / "BPR-eval.pth", interactions=INTER, holdout=INTER)
    for model, verb in (("LightGCN", "propagation"), ("SimpleX", "cannot rebuild its user vectors")):
        served = served_of(_as(bundles["BPR"], model), None, config)
        assert served is not None and not served.as_served and verb in served.warnings[0]
        assert "no training log was given" not in served.warnings[0]
        assert ("with holdout popaudit reproduces no RecBole split to compute them over: the whole interactions "
                "file is then the training log; drop holdout to have them computed over the training part of the "
                "split the checkpoint records") in served.warnings[0]
    assert "no training log was given to propagate over" in served_of(_as(bundles["BPR"], "LightGCN"), None).warnings[0]  # type: ignore[union-attr]

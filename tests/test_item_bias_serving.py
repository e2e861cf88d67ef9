"""Models that add an item bias to every score are audited as they serve: retrieval ranks
u·i + b_i (served vectors [i, b_i], queries [q, 1]), the verdict says so, and a textbook
PyTorch MF's ``item_bias`` tensor is recognised as the item bias (docs/measures.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner
from scipy.stats import spearmanr

from auditor.cli import cli
from auditor.config import LoadOptions
from auditor.loading import load_model

DATA = Path(__file__).resolve().parent / "data"


def check(model: Path, log: Path, tmp_path: Path, *extra: str) -> dict[str, Any]:
    out = tmp_path / "report.json"
    result = CliRunner().invoke(
        cli, ["check", str(model), "--interactions", str(log), "--json", str(out), "--no-probes", "--bootstrap", "0",
              "-q", *extra], catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def head(percent: float, popularity: np.ndarray) -> np.ndarray:
    """The top ``percent`` items by popularity, ties at the cut included (docs/measures.md)."""
    count = max(1, int(percent / 100 * popularity.size))
    cut = np.sort(popularity)[::-1][count - 1]
    return (popularity >= cut) & (popularity > 0)


def served_lists(scores: np.ndarray, users: np.ndarray, items: np.ndarray, queried: np.ndarray, k: int) -> np.ndarray:
    """Each queried user's top-k by ``scores``, training items masked (numpy's reference)."""
    masked = scores.copy()
    masked[users, items] = -np.inf
    return np.argsort(-masked, axis=1, kind="stable")[queried, :k]


def write_log(path: Path, users: np.ndarray, items: np.ndarray) -> Path:
    pq.write_table(pa.table({"user_id": pa.array(users, pa.int64()), "item_id": pa.array(items, pa.int64())}), path)
    return path


def hand_model(tmp_path: Path, extra: dict[str, torch.Tensor] | None = None) -> tuple[Path, Path]:
    """20 unit-norm items, 10 users of norm 0.1 along x; item 0 points away from every
    user (u·i = −0.1, the lowest score) but carries a bias of 5, every other item 0.
    Users 0..4 trained on item 0 (its 5 interactions make it the top-1% item), user u
    also on item u + 1."""
    angles = np.linspace(-1.4, 1.4, 19)
    items = np.vstack([[-1.0, 0.0], np.column_stack([np.cos(angles), np.sin(angles)])]).astype(np.float32)
    bias = np.zeros((20, 1), np.float32)
    bias[0, 0] = 5.0
    state = {"user_emb.weight": torch.full((10, 2), 0.0).index_fill_(1, torch.tensor([0]), 0.1),
             "item_emb.weight": torch.from_numpy(items), "user_bias.weight": torch.zeros(10, 1),
             "item_bias.weight": torch.from_numpy(bias), "global_bias": torch.tensor([3.5]), **(extra or {})}
    torch.save(state, tmp_path / "mf.pt")
    users = np.concatenate([np.arange(5), np.arange(10)])
    trained = np.concatenate([np.zeros(5, np.int64), np.arange(1, 11)])
    return tmp_path / "mf.pt", write_log(tmp_path / "log.parquet", users, trained)


def test_state_dict_item_bias_is_served_hand_checked(tmp_path: Path) -> None:
    model, log = hand_model(tmp_path)
    report = check(model, log, tmp_path, "-k", "1", "-k", "2")
    # u·i + b_i: item 0 scores −0.1 + 5 = 4.9, every other item at most 0.1, so the 5 users who
    # did not train on it get it first: 5 of 10 first slots. Without the bias it scores lowest
    # and is never served (what popaudit ranked before: 0.0).
    assert report["retrieval"]["at"]["1"]["dot"]["head_share_1pct"] == pytest.approx(0.5)
    assert report["retrieval"]["at"]["2"]["dot"]["head_share_1pct"] == pytest.approx(0.25)
    served = report["served_vectors"]
    assert served["source"] == "bias" and served["as_served"] is True and served["not_served"] is None
    assert "`item_bias.weight`" in served["description"] and "u·i + b_i" in served["description"]
    frequencies = np.bincount(np.concatenate([np.zeros(5, int), np.arange(1, 11)]), minlength=20)
    want = spearmanr(np.r_[5.0, np.zeros(19)], frequencies).statistic
    assert report["measures"]["item_bias_spearman"] == pytest.approx(want, abs=1e-12)
    assert served["item_bias_spearman"] == pytest.approx(want, abs=1e-12)
    assert any("item bias term (20 values, from `item_bias.weight`)" in w for w in report["warnings"])
    assert not any("plugin" in w or "item-side tensors" in w for w in report["warnings"]), report["warnings"]
    assert "adds a per-item bias to every score" in report["verdict"]["summary"]
    assert report["inputs"]["dim"] == 2  # the stored factors stay the audited table
    assert report["conditions"]["C2"]["status"] != "violated"


def test_a_bias_beside_an_item_projection_still_stands_in(tmp_path: Path) -> None:
    """An item tower with more than its table and bias: the encoder is not run, as before."""
    model, log = hand_model(tmp_path, {"item_proj.weight": torch.eye(2)})
    report = check(model, log, tmp_path, "-k", "1")
    served = report["served_vectors"]
    assert served["source"] == "tables" and served["as_served"] is False
    assert "`item_bias.weight`" in served["not_served"] and report["measures"]["item_bias_spearman"] is None
    assert report["retrieval"]["at"]["1"]["dot"]["head_share_1pct"] == 0.0


def test_a_bias_beside_a_user_projection_says_the_queries_stand_in(tmp_path: Path) -> None:
    """The items are served with their bias, but the user tower projects its rows: the
    queries are the raw rows, said first and in the served section (it was silent)."""
    model, log = hand_model(tmp_path, {"user_proj.weight": torch.eye(2)})
    report = check(model, log, tmp_path, "-k", "1")
    served = report["served_vectors"]
    assert served["source"] == "bias" and served["as_served"] is False
    assert "`user_proj.weight` are ignored" in served["not_served"]
    assert report["warnings"][0].startswith("queried the raw rows of the user table")
    assert report["verdict"]["summary"].startswith("This audit is of the item factors")


def test_implicit_bpr_serves_its_bias_column_as_implicit_scores(tmp_path: Path) -> None:
    """implicit's recommend() ranks the full inner product of its factors (bias column
    included): the 'dot' lists are those (before: the bias was dropped, 0.0183 vs 0.0833)."""
    folder = DATA / "implicit"
    report = check(folder / "bpr.npz", folder / "interactions.csv", tmp_path, "-k", "10")
    saved = np.load(folder / "bpr.npz")
    users_f, items_f = saved["user_factors"].astype(np.float64), saved["item_factors"].astype(np.float64)
    log = np.loadtxt(folder / "interactions.csv", delimiter=",", skiprows=1, dtype=np.int64)
    users, items = log[:, 0], log[:, 1]
    lists = served_lists(users_f @ items_f.T, users, items, np.unique(users), 10)
    frequencies = np.bincount(items, minlength=items_f.shape[0]).astype(np.float64)
    dot = report["retrieval"]["at"]["10"]["dot"]
    assert dot["head_share_10pct"] == pytest.approx(head(10, frequencies)[lists].mean(), abs=1e-12)
    assert dot["arp"] == pytest.approx(frequencies[lists].mean(), abs=1e-9)
    assert dot["head_share_10pct"] == pytest.approx(0.0833, abs=1e-4)  # the QA finding's figure
    assert report["served_vectors"]["source"] == "bias"


def test_lightfm_serves_its_item_biases(tmp_path: Path) -> None:
    """LightFM predicts u·i + b_u + b_i: the same lists as u·i + b_i for each user."""
    folder = DATA / "lightfm"
    report = check(folder / "lightfm_warp.pkl", folder / "interactions.csv", tmp_path, "-k", "10")
    bundle = load_model(folder / "lightfm_warp.pkl", LoadOptions())
    assert bundle.user_table is not None and bundle.item_biases is not None
    log = np.loadtxt(folder / "interactions.csv", delimiter=",", skiprows=1, dtype=np.int64)
    users, items = log[:, 0], log[:, 1]
    scores = bundle.user_table.astype(np.float64) @ bundle.item_table.T.astype(np.float64) + bundle.item_biases
    lists = served_lists(scores, users, items, np.unique(users), 10)
    frequencies = np.bincount(items, minlength=bundle.n_items).astype(np.float64)
    dot = report["retrieval"]["at"]["10"]["dot"]
    for percent in (10, 20):
        assert dot[f"head_share_{percent}pct"] == pytest.approx(head(percent, frequencies)[lists].mean(), abs=1e-12)
    assert (dot["head_share_10pct"], dot["head_share_20pct"]) == pytest.approx((0.18, 0.51), abs=1e-12)


def test_history_queries_get_the_bias_column_too(tmp_path: Path) -> None:
    """No user table: each history query q (the mean of the user's distinct training
    items) is served as [q, 1], so the lists rank q·i + b_i; an .npz of arrays with an
    `item_bias` member is read as a state dict is."""
    rng = np.random.default_rng(7)
    n_items, n_users = 60, 30
    table = rng.normal(size=(n_items, 4)).astype(np.float32)
    users = rng.integers(0, n_users, 400)
    items = np.minimum(rng.zipf(1.6, 400) - 1, n_items - 1)
    frequencies = np.bincount(items, minlength=n_items).astype(np.float64)
    bias = (0.5 * np.log1p(frequencies)).astype(np.float32)
    np.savez(tmp_path / "tables.npz", item_embeddings=table, item_bias=bias)
    report = check(tmp_path / "tables.npz", write_log(tmp_path / "log.parquet", users, items), tmp_path, "-k", "5")
    assert report["retrieval"]["population"]["source"] == "history"
    pairs = np.unique(users * n_items + items)
    seen = np.zeros((n_users, n_items))
    seen[pairs // n_items, pairs % n_items] = 1
    queried = np.flatnonzero(seen.sum(axis=1))
    queries = (seen @ table.astype(np.float64)) / np.maximum(seen.sum(axis=1, keepdims=True), 1)
    lists = served_lists(queries @ table.T.astype(np.float64) + bias, users, items, queried, 5)
    dot = report["retrieval"]["at"]["5"]["dot"]
    assert dot["head_share_10pct"] == pytest.approx(head(10, frequencies)[lists].mean(), abs=1e-12)
    assert dot["arp"] == pytest.approx(frequencies[lists].mean(), abs=1e-9)
    assert report["measures"]["item_bias_spearman"] == pytest.approx(spearmanr(bias, frequencies).statistic)


def test_mitigate_rescales_the_bias_with_the_rows_hand_checked(tmp_path: Path) -> None:
    """The served row [i, b_i] is what α rescales: [3, 0 | 4] has norm 5, so at α = 0.5 it
    becomes [3, 0 | 4]/√5; [0, 1 | 0] keeps norm 1 and stays. The output's dot serving is
    then the input's alpha_0.5 scoring."""
    model, log = hand_model(tmp_path)
    state = torch.load(model)
    state["item_emb.weight"][1] = torch.tensor([3.0, 0.0])
    state["item_bias.weight"][1, 0] = 4.0
    state["item_emb.weight"][2] = torch.tensor([0.0, 1.0])
    torch.save(state, model)
    ran = CliRunner().invoke(cli, ["mitigate", str(model), "--alpha", "0.5", "-o", str(tmp_path / "out.pt")],
                             catch_exceptions=False)
    assert ran.exit_code == 0, ran.output
    out = torch.load(tmp_path / "out.pt")
    np.testing.assert_allclose(out["item_emb.weight"][1].numpy(), [3 / 5**0.5, 0.0], rtol=1e-6)
    assert float(out["item_bias.weight"][1, 0]) == pytest.approx(4 / 5**0.5, rel=1e-6)
    np.testing.assert_array_equal(out["item_emb.weight"][2].numpy(), [0.0, 1.0])
    assert float(out["item_bias.weight"][2, 0]) == 0.0
    assert torch.equal(out["user_emb.weight"], state["user_emb.weight"]) and float(out["global_bias"]) == 3.5
    before = check(model, log, tmp_path, "-k", "2", "--alpha", "0.5")["retrieval"]["at"]["2"]["alpha_0.5"]
    after = check(tmp_path / "out.pt", log, tmp_path, "-k", "2")["retrieval"]["at"]["2"]["dot"]
    assert {k: after[k] for k in ("head_share_1pct", "arp", "coverage")} == {
        k: before[k] for k in ("head_share_1pct", "arp", "coverage")}


def test_alpha_auto_of_a_history_bias_model_measures_what_check_of_the_output_serves(tmp_path: Path) -> None:
    """No user table: --alpha auto's trade-off serves each candidate output as check of it
    would, history queries [q, 1] rebuilt from the rescaled factors, beside [i, b_i]."""
    from auditor.config import AuditConfig
    from auditor.mitigation.history import output_tradeoff
    from auditor.plugins import get_plugin_manager

    rng = np.random.default_rng(3)
    users, items = rng.integers(0, 40, 900), np.minimum(rng.zipf(1.5, 900) - 1, 49)
    frequencies = np.bincount(items, minlength=50)
    table = rng.normal(size=(50, 4)) * (1 + np.log1p(frequencies))[:, None] * 0.3
    bias = (0.8 * np.log1p(frequencies))[:, None]
    torch.save({"item_emb.weight": torch.tensor(table, dtype=torch.float32),
                "item_bias.weight": torch.tensor(bias, dtype=torch.float32)}, tmp_path / "hb.pt")
    held = rng.random(900) < 0.2
    train = write_log(tmp_path / "train.parquet", users[~held], items[~held])
    holdout = write_log(tmp_path / "hold.parquet", users[held], items[held])
    config = AuditConfig(model=tmp_path / "hb.pt", interactions=train, holdout=holdout, probes=False, bootstrap=0,
                         ks=(10,))
    _, cut = output_tradeoff(config, 10, pm=get_plugin_manager())
    ran = CliRunner().invoke(cli, ["mitigate", str(tmp_path / "hb.pt"), "--alpha", "0.5", "-o", str(tmp_path / "o.pt")],
                             catch_exceptions=False)
    assert ran.exit_code == 0, ran.output
    output = check(tmp_path / "o.pt", train, tmp_path, "-k", "10", "--holdout", str(holdout))
    dot = output["retrieval"]["at"]["10"]["dot"]
    for name in ("head_share_10pct", "arp", "coverage"):
        assert cut.norm_aware["alpha_0.5"][name] == pytest.approx(dot[name], abs=1e-12)


def test_the_verdict_names_a_popular_bias_first_when_the_norms_do_not_rise(tmp_path: Path) -> None:
    """Unit-norm factors (no norm mechanism) and a bias 2·log(1 + frequency): the served
    lists favour the head through the bias alone; the verdict says so and its first
    recommendation is about the bias, whatever the top-1% skew's band. The report
    sections show the bias's ρ."""
    rng = np.random.default_rng(11)
    users, items = rng.integers(0, 50, 700), np.minimum(rng.zipf(1.4, 700) - 1, 99)
    frequencies = np.bincount(items, minlength=100)
    factors = rng.normal(size=(100, 6))
    factors /= np.linalg.norm(factors, axis=1, keepdims=True)
    torch.save({"user_emb.weight": torch.tensor(rng.normal(size=(50, 6)), dtype=torch.float32),
                "item_emb.weight": torch.tensor(factors, dtype=torch.float32),
                "item_bias.weight": torch.tensor(2 * np.log1p(frequencies)[:, None], dtype=torch.float32)},
               tmp_path / "mf.pt")
    log = write_log(tmp_path / "log.parquet", users, items)
    report = check(tmp_path / "mf.pt", log, tmp_path, "-k", "10", "--markdown", str(tmp_path / "r.md"))
    verdict = report["verdict"]
    assert report["frequency_norm"]["spearman"] is None  # every factor has norm 1
    dot = report["retrieval"]["at"]["10"]["dot"]["head_share_10pct"]
    assert dot > 3 * report["retrieval"]["at"]["10"]["cosine"]["head_share_10pct"]
    assert "it rises with training frequency, Spearman ρ = 1.00" in verdict["summary"]
    assert verdict["recommendations"][0].startswith("The item bias of the model in mf.pt rises with popularity")
    markdown = (tmp_path / "r.md").read_text()
    assert "item bias: Spearman ρ with training frequency: 1.000" in markdown
    assert re.search(r"u·i \+ b\\?_i as the model does", markdown)


def test_an_integer_item_buffer_beside_the_bias_keeps_it_served(tmp_path: Path) -> None:
    """An integer `item_index` buffer is no weight: the bias is still the one item-side
    tensor beside the table, served (it dropped the bias and blamed it as a tower tensor)."""
    model, log = hand_model(tmp_path, {"item_index": torch.arange(20)})
    report = check(model, log, tmp_path, "-k", "1")
    assert report["served_vectors"]["source"] == "bias" and report["served_vectors"]["as_served"] is True

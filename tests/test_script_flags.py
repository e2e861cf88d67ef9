"""Loaders F2: a TorchScript module with a config flag (``if self.cos: F.normalize ...``) is
read by the branch it takes: the flag is a bool the archive records (data.pkl), so the ``if``
is folded before the scoring is placed (auditor/loading/script_branches.py). Such a module
stood in as bare tables with its bias left out, so a dot gate passed on lists no format of
the model serves, while its ONNX export and pickle tripped it.

Known answer: numpy's ranking of the module's own score (training items excluded): the dot
head share at K=10 (u·i + b_i) and the scoring recorded.
"""

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
import torch.nn.functional as F
from click.testing import CliRunner
from torch import nn

from auditor.cli import cli
from auditor.loading.script_branches import folded_forward

N_USERS, N_ITEMS, DIM, K = 40, 60, 8, 10


class FlagMF(nn.Module):
    """score = (u·i or cos(u,i)) [+ b_i], by two flags."""

    def __init__(self, users: np.ndarray, items: np.ndarray, bias: np.ndarray, cos: bool, biased: bool) -> None:
        super().__init__()
        self.cos, self.biased = cos, biased
        self.user_embedding = nn.Embedding.from_pretrained(torch.tensor(users))
        self.item_embedding = nn.Embedding.from_pretrained(torch.tensor(items))
        self.item_bias = nn.Embedding.from_pretrained(torch.tensor(bias[:, None]))

    def forward(self, user_ids: torch.Tensor, item_ids: torch.Tensor) -> torch.Tensor:
        u, i = self.user_embedding(user_ids), self.item_embedding(item_ids)
        if self.cos:
            u = F.normalize(u, dim=-1)
            i = F.normalize(i, dim=-1)
        score = (u * i).sum(-1)
        if not self.biased:
            return score
        return score + self.item_bias(item_ids).squeeze(-1)


class ModeMF(FlagMF):
    """Normalises on an int attribute: not a recorded bool flag, so not folded."""

    def __init__(self, users: np.ndarray, items: np.ndarray, bias: np.ndarray) -> None:
        super().__init__(users, items, bias, cos=False, biased=True)
        self.mode = 0

    def forward(self, user_ids: torch.Tensor, item_ids: torch.Tensor) -> torch.Tensor:
        u, i = self.user_embedding(user_ids), self.item_embedding(item_ids)
        if self.mode == 1:
            u = F.normalize(u, dim=-1)
        return (u * i).sum(-1) + self.item_bias(item_ids).squeeze(-1)


class CosFlagMF(nn.Module):
    """score = u·i or cos(u,i), by a flag; no bias."""

    def __init__(self, users: np.ndarray, items: np.ndarray, cos: bool) -> None:
        super().__init__()
        self.cos = cos
        self.user_embedding = nn.Embedding.from_pretrained(torch.tensor(users))
        self.item_embedding = nn.Embedding.from_pretrained(torch.tensor(items))

    def forward(self, user_ids: torch.Tensor, item_ids: torch.Tensor) -> torch.Tensor:
        u, i = self.user_embedding(user_ids), self.item_embedding(item_ids)
        if self.cos:
            u = F.normalize(u, dim=-1)
            i = F.normalize(i, dim=-1)
        return (u * i).sum(-1)


def _model() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    p = 1.0 / np.arange(1, N_ITEMS + 1) ** 1.1
    items = np.concatenate([rng.choice(N_ITEMS, 8, replace=False, p=p / p.sum()) for _ in range(N_USERS)])
    freq = np.bincount(items, minlength=N_ITEMS)
    table = (rng.normal(size=(N_ITEMS, DIM)) * (0.3 + np.log1p(freq))[:, None]).astype(np.float32)
    users = rng.normal(size=(N_USERS, DIM)).astype(np.float32)
    bias = (1.6 * np.log1p(freq) + 0.4 * rng.normal(size=N_ITEMS)).astype(np.float32)
    return np.repeat(np.arange(N_USERS), 8), items, freq, users, table, bias


def _head_share(scores: np.ndarray, users: np.ndarray, items: np.ndarray, freq: np.ndarray) -> float:
    scores = scores.astype(np.float64).copy()
    scores[users, items] = -np.inf
    lists = np.argsort(-scores, axis=1, kind="stable")[:, :K]
    threshold = np.sort(freq)[::-1][N_ITEMS // 10 - 1]
    return float(((freq >= threshold) & (freq > 0))[lists].mean())


def _check(tmp_path: Path, module: nn.Module, *gate: str) -> tuple[int, dict[str, Any]]:
    users, items = _model()[:2]
    pq.write_table(pa.table({"user_id": users, "item_id": items}), tmp_path / "log.parquet")
    torch.jit.script(module).save(str(tmp_path / "m.pt"))
    out = CliRunner().invoke(cli, ["check", str(tmp_path / "m.pt"), "--interactions", str(tmp_path / "log.parquet"),
                                   "-k", str(K), "-q", "--format", "json", "--no-probes", "--bootstrap", "0", *gate])
    return out.exit_code, json.loads(out.stdout)


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_flag_off_serves_the_bias_and_trips_the_dot_gate(tmp_path: Path) -> None:
    users, items, freq, u, i, b = _model()
    expected = _head_share(u @ i.T + b, users, items, freq)
    assert expected > 0.14 > _head_share(u @ i.T, users, items, freq)  # the stand-in passed this gate
    code, report = _check(tmp_path, FlagMF(u, i, b, cos=False, biased=True),
                          "--fail-on", "head_share_10pct_dot@10>0.14")
    assert code == 3
    assert (report["served_vectors"]["source"], report["served_vectors"]["score"]) == ("bias", "u·i + b_i")
    assert report["retrieval"]["at"][str(K)]["dot"]["head_share_10pct"] == pytest.approx(expected, abs=1e-9)
    assert not any("cannot place" in w for w in report["warnings"])


def test_flag_on_scores_by_cosine(tmp_path: Path) -> None:
    users, items, freq, u, i, b = _model()
    code, report = _check(tmp_path, CosFlagMF(u, i, cos=True))
    assert code == 0
    assert report["served_vectors"]["scoring"] == "cosine"
    assert report["retrieval"]["at"][str(K)]["cosine"]["head_share_10pct"] == pytest.approx(
        _head_share(_unit(u) @ _unit(i).T, users, items, freq), abs=1e-9)
    assert not any("cannot place" in w for w in report["warnings"])


def test_flag_on_with_bias_scores_cosine_plus_bias(tmp_path: Path) -> None:
    users, items, freq, u, i, b = _model()
    _, report = _check(tmp_path, FlagMF(u, i, b, cos=True, biased=True))
    assert report["served_vectors"]["score"] == "cos(u,i) + b_i"
    assert report["retrieval"]["at"][str(K)]["dot"]["head_share_10pct"] == pytest.approx(
        _head_share(_unit(u) @ _unit(i).T + b, users, items, freq), abs=1e-9)


def test_a_condition_on_anything_but_a_recorded_bool_stays_a_doubt(tmp_path: Path) -> None:
    """Not folded: the tables stand in, and every gate line on their lists says so (the
    popular list's does not: it reads no vector)."""
    _, _, _, u, i, b = _model()
    _, report = _check(tmp_path, ModeMF(u, i, b))
    assert report["served_vectors"]["as_served"] is False
    assert any("cannot place" in w for w in report["warnings"])
    out = CliRunner().invoke(cli, ["check", str(tmp_path / "m.pt"), "--interactions", str(tmp_path / "log.parquet"),
                                   "-k", str(K), "--no-probes", "--bootstrap", "0", "--fail-on",
                                   "head_share_10pct_dot@10>0.9", "--fail-on", "head_share_10pct_popular@10>0.99"])
    assert out.exit_code == 0, out.output
    said = " ".join(out.output.split())  # the console wraps long lines
    assert re.search(r"gate head_share_10pct_dot@10>0\.9: [\d.]+ \(ok\), of the stored tables standing in, not of "
                     r"the vectors the model serves with \(see its first warning\)", said), said
    assert re.search(r"gate head_share_10pct_popular@10>0\.99: [\d.]+ \(ok\)(?!,)", said), said


def test_nested_and_negated_flags_fold_to_the_branch_taken() -> None:
    forward = "\n".join([
        "  def forward(s: __torch__.M,", "    u_ids: Tensor) -> Tensor:",
        "    _0 = __torch__.torch.nn.functional.normalize", "    u = (user_embedding).forward(u_ids, )",
        "    unit_items = s.unit_items", "    if torch.__not__(unit_items):", "      cos = s.cos", "      if cos:",
        "        u2 = _0(u, 2., -1, 1e-12, None, )", "        u1 = u2", "      else:", "        u1 = u",
        "      u0 = u1", "    else:", "      u0 = u", "    return torch.sum(torch.mul(u0, i), [-1])"])
    on = folded_forward(forward, {"unit_items": False, "cos": True})
    assert "if " not in on and "u2 = _0(u, 2., -1, 1e-12, None, )" in on
    assert on.endswith("return torch.sum(torch.mul(u2, i), [-1])")
    off = folded_forward(forward, {"unit_items": False, "cos": False})
    assert "normalize" not in off and off.endswith("return torch.sum(torch.mul(u, i), [-1])")
    assert folded_forward(forward, {}) == forward


def test_a_hostile_length_of_forward_is_left_unfolded() -> None:
    """A forward() of MAX_LINES renames after a flag is not folded (it stays a doubt), fast."""
    from auditor.loading.script_branches import MAX_LINES

    renames = [f"    v{n + 1} = v{n}" for n in range(MAX_LINES + 1)]
    forward = "\n".join(["  def forward(s: __torch__.M,", "    cos = s.cos", "    if cos:", "      pass", *renames])
    assert folded_forward(forward, {"cos": False}) == forward


# Loaders F6: a pickled module (torch.save(model)) holds its attributes, never its forward().


def _pickled(tmp_path: Path, module: nn.Module) -> dict[str, Any]:
    users, items = _model()[:2]
    pq.write_table(pa.table({"user_id": users, "item_id": items}), tmp_path / "log.parquet")
    torch.save(module, tmp_path / "full.pt")
    out = CliRunner().invoke(cli, ["check", str(tmp_path / "full.pt"), "--interactions", str(tmp_path / "log.parquet"),
                                   "-k", str(K), "-q", "--format", "json", "--no-probes", "--bootstrap", "0"])
    assert out.exit_code == 0, out.output
    return dict(json.loads(out.stdout))


def test_a_pickled_module_with_a_cosine_flag_on_stands_in_and_is_not_told_to_serve_by_cosine(tmp_path: Path) -> None:
    _, _, _, u, i, _ = _model()
    report = _pickled(tmp_path, CosFlagMF(u, i, cos=True))
    assert report["served_vectors"]["as_served"] is False
    assert report["warnings"][0].startswith("the stored tables stand in for the vectors the model in full.pt scores: "
                                            "it records `cos` = True, and its forward() is not in the file, so it may "
                                            "score by cosine")
    assert report["verdict"]["recommendations"][0].startswith("Audit the vectors the model in full.pt serves")


def test_a_pickled_module_says_its_scoring_is_assumed(tmp_path: Path) -> None:
    """Flag off (or negated: ``no_cos``): no doubt, the dot product assumed and said."""
    users, items, freq, u, i, b = _model()
    report = _pickled(tmp_path, FlagMF(u, i, b, cos=False, biased=True))
    assert report["served_vectors"]["score"] == "u·i + b_i"
    assert report["retrieval"]["at"][str(K)]["dot"]["head_share_10pct"] == pytest.approx(
        _head_share(u @ i.T + b, users, items, freq), abs=1e-9)
    assert any("The pickle holds no code, so how" in w and "the audit assumes the dot product" in w
               for w in report["warnings"])


def test_cosine_flag_names() -> None:
    from auditor.loading.pickled_module import _says_cosine

    assert [n for n in ("cos", "use_cosine", "l2Normalize", "normalize_items", "spherical", "no_cos", "not_normalized",
                        "cost", "biased", "cosmetic", "training") if _says_cosine(n)] == [
        "cos", "use_cosine", "l2Normalize", "normalize_items", "spherical"]


# Loaders 3 N2: a flag's name must say the scoring is cosine; a bias model in doubt keeps its bias.


def test_only_names_that_say_the_scoring_is_cosine_cast_doubt() -> None:
    from auditor.loading.pickled_module import _says_cosine

    scoring = ("cos", "cosine", "use_cosine", "normalize_embeddings", "l2_normalize", "useCosine", "cosine_similarity")
    other = ("cos_lr_schedule", "cosine_annealing", "use_cosine_scheduler", "normalize_inputs", "batch_normalize",
             "layer_normalization", "normalize_rewards", "no_normalize")
    assert [n for n in scoring if not _says_cosine(n)] == []
    assert [n for n in other if _says_cosine(n)] == []


class _ScheduledBiasMF(FlagMF):
    """u·i + b_i, with an unrelated True attribute whose name holds 'cos'."""

    def __init__(self, users: np.ndarray, items: np.ndarray, bias: np.ndarray, flag: str) -> None:
        super().__init__(users, items, bias, cos=False, biased=True)
        setattr(self, flag, True)


def test_a_schedule_flag_leaves_a_pickled_bias_model_served(tmp_path: Path) -> None:
    """Was: the tables stood in, the bias left out of the figures (a dot gate passed)."""
    users, items, freq, u, i, b = _model()
    report = _pickled(tmp_path, _ScheduledBiasMF(u, i, b, "cos_lr_schedule"))
    assert report["served_vectors"]["as_served"] is True and report["served_vectors"]["score"] == "u·i + b_i"
    assert report["retrieval"]["at"][str(K)]["dot"]["head_share_10pct"] == pytest.approx(
        _head_share(u @ i.T + b, users, items, freq), abs=1e-9)
    assert not any("may score by cosine" in w for w in report["warnings"])


def test_a_pickled_bias_model_in_doubt_keeps_its_bias(tmp_path: Path) -> None:
    """``use_cosine`` = True: its score may be u·i + b_i or cos(u,i) + b_i; both trip a dot
    gate the bare tables pass, so u·i + b_i stands in, said, and the gate line says so."""
    users, items, freq, u, i, b = _model()
    dot_bias = _head_share(u @ i.T + b, users, items, freq)
    assert min(dot_bias, _head_share(_unit(u) @ _unit(i).T + b, users, items, freq)) > 0.14 > _head_share(
        u @ i.T, users, items, freq)
    report = _pickled(tmp_path, _ScheduledBiasMF(u, i, b, "use_cosine"))
    served = report["served_vectors"]
    assert (served["as_served"], served["source"], served["score"]) == (False, "bias", "u·i + b_i")
    assert report["retrieval"]["at"][str(K)]["dot"]["head_share_10pct"] == pytest.approx(dot_bias, abs=1e-9)
    assert report["warnings"][0].startswith("u·i + b_i (the stored tables with the item bias) stands in for the score "
                                            "of the model in full.pt: it records `use_cosine` = True")
    assert not any("left out" in w for w in report["warnings"])
    out = CliRunner().invoke(cli, ["check", str(tmp_path / "full.pt"), "--interactions", str(tmp_path / "log.parquet"),
                                   "-k", str(K), "--no-probes", "--bootstrap", "0", "--fail-on",
                                   "head_share_10pct_dot@10>0.14"])
    assert out.exit_code == 3, out.output
    assert re.search(r"gate head_share_10pct_dot@10>0\.14: [\d.]+ \(TRIPPED\), of the stored tables standing in",
                     " ".join(out.output.split()))

"""Loaders QA12 F1/F2: a checkpoint's recorded config (Lightning's ``hyper_parameters``, a
``config``/``hparams`` entry) is evidence of how the model scores on every route, with an
item bias or without, as a pickled module's attributes are. ``model: LightGCN`` with an
item bias was reported ``as_served`` "u·i + b_i"; ``use_cosine: True`` in
``hyper_parameters`` was ignored (a ``served_spearman`` gate passed or tripped on the raw
table), while the same flag in a pickled module made the tables stand in.

Known answer: numpy's ranking of u·i + b_i over the stored tables (training items
excluded, head = the ⌊10%·n⌋ most frequent items): the figure stands, but as a stand-in.
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
from click.testing import CliRunner

from auditor.cli import cli
from auditor.loading.pickle_scan import shown, shown_value
from tests.loader_world import K, N_ITEMS, loader_world


def _head_share(scores: np.ndarray, users: np.ndarray, items: np.ndarray, freq: np.ndarray) -> float:
    scores = scores.astype(np.float64).copy()
    scores[users, items] = -np.inf
    top = np.argsort(-scores, axis=1, kind="stable")[:, :K]
    head = np.argsort(-freq, kind="stable")[: N_ITEMS // 10]
    threshold = freq[head].min()
    return float(np.isin(top, np.flatnonzero(freq >= threshold)).mean())


def _checkpoint(tmp_path: Path, hyper: dict[str, Any], biased: bool) -> tuple[Path, Path, dict[str, np.ndarray]]:
    users, items, freq, u, i, b = loader_world()
    state = {"model.user_embedding.weight": torch.from_numpy(u), "model.item_embedding.weight": torch.from_numpy(i)}
    if biased:
        state["model.item_bias.weight"] = torch.from_numpy(b)[:, None]
    path = tmp_path / "model.ckpt"
    torch.save({"state_dict": state, "hyper_parameters": hyper, "epoch": 3, "global_step": 30,
                "pytorch-lightning_version": "2.4.0"}, path)
    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": pa.array(users), "item_id": pa.array(items)}), log)
    return path, log, {"users": users, "items": items, "freq": freq, "u": u, "i": i, "b": b}


def _audit(model: Path, log: Path, *extra: str) -> tuple[int, str, dict[str, Any] | None]:
    report = model.parent / "r.json"
    report.unlink(missing_ok=True)
    result = CliRunner().invoke(cli, ["check", str(model), "--interactions", str(log), "--no-probes", "--bootstrap",
                                      "0", "-k", str(K), "--json", str(report), *extra], catch_exceptions=False)
    loaded = json.loads(report.read_text()) if report.exists() else None
    return result.exit_code, " ".join(result.output.split()), loaded


def test_a_recorded_lightgcn_with_an_item_bias_stands_in(tmp_path: Path) -> None:
    """Was: as_served true, "u·i + b_i", the dot gate line unqualified, no word of LightGCN."""
    model, log, d = _checkpoint(tmp_path, {"model": "LightGCN", "n_layers": 3}, biased=True)
    dot_bias = _head_share(d["u"] @ d["i"].T + d["b"], d["users"], d["items"], d["freq"])
    assert dot_bias > 0.14
    code, output, report = _audit(model, log, "--fail-on", "head_share_10pct_dot@10>0.14")
    assert code == 3 and report is not None, output
    served = report["served_vectors"]
    assert (served["as_served"], served["source"], served["score"], served["model"]) == (
        False, "bias", "u·i + b_i", "LightGCN")
    assert report["retrieval"]["at"][str(K)]["dot"]["head_share_10pct"] == pytest.approx(dot_bias, abs=1e-9)
    assert report["warnings"][0].startswith(
        "u·i + b_i (the stored tables with the item bias) stands in for the score of LightGCN: its config records "
        "LightGCN, which scores with the mean of layers 0..n_layers of light-graph propagation")
    assert re.search(r"gate head_share_10pct_dot@10>0\.14: [\d.]+ \(TRIPPED\), of the stored tables standing in", output)
    code, output, _ = _audit(model, log, "--fail-on", "served_spearman>0.5")
    assert code == 1 and "stand in" in output, output


@pytest.mark.parametrize("entry", ["hyper_parameters", "config", "hparams"])
def test_a_recorded_cosine_flag_makes_the_tables_stand_in(tmp_path: Path, entry: str) -> None:
    """Was: no served_vectors and no doubt; ``served_spearman>0.5`` evaluated on the raw
    table (0.8555, tripped). The flag is read as the pickled module's attribute is."""
    model, log, d = _checkpoint(tmp_path, {"use_cosine": True, "lr": 0.01}, biased=False)
    if entry != "hyper_parameters":
        saved = torch.load(model, weights_only=False)
        saved[entry] = saved.pop("hyper_parameters")
        torch.save(saved, model)
    code, output, report = _audit(model, log)
    assert code == 0 and report is not None, output
    assert report["served_vectors"]["as_served"] is False and report["served_vectors"]["source"] == "tables"
    assert report["warnings"][0].startswith("the stored tables stand in for the vectors the model in model.ckpt scores: "
                                            "its config records `use_cosine` = True")
    assert report["retrieval"]["at"][str(K)]["dot"]["head_share_10pct"] == pytest.approx(
        _head_share(d["u"] @ d["i"].T, d["users"], d["items"], d["freq"]), abs=1e-9)
    code, output, _ = _audit(model, log, "--fail-on", "served_spearman>0.5")
    assert code == 1 and "stored tables stand in" in output, output


def test_a_recorded_cosine_flag_beside_an_item_bias_keeps_it(tmp_path: Path) -> None:
    """Was: as_served true, "u·i + b_i", the dot gate line unqualified. Both readings trip it."""
    model, log, d = _checkpoint(tmp_path, {"use_cosine": True}, biased=True)
    unit_u = d["u"] / np.linalg.norm(d["u"], axis=1, keepdims=True)
    unit_i = d["i"] / np.linalg.norm(d["i"], axis=1, keepdims=True)
    dot_bias = _head_share(d["u"] @ d["i"].T + d["b"], d["users"], d["items"], d["freq"])
    assert min(dot_bias, _head_share(unit_u @ unit_i.T + d["b"], d["users"], d["items"], d["freq"])) > 0.14
    code, output, report = _audit(model, log, "--fail-on", "head_share_10pct_dot@10>0.14")
    assert code == 3 and report is not None, output
    served = report["served_vectors"]
    assert (served["as_served"], served["source"], served["score"]) == (False, "bias", "u·i + b_i")
    assert report["retrieval"]["at"][str(K)]["dot"]["head_share_10pct"] == pytest.approx(dot_bias, abs=1e-9)
    assert report["warnings"][0].startswith("u·i + b_i (the stored tables with the item bias) stands in for the score "
                                            "of the model in model.ckpt: its config records `use_cosine` = True")
    assert re.search(r"gate head_share_10pct_dot@10>0\.14: [\d.]+ \(TRIPPED\), of the stored tables standing in", output)


def test_a_recorded_schedule_flag_changes_nothing(tmp_path: Path) -> None:
    """``cos_lr_schedule`` names a schedule, not a scoring: u·i + b_i is served."""
    model, log, _ = _checkpoint(tmp_path, {"cos_lr_schedule": True, "use_cosine": False}, biased=True)
    code, output, report = _audit(model, log)
    assert code == 0 and report is not None, output
    assert report["served_vectors"]["as_served"] is True and report["served_vectors"]["score"] == "u·i + b_i"
    assert not any("stands in" in w or "stand in" in w for w in report["warnings"])


# Loaders QA12 N3: a recorded text value naming cosine as the scoring (``similarity: "cosine"``)
# is the same evidence as ``use_cosine: True``; a schedule's ``"cosine"`` is none.

SCORING_NAMED = [{"similarity": "cosine"}, {"score": "cos"}, {"metric": "cosine"}, {"distance": "cosine"},
                 {"similarity_fn": "cosine_similarity"}, {"scoring": "Cosine"}, {"distance_metric": "cosine"},
                 {"sim_type": "cos"}]
NOT_SCORING = [{"lr_scheduler_type": "cosine"}, {"scheduler": "cosine"}, {"annealing_strategy": "cos"},
               {"loss": "cosine"}, {"eval_metric": "cosine"}, {"similarity": "dot"}, {"metric": "cosine_annealing"},
               {"no_similarity": "cosine"}, {"similarity": "cosine " * 20}, {"similarity": 1}]


@pytest.mark.parametrize("hyper", SCORING_NAMED + NOT_SCORING)
def test_a_text_value_names_cosine_only_under_a_key_naming_the_scoring(hyper: dict[str, Any]) -> None:
    from auditor.loading.pickled_module import _flagged

    assert _flagged({**hyper, "lr": 0.01, "optimizer": "adam"}) == (list(hyper.items()) if hyper in SCORING_NAMED else [])


def test_a_recorded_similarity_string_makes_the_tables_stand_in(tmp_path: Path) -> None:
    """Was: no doubt, ``served_spearman>0.5`` evaluated on the raw table: 0.8555, tripped (rc 3)."""
    model, log, d = _checkpoint(tmp_path, {"similarity": "cosine", "lr": 0.01}, biased=False)
    code, output, _ = _audit(model, log, "--fail-on", "served_spearman>0.5")
    assert code == 1 and "stored tables stand in" in output, output
    code, output, report = _audit(model, log)
    assert code == 0 and report is not None, output
    assert report["served_vectors"]["as_served"] is False and report["served_vectors"]["source"] == "tables"
    assert report["warnings"][0].startswith("the stored tables stand in for the vectors the model in model.ckpt scores: "
                                            'its config records `similarity` = "cosine", and its forward() is not in '
                                            "the file, so it may score by cosine")
    assert report["retrieval"]["at"][str(K)]["dot"]["head_share_10pct"] == pytest.approx(
        _head_share(d["u"] @ d["i"].T, d["users"], d["items"], d["freq"]), abs=1e-9)


@pytest.mark.parametrize(("hyper", "as_served"), [({"metric": "cosine"}, False), ({"lr_scheduler_type": "cosine"}, True)])
def test_a_recorded_scoring_string_beside_an_item_bias_keeps_it(tmp_path: Path, hyper: dict[str, Any],
                                                                as_served: bool) -> None:
    """Was (``metric``): as_served true, "u·i + b_i", as if the model served it. A schedule's "cosine" changes nothing."""
    model, log, d = _checkpoint(tmp_path, hyper, biased=True)
    code, output, report = _audit(model, log)
    assert code == 0 and report is not None, output
    served = report["served_vectors"]
    assert (served["as_served"], served["source"], served["score"]) == (as_served, "bias", "u·i + b_i")
    assert report["retrieval"]["at"][str(K)]["dot"]["head_share_10pct"] == pytest.approx(
        _head_share(d["u"] @ d["i"].T + d["b"], d["users"], d["items"], d["freq"]), abs=1e-9)
    assert any('its config records `metric` = "cosine"' in w for w in report["warnings"]) is not as_served


# Loaders QA12 verify-2 B: a recorded value with a space was shown as "(a name with unusual
# characters)", so the warning said why the tables stand in but not which value said so.
def test_the_doubt_shows_the_recorded_value_with_its_spaces(tmp_path: Path) -> None:
    model, log, d = _checkpoint(tmp_path, {"similarity": "cosine similarity"}, biased=True)
    code, output, report = _audit(model, log)
    assert code == 0 and report is not None, output
    assert report["served_vectors"]["as_served"] is False
    said = 'its config records `similarity` = "cosine similarity", and its forward() is not in the file'
    assert said in report["warnings"][0] and said in report["served_vectors"]["not_served"], report["warnings"][0]
    assert report["retrieval"]["at"][str(K)]["dot"]["head_share_10pct"] == pytest.approx(
        _head_share(d["u"] @ d["i"].T + d["b"], d["users"], d["items"], d["freq"]), abs=1e-9)


def test_a_recorded_value_is_shown_as_printable_text_only() -> None:
    """Values: 64 printable characters at most, spaces and punctuation allowed, never a quote,
    backslash, backtick, control or non-ASCII character; names keep the stricter rule."""
    assert shown_value("cosine similarity") == "cosine similarity"
    assert shown_value("torch.nn.functional.cosine_similarity") == "torch.nn.functional.cosine_similarity"
    for hostile in ('cos"ine', "cos'ine", "cos\\ine", "cos`ine", "cos\x1b[31mine", "cos\nine", "cosíne", "c" * 65, ""):
        assert shown_value(hostile) == "(a value with unusual characters)", hostile
    assert shown("cosine similarity") == "(a name with unusual characters)"

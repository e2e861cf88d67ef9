"""`popaudit mitigate --alpha auto` and the advice around it: the remedies a refusal names,
the trade-off of history-query models, the stored split of a retrain checkpoint, the
command `check` suggests, and a table that is already a mitigation output."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.errors import NoClearGainError
from auditor.mitigation.auto import recommended_alpha
from auditor.result import Accuracy, RankingAccuracy, ScoringChange


def _kept_dot(ndcg: dict[str, float], changes: dict[str, ScoringChange], best: str, tolerance: float) -> Accuracy:
    """An accuracy section whose trade-off kept dot at K=10, ``best`` its best alternative."""
    at = {10: {name: RankingAccuracy(recall=v, ndcg=v, hit_rate=v, mrr=v) for name, v in ndcg.items()}}
    return Accuracy(protocol="", n_users_evaluated=100, n_dropped=0, at=at, tolerance=tolerance, quoted_k=10,
                    recommended="dot", recommendation="At K=10, no serving change is clearly better than dot.",
                    changes=changes, best_alternative=best)


def _refusal(accuracy: Accuracy) -> str:
    with pytest.raises(NoClearGainError) as caught:
        plain = SimpleNamespace(rescaled_alpha=None)  # not a mitigate output
        recommended_alpha(SimpleNamespace(accuracy=accuracy, not_measured={}, inputs=plain))  # type: ignore[arg-type]
    return str(caught.value)


def test_a_refusal_blocked_by_the_interval_does_not_offer_a_looser_tolerance() -> None:
    """The best alternative keeps far more than the tolerance; its head-share interval
    includes 0: loosening the tolerance admits nothing, so it is not offered."""
    accuracy = _kept_dot(
        {"dot": 0.0088, "cosine": 0.0127, "alpha_0.5": 0.0100},
        {"cosine": ScoringChange(0.0039, -0.0002, (0.0013, 0.0072), (-0.0005, 0.00001)),
         "alpha_0.5": ScoringChange(0.0012, -0.0001, (0.0001, 0.002), (-0.0003, 0.0001))},
        "cosine", tolerance=0.01)
    said = _refusal(accuracy)
    assert said.endswith("the best available is alpha 0 (cosine): pass it to write that table anyway")
    assert "accuracy_tolerance" not in said


def test_a_refusal_blocked_by_the_tolerance_names_the_tolerance_that_admits_a_scoring() -> None:
    """Cosine clearly lowers the head share but keeps 70% of dot's NDCG (below 0.98);
    alpha_0.5 keeps 95% (below 0.98 too) and its interval includes 0. The refusal offers
    alpha_0.5 anyway, and a tolerance of 0.7 (0.14 / 0.2), which admits cosine."""
    accuracy = _kept_dot(
        {"dot": 0.20, "cosine": 0.14, "alpha_0.5": 0.19},
        {"cosine": ScoringChange(-0.06, -0.2, (-0.07, -0.05), (-0.25, -0.15)),
         "alpha_0.5": ScoringChange(-0.01, -0.01, (-0.02, 0.0), (-0.03, 0.01))},
        "alpha_0.5", tolerance=0.98)
    said = _refusal(accuracy)
    assert said.endswith("the best available is alpha 0.5 (alpha_0.5): pass it to write that table anyway, or "
                         "accuracy_tolerance 0.7 admits cosine, which clearly lowers the head share and keeps 70.0% "
                         "of dot's NDCG")
    assert 0.7 * 0.20 <= 0.14  # the tolerance quoted does admit it


def test_an_alternative_that_does_not_lower_the_head_share_is_not_offered() -> None:
    accuracy = _kept_dot({"dot": 0.20, "cosine": 0.21},
                         {"cosine": ScoringChange(0.01, 0.02, (0.0, 0.02), (0.01, 0.03))}, "cosine", tolerance=0.98)
    assert _refusal(accuracy).endswith("the trade-off keeps dot-product serving. At K=10, no serving change is "
                                       "clearly better than dot")


# ------------------------------------------------------------------ a table mitigate already wrote


def _mitigate(*args: Any, code: int | None = 0) -> Any:
    result = CliRunner().invoke(cli, ["mitigate", *(str(a) for a in args)])
    assert code is None or result.exit_code == code, result.output
    return result


def test_rescaling_a_mitigate_output_again_warns_with_the_combined_exponent(tmp_path: Path) -> None:
    """Norms 1..16 (rows along the axes): alpha 0.5 then 0.5 again leaves |k|^0.25 in all
    (norms 1, 2^(0.25*k)...); the warning and the sidecar say so; a third round carries
    0.125; a file that is not the one the sidecar describes gets no warning."""
    norms = np.array([1.0, 2.0, 4.0, 16.0])
    np.save(tmp_path / "items.npy", (np.eye(4) * norms[:, None]).astype(np.float32))
    first = _mitigate(tmp_path / "items.npy", "--alpha", "0.5", "-o", tmp_path / "h.npy")
    assert "already rescaled" not in first.output
    second = _mitigate(tmp_path / "h.npy", "--alpha", "0.5", "-o", tmp_path / "q.npy")
    said = (f"{tmp_path / 'h.npy'} is already rescaled by alpha 0.5 (its sidecar {tmp_path / 'h.npy'}.popaudit.json "
            "says so): rescaling it again by alpha 0.5 leaves the original's norms raised to 0.25 in all, and each "
            "round may give up accuracy again; to serve another alpha, rescale the original table once")
    assert "".join(f"note: {said}".split()) in "".join(second.output.split())  # the console wraps long paths
    np.testing.assert_allclose(np.linalg.norm(np.load(tmp_path / "q.npy"), axis=1), norms**0.25, rtol=1e-6)
    side = json.loads((tmp_path / "q.npy.popaudit.json").read_text())
    assert side["input_rescaled"] == {"alpha": 0.5, "sidecar": str(tmp_path / "h.npy.popaudit.json"),
                                      "combined_alpha": 0.25}
    assert said in side["warnings"]
    _mitigate(tmp_path / "q.npy", "--alpha", "0.5", "-o", tmp_path / "e.npy", "-q")
    assert json.loads((tmp_path / "e.npy.popaudit.json").read_text())["input_rescaled"]["combined_alpha"] == 0.125
    np.save(tmp_path / "h.npy", np.eye(4, dtype=np.float32))  # no longer the file its sidecar describes
    third = _mitigate(tmp_path / "h.npy", "--alpha", "0.5", "-o", tmp_path / "x.npy")
    assert "already rescaled" not in third.output
    assert json.loads((tmp_path / "x.npy.popaudit.json").read_text())["input_rescaled"] is None


# ------------------------------------------------------------------ history queries (no user table)


def _history_model(folder: Path) -> tuple[Path, Path, Path]:
    """An item table without a user table whose norms grow with popularity (so history
    queries, means of item rows, change with the rescaling), a training log and a holdout
    drawn from the same popularity."""
    rng = np.random.default_rng(3)
    n_items, dim, n_users = 300, 8, 150
    popularity = 1.0 / np.arange(1, n_items + 1) ** 0.9
    rows = rng.normal(size=(n_items, dim))
    rows *= (0.5 + 20.0 * popularity / np.linalg.norm(rows, axis=1))[:, None]
    np.save(folder / "items.npy", rows.astype(np.float32))
    taste = rng.normal(size=(n_users, dim))
    weights = np.exp(taste @ rows.T / 2) * popularity
    weights /= weights.sum(axis=1, keepdims=True)
    picks = np.stack([rng.choice(n_items, size=8, replace=False, p=w) for w in weights])
    users = np.repeat(np.arange(n_users), 6)
    pq.write_table(pa.table({"user_id": users, "item_id": picks[:, :6].ravel()}), folder / "train.parquet")
    held = np.repeat(np.arange(n_users), 2)
    pq.write_table(pa.table({"user_id": held, "item_id": picks[:, 6:].ravel()}), folder / "test.parquet")
    return folder / "items.npy", folder / "train.parquet", folder / "test.parquet"


def _report(*args: Any) -> dict[str, Any]:
    out = Path(str(args[0]) + ".json")
    result = CliRunner().invoke(cli, ["check", *(str(a) for a in args), "--no-probes", "-q", "--json", str(out)])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def test_alpha_auto_for_history_queries_promises_what_check_of_the_output_measures(tmp_path: Path) -> None:
    """No user table: check OUT's queries are means of OUT's rows. The sidecar's 'after'
    figures are check OUT's dot figures (to the bit: the same lists), its 'before' check
    MODEL's dot ones; and they are not check MODEL's alpha_<chosen> figures, which keep
    MODEL's queries (what --alpha auto promised before)."""
    items, train, test = _history_model(tmp_path)
    result = _mitigate(items, "--alpha", "auto", "-o", tmp_path / "out.npy", "--interactions", train, "--holdout",
                       test, "--accuracy-tolerance", "0.01")
    assert "rebuilt from the rescaled table" in " ".join(result.output.split())
    side = json.loads((tmp_path / "out.npy.popaudit.json").read_text())
    figures, k = side["tradeoff"], str(side["tradeoff"]["k"])
    assert figures["queries"].startswith("history: each user's mean training-item vector, rebuilt")
    model = _report(items, "--interactions", train, "--holdout", test)
    output = _report(tmp_path / "out.npy", "--interactions", train, "--holdout", test)
    assert model["retrieval"]["population"]["source"] == output["retrieval"]["population"]["source"] == "history"
    assert figures["ndcg"] == {"before": model["accuracy"]["at"][k]["dot"]["ndcg"],
                               "after": output["accuracy"]["at"][k]["dot"]["ndcg"]}
    assert figures["head_share_1pct"] == {"before": model["retrieval"]["at"][k]["dot"]["head_share_1pct"],
                                          "after": output["retrieval"]["at"][k]["dot"]["head_share_1pct"]}
    same_queries = model["accuracy"]["at"][k][figures["scoring"]]["ndcg"], \
        model["retrieval"]["at"][k][figures["scoring"]]["head_share_1pct"]
    assert same_queries != (figures["ndcg"]["after"], figures["head_share_1pct"]["after"])
    assert 0.0 <= side["alpha"] < 1.0
    kept = _mitigate(items, "--alpha", "auto", "-o", tmp_path / "kept.npy", "--interactions", train, "--holdout", test,
                     code=1)  # at the default tolerance, no output keeps 98% of dot's NDCG: the refusal says whose
    assert "with each user's history query rebuilt from it as check of that output builds it)" in \
        " ".join(kept.output.split())


def test_a_given_alpha_on_a_table_without_user_table_says_check_rebuilds_its_queries(tmp_path: Path) -> None:
    items, train, _test = _history_model(tmp_path)
    result = _mitigate(items, "--alpha", "0.5", "-o", tmp_path / "out.npy", "--interactions", train)
    side = json.loads((tmp_path / "out.npy.popaudit.json").read_text())
    assert any(w.startswith(f"{items} has no user table, so check queries it with each user's mean training-item "
                            "vector") and "are not check's alpha_0.5 figures" in w for w in side["warnings"])
    assert "has no user table" in " ".join(result.output.split())


# ------------------------------------------------------------------ a retrain checkpoint's stored split


def test_alpha_auto_uses_the_split_a_retrain_checkpoint_stored(tmp_path: Path) -> None:
    """`check ref.pt` measures accuracy from the held-out pairs `retrain --holdout-fraction`
    stored; `mitigate ref.pt --alpha auto` reads the same split with no option, and its
    sidecar's NDCG is check's dot NDCG of ref.pt and of the output; a table with no split and no holdout
    is an error (exit 1) saying accuracy was not measured."""
    made = CliRunner().invoke(cli, ["retrain", "--n-users", "40", "--n-items", "60", "--n-interactions", "1500",
                                    "--epochs", "2", "--holdout-fraction", "0.2", "-o", str(tmp_path / "ref.pt")])
    assert made.exit_code == 0, made.output
    result = _mitigate(tmp_path / "ref.pt", "--alpha", "auto", "-o", tmp_path / "out.pt", "--accuracy-tolerance",
                       "0.01")
    assert result.output.rstrip().endswith(f"Next: popaudit check {tmp_path / 'out.pt'}")
    report, output = _report(tmp_path / "ref.pt"), _report(tmp_path / "out.pt")
    assert report["accuracy"]["holdout"] == f"{tmp_path / 'ref.pt'} (recorded holdout)"
    figures = json.loads((tmp_path / "out.pt.popaudit.json").read_text())["tradeoff"]
    k = str(figures["k"])
    assert figures["ndcg"] == {"before": report["accuracy"]["at"][k]["dot"]["ndcg"],
                               "after": output["accuracy"]["at"][k]["dot"]["ndcg"]}
    assert figures["queries"] == "users: the audit's queries, which the rescaling leaves unchanged"
    np.save(tmp_path / "items.npy", np.eye(4, dtype=np.float32))
    refused = _mitigate(tmp_path / "items.npy", "--alpha", "auto", "-o", tmp_path / "o.npy", code=1)
    assert "accuracy was not measured" in refused.output


# ------------------------------------------------------------------ the command check's advice names


def _advised(report: dict[str, Any]) -> list[str]:
    """The mitigate command the report's advice quotes, as words (after `popaudit`)."""
    quoted = [r.split("`")[1] for r in report["verdict"]["recommendations"] if "`popaudit mitigate" in r]
    assert len(quoted) == 1, report["verdict"]["recommendations"]
    words = shlex.split(quoted[0])
    assert words[:2] == ["popaudit", "mitigate"]
    return words[1:]


def _pairs(words: list[str]) -> dict[str, str]:
    return dict(zip(words[::2], words[1::2]))


def test_check_advises_a_mitigate_command_that_runs_as_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's model, log (its column names) and holdout in the advice's command, which
    writes the table; with a K that mitigate's audit would not repeat, the α check
    recommended instead of auto (and no --holdout, which a number refuses)."""
    items, train, test = _history_model(tmp_path)
    for log in (train, test):
        pq.write_table(pq.read_table(log).rename_columns(["u", "i"]), log)
    monkeypatch.chdir(tmp_path)
    options = ["--interactions", "train.parquet", "--holdout", "test.parquet", "--user-col", "u", "--item-col", "i",
               "--accuracy-tolerance", "0.01"]
    words = _advised(_report("items.npy", *options))
    assert words[:6] == ["mitigate", "items.npy", "--alpha", "auto", "-o", "items.mitigated.npy"]
    assert _pairs(words[6:]) == _pairs(options)
    _mitigate(*words[1:], "-q")
    assert json.loads(Path("items.mitigated.npy.popaudit.json").read_text())["alpha_source"].startswith("auto: ")
    # A K mitigate's audit does not repeat: a table with a user table gets the α check
    # recommended; a history-query model still gets auto, whose rebuilt queries decide.
    report = _report("items.npy", *options, "-k", "5")
    words = _advised(report)
    assert words[:6] == ["mitigate", "items.npy", "--alpha", "auto", "-o", "items.mitigated.npy"]
    assert _pairs(words[6:]) == _pairs(options)
    _mitigate(*words[1:], "-q")


def test_the_settings_the_advice_repeats_are_the_ones_mitigate_takes() -> None:
    from auditor.cli._next import AUTO_ONLY, MITIGATE_TAKES
    from auditor.cli.mitigate import command
    from auditor.config import AuditConfig

    options = {p.name for p in command.params}
    assert set(MITIGATE_TAKES) == options & {f.name for f in dataclasses.fields(AuditConfig)} - {"model"}
    assert set(AUTO_ONLY) <= set(MITIGATE_TAKES)


def test_alpha_one_on_a_mitigate_output_records_it_without_a_warning(tmp_path: Path) -> None:
    np.save(tmp_path / "items.npy", np.diag([1.0, 4.0, 9.0]).astype(np.float32))
    _mitigate(tmp_path / "items.npy", "--alpha", "0.5", "-o", tmp_path / "h.npy", "-q")
    copied = _mitigate(tmp_path / "h.npy", "--alpha", "1", "-o", tmp_path / "c.npy")
    assert "already rescaled" not in copied.output
    side = json.loads((tmp_path / "c.npy.popaudit.json").read_text())
    assert side["input_rescaled"]["combined_alpha"] == 0.5 and side["warnings"] == []


def _cosine_taste_model(folder: Path, seed: int = 1, held_popularity: float = 0.7) -> None:
    """500 items, 300 users who pick items by cosine affinity and popularity; item norms
    0.5 + sqrt(training frequency); an item table alone (history queries). The held-out
    picks lean less on popularity (exponent ``held_popularity``)."""
    rng = np.random.default_rng(seed)
    n_items, n_users, dim = 500, 300, 16
    popularity = 1.0 / np.arange(1, n_items + 1)
    p_item = (popularity / popularity.sum())[rng.permutation(n_items)]
    directions = rng.normal(size=(n_items, dim))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    users = rng.normal(size=(n_users, dim))
    train, held = [], []
    for u in range(n_users):
        affinity = directions @ (users[u] / np.linalg.norm(users[u]))
        w = p_item * np.exp(3 * affinity)
        items = rng.choice(n_items, size=20, replace=False, p=w / w.sum())
        train += [(u, i) for i in items]
        w2 = p_item ** held_popularity * np.exp(6 * affinity)
        w2[items] = 0
        held += [(u, i) for i in rng.choice(n_items, size=5, replace=False, p=w2 / w2.sum())]
    tr, ho = np.array(train), np.array(held)
    norms = 0.5 + np.sqrt(np.bincount(tr[:, 1], minlength=n_items))
    np.save(folder / "items.npy", (directions * norms[:, None]).astype(np.float32))
    pq.write_table(pa.table({"user_id": tr[:, 0], "item_id": tr[:, 1]}), folder / "train.parquet")
    pq.write_table(pa.table({"user_id": ho[:, 0], "item_id": ho[:, 1]}), folder / "hold.parquet")


def test_history_advice_and_alpha_auto_say_both_trade_offs_where_they_differ(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """On this model check's trade-off (queries kept from the original rows) recommends
    alpha_0.75, while dot serving of each rescaled table with its queries rebuilt (what
    check of the output measures) recommends alpha_0.25. check's advice must not promise
    that its command writes alpha_0.75: it says the α auto writes may differ, and why; the
    command then writes 0.25 and its sentence quotes check's choice beside its own, with
    check's figures. Once written, check of the output measures the 'after' figures."""
    _cosine_taste_model(tmp_path)
    monkeypatch.chdir(tmp_path)
    options = ["--interactions", "train.parquet", "--holdout", "hold.parquet"]
    report = _report("items.npy", *options)
    assert report["accuracy"]["recommended"] == "alpha_0.75"
    advice = next(r for r in report["verdict"]["recommendations"] if "`popaudit mitigate" in r)
    assert "writes the item table rescaled for it" not in advice
    assert "which may differ from the one above" in advice and "recommends alpha_0.75" in advice
    words = _advised(report)
    assert words[:4] == ["mitigate", "items.npy", "--alpha", "auto"]
    _mitigate(*words[1:], "-q")
    side = json.loads(Path("items.mitigated.npy.popaudit.json").read_text())
    assert side["alpha"] == 0.25 and side["tradeoff"]["scoring"] == "alpha_0.25"
    # The figures docs/mitigate.md ("History queries") quotes for this construction.
    assert "keeps 98.3% of dot's NDCG" in report["accuracy"]["recommendation"]
    # The top 10% graded the severity here, so both trade-offs judge their share (QA measures F3).
    assert "top-10% head share (the head that graded the severity) goes from 51.8% to 41.8%" in (
        report["accuracy"]["recommendation"])
    assert "keeps 100.4% of dot's NDCG" in side["tradeoff"]["recommendation"]
    assert "head share (the head that graded the severity) goes from 51.8% to 17.0%" in side["tradeoff"]["recommendation"]
    assert side["tradeoff"]["head_percent"] == 10
    assert side["alpha_source"] == ("auto: " + side["tradeoff"]["recommendation"] + " Check of the model chooses "
                                    "otherwise, its history queries kept from the original rows (not what a rescaled "
                                    "table serves): " + report["accuracy"]["recommendation"])
    after = _report("items.mitigated.npy", *options)
    assert after["accuracy"]["at"]["10"]["dot"]["ndcg"] == side["tradeoff"]["ndcg"]["after"]


def test_history_advice_names_alpha_auto_when_check_keeps_dot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Here check keeps dot (alpha_0.5 keeps 97.5% of dot's NDCG, under 0.98), while the
    rebuilt trade-off finds a table clearly better: the advice still quotes mitigate
    --alpha auto (runnable, with the run's files), which writes it (cosine, alpha 0)."""
    _cosine_taste_model(tmp_path, held_popularity=0.5)
    monkeypatch.chdir(tmp_path)
    options = ["--interactions", "train.parquet", "--holdout", "hold.parquet"]
    report = _report("items.npy", *options)
    assert report["accuracy"]["recommended"] == "dot"
    advice = next(r for r in report["verdict"]["recommendations"] if "`popaudit mitigate" in r)
    assert "(which keeps dot, the queries kept from the original rows)" in advice
    words = _advised(report)
    assert words[:6] == ["mitigate", "items.npy", "--alpha", "auto", "-o", "items.mitigated.npy"]
    assert _pairs(words[6:]) == _pairs(options)
    _mitigate(*words[1:], "-q")
    side = json.loads(Path("items.mitigated.npy.popaudit.json").read_text())
    assert side["alpha"] == 0.0 and "Check of the model chooses otherwise" in side["alpha_source"]

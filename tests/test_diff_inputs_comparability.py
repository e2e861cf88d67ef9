"""`popaudit diff` on inputs that change what a figure means without a `check` setting
saying so (QA report 5, Diff F1–F3): a catalogue whose top-p% head holds another number of
items, an approximate index against exact search, another training log or model file."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import spearmanr

from auditor.audit import run_audit
from auditor.config import AuditConfig
from auditor.diff import diff_reports, evaluate_diff_gates, parse_diff_gates
from auditor.errors import UnmeasuredGateError
from diff_samples import biased_table_report

K = 10
N_USERS = 60


def _log_and_lists(folder: Path, n_seen: int) -> tuple[np.ndarray, np.ndarray]:
    """A log over items 0..n_seen-1 (every item seen, counts falling with the id) and top-10
    lists of random seen items; returns (item counts, lists)."""
    rng = np.random.default_rng(3)
    counts = (200 / np.arange(1, n_seen + 1) ** 0.8).astype(np.int64) + 1
    items = np.repeat(np.arange(n_seen), counts)
    pq.write_table(pa.table({"user_id": rng.integers(0, N_USERS, items.size), "item_id": items}), folder / "log.parquet")
    lists = np.stack([rng.choice(n_seen, K, replace=False) for _ in range(N_USERS)])
    return counts, lists


def _audit_lists(folder: Path, lists: np.ndarray, name: str) -> dict[str, Any]:
    pq.write_table(pa.table({"user_id": np.repeat(np.arange(N_USERS), K), "item_id": lists.ravel(),
                             "rank": np.tile(np.arange(1, K + 1), N_USERS)}), folder / name)
    config = AuditConfig(model=None, interactions=folder / "log.parquet", recommendations=folder / name, ks=(K,))
    return json.loads(json.dumps(run_audit(config).to_dict()))


def _head_share(counts: np.ndarray, lists: np.ndarray, c: int) -> float:
    """The share of slots taken by the items at least as popular as the c-th most popular."""
    head = np.flatnonzero(counts >= np.sort(counts)[::-1][c - 1])
    return float(np.isin(lists, head).mean())


def _with_cold_slots(lists: np.ndarray, n_seen: int, n_cold: int) -> np.ndarray:
    """The lists with the least popular slots of user 0 swapped for never-seen items."""
    out = lists.copy()
    worst = np.argsort(-out[0])[:n_cold]  # the largest ids: the least popular items of the list
    out[0, worst] = n_seen + np.arange(n_cold)
    return out


def test_a_catalogue_whose_head_holds_another_number_of_items_is_not_compared(tmp_path: Path) -> None:
    """QA F1: 199 seen items + 1 never-seen item served: the top-1% head goes from 1 item to 2
    (c = max(1, floor(n/100))); the old diff compared the head shares as a change of bias."""
    counts, lists = _log_and_lists(tmp_path, 199)
    today = _with_cold_slots(lists, 199, 1)
    base, new = _audit_lists(tmp_path, lists, "y.parquet"), _audit_lists(tmp_path, today, "t.parquet")
    assert (base["inputs"]["n_items"], new["inputs"]["n_items"]) == (199, 200)
    # With the head fixed (1 item), the share is unchanged: only the definition moved.
    assert _head_share(counts, lists, 1) == pytest.approx(_head_share(counts, today, 1))
    assert base["retrieval"]["at"]["10"]["served"]["head_share_1pct"] == pytest.approx(_head_share(counts, lists, 1))
    assert new["retrieval"]["at"]["10"]["served"]["head_share_1pct"] == pytest.approx(
        _head_share(np.append(counts, 0), today, 2))
    diff = diff_reports(base, new)
    for name in ("head_share_1pct_served@10", "head_share_10pct_served@10", "head_share_20pct_served@10",
                 "head_share_log", "gap_delta_niche_served@10"):
        change = diff.metric(name)
        assert (change.status, change.delta) == ("incomparable", None), name
        assert "inputs.n_items differs (199 vs 200)" in (change.reason or "")
    assert [s.setting for s in diff.settings] == ["inputs.n_items"]
    assert not [n for n in diff.notes if n.startswith("inputs.n_items")]  # the setting row says it, once
    assert diff.metric("aplt_served@10").status == "compared"  # the short head is by mass, not by count
    assert diff.verdict.direction == "not comparable"
    gates = parse_diff_gates(["head_share_1pct_served@10.delta>0.001"], ["head_share_1pct_served@10"])
    with pytest.raises(UnmeasuredGateError, match=r"not comparable: inputs.n_items differs \(199 vs 200\)"):
        evaluate_diff_gates(gates, diff)


def test_a_catalogue_that_grew_within_the_same_head_cuts_is_compared(tmp_path: Path) -> None:
    """204 items against 201: every cut (1% 2 items, 10% 20, 20% 40) is the same, so the heads
    are the same items and the shares are compared, as numpy counts them."""
    counts, lists = _log_and_lists(tmp_path, 201)
    today = _with_cold_slots(lists, 201, 3)
    diff = diff_reports(_audit_lists(tmp_path, lists, "y.parquet"), _audit_lists(tmp_path, today, "t.parquet"))
    assert not diff.settings
    change = diff.metric("head_share_1pct_served@10")
    expected = _head_share(counts, today, 2) - _head_share(counts, lists, 2)
    assert change.status == "compared" and change.delta == pytest.approx(expected, abs=1e-12)
    assert any(n.startswith("inputs.n_items differs (201 vs 204)") for n in diff.notes)
    assert any(n.startswith("served.source differs (") and "y.parquet vs " in n for n in diff.notes)


@pytest.fixture(scope="module")
def exact(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The JSON report of a small biased table audited with exact search."""
    return biased_table_report(tmp_path_factory.mktemp("exact"), "logA.parquet")


def test_an_approximate_index_against_exact_search_is_not_compared(exact: dict[str, Any]) -> None:
    """QA F2: the lists of an approximate index miss candidates; its lower head share read
    "less bias" and gates passed."""
    assert exact["retrieval"]["index"] == "exact"
    approximate = copy.deepcopy(exact)
    approximate["retrieval"]["index"], approximate["retrieval"]["recall"] = "ivf", {"10": 0.855}
    cut = approximate["retrieval"]["at"]["10"]
    cut["dot"]["head_share_1pct"] = cut["dot"]["head_share_1pct"] / 3  # what lost candidates did
    diff = diff_reports(exact, approximate)
    assert [(s.setting, s.base, s.new) for s in diff.settings] == [("retrieval.index", "exact", "ivf")]
    for name in ("head_share_1pct_dot@10", "coverage_dot@10", "head_share_1pct_cosine@10", "head_share_1pct_ratio@10"):
        assert diff.metric(name).status == "incomparable", name
    assert diff.metric("head_share_1pct_popular@10").status == "compared"  # counted, not searched
    assert diff.metric("spearman").status == "compared"
    assert diff.verdict.direction == "not comparable"
    gates = parse_diff_gates(["head_share_1pct_dot@10.delta>0.005"], ["head_share_1pct_dot@10"])
    with pytest.raises(UnmeasuredGateError, match=r'retrieval.index differs \("exact" vs "ivf"\)'):
        evaluate_diff_gates(gates, diff)
    other_recall = copy.deepcopy(approximate)
    other_recall["retrieval"]["recall"] = {"10": 0.9}
    again = diff_reports(approximate, other_recall)
    assert not again.settings and any(n.startswith("retrieval.recall differs") for n in again.notes)


def test_a_gate_on_an_incomparable_figure_says_so_on_its_line(exact: dict[str, Any], tmp_path: Path) -> None:
    """QA Diff B: the gate's own line read "not measured" before the error that says the
    figure is not comparable; the line now says what the diff found of it."""
    from click.testing import CliRunner

    from auditor.cli import cli

    approximate = copy.deepcopy(exact)
    approximate["retrieval"]["index"] = "ivf"
    approximate["frequency_norm"]["kendall"] = None  # a figure only the base report holds
    for name, report in (("exact.json", exact), ("ivf.json", approximate)):
        (tmp_path / name).write_text(json.dumps(report))
    ran = CliRunner().invoke(cli, ["diff", str(tmp_path / "exact.json"), str(tmp_path / "ivf.json"), "-q",
                                   "--fail-on", "head_share_1pct_dot@10.delta>0.005", "--fail-on", "kendall.delta>0"])
    assert ran.exit_code == 1
    assert "gate head_share_1pct_dot@10.delta>0.005: not comparable" not in ran.stderr  # -q: only tripped lines
    ran = CliRunner().invoke(cli, ["diff", str(tmp_path / "exact.json"), str(tmp_path / "ivf.json"),
                                   "--fail-on", "head_share_1pct_dot@10.delta>0.005", "--fail-on", "kendall.delta>0"])
    assert ran.exit_code == 1
    assert "gate head_share_1pct_dot@10.delta>0.005: not comparable\n" in ran.stderr
    assert "gate kendall.delta>0: in the base report only\n" in ran.stderr
    assert "not measured" not in ran.stderr.split("Error:")[0]


def test_another_training_log_or_model_is_said(exact: dict[str, Any]) -> None:
    """QA F3: the notes were empty for another log of the same size and for another model."""
    other = copy.deepcopy(exact)
    other["inputs"]["interactions"], other["inputs"]["model"] = "logB.parquet", "fixed.npy"
    diff = diff_reports(exact, other)
    assert not diff.settings
    assert [n.split(":")[0] for n in diff.notes] == [
        f"inputs.model differs ({exact['inputs']['model']} vs fixed.npy)",
        f"inputs.interactions differs ({exact['inputs']['interactions']} vs logB.parquet)"]
    assert not diff_reports(exact, copy.deepcopy(exact)).notes


def test_served_lists_are_compared_whatever_population_the_model_retrieved_for(tmp_path: Path) -> None:
    """QA F7: the same served lists audited with a model (its query population recorded) and
    alone (none) had every served figure "incomparable", and served gates failed (exit 1)."""
    counts, lists = _log_and_lists(tmp_path, 120)
    alone = _audit_lists(tmp_path, lists, "recs.parquet")
    assert alone["retrieval"]["population"] is None
    with_model = copy.deepcopy(alone)
    with_model["retrieval"]["population"] = {"source": "users", "seen_items": "excluded"}
    diff = diff_reports(with_model, alone)
    assert {s.setting for s in diff.settings} == {"retrieval.population.source", "retrieval.population.seen_items"}
    share = _head_share(counts, lists, 1)
    for name in ("head_share_1pct_served@10", "gini_served@10", "aplt_served@10", "head_share_log"):
        change = diff.metric(name)
        assert (change.status, change.delta) == ("compared", 0.0), name
    assert diff.metric("head_share_1pct_served@10").new == pytest.approx(share)
    assert diff.metric("head_share_1pct_popular@10").status == "incomparable"  # the popular list skips seen items
    gates = parse_diff_gates(["head_share_1pct_served@10.delta>0.01"], ["head_share_1pct_served@10"])
    assert [o.value for o in evaluate_diff_gates(gates, diff)] == [0.0]


def test_training_popularity_from_another_count_file_is_said(tmp_path: Path) -> None:
    """QA N1: `check --frequencies countsA` vs `--frequencies countsB` (and a log vs a count
    file) had no note: a swap of the training popularity read "less bias" with nothing said."""
    rng = np.random.default_rng(7)
    items = rng.standard_normal((100, 8)).astype(np.float32)
    np.save(tmp_path / "items.npy", items)
    counts_a = (50 / np.arange(1, 101)).astype(np.int64) + 1
    for name, counts in (("countsA.parquet", counts_a), ("countsB.parquet", counts_a[::-1].copy())):
        pq.write_table(pa.table({"item_id": np.arange(100), "count": counts}), tmp_path / name)
    rows = np.repeat(np.arange(100), counts_a)
    pq.write_table(pa.table({"user_id": rng.integers(0, 30, rows.size), "item_id": rows}), tmp_path / "logA.parquet")

    def audit(**source: Path) -> dict[str, Any]:
        config = AuditConfig(model=tmp_path / "items.npy", ks=(10,), probes=False, bootstrap=0, **source)
        return json.loads(json.dumps(run_audit(config).to_dict(), allow_nan=False))

    by_a, by_b = audit(frequencies=tmp_path / "countsA.parquet"), audit(frequencies=tmp_path / "countsB.parquet")
    by_log = audit(interactions=tmp_path / "logA.parquet")
    diff = diff_reports(by_a, by_b)
    assert not diff.settings
    assert [n.split(":")[0] for n in diff.notes] == [
        f"settings.frequencies differs ({tmp_path / 'countsA.parquet'} vs {tmp_path / 'countsB.parquet'})"]
    norms = np.linalg.norm(items, axis=1)  # compared, but said: each against its own counts
    assert diff.metric("spearman").base == pytest.approx(spearmanr(norms, counts_a)[0])
    assert diff.metric("spearman").new == pytest.approx(spearmanr(norms, counts_a[::-1])[0])
    cross = diff_reports(by_log, by_b).notes
    assert [n.split(":")[0] for n in cross if "training" in n or "interactions differs" in n] == [
        f"training popularity differs (inputs.interactions {tmp_path / 'logA.parquet'} vs "
        f"settings.frequencies {tmp_path / 'countsB.parquet'})"]
    assert not diff_reports(by_a, copy.deepcopy(by_a)).notes

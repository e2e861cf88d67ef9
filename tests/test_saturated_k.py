"""A cut-off K at or past every query's candidate count measures no harm (QA measures F1):
every list then holds every candidate under any scoring, so dot and cosine serve the same
items by construction. Such a K never grades the harm nor clears it ("serving is not
skewed"): where every K is so, severity rests on the correlation, as without retrieval."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from auditor.audit import run_audit
from auditor.config import AuditConfig
from auditor.errors import setting
from auditor.harm import measured_cutoffs, worst_skew
from auditor.report.content import headline
from auditor.report.harms import cutoff_title
from auditor.harm import saturated_at
from auditor.retrieval.serving import saturation

N_ITEMS = 60


def _model(folder: Path) -> tuple[Path, Path, np.ndarray]:
    """60 items whose norms grow with their training frequency, 40 users."""
    rng = np.random.default_rng(0)
    freqs = np.arange(1, N_ITEMS + 1)
    vectors = rng.normal(size=(N_ITEMS, 8))
    vectors *= (np.log1p(freqs) / np.linalg.norm(vectors, axis=1))[:, None]
    np.save(folder / "items.npy", vectors.astype(np.float32))
    items = np.repeat(np.arange(N_ITEMS), freqs)
    users = rng.integers(0, 40, items.size)
    pq.write_table(pa.table({"user_id": users, "item_id": items}), folder / "log.parquet")
    return folder / "items.npy", folder / "log.parquet", vectors


def test_saturated_queries_count_each_querys_candidates() -> None:
    # 6 items; query 0 excludes 1 row, query 1 excludes 3: 5 and 3 candidates.
    exclude = (np.array([0, 1, 4]), np.array([0, 1, 2, 3]))
    assert saturation([1, 3, 4, 5, 6], 6, 2, exclude)["n_saturated"] == {1: 0, 3: 1, 4: 1, 5: 2, 6: 2}
    assert saturation([5, 6], 6, 7, None)["n_saturated"] == {5: 0, 6: 7}  # nothing excluded: the catalogue


def test_a_k_grades_only_while_fewer_than_half_its_queries_are_saturated() -> None:
    # QA measures N1: 30 of 35 saturated graded "not skewed" (K=56); 35 of 35 did not (K=57).
    assert saturated_at(30, 35) and saturated_at(35, 35) and saturated_at(18, 35) and saturated_at(20, 40)
    assert not saturated_at(17, 35) and not saturated_at(19, 40) and not saturated_at(0, 35)
    assert not saturated_at(0, 0)  # no queries: nothing saturated


def test_a_k_past_the_catalogue_is_not_graded_and_severity_rests_on_the_correlation(tmp_path: Path) -> None:
    model, log, vectors = _model(tmp_path)
    result = run_audit(AuditConfig(model=model, interactions=log, ks=(100,), probes=False, bootstrap=0, seed=1))
    assert result.retrieval is not None
    assert result.retrieval.saturated == {N_ITEMS: True}  # clamped to 60: every list holds every candidate
    cut = result.retrieval.at[N_ITEMS]
    assert cut.dot.get("head_share_10pct") == pytest.approx(cut.cosine.get("head_share_10pct"))
    assert measured_cutoffs(result) == [] and worst_skew(result) is None
    # The correlation rule, computed independently: ρ of norm against frequency >= 0.3 gives moderate.
    rho = stats.spearmanr(np.arange(1, N_ITEMS + 1), np.linalg.norm(vectors, axis=1)).statistic
    assert rho > 0.5
    assert result.verdict.severity == "moderate"  # was "none": "serving is not skewed"
    assert result.verdict.quoted_k is None and result.verdict.assessed
    said = "the harm is not measured at K=60 (K reaches the catalogue: every list holds every candidate)"
    assert said in result.verdict.summary and "not skewed" not in result.verdict.summary
    assert said in headline(result)
    assert "K reaches the catalogue" in cutoff_title(result.retrieval, N_ITEMS, N_ITEMS)
    assert "K holds every candidate of every query" in cutoff_title(result.retrieval, N_ITEMS)  # catalogue not given
    assert result.to_dict()["retrieval"]["saturated"] == {"60": True}
    assert result.flat_metrics()["severity_level"] == 2.0


def test_a_smaller_k_beside_it_grades_and_the_saturated_k_is_never_quoted(tmp_path: Path) -> None:
    model, log, _ = _model(tmp_path)
    result = run_audit(AuditConfig(model=model, interactions=log, ks=(5, 100), probes=False, bootstrap=0, seed=1))
    assert result.retrieval is not None and result.retrieval.saturated == {5: False, N_ITEMS: True}
    assert measured_cutoffs(result) == [5]
    assert result.verdict.quoted_k == 5 and result.verdict.first_seen_k is None
    assert "K reaches the catalogue" not in cutoff_title(result.retrieval, 5)


def test_a_k_one_short_of_every_users_candidates_is_saturated_after_seen_items(tmp_path: Path) -> None:
    # Every user trained on at least one item, so K = 59 already holds every unseen item.
    model, log, _ = _model(tmp_path)
    result = run_audit(AuditConfig(model=model, interactions=log, ks=(59,), probes=False, bootstrap=0, seed=1))
    assert result.retrieval is not None and result.retrieval.saturated == {59: True}
    assert result.verdict.quoted_k is None


def _qa_cliff_model(folder: Path) -> tuple[Path, Path, np.ndarray]:
    """The QA's 60-item model (v_f1_cliff.py, gen_base seed 0): 35 trained users of 40."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    p = 1.0 / np.arange(1, N_ITEMS + 1) ** 1.1
    p /= p.sum()
    rows = [(u, int(i)) for u in range(35) for i in rng.choice(N_ITEMS, size=rng.integers(3, 10), replace=False, p=p)]
    log = np.array(rows)
    for u in range(35):  # the QA's holdout draws, which move the generator on
        cand = [i for i in range(N_ITEMS) if i not in set(log[log[:, 0] == u, 1])]
        rng.choice(cand, size=2, replace=False, p=np.array([p[c] for c in cand]) / sum(p[c] for c in cand))
    freq = np.bincount(log[:, 1], minlength=N_ITEMS)
    vectors = rng.normal(size=(N_ITEMS, 8))
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors *= (0.5 + 0.3 * np.log1p(freq) + rng.uniform(0, 0.3, N_ITEMS))[:, None]
    users = rng.normal(size=(40, 8))
    torch.save({"user_embedding.weight": torch.tensor(users, dtype=torch.float32),
                "item_embedding.weight": torch.tensor(vectors, dtype=torch.float32)}, folder / "model.pt")
    pq.write_table(pa.table({"user_id": log[:, 0].astype("int64"), "item_id": log[:, 1].astype("int64")}),
                   folder / "train.parquet")
    return folder / "model.pt", folder / "train.parquet", log


def _saturated_by_hand(log: np.ndarray, k: int) -> int:
    """Queried users (those in the log) whose unseen items number at most ``k``."""
    seen = np.array([np.unique(log[log[:, 0] == u, 1]).size for u in np.unique(log[:, 0])])
    return int(np.sum(N_ITEMS - seen <= k))


def test_a_k_saturated_for_most_queries_measures_no_harm(tmp_path: Path) -> None:
    # QA measures N1: at K=56, 30 of 35 queries hold every candidate; it graded "none" (rc 0).
    model, log_file, log = _qa_cliff_model(tmp_path)
    assert _saturated_by_hand(log, 56) == 30 and _saturated_by_hand(log, 57) == 35
    result = run_audit(AuditConfig(model=model, interactions=log_file, ks=(56,), probes=False, bootstrap=0, seed=1))
    assert result.retrieval is not None and result.retrieval.n_queries == 35
    assert result.retrieval.n_saturated == {56: 30} and result.retrieval.saturated == {56: True}
    assert measured_cutoffs(result) == [] and result.verdict.quoted_k is None
    assert result.verdict.severity == "moderate"  # the correlation rule, as at K=57 (was "none" at K=56)
    said = "K=56 (holds every candidate for 30 of 35 queries, at least half"
    assert said in result.verdict.summary and "not skewed" not in result.verdict.summary
    assert said in headline(result)
    assert "holds every candidate for 30 of 35 queries: the harm is not measured here" in cutoff_title(
        result.retrieval, 56)
    assert result.to_dict()["retrieval"]["n_saturated"] == {"56": 30}


def test_a_graded_k_that_saturates_some_queries_says_how_many(tmp_path: Path) -> None:
    model, log_file, log = _qa_cliff_model(tmp_path)
    some = _saturated_by_hand(log, 53)
    assert 0 < some < 35 / 2, some
    result = run_audit(AuditConfig(model=model, interactions=log_file, ks=(5, 53), probes=False, bootstrap=0, seed=1))
    assert result.retrieval is not None and result.retrieval.saturated == {5: False, 53: False}
    assert result.retrieval.n_saturated == {5: 0, 53: some}
    assert f"(holds every candidate for {some} of 35 queries)" in cutoff_title(result.retrieval, 53)
    assert "holds every candidate" not in cutoff_title(result.retrieval, 5)


def test_the_default_k_on_a_12_item_catalogue_is_mostly_saturated(tmp_path: Path) -> None:
    # QA measures N1 (v_f1_tiny.py): 12 items, 40 users of 1-3 items; K=10 saturated 24 of 40: graded "none".
    torch = pytest.importorskip("torch")
    rng, n = np.random.default_rng(1), 12
    p = 1 / np.arange(1, n + 1) ** 1.1
    p /= p.sum()
    rows = []
    for u in range(40):
        picked = rng.choice(n, size=rng.integers(1, 4), replace=False, p=p)
        rows += [(u, int(i)) for i in picked]
        rng.choice([i for i in range(n) if i not in picked])  # the QA's held-out draw
    log = np.array(rows)
    freq = np.bincount(log[:, 1], minlength=n)
    vectors = rng.normal(size=(n, 8))
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors *= (0.5 + 0.3 * np.log1p(freq) + rng.uniform(0, 0.3, n))[:, None]
    users = rng.normal(size=(40, 8))
    torch.save({"user_embedding.weight": torch.tensor(users), "item_embedding.weight": torch.tensor(vectors)},
               tmp_path / "model.pt")
    pq.write_table(pa.table({"user_id": log[:, 0], "item_id": log[:, 1]}), tmp_path / "train.parquet")
    saturated = int(np.sum(n - np.bincount(log[:, 0]) <= 10))
    assert saturated == 24
    result = run_audit(AuditConfig(model=tmp_path / "model.pt", interactions=tmp_path / "train.parquet",
                                   probes=False, bootstrap=0, seed=1))
    assert result.retrieval is not None and result.retrieval.n_saturated == {10: 24, 12: 40}
    assert result.retrieval.saturated == {10: True, 12: True}
    assert result.verdict.severity == "moderate" and result.verdict.quoted_k is None  # was "none", 1.00×


def test_a_quoted_k_that_saturates_some_queries_says_how_many_in_the_verdict(tmp_path: Path) -> None:
    model, log_file, log = _qa_cliff_model(tmp_path)
    some = _saturated_by_hand(log, 53)
    result = run_audit(AuditConfig(model=model, interactions=log_file, ks=(53,), probes=False, bootstrap=0, seed=1))
    assert result.verdict.quoted_k == 53  # 14 of 35: fewer than half, so it grades
    said = f"K=53 holds every candidate for {some} of 35 queries"
    assert said in result.verdict.summary and said in headline(result)


def test_queries_without_a_candidate_saturate_no_k_and_leave_the_share() -> None:
    # QA measures F1: a query trained on every item has an empty list under every scoring.
    # 6 items; queries exclude 1, 6 (all), 3, 6 (all) and 5 rows: 5, 0, 3, 0 and 1 candidates.
    counts = [1, 6, 3, 6, 5]
    exclude = (np.r_[0, np.cumsum(counts)], np.concatenate([np.arange(c) for c in counts]))
    said = saturation([1, 3, 5, 6], 6, 5, exclude)
    assert said["n_saturated"] == {1: 1, 3: 2, 5: 3, 6: 3}  # was {1: 3, 3: 4, 5: 5, 6: 5}
    assert said["n_no_candidates"] == 2
    # Of the 3 queries with a candidate (1, 3, 5), 2 saturate from K=3 on: K=2 is the largest that grades.
    assert said["graded_up_to"] == 2 and saturated_at(1, 3) is False and saturated_at(2, 3) is True
    one_left = (np.array([0, 5, 10, 15]), np.tile(np.arange(5), 3))  # three queries, one candidate each
    assert saturation([1], 6, 3, one_left)["graded_up_to"] is None  # K=1 already holds every candidate
    nothing = (np.array([0, 6]), np.arange(6))
    assert saturation([1], 6, 1, nothing) == {"n_saturated": {1: 0}, "n_no_candidates": 1, "graded_up_to": None}


def _with_all_seen_users(folder: Path, log: np.ndarray, extra: int) -> tuple[Path, Path]:
    """The QA cliff model's log plus ``extra`` users (ids 40 on, with user rows) trained on every item."""
    torch = pytest.importorskip("torch")
    state = torch.load(folder / "model.pt")
    users = torch.cat([state["user_embedding.weight"], torch.ones(extra, 8)])
    torch.save({"user_embedding.weight": users, "item_embedding.weight": state["item_embedding.weight"]},
               folder / "all_seen.pt")
    everyone = np.array([(40 + u, i) for u in range(extra) for i in range(N_ITEMS)])
    both = np.concatenate([log, everyone])
    pq.write_table(pa.table({"user_id": both[:, 0].astype("int64"), "item_id": both[:, 1].astype("int64")}),
                   folder / "all_seen.parquet")
    return folder / "all_seen.pt", folder / "all_seen.parquet"


def test_users_trained_on_every_item_do_not_void_the_harm(tmp_path: Path) -> None:
    # QA measures F1: 120 such users of 220 voided the harm at every K (high -> moderate).
    model, log_file, log = _qa_cliff_model(tmp_path)
    all_seen, all_seen_log = _with_all_seen_users(tmp_path, log, 40)
    config = {"ks": (5, 53), "probes": False, "bootstrap": 0, "seed": 1}
    ref = run_audit(AuditConfig(model=model, interactions=log_file, **config))  # type: ignore[arg-type]
    got = run_audit(AuditConfig(model=all_seen, interactions=all_seen_log, **config))  # type: ignore[arg-type]
    assert ref.retrieval is not None and got.retrieval is not None
    assert got.retrieval.n_queries == 75 and got.retrieval.n_no_candidates == 40
    some = _saturated_by_hand(log, 53)
    assert got.retrieval.n_saturated == {5: 0, 53: some}  # was {5: 40, 53: 40 + some}
    assert got.retrieval.saturated == {5: False, 53: False}  # was True at both: 40 of 75
    candidates = np.sort(N_ITEMS - np.array([np.unique(log[log[:, 0] == u, 1]).size for u in range(35)]))
    graded = int(candidates[17]) - 1  # 18 of 35 queries (at least half) saturate from candidates[17] on
    assert _saturated_by_hand(log, graded) < 17.5 <= _saturated_by_hand(log, graded + 1)
    assert got.retrieval.graded_up_to == ref.retrieval.graded_up_to == graded
    for k in (5, 53):  # the 40 empty lists add no slot: the same head shares as without them
        for scoring in ("dot", "cosine"):
            for head in ("head_share_1pct", "head_share_10pct"):
                assert getattr(got.retrieval.at[k], scoring).get(head) == getattr(ref.retrieval.at[k], scoring).get(head)
    assert got.verdict.severity == ref.verdict.severity and got.verdict.quoted_k == ref.verdict.quoted_k == 5
    assert got.to_dict()["retrieval"]["graded_up_to"] == graded


def test_where_every_measured_k_is_saturated_the_summary_names_the_largest_k_that_grades(tmp_path: Path) -> None:
    model, log_file, _ = _model(tmp_path)
    table = pq.read_table(log_file)
    log = np.column_stack([table["user_id"].to_numpy(), table["item_id"].to_numpy()])
    users = np.unique(log[:, 0])
    candidates = np.sort([N_ITEMS - np.unique(log[log[:, 0] == u, 1]).size for u in users])
    graded = int(candidates[int(np.ceil(users.size / 2)) - 1]) - 1  # half the queries saturate from the next K on
    result = run_audit(AuditConfig(model=model, interactions=log_file, ks=(100,), probes=False, bootstrap=0, seed=1))
    assert result.retrieval is not None and result.retrieval.graded_up_to == graded
    assert (f"every list holds every candidate); K={graded} is the largest K that grades it (ks {graded}), so severity "
            "rests on the correlation") in result.verdict.summary


@pytest.mark.parametrize("n_users", [1, 30])
def test_where_no_queried_user_has_a_candidate_left_the_reports_say_so(tmp_path: Path, n_users: int) -> None:
    # QA measures N1: every queried user trained on every item: every list is empty, and the
    # summary read "the top-10% items get n/a vs n/a", the headline "fill n/a ... vs n/a".
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    items = rng.normal(size=(N_ITEMS, 8)) * np.linspace(1, 3, N_ITEMS)[:, None]
    torch.save({"user_embedding.weight": torch.tensor(rng.normal(size=(n_users, 8)), dtype=torch.float32),
                "item_embedding.weight": torch.tensor(items, dtype=torch.float32)}, tmp_path / "model.pt")
    log = np.array([(u, i) for u in range(n_users) for i in range(N_ITEMS) for _ in range(1 + i // 6)])  # norms' order
    pq.write_table(pa.table({"user_id": log[:, 0], "item_id": log[:, 1]}), tmp_path / "log.parquet")
    result = run_audit(AuditConfig(model=tmp_path / "model.pt", interactions=tmp_path / "log.parquet", ks=(5,),
                                   probes=False, bootstrap=0, seed=1))
    assert result.retrieval is not None
    assert result.retrieval.n_no_candidates == result.retrieval.n_queries == n_users
    assert np.isnan(result.retrieval.at[5].dot.get("head_share_10pct"))  # no slot: the figure is null in the JSON
    who = "the one queried user" if n_users == 1 else f"all {n_users} queried users"
    said = (f"no queried user has an unseen item left ({who} trained on every item, and training items are not "
            f"served; {setting('keep_seen')} measures it): no list is served")
    assert f"{said}, so the harm rule has nothing to grade and severity rests on the correlation" in result.verdict.summary
    assert f"{said}, so severity rests on the correlation" in headline(result)
    assert "n/a" not in result.verdict.summary and "n/a" not in headline(result)
    assert result.verdict.severity == "moderate"  # the correlation alone (rho > 0.5) gives at most moderate
    assert any(f"here {said}" in advice for advice in result.verdict.recommendations)

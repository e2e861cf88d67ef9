"""RecBole's route under a global split (RS with group_by none, TS): the test users who
have no training interaction are evaluated as RecBole's own test evaluates them, by their
stored (untrained) user rows with their validation items masked (QA6 served F1).

Known answer: a 30-line .inter whose ratio split [0.8, 0.1, 0.1] over the whole time-ordered
sequence is fixed by hand (lines 1-24 train, 25-27 valid, 28-30 test), a RecBole-shaped
checkpoint with fixed tables, and RecBole's metrics computed here in numpy.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from auditor.audit import run_audit
from auditor.config import AuditConfig
from auditor.result import AuditResult
from recbole_helpers import write_checkpoint

TRAIN = [(0, 0), (0, 1), (1, 2), (1, 3), (2, 4), (2, 5), (3, 6), (3, 7), (0, 2), (1, 4), (2, 6), (3, 0),
         (0, 3), (1, 5), (2, 7), (3, 1), (0, 4), (1, 6), (2, 0), (3, 2), (0, 6), (1, 0), (2, 1), (3, 3)]
VALID = [(4, 0), (4, 2), (0, 5)]
TEST = [(1, 7), (4, 3), (5, 6)]  # u1 trained; u4 only validated; u5 never seen before its test
N_USERS, N_ITEMS, KS = 6, 8, (2, 4)
GLOBAL = {"eval_args": {"split": {"RS": [0.8, 0.1, 0.1]}, "order": "TO", "group_by": "none", "mode": "full"}}


def _tables() -> tuple[np.ndarray, np.ndarray]:
    """User and item tables with their padding row 0 (RecBole's row r is user/item r - 1 here)."""
    rng = np.random.default_rng(7)
    return rng.normal(size=(N_USERS + 1, 3)), rng.normal(size=(N_ITEMS + 1, 3))


def _write(tmp_path: Path) -> tuple[Path, Path]:
    inter = tmp_path / "g.inter"
    rows = [f"u{u}\ti{i}\t{t}" for t, (u, i) in enumerate(TRAIN + VALID + TEST, start=1)]
    inter.write_text("user_id:token\titem_id:token\ttimestamp:float\n" + "\n".join(rows) + "\n", encoding="utf-8")
    model = tmp_path / "BPR-g.pth"
    write_checkpoint(model, "BPR", GLOBAL, N_USERS, N_ITEMS, dim=3, tables=_tables())
    return model, inter


def _expected() -> dict[int, dict[str, float]]:
    """RecBole's full-sort test: each test user ranks every item by dot product of the
    float32 tables, masking their train and valid items less their test items; one held-out
    item each, so recall = hit, NDCG = 1/log2(rank + 1), MRR = 1/rank (0 past K)."""
    users, items = (t.astype(np.float32) for t in _tables())
    seen = {u: {i for v, i in TRAIN + VALID if v == u} for u in range(N_USERS)}
    ranks = []
    for user, item in TEST:
        scores = users[user + 1] @ items[1:].T
        masked = np.array([i in seen[user] and i != item for i in range(N_ITEMS)])
        scores = np.where(masked, -np.inf, scores)
        ranks.append(1 + int((scores > scores[item]).sum()))
    out = {}
    for k in KS:
        hit = np.array([r <= k for r in ranks], dtype=float)
        inverse = np.array([1.0 / r if r <= k else 0.0 for r in ranks])
        ndcg = np.array([1.0 / np.log2(r + 1) if r <= k else 0.0 for r in ranks])
        out[k] = {"recall": hit.mean(), "ndcg": ndcg.mean(), "hit_rate": hit.mean(), "mrr": inverse.mean()}
    return out


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> AuditResult:
    model, inter = _write(tmp_path_factory.mktemp("global"))
    return run_audit(AuditConfig(model=model, interactions=inter, ks=KS, bootstrap=100, probes=False))


def test_untrained_test_users_are_evaluated_as_recbole_does(audited: AuditResult) -> None:
    """All three test users are evaluated (the old route evaluated u1 alone), with
    RecBole's figures at every K."""
    accuracy = audited.accuracy
    assert accuracy is not None
    assert accuracy.n_users_evaluated == 3 and accuracy.n_users_not_in_training == 0
    for k, expected in _expected().items():
        found = accuracy.at[k]["dot"]
        for name, value in expected.items():
            assert getattr(found, name) == pytest.approx(value, abs=1e-12), (k, name)
    assert "2 held-out users with no training interaction in RecBole's split" in accuracy.protocol


def test_exposure_keeps_to_the_trained_users_and_a_note_counts_the_untrained(audited: AuditResult) -> None:
    assert audited.retrieval is not None and audited.retrieval.n_queries == 4  # u0..u3 trained
    notes = [w for w in audited.warnings if "have no training interaction" in w]
    assert len(notes) == 1 and notes[0].startswith("2 of the 3 held-out users of ")
    assert "exposure and retrieval keep to the 4 queried (trained) users" in notes[0]


def test_popular_scoring_ranks_them_too(audited: AuditResult) -> None:
    """The most-popular list (training counts, masked as RecBole masks) of each test user:
    u1 masks i0, i2..i6 (i7 is its test item); u4 masks i0, i2; u5 nothing."""
    accuracy = audited.accuracy
    assert accuracy is not None
    counts = np.bincount([i for _, i in TRAIN], minlength=N_ITEMS)
    seen = {1: {0, 2, 3, 4, 5, 6}, 4: {0, 2}, 5: set()}
    hits = []
    for user, item in TEST:
        order = [i for i in np.lexsort((np.arange(N_ITEMS), -counts)) if i not in seen[user]]
        hits.append(order.index(item) + 1)
    assert hits == [2, 3, 2]
    assert accuracy.at[4]["popular"].mrr == pytest.approx(np.mean([1 / r for r in hits]))  # 0.4444 (u1 alone: 0.5)


def test_queried_only_drops_the_untrained_users_and_counts_them() -> None:
    """Lists of the queried users alone (a mitigated table's history queries) are scored
    without the untrained users, who are counted as absent from the training log again."""
    from auditor.model import HeldOutQueries, QueryPopulation

    untrained = QueryPopulation(vectors=np.ones((1, 2), dtype=np.float32), source="users", description="")
    heldout = HeldOutQueries(positions=np.array([1, 2, 0]), indptr=np.array([0, 2, 3, 4]), items=np.array([5, 6, 7, 8]),
                             source="s", user_ids=np.array([11, 12, 10]), n_not_in_training=1, n_queried=2,
                             untrained=untrained)
    queried = heldout.queried_only()
    assert queried.positions.tolist() == [1, 0] and queried.indptr.tolist() == [0, 2, 3]
    assert queried.user_ids.tolist() == [11, 10]  # the raw ids follow their users
    assert queried.items.tolist() == [5, 6, 8] and queried.n_not_in_training == 2 and queried.untrained is None


def _ranks(scorer: dict[int, list[int]]) -> dict[int, float]:
    """RecBole's figures at each K for one list per test user (``scorer``: user -> list)."""
    ranks = [scorer[user].index(item) + 1 if item in scorer[user] else 10**6 for user, item in TEST]
    return {k: float(np.mean([1.0 / np.log2(r + 1) if r <= k else 0.0 for r in ranks])) for k in KS}


def test_served_lists_beside_keep_recboles_population(tmp_path: Path) -> None:
    """QA6 served N1: with --recommendations the model's scorings still evaluate all three
    test users (the old route fell back to u1 alone: NDCG@2 dot 0.0 -> RecBole's figure);
    the served scoring scores the untrained users' own lists (u5's here) and counts a
    user without one (u4) as a miss."""
    model, inter = _write(tmp_path)
    recs = tmp_path / "recs.csv"
    served = {1: [7, 0, 1, 2], 5: [3, 6, 0, 1]}  # u1's hit at rank 1, u5's at rank 2; u4 has no list
    recs.write_text("user_id,item_id,rank\n" + "".join(
        f"u{u},i{i},{r}\n" for u, items in served.items() for r, i in enumerate(items, start=1)), encoding="utf-8")
    result = run_audit(AuditConfig(model=model, interactions=inter, recommendations=recs, ks=KS, bootstrap=100,
                                   probes=False))
    accuracy = result.accuracy
    assert accuracy is not None and accuracy.n_users_evaluated == 3
    for k, expected in _expected().items():
        assert accuracy.at[k]["dot"].ndcg == pytest.approx(expected["ndcg"], abs=1e-12), k
    for k, expected_ndcg in _ranks({**served, 4: []}).items():  # (1 + 1/log2(3) + 0) / 3 at K >= 2
        assert accuracy.at[k]["served"].ndcg == pytest.approx(expected_ndcg, abs=1e-12), k
    assert accuracy.at[2]["served"].ndcg == pytest.approx((1 + 1 / np.log2(3)) / 3)
    assert "the served scoring scores the list the file holds for each of them, and counts one without a list as a " \
           "miss" in accuracy.protocol
    note = next(w for w in result.warnings if "have a list in" in w)
    assert note.startswith("1 of the 2 held-out users with no training interaction in RecBole's split have a list")
    assert "the other 1 have none there, so they count as misses for the served scoring" in note
    assert f"1 of the 2 users in {recs} do not appear in the training log: their lists are in no per-K exposure figure" in (
        "\n".join(result.warnings))  # not "not measured": u5's list is scored for accuracy
    assert result.retrieval is not None and result.retrieval.n_queries == 4  # exposure: the trained users alone


def test_wording_names_the_vectors_recbole_scores_them_with(audited: AuditResult) -> None:
    """QA6 served N2: a stored-table model ranks them by its stored rows (said so), and the
    rows warning says they were not queried for exposure but evaluated for accuracy."""
    accuracy = audited.accuracy
    assert accuracy is not None
    assert "ranked by their stored user-table rows (never trained; RecBole scores them so)" in accuracy.protocol
    assert "stored (untrained) user rows" not in accuracy.protocol
    rows = [w for w in audited.warnings if "user-table rows belong to users who never appear" in w]
    assert rows == ["2 user-table rows belong to users who never appear in the training part of RecBole's split of "
                    f"{audited.inputs.interactions} (untrained vectors): they were not queried for exposure (2 of them "
                    "evaluated for accuracy)"]


def test_computed_vectors_are_named_as_such(tmp_path: Path) -> None:
    """A graph model or SimpleX serves computed user vectors: the untrained users are
    ranked by those, and the wording says so (not 'stored rows')."""
    from dataclasses import replace

    from auditor.loading import load_model
    from auditor.config import LoadOptions
    from auditor.loading.recbole_eval import _untrained_test_users, recbole_evaluation, recbole_population

    model, inter = _write(tmp_path)
    bundle = load_model(model, LoadOptions())
    config = AuditConfig(model=model, interactions=inter, ks=KS, probes=False)
    evaluation = recbole_evaluation(bundle, config)
    population = recbole_population(bundle, config, evaluation)
    assert bundle.user_table is not None
    computed = replace(bundle, user_table=bundle.user_table * 2.0)
    untrained = _untrained_test_users(bundle, computed, population, evaluation)
    assert untrained is not None and untrained.n_queries == 2
    assert untrained.what.startswith("the user vectors the model computes for them without training edges")
    np.testing.assert_array_equal(untrained.vectors, computed.user_table[[4, 5]].astype(np.float32))


def test_another_inter_than_the_run_read_is_warned(tmp_path: Path) -> None:
    """QA6 served N3: the checkpoint records dataset 'g' (RecBole read g.inter); auditing
    it with other.inter (same rows) runs, with a warning naming both files."""
    model, inter = _write(tmp_path)
    write_checkpoint(model, "BPR", {**GLOBAL, "dataset": "g", "data_path": str(tmp_path)}, N_USERS, N_ITEMS, dim=3,
                     tables=_tables())
    same = run_audit(AuditConfig(model=model, interactions=inter, ks=KS, bootstrap=0, probes=False))
    assert not [w for w in same.warnings if "is not the file the run of" in w]
    other = tmp_path / "other.inter"
    other.write_bytes(inter.read_bytes())
    result = run_audit(AuditConfig(model=model, interactions=other, ks=KS, bootstrap=0, probes=False))
    notes = [w for w in result.warnings if "is not the file the run of" in w]
    assert len(notes) == 1 and f"records dataset 'g', and RecBole reads {{data_path}}/{{dataset}}.inter ({inter})" in (
        notes[0])
    assert str(other) in notes[0] and result.accuracy is not None and result.accuracy.n_users_evaluated == 3


def test_diff_does_not_compare_accuracy_under_another_protocol(audited: AuditResult) -> None:
    """QA6 served N4: a report from before F1 (the untrained test users not evaluated: a
    protocol without that clause, NDCG@4 dot over u1 alone) against today's: the accuracy
    figures are flagged (setting accuracy.protocol), not read as "more accuracy"; the
    exposure figures stay compared."""
    import copy

    from auditor.diff import diff_reports
    from test_diff import as_json

    new = as_json(audited)
    old = copy.deepcopy(new)
    old["accuracy"]["protocol"] = new["accuracy"]["protocol"].split("; also evaluated")[0] + "; " + (
        new["accuracy"]["repeats"])
    old["accuracy"]["n_users_evaluated"] = 1
    old["accuracy"]["at"]["4"]["dot"]["ndcg"] = new["accuracy"]["at"]["4"]["dot"]["ndcg"] / 2
    diff = diff_reports(old, new)
    assert "accuracy.protocol" in [s.setting for s in diff.settings]
    ndcg = diff.metric("ndcg_dot@4")
    assert ndcg.status == "incomparable" and ndcg.delta is None and "accuracy.protocol differs" in (ndcg.reason or "")
    assert diff.metric("gini_dot@4").status == "compared" and diff.metric("gini_dot@4").delta == 0
    same = diff_reports(new, copy.deepcopy(new))
    assert same.metric("ndcg_dot@4").status == "compared" and not same.settings


def test_diff_keeps_comparing_the_scorings_when_served_lists_join(audited: AuditResult) -> None:
    """QA6 served N6: the protocol's clause for served lists concerns the served scoring
    alone, so the same model audited with and without a lists file keeps dot's accuracy
    compared (it was flagged with every other accuracy figure)."""
    import copy

    from auditor.diff import diff_reports
    from auditor.served_section import UNTRAINED_SERVED
    from test_diff import as_json

    new = as_json(audited)
    with_lists = copy.deepcopy(new)
    protocol = new["accuracy"]["protocol"]
    repeats = "; " + new["accuracy"]["repeats"]
    assert protocol.endswith(repeats)
    with_lists["accuracy"]["protocol"] = protocol.removesuffix(repeats) + f"; {UNTRAINED_SERVED}" + repeats
    diff = diff_reports(new, with_lists)
    assert "accuracy.protocol" not in [s.setting for s in diff.settings]
    assert diff.metric("ndcg_dot@4").status == "compared" and diff.metric("ndcg_dot@4").delta == 0


def test_lists_of_untrained_test_users_only_are_refused_for_what_they_are(tmp_path: Path) -> None:
    """QA6 served N5: a lists file holding lists only for RecBole's test users who never
    trained (u5 here) was refused as if its ids did not match the log's; it is refused
    because such lists count in accuracy alone and leave no service to expose."""
    from auditor.errors import IdMappingError

    model, inter = _write(tmp_path)
    recs = tmp_path / "recs.csv"
    recs.write_text("user_id,item_id,rank\n" + "".join(f"u5,i{i},{r}\n" for r, i in enumerate([3, 6, 0, 1], start=1)),
                    encoding="utf-8")
    with pytest.raises(IdMappingError) as refused:
        run_audit(AuditConfig(model=model, interactions=inter, recommendations=recs, ks=KS, bootstrap=0, probes=False))
    message = str(refused.value)
    assert "is a trained user of RecBole's split" in message and "count in accuracy alone" in message
    assert "the ids evidently do not match" not in message

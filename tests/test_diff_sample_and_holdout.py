"""`popaudit diff` where only what the model was measured against differs (QA report 9,
diff F1, F3, F7): another holdout file of the same size, another sample of queries, another
accuracy tolerance. The model file is the same in every audit here, so any "more" or
"less" the diff read would be the holdout's, the sample's or the tolerance's."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from scipy.stats import pearsonr

from auditor import AuditConfig, run_audit
from auditor.diff import ReportDiff, diff_reports, evaluate_diff_gates, flat_metrics_from_report, parse_diff_gates
from auditor.errors import ReportError, UnmeasuredGateError
from auditor.mitigation.run import MitigateConfig, mitigate
from auditor.report.diff_doc import diff_document

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data"


def _audit(model: Path = SAMPLE / "biased.pt", **settings: Any) -> dict[str, Any]:
    config = AuditConfig(model=model, interactions=SAMPLE / "interactions.parquet", ks=(10,),
                         probes=False, bootstrap=0, **settings)
    return json.loads(json.dumps(run_audit(config).to_dict()))  # as written and read back


def _holdout(path: Path, seed: int, by_popularity: bool) -> Path:
    """300 held-out pairs: items drawn by training popularity (the log's rows) or uniformly."""
    log = pq.read_table(SAMPLE / "interactions.parquet")
    users, items = log.column("user_id").to_numpy(), log.column("item_id").to_numpy()
    rng = np.random.default_rng(seed)
    pool = items if by_popularity else np.unique(items)
    pq.write_table(pa.table({"user_id": rng.choice(np.unique(users), 300), "item_id": rng.choice(pool, 300)}), path)
    return path


def _gate(diff: ReportDiff, gate: str, base: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether ``gate`` trips on the diff (UnmeasuredGateError where it cannot be evaluated)."""
    return evaluate_diff_gates(parse_diff_gates([gate], diff.flat()), diff, (base, new))[0].tripped


@pytest.fixture(scope="module")
def two_holdouts(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    folder = tmp_path_factory.mktemp("holdouts")
    return (_audit(holdout=_holdout(folder / "a.parquet", 1, True)),
            _audit(holdout=_holdout(folder / "b.parquet", 2, False)))


def test_another_holdout_file_of_the_same_size_makes_accuracy_incomparable(
        two_holdouts: tuple[dict[str, Any], dict[str, Any]]) -> None:
    base, new = two_holdouts
    assert base["accuracy"]["n_holdout_interactions"] == new["accuracy"]["n_holdout_interactions"] == 300
    ndcg_a, ndcg_b = (r["accuracy"]["at"]["10"]["dot"]["ndcg"] for r in (base, new))
    assert ndcg_a > ndcg_b > 0  # popular held-out items are hit more often: the old diff read "less accuracy"
    diff = diff_reports(base, new)
    change = diff.metric("ndcg_dot@10")
    assert (change.base, change.new, change.delta, change.status) == (ndcg_a, ndcg_b, None, "incomparable")
    assert change.reason is not None and change.reason.startswith("accuracy.holdout_fingerprint differs (")
    assert "accuracy.holdout_fingerprint" in [s.setting for s in diff.settings]  # its content (QA9 diff N2)
    assert all(m.status == "incomparable" for m in diff.metrics if m.name.startswith(("recall_dot", "ndcg_cos")))
    assert diff.metric("head_share_1pct_dot@10").status == "compared"  # the model's lists are the same lists
    with pytest.raises(UnmeasuredGateError, match="not comparable"):
        _gate(diff, "ndcg_dot@10.rel<-0.02", base, new)


def _skewed(path: Path) -> Path:
    """biased.pt with its 8 most-trained items given norms of 300 nearly orthogonal to the
    mean user: dot serves them, cosine does not (a high harm at K=10)."""
    state = torch.load(SAMPLE / "biased.pt", weights_only=False)
    items, users = state["item_embeddings"].clone(), state["user_embeddings"]
    mean = torch.nn.functional.normalize(users.mean(0), dim=0)
    least = torch.linalg.svd(users, full_matrices=False).Vh
    for j, row in enumerate(torch.argsort(state["item_frequencies"], descending=True)[:8]):
        away = least[-1 - j % 4]
        away = torch.nn.functional.normalize(away - (away @ mean) * mean, dim=0)
        items[row] = 300 * (0.08 * mean + (1 - 0.08**2) ** 0.5 * away)
    state["item_embeddings"] = items
    torch.save(state, path)
    return path


def test_a_severity_graded_at_k_against_one_without_retrieval_is_not_comparable(tmp_path: Path) -> None:
    """QA9 diff F2: the same model with ``--no-retrieval`` (the correlation alone, at most
    moderate) and at K=10 (the harm bands, high) read "moderate → high (more bias)"."""
    model = _skewed(tmp_path / "skewed.pt")
    without, at_ten = _audit(model, retrieval=False), _audit(model)
    assert (without["verdict"]["severity"], without["verdict"]["quoted_k"]) == ("moderate", None)
    assert (at_ten["verdict"]["severity"], at_ten["verdict"]["quoted_k"]) == ("high", 10)
    for base, new, side, other in ((without, at_ten, "new", "base"), (at_ten, without, "base", "new")):
        diff = diff_reports(base, new)
        assert diff.verdict.direction == "not comparable"
        assert diff.verdict.reason == (f"the {side} report's severity was graded at K=10, and the {other} measured no "
                                       "cut-off (no retrieval: its severity is graded by the norm–popularity "
                                       "correlation alone)")
        assert diff.graded is not None and (diff.graded.delta, diff.graded.status) == (None, "incomparable")
        with pytest.raises(UnmeasuredGateError, match="not comparable"):
            _gate(diff, "severity_level.delta>0", base, new)
    assert diff_reports(without, without).verdict.direction == "unchanged"  # neither measured a K: comparable


def test_another_sample_of_queries_makes_the_model_lists_and_verdict_incomparable() -> None:
    """QA9 diff F3: 50 of the 600 users drawn with seed 0 and with seed 1 read "high →
    moderate (less bias)" on one model, "their settings agree"; every user reads 4.1%."""
    seed0, seed1, every = _audit(max_queries=50, seed=0), _audit(max_queries=50, seed=1), _audit()
    shares = [r["retrieval"]["at"]["10"]["dot"]["head_share_1pct"] for r in (seed0, seed1, every)]
    assert shares[0] != shares[1] and (seed0["verdict"]["severity"], seed1["verdict"]["severity"]) == ("high", "moderate")
    diff = diff_reports(seed0, seed1)
    assert [(s.setting, s.base, s.new) for s in diff.settings] == [("retrieval.population.seed", 0, 1)]
    head = diff.metric("head_share_1pct_dot@10")
    assert (head.base, head.new, head.delta, head.status) == (shares[0], shares[1], None, "incomparable")
    assert diff.metric("spearman").status == "compared"  # the table's figures do not depend on the queries
    assert diff.verdict.direction == "not comparable" and "retrieval.population.seed differs (0 vs 1)" in str(diff.verdict.reason)
    with pytest.raises(UnmeasuredGateError, match="not comparable"):
        _gate(diff, "severity_level.delta!=0", seed0, seed1)
    more = diff_reports(seed0, _audit(max_queries=60, seed=0))  # a larger sample is another sample too
    assert [s.setting for s in more.settings] == ["retrieval.population.n_queries"]
    against_all = diff_reports(seed0, every)  # one sample against every user: compared, and said
    assert against_all.settings == () and against_all.metric("head_share_1pct_dot@10").status == "compared"
    assert ("only the base report sampled its queries (50 of 600, seed 0): its figures of the model's own lists, "
            "and the verdict graded on them, may move with the sample") in against_all.notes


@pytest.mark.parametrize(("field", "value", "shown"), [
    ("assessed", "false", '"false"'), ("assessed", None, "null"), ("quoted_k", "ten", '"ten"'),
    ("quoted_k", 10.0, "10.0"), ("quoted_k", 0, "0")])  # fmt: skip
def test_a_verdict_field_of_another_kind_is_refused(field: str, value: Any, shown: str) -> None:
    """QA9 diff F5: ``assessed: "false"`` read as assessed (a "less bias" gate tripped on an
    unassessed "none") and ``quoted_k: "ten"`` as no K (the change read "unchanged")."""
    report = _audit(max_queries=50)
    edited = copy.deepcopy(report)
    edited["verdict"].update({field: value, "severity": "none"})
    for base, new, side in ((report, edited, "new"), (edited, report, "base")):
        with pytest.raises(ReportError, match=rf"^{side} report {side}\.json: verdict\.{field} is {re.escape(shown)}, "):
            diff_reports(base, new, base_name="base.json", new_name="new.json")
    with pytest.raises(ReportError, match=rf"verdict\.{field} is"):
        flat_metrics_from_report(edited)


def test_no_key_figures_at_a_k_neither_report_measured() -> None:
    """QA9 diff F4: two ``--no-retrieval`` reports (settings.ks still [10]) were headed "Key
    figures at K=10" over a table of Spearman ρ and the log–log slope alone."""
    base, new = _audit(retrieval=False), _audit(SAMPLE / "control.pt", retrieval=False)
    assert base["settings"]["ks"] == [10] and base["retrieval"] is None
    doc = diff_document(diff_reports(base, new).to_dict())
    key = next(s for s in doc.sections if s.key == "key")
    assert key.title == "Key figures"
    table = key.blocks[0]
    assert [row[0] for row in table.rows] == ["spearman", "loglog_slope"]  # type: ignore[attr-defined]
    assert "K=" not in str(key)


def test_another_accuracy_tolerance_is_named_as_why_the_recommendation_moved(tmp_path: Path) -> None:
    """QA9 diff F7: tolerance 0.98 against 0.5 changed only the recommended scoring, shown
    as "Changed: recommended scoring" beside "their settings agree"."""
    holdout = _holdout(tmp_path / "held.parquet", 1, True)
    strict, lax = _audit(holdout=holdout), _audit(holdout=holdout, accuracy_tolerance=0.5)
    assert (strict["accuracy"]["recommended"], lax["accuracy"]["recommended"]) == ("dot", "alpha_0.5")
    diff = diff_reports(strict, lax)
    assert diff.settings == () and all(m.status != "incomparable" for m in diff.metrics)  # every figure compares
    assert diff.metric("ndcg_dot@10").delta == 0.0
    assert ("accuracy.tolerance differs (0.98 vs 0.5): the recommended scoring is chosen under another accuracy "
            "tolerance (the share of dot's NDCG it must keep), so it may change while no figure does") in diff.notes
    comparability = next(s for s in diff_document(diff.to_dict()).sections if s.key == "comparability")
    assert "their settings agree" not in str(comparability)


def test_pearson_log_has_no_direction_under_a_monotone_rescaling(tmp_path: Path) -> None:
    """QA9 diff F6: ``mitigate --alpha 0.5`` (norms ‖v‖^0.5: ρ and τ kept, the slope halved)
    raised Pearson(‖v‖, log(1 + f)) and the diff called it the one "more bias" figure."""
    mitigate(MitigateConfig(model=SAMPLE / "biased.pt", output=tmp_path / "fixed.pt", alpha=0.5))
    before, after = _audit(max_queries=50), _audit(tmp_path / "fixed.pt", max_queries=50)
    state = torch.load(SAMPLE / "biased.pt", weights_only=False)
    norms = state["item_embeddings"].double().norm(dim=1).numpy()
    log_f = np.log1p(state["item_frequencies"].double().numpy())
    expected = [pearsonr(norms, log_f)[0], pearsonr(norms**0.5, log_f)[0]]
    assert [r["frequency_norm"]["pearson_log"] for r in (before, after)] == pytest.approx(expected, abs=1e-6)
    assert expected[1] > expected[0]  # the cure raised it
    change = diff_reports(before, after).metric("pearson_log")
    assert change.delta == pytest.approx(expected[1] - expected[0], abs=1e-6) and change.direction == "neutral"
    assert diff_reports(before, after).metric("spearman").direction == "unchanged"

"""`popaudit diff` reads what a severity judges from the report's own ``verdict.graded_by``
(QA11 diffapi F2): one model audited alone (graded by its own serving) and with served lists
beside it that graded worse (``graded_by`` ``served``) read "moderate → high (more bias)"
and tripped a severity gate, with no figure of the model changed."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from auditor import AuditConfig, run_audit
from auditor.diff import diff_reports, evaluate_diff_gates, parse_diff_gates
from auditor.errors import UnmeasuredGateError
from auditor.report.diff_doc import lead_sentence
from diff_samples import biased_table_report


def test_a_severity_the_served_lists_graded_is_not_compared_with_the_models_own(tmp_path: Path) -> None:
    biased_table_report(tmp_path)  # its log; the model below serves by direction alone (unit norms)
    rng = np.random.default_rng(11)
    directions = rng.standard_normal((200, 8))
    np.save(tmp_path / "flat.npy", (directions / np.linalg.norm(directions, axis=1, keepdims=True)).astype(np.float32))
    config = AuditConfig(model=tmp_path / "flat.npy", interactions=tmp_path / "log.parquet", ks=(10,), probes=False,
                         bootstrap=0)
    alone = json.loads(json.dumps(run_audit(config).to_dict()))
    counts = np.bincount(pq.read_table(tmp_path / "log.parquet")["item_id"].to_numpy(), minlength=200)
    top = np.argsort(-counts, kind="stable")[:10]  # every user is served the 10 most popular items
    pq.write_table(pa.table({"user_id": np.repeat(np.arange(40), 10), "item_id": np.tile(top, 40),
                             "rank": np.tile(np.arange(1, 11), 40)}), tmp_path / "recs.parquet")
    result = run_audit(replace(config, recommendations=tmp_path / "recs.parquet"))
    beside = json.loads(json.dumps(result.to_dict()))
    # The top 1% of 200 items is 2 items, both in every list: 2 of 10 slots; the log gives them its share.
    head = counts >= np.sort(counts)[::-1][1]
    assert beside["retrieval"]["at"]["10"]["served"]["head_share_1pct"] == pytest.approx(np.isin(top, np.flatnonzero(head)).mean())
    assert beside["served"]["head_share_log"] == pytest.approx(counts[head].sum() / counts.sum())
    assert (alone["verdict"]["graded_by"], beside["verdict"]["graded_by"]) == ("model", "served")
    assert (alone["verdict"]["severity"], beside["verdict"]["severity"]) == ("none", "low")
    assert beside["retrieval"]["at"]["10"]["dot"] == alone["retrieval"]["at"]["10"]["dot"]  # the model is the same
    diff = diff_reports(alone, beside)
    verdict = diff.verdict
    assert (verdict.direction, verdict.base_basis, verdict.new_basis) == ("not comparable", "model", "served lists")
    assert "graded by the model's own serving" in (verdict.reason or "") and "by the served lists" in (verdict.reason or "")
    names = [*(m.name for m in diff.metrics), "severity_level"]
    with pytest.raises(UnmeasuredGateError, match="not comparable: the verdicts: the base's severity was graded by"):
        evaluate_diff_gates(parse_diff_gates(["severity_level.delta>0"], names), diff)
    assert diff_reports(beside, alone).verdict.direction == "not comparable"
    # Both took the worse of the model's and the lists' grades: one rule, whichever graded worse.
    model_graded = copy.deepcopy(beside)
    model_graded["verdict"].update(graded_by="model", severity="none")
    both = diff_reports(model_graded, beside).verdict
    assert (both.direction, both.base_basis, both.new_basis, both.reason) == ("more bias", "model", "served lists", None)


def test_the_lead_sentence_gives_the_verdicts_own_reason(tmp_path: Path) -> None:
    """QA11 diffapi N1: two reports whose served lists beside a model graded worse in one and
    not the other compare (the worse of both); read through another item mapping they do not,
    and the lead sentence gave the two bases as why, not the mapping the verdict names."""
    base = biased_table_report(tmp_path)
    base["served"] = {"head_share_log": 0.2}
    base["verdict"].update(graded_by="model", severity="none")
    new = copy.deepcopy(base)
    new["verdict"].update(graded_by="served", severity="low")
    new["inputs"].update(item_id_mapping="item rows mapped through --item-ids ids.txt", item_ids="ids.txt",
                         item_id_fingerprint="sha256:" + "1" * 64)  # other ids than the rows' own (QA12 scale N2)
    diff = diff_reports(base, new).to_dict()
    assert diff["verdict"]["direction"] == "not comparable"
    assert "inputs.item_id_mapping differs" in diff["verdict"]["reason"]
    lead = lead_sentence(diff, diff["metrics"])
    assert lead.startswith(f"Verdict severity none → low (not comparable: {diff['verdict']['reason']}). ")
    assert "judges" not in lead

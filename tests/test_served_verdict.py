"""Served lists beside a model grade the verdict too (QA batchlists F10): the lists are what
users met, so the severity is the worse of the model's own serving and the served lists'
amplification (the lists-only rule), and ``head_share_log`` is a flat name in both routes.

Known answers: a log where item 0 holds 30 of the 120 interactions (the top 1% of a 100-item
catalogue is that one item: 25%), and lists that give item 0 one of every user's 2 slots
(50%: 2× and +25 points, "high"); a model of equal-norm items, whose dot serving is its
cosine serving (no harm of its own).

Beside a model the served figures count the same users as the lists alone (QA batchlists
F11): ``overlap_served_*`` leaves out the queried users the file has no list for (counted in
``served.n_queried_without_list``), and ``served.short_lists`` is filled in both routes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from auditor.audit import run_audit
from auditor.config import AuditConfig
from auditor.gate import evaluate_gates, gates_for
from auditor.report.content import headline
from auditor.report.served_lists import GRADED_BESIDE_POINTER, pointer

N_ITEMS, N_USERS, DIM = 100, 30, 6


def _files(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Unit-norm item and user tables, the log (item 0: 30 of 120 interactions), hot lists."""
    rng = np.random.default_rng(7)
    items = rng.standard_normal((N_ITEMS, DIM))
    items /= np.linalg.norm(items, axis=1, keepdims=True)
    model = tmp_path / "model.pt"
    import torch

    torch.save({"item_embedding.weight": torch.from_numpy(items.astype(np.float32)),
                "user_embedding.weight": torch.from_numpy(rng.standard_normal((N_USERS, DIM)).astype(np.float32))}, model)
    # Item 0: 30 interactions (one per user); items 1..90: one each, by users i % 30.
    users = np.concatenate([np.arange(N_USERS), np.arange(90) % N_USERS])
    logged = np.concatenate([np.zeros(N_USERS, dtype=np.int64), np.arange(1, 91)])
    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": users, "item_id": logged}), log)
    # Every user is served item 0 first, then one item it never trained on (91..99).
    lists = tmp_path / "lists.csv"
    second = 91 + np.arange(N_USERS) % 9
    pacsv.write_csv(pa.table({"user_id": np.repeat(np.arange(N_USERS), 2),
                              "item_id": np.column_stack([np.zeros(N_USERS, dtype=np.int64), second]).ravel(),
                              "rank": np.tile([1, 2], N_USERS)}), lists)
    return model, log, lists


def test_served_lists_beside_a_model_grade_the_severity_as_alone(tmp_path: Path) -> None:
    model, log, lists = _files(tmp_path)
    common = dict(interactions=log, recommendations=lists, ks=(2,), probes=False, bootstrap=0)
    alone = run_audit(AuditConfig(model=None, **common))  # type: ignore[arg-type]
    beside = run_audit(AuditConfig(model=model, **common))  # type: ignore[arg-type]
    bare = run_audit(AuditConfig(model=model, interactions=log, ks=(2,), probes=False, bootstrap=0))
    assert alone.verdict.severity == "high" and bare.verdict.severity == "none"
    # The model alone grades none; its served lists grade high, as they do alone.
    assert beside.verdict.severity == "high" and beside.verdict.bias_detected
    assert beside.verdict.graded_by == "served" and alone.verdict.graded_by == "served"
    assert beside.verdict.summary.startswith(
        "The served lists amplify popularity: the served lists give the top-1% most popular items 50.0% of their "
        "top-2 slots, against 25.0% of the training interactions, 2.00×")
    assert "severity high is theirs (the model's own serving grades none)" in beside.verdict.summary
    assert beside.to_dict()["verdict"]["graded_by"] == "served"
    assert headline(beside).startswith("Popularity bias detected in the served lists (severity high): ")
    assert "served lists: top-1% items' share of the served top-2 slots 50.0% vs 25.0% of the training " \
           "interactions, which graded the severity" in headline(beside)
    assert pointer(beside) == GRADED_BESIDE_POINTER and pointer(bare) is None
    # head_share_log is a flat name beside a model too, equal to the lists-alone figure.
    for result in (alone, beside):
        assert result.flat_metrics()["head_share_log"] == pytest.approx(30 / 120)
        assert result.flat_metrics()["head_share_1pct_served@2"] == pytest.approx(0.5)
    gates = gates_for(["severity_level>=1", "head_share_log>0.2"], (2,))
    assert all(line.tripped for line in evaluate_gates(gates, beside.flat_metrics()))


def test_served_lists_that_skew_less_than_the_model_are_quoted_not_grading(tmp_path: Path) -> None:
    """Lists without the head item (0% of their slots): the model's verdict stands, the
    served figures are quoted after it."""
    model, log, _ = _files(tmp_path)
    cold = tmp_path / "cold.csv"
    pacsv.write_csv(pa.table({"user_id": np.arange(N_USERS), "item_id": 91 + np.arange(N_USERS) % 9,
                              "rank": np.ones(N_USERS, dtype=np.int64)}), cold)
    result = run_audit(AuditConfig(model=model, interactions=log, recommendations=cold, ks=(1,), probes=False,
                                   bootstrap=0))
    assert result.verdict.graded_by == "model" and result.verdict.severity == "none"
    assert result.verdict.summary.endswith(
        "Served lists: the served lists give the top-1% most popular items 0.0% of their top-1 slots, against 25.0% "
        "of the training interactions, 0.00× (the most-popular list: 0.0%); they do not amplify popularity beyond "
        "the log (severity none by themselves).")


def test_overlaps_and_short_lists_count_listed_users_only(tmp_path: Path) -> None:
    model, log, _ = _files(tmp_path)
    # Lists for users 0..14 only: users 0..4 are served item 0 alone, users 5..14 item 1 then item 91.
    users = [*range(15), *range(5, 15)]
    items = [0] * 5 + [1] * 10 + [91] * 10
    ranks = [1] * 15 + [2] * 10
    lists = tmp_path / "half.csv"
    pacsv.write_csv(pa.table({"user_id": users, "item_id": items, "rank": ranks}), lists)
    common = dict(interactions=log, recommendations=lists, ks=(2,), probes=False, bootstrap=0)
    alone = run_audit(AuditConfig(model=None, **common))  # type: ignore[arg-type]
    beside = run_audit(AuditConfig(model=model, **common))  # type: ignore[arg-type]
    assert beside.served is not None and beside.served.n_queried_without_list == N_USERS - 15
    # Popular lists skip each user's training items (item 0, and u+1, u+31, u+61 for user u): users 5..14
    # get items 1 and 2, so their served item 1 is half their list; users 0..4 share nothing. Over the
    # 15 users with a list: 10 * 0.5 / 15 = 1/3 in both routes (the old mean over all 30 queried users: 1/6).
    flat_alone, flat_beside = alone.flat_metrics(), beside.flat_metrics()
    assert flat_alone["overlap_served_popular@2"] == pytest.approx(1 / 3)
    assert flat_beside["overlap_served_popular@2"] == pytest.approx(1 / 3)
    # Users 0..4 fill one of their two slots: short at K=2, in both routes.
    assert beside.to_dict()["served"]["short_lists"] == {"2": 5} == alone.to_dict()["served"]["short_lists"]
    # The warnings say the same counts and what they count (QA batchlists F11 nit): the file's rows as read, and
    # beside the model the 15 queried users' lists at K=2 (5 short), as served.short_lists.
    read = [w for w in beside.warnings if w.startswith("5 of the 15 lists in ")
            and "half.csv hold fewer than 2 items as the file gives them" in w]
    assert len(read) == 1 and "served.short_lists" in read[0], beside.warnings
    assert any(w.startswith("at K=2, 5 of the 15 queried users' served lists") for w in beside.warnings), beside.warnings
    assert any(w.startswith("at K=2, 5 of the 15 served lists hold fewer than 2 items") for w in alone.warnings)


def test_lists_alone_are_graded_by_the_served_lists_and_diff_reads_older_reports(tmp_path: Path) -> None:
    """QA6 served F2: without a model, ``verdict.graded_by`` is ``served`` (was ``model``,
    naming a model that does not exist), in the JSON and the headline; a diff against a
    report written with the old ``model`` reads the same basis and the same verdict."""
    import copy

    from auditor.diff import diff_reports

    _, log, lists = _files(tmp_path)
    alone = run_audit(AuditConfig(model=None, interactions=log, recommendations=lists, ks=(2,), probes=False,
                                  bootstrap=0))  # type: ignore[arg-type]
    report = alone.to_dict()
    assert report["verdict"]["graded_by"] == "served" and report["verdict"]["severity"] == "high"
    assert headline(alone).startswith("Popularity bias detected in the served lists (severity high): ")
    older = copy.deepcopy(report)
    older["verdict"]["graded_by"] = "model"  # what earlier versions wrote for lists alone
    for base, new in ((older, report), (report, older)):
        verdict = diff_reports(base, new).verdict
        assert verdict.base_basis == verdict.new_basis == "served lists"
        assert verdict.direction == "unchanged" and not verdict.changed

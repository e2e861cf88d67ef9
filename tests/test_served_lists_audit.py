"""`popaudit check --recommendations` (issue #21 item 4): served lists audited alone (no
model) and beside a model as the `served` scoring, through run_audit and the CLI.

Known answers: a served-lists file written from the model's own dot top-K gives the
audit's dot figures (exposure, accuracy, overlap 1 with dot); the lists-only figures of
the fixture equal what RecTools recorded (tests/data/served_lists/expected.json)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from auditor.audit import run_audit
from auditor.cli import cli
from auditor.config import AuditConfig
from auditor.errors import InputError
from auditor.result import AuditResult

DATA = Path(__file__).resolve().parent / "data" / "served_lists"
EXPECTED = json.loads((DATA / "expected.json").read_text())
KS = (1, 5, 10)
N_ITEMS, N_USERS, DIM = 60, 40, 8


def _invoke(*args: object) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _model(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A biased table with a user table, its Zipf log (raw item ids 700 + row) and a holdout."""
    rng = np.random.default_rng(4)
    popularity = (25 / np.arange(1, N_ITEMS + 1) ** 0.9).astype(int) + 1
    directions = rng.standard_normal((N_ITEMS, DIM))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    items = (directions * np.log1p(popularity)[:, None]).astype(np.float32)
    users = rng.standard_normal((N_USERS, DIM)).astype(np.float32)
    rows = np.repeat(np.arange(N_ITEMS), popularity)
    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": rng.integers(0, N_USERS, rows.size), "item_id": rows}), log)
    holdout = tmp_path / "holdout.parquet"
    pq.write_table(pa.table({"user_id": np.arange(N_USERS), "item_id": rng.integers(0, N_ITEMS, N_USERS)}), holdout)
    model = tmp_path / "model.pt"
    import torch

    torch.save({"item_embedding.weight": torch.from_numpy(items), "user_embedding.weight": torch.from_numpy(users)}, model)
    return model, log, holdout


def _dot_lists(tmp_path: Path, population_ids: np.ndarray, lists: np.ndarray) -> Path:
    """The audit's dot top-K as a served-lists file (rank column, rows shuffled)."""
    query, slot = np.nonzero(lists >= 0)
    order = np.random.default_rng(1).permutation(query.size)
    query, slot = query[order], slot[order]
    path = tmp_path / "served.csv"
    table = pa.table({"user_id": population_ids[query], "item_id": lists[query, slot], "rank": slot + 1})
    pacsv.write_csv(table, path)
    return path


@pytest.fixture()
def dot_file(tmp_path: Path) -> tuple[Path, Path, Path, Path, AuditResult]:
    """The model, its log and holdout, the audit of the model alone, and its dot top-10 as a file."""
    from auditor.loading.inputs import load_inputs
    from auditor.plugins import get_plugin_manager
    from auditor.retrieval import measure_retrieval

    model, log, holdout = _model(tmp_path)
    config = AuditConfig(model=model, interactions=log, holdout=holdout, ks=KS, probes=False, bootstrap=0)
    result = run_audit(config)
    inputs = load_inputs(config, get_plugin_manager(()))
    assert inputs.population is not None and inputs.stats is not None and inputs.population.raw_ids is not None
    outcome = measure_retrieval(inputs.bundle, inputs.stats, config, inputs.population)
    path = _dot_lists(tmp_path, inputs.population.raw_ids, outcome.lists["dot"])
    return model, log, holdout, path, result


def test_keep_seen_counts_every_users_training_items_for_the_served_lists(
    dot_file: tuple[Path, Path, Path, Path, AuditResult],
) -> None:
    """With --keep-seen every user's training items are PopRSP candidates of the served lists,
    as of the model's scorings (QA harms N1: one rule for every list of a report), and the
    same lists audited alone with --keep-seen give the same figure (the known answer is in
    test_served_population_groups.py; here every list is all short head, so PopRSP is 1 under
    either denominator)."""
    model, log, holdout, served, _ = dot_file
    kept = run_audit(AuditConfig(model=model, interactions=log, holdout=holdout, ks=KS, probes=False, bootstrap=0,
                                 recommendations=served, keep_seen=True))
    lists_kept = run_audit(AuditConfig(model=None, interactions=log, holdout=holdout, ks=KS, probes=False, bootstrap=0,
                                       recommendations=served, keep_seen=True))
    assert kept.retrieval is not None and lists_kept.served is not None
    for k in KS:
        beside = kept.retrieval.at[k].norm_aware["served"]["pop_rsp"]
        assert beside == pytest.approx(lists_kept.served.at[k].served["pop_rsp"])


def test_served_dot_lists_beside_the_model_equal_its_dot_scoring(dot_file: tuple[Path, Path, Path, Path, AuditResult]) -> None:
    model, log, holdout, served, alone = dot_file
    config = AuditConfig(model=model, interactions=log, holdout=holdout, ks=KS, probes=False, bootstrap=0,
                         recommendations=served)
    result = run_audit(config)
    assert result.retrieval is not None and alone.retrieval is not None and result.accuracy is not None
    for k in KS:
        cut = result.retrieval.at[k]
        assert dict(cut.norm_aware["served"]) == pytest.approx(dict(alone.retrieval.at[k].dot)), k
        assert dict(cut.dot) == pytest.approx(dict(alone.retrieval.at[k].dot))  # the lists change no other figure
        assert cut.overlap_served["dot"] == 1.0
        assert cut.overlap_served["cosine"] == pytest.approx(cut.overlap_dot_cosine)
        assert result.accuracy.at[k]["served"] == result.accuracy.at[k]["dot"], k
    assert result.accuracy.recommended != "served"  # a reference point, never a way to serve
    flat = result.flat_metrics()
    assert flat["head_share_1pct_served@10"] == flat["head_share_1pct_dot@10"]
    assert flat["overlap_served_dot@10"] == 1.0 and flat["ndcg_served@10"] == flat["ndcg_dot@10"]
    assert result.served is not None and result.served.n_queried_without_list == 0
    assert result.served.n_users == N_USERS and result.served.longest == max(KS)


def test_served_lists_beside_a_model_are_not_measured_above_their_length(
    tmp_path: Path, dot_file: tuple[Path, Path, Path, Path, AuditResult]
) -> None:
    """Lists of 10 beside a model audited at K=20: the served scoring is measured at K <= 10
    only (as lists alone are), never over the 10 slots as if they were 20: no served figure,
    overlap or accuracy at 20, a warning saying so, and a gate there is not measured (exit 1)."""
    model, log, holdout, served, alone = dot_file
    config = AuditConfig(model=model, interactions=log, holdout=holdout, ks=(10, 20), probes=False, bootstrap=0,
                         recommendations=served)
    result = run_audit(config)
    assert result.retrieval is not None and result.accuracy is not None and alone.retrieval is not None
    assert dict(result.retrieval.at[10].norm_aware["served"]) == pytest.approx(dict(alone.retrieval.at[10].dot))
    assert "served" not in result.retrieval.at[20].norm_aware and result.retrieval.at[20].overlap_served == {}
    assert "served" in result.accuracy.at[10] and "served" not in result.accuracy.at[20]
    flat = result.flat_metrics()
    assert "head_share_1pct_served@10" in flat and "head_share_1pct_dot@20" in flat
    assert flat["head_share_1pct_served@10"] is not None
    served_20 = [name for name in flat if "served" in name and name.endswith("@20")]
    assert "head_share_1pct_served@20" in served_20 and all(flat[name] is None for name in served_20)
    assert any(re.search(r"not measured at K=20 \(\S+ 10 measures them", w) for w in result.warnings), result.warnings
    gate = _invoke("check", model, "--interactions", log, "--recommendations", served, "-k", "10", "-k", "20",
                   "--bootstrap", "0", "--no-probes", "-q", "--fail-on", "head_share_1pct_served@20>0.5")
    assert gate.exit_code == 1 and "the served lists are shorter than K=20, which is not measured for them (gate " \
        "head_share_1pct_served@10)" in gate.stderr, gate.output


def test_served_dot_lists_alone_give_the_models_dot_figures(dot_file: tuple[Path, Path, Path, Path, AuditResult]) -> None:
    _model_path, log, holdout, served, alone = dot_file
    # The user- and item-side measures read the training profiles and, with the holdout, the held-out items.
    result = run_audit(AuditConfig(model=None, interactions=log, ks=KS, recommendations=served, holdout=holdout))
    assert result.served is not None and alone.retrieval is not None
    assert result.retrieval is None and result.frequency_norm is None and result.conditions is None
    assert {"frequency_norm", "dot_cosine", "conditions", "probes"} <= set(result.not_measured)
    report = result.to_dict()  # the JSON's retrieval section holds the served lists as the scoring `served`
    assert report["retrieval"]["at"]["10"]["served"] == pytest.approx(dict(alone.retrieval.at[10].dot))
    assert "dot" not in report["retrieval"]["at"]["10"] and "retrieval" not in report["not_measured"]
    for k in KS:  # every table item is in the log: only the row numbering differs, and no figure depends on it
        assert dict(result.served.at[k].served) == pytest.approx(dict(alone.retrieval.at[k].dot)), k


@pytest.mark.parametrize("k", EXPECTED["ks"])
def test_lists_alone_equal_rectools_figures(k: int) -> None:
    expected = EXPECTED["rectools"][str(k)]
    result = run_audit(AuditConfig(model=None, interactions=DATA / "train.csv", ks=tuple(EXPECTED["ks"]),
                                   recommendations=DATA / "recs.csv"))
    flat = result.flat_metrics()
    assert flat[f"arp_served@{k}"] == pytest.approx(expected["AvgRecPopularity"])
    assert flat[f"novelty_served@{k}"] == pytest.approx(expected["MeanInvUserFreq"])
    assert flat[f"coverage_served@{k}"] == pytest.approx(expected["CatalogCoverage_normalized"])


def test_lists_alone_verdict_compares_the_served_head_with_the_log() -> None:
    result = run_audit(AuditConfig(model=None, interactions=DATA / "train.csv", ks=(1, 3, 5, 10),
                                   recommendations=DATA / "recs_scores.csv"))
    served = result.served
    assert served is not None and sorted(served.at) == [1, 3, 5]  # K=10 measured at the longest list, 5
    assert any("K=10 exceeds the longest served list" in w for w in result.warnings)
    # The head: item 101 (1% of 32 items, ties at the cut in), 111 of the 400 interactions.
    assert served.head_share_log == pytest.approx(111 / 400)
    assert result.verdict.severity == "none" and not result.verdict.bias_detected
    assert result.verdict.quoted_k in served.at and "docs/served-lists.md" in result.verdict.rule
    # 2.2% of the top-3 slots against 27.8% of the interactions: the ratio in the report's sign, ×
    assert "27.8% of the training interactions, 0.08× (the most-popular list" in result.verdict.summary
    assert served.at[5].n_short_lists == 2 and served.shortest == 3 and served.longest == 5


def test_popular_lists_served_as_they_are_amplify_popularity(tmp_path: Path) -> None:
    # Every user served the log's 3 most popular items: the top-1% item takes a third of the slots.
    users = np.repeat(np.arange(1, 11), 3)
    recs = tmp_path / "popular.csv"
    recs.write_text("user_id,item_id,rank\n" + "".join(
        f"{u},{i},{r}\n" for u, (i, r) in zip(users, [(101, 1), (102, 2), (103, 3)] * 10)))
    result = run_audit(AuditConfig(model=None, interactions=DATA / "train.csv", ks=(1, 3),
                                   recommendations=recs))
    assert result.served is not None
    assert result.served.at[1].served["head_share_1pct"] == 1.0
    assert result.verdict.severity == "high" and result.verdict.bias_detected
    assert result.verdict.quoted_k == 1


def test_settings_a_lists_alone_audit_refuses() -> None:
    with pytest.raises(InputError, match="--recommendations|recommendations"):
        AuditConfig(model=None, interactions=DATA / "train.csv")
    with pytest.raises(InputError, match="interactions"):
        AuditConfig(model=None, recommendations=DATA / "recs.csv")
    with pytest.raises(InputError, match="rank.col"):
        AuditConfig(model=Path("m.npy"), rank_col="rank")


def test_cli_lists_alone_gates_and_reports(tmp_path: Path) -> None:
    base = ["check", "--recommendations", DATA / "recs.csv", "--interactions", DATA / "train.csv", "-k", "3", "-q"]
    report = tmp_path / "report.json"
    tripped = _invoke(*base, "--json", report, "--fail-on", "head_share_1pct_served@3>0.02")
    assert tripped.exit_code == 3, tripped.output
    assert json.loads(report.read_text())["retrieval"]["at"]["3"]["served"]["arp"] == pytest.approx(
        EXPECTED["rectools"]["3"]["AvgRecPopularity"])
    held = _invoke(*base, "--fail-on", "head_share_1pct_served@3>0.05", "--fail-on", "arp_popular@3<10")
    assert held.exit_code == 0, held.output
    for fmt in ("markdown", "html"):
        out = tmp_path / f"report.{fmt}"
        assert _invoke(*base, "--format", fmt, "-o", out).exit_code == 0
        text = out.read_text()
        assert "Served lists" in text and "Not measured" in text and "no model" in text
    unmeasured = _invoke(*base, "--fail-on", "spearman>0.5")
    assert unmeasured.exit_code == 1 and "spearman" in unmeasured.output


def test_the_suggested_gate_runs_as_printed_on_short_lists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lists of at most 5 items are measured at K=5 for the default K=10 and 100: the
    "Next:" line's gate is the verdict's own grade, measured whatever the Ks (a head-share
    gate named @10, which exits 1 as not measured), and the command runs as printed."""
    monkeypatch.chdir(tmp_path)  # the suggested report.html and report.json land here
    ran = _invoke("check", "--recommendations", DATA / "recs.csv", "--interactions", DATA / "train.csv")
    assert ran.exit_code == 0, ran.output
    command = next(line for line in ran.stderr.splitlines() if line.startswith("Next: ")).removeprefix("Next: ")
    assert "--fail-on 'severity_level>=1'" in command and " -k " not in command
    rerun = _invoke(*shlex.split(command)[1:])
    severity = json.loads((tmp_path / "report.json").read_text())["verdict"]["severity"]
    assert rerun.exit_code == (0 if severity == "none" else 3), rerun.output  # the gate trips as the verdict does
    assert json.loads((tmp_path / "report.json").read_text())["retrieval"]["at"]["5"]["served"]["head_share_1pct"] >= 0
    assert (tmp_path / "report.html").is_file()


def test_cli_usage_errors() -> None:
    missing = CliRunner().invoke(cli, ["check", "--interactions", str(DATA / "train.csv")])
    assert missing.exit_code == 2 and "MODEL" in missing.output and "--recommendations" in missing.output
    stray = CliRunner().invoke(cli, ["check", "--interactions", str(DATA / "train.csv"), "--recommendations",
                                     str(DATA / "recs.csv"), "--rank-col", "rank", "--score-col", "score"])
    assert stray.exit_code == 1 and "not both" in stray.output
    lone = CliRunner().invoke(cli, ["check", "m.npy", "--score-col", "score"])
    assert lone.exit_code == 2 and "--recommendations" in lone.output


def test_cli_rank_and_score_columns(tmp_path: Path) -> None:
    renamed = tmp_path / "renamed.csv"
    text = (DATA / "recs_scores.csv").read_text().replace("score", "how_good", 1)
    renamed.write_text(text)
    report = tmp_path / "r.json"
    base = ["check", "--recommendations", renamed, "--interactions", DATA / "train.csv", "-k", "5", "-q"]
    unnamed = _invoke(*base)
    assert unnamed.exit_code == 1 and "--score-col" in unnamed.output
    named = _invoke(*base, "--score-col", "how_good", "--json", report)
    assert named.exit_code == 0, named.output
    written = json.loads(report.read_text())
    assert written["served"]["order"] == "score column 'how_good'"
    assert written["retrieval"]["at"]["5"]["served"]["arp"] == pytest.approx(EXPECTED["rectools"]["5"]["AvgRecPopularity"])


@pytest.mark.slow  # a batch run: about 20 s on two shared cores
def test_batch_recommendations_column(tmp_path: Path, dot_file: tuple[Path, Path, Path, Path, AuditResult]) -> None:
    model, log, _holdout, served, alone = dot_file
    manifest = tmp_path / "manifest.csv"
    manifest.write_text(
        "label,model,recommendations,interactions,k\n"
        f"alone,,{DATA / 'recs.csv'},{DATA / 'train.csv'},\"1,3,5\"\n"
        f"beside,{model},{served},{log},10\n"
        f"lists-of-the-model,,{served},{log},10\n"
        f"nothing,,,{log},10\n"
    )
    results = tmp_path / "results.parquet"
    # Rows 1 and 2 ask for K=10 only and row 3 has no lists: known from the manifest, so the gate is refused
    # (exit 1) before any audit, naming each row's remedy (QA batchlists F2b).
    run = _invoke("batch", manifest, "-o", results, "--bootstrap", "0", "--no-probes", "-q",
                  "--fail-on", "head_share_1pct_served@5>0.5")
    assert run.exit_code == 1 and not results.exists(), run.output
    assert ("head_share_1pct_served@5>0.5: no served lists were given for row 3 (pass the recommendations column); "
            "K=5 was not asked for (add 5 to the k cells of rows 1, 2 (a row's k cell overrides -k for that row))"
            in run.stderr), run.stderr
    run = _invoke("batch", manifest, "-o", results, "--bootstrap", "0", "--no-probes", "-q")
    assert run.exit_code == 0 and "row 3 (no model) failed" in run.stderr, run.output
    table = pq.read_table(results).to_pylist()
    by_label = {row["label"]: row for row in table}
    assert by_label["alone"]["status"] == "ok" and by_label["beside"]["status"] == "ok"
    assert by_label["alone"]["arp_served@5"] == pytest.approx(EXPECTED["rectools"]["5"]["AvgRecPopularity"])
    assert alone.retrieval is not None
    dot = alone.retrieval.at[10].dot
    for label in ("beside", "lists-of-the-model"):
        assert by_label[label]["head_share_1pct_served@10"] == pytest.approx(dot["head_share_1pct"]), label
        assert by_label[label]["gini_served@10"] == pytest.approx(dot["gini"]), label
    assert by_label["beside"]["overlap_served_dot@10"] == 1.0
    assert by_label["nothing"]["status"] != "ok" and "recommendations" in (by_label["nothing"]["error"] or "")


def test_lists_alone_with_counts_made_elsewhere(tmp_path: Path) -> None:
    # Interactions and distinct users per item of train.csv, counted here: RecTools' ARP and
    # coverage need only the counts; novelty needs the log's number of users, which counts lack.
    rows = [line.split(",") for line in (DATA / "train.csv").read_text().split()[1:]]
    users: dict[str, set[str]] = {}
    counts: dict[str, int] = {}
    for user, item in rows:
        users.setdefault(item, set()).add(user)
        counts[item] = counts.get(item, 0) + 1
    frequencies = tmp_path / "counts.csv"
    frequencies.write_text("item_id,count,users\n" + "".join(f"{i},{counts[i]},{len(users[i])}\n" for i in counts))
    result = run_audit(AuditConfig(model=None, frequencies=frequencies, ks=(1, 3, 5), recommendations=DATA / "recs.csv",
                                   id_offset=1, item_ids=DATA / "train.csv"))
    assert result.served is not None
    for k in (1, 3, 5):
        expected = EXPECTED["rectools"][str(k)]
        assert result.served.at[k].served["arp"] == pytest.approx(expected["AvgRecPopularity"])
        assert result.served.at[k].served["coverage"] == pytest.approx(expected["CatalogCoverage_normalized"])
        assert result.served.at[k].served["novelty"] is None
    assert "novelty" in result.not_measured and result.served.n_unknown_users is None
    assert result.served.at[5].served["pop_rsp"] is None  # each user's training items: not in counts, and said
    assert result.not_measured["who_pays"].endswith("frequencies gives counts per item only: pass the log with "
                                                    "interactions")
    ignored = r"^(--item-ids|item_ids), (--id-offset|id_offset) ignored: they apply to a model"
    assert any(re.match(ignored, w) for w in result.warnings), result.warnings
    # Skipping retrieval has no meaning here: the lists' measures are the audit, so it says the flag is ignored.
    kept = run_audit(AuditConfig(model=None, frequencies=frequencies, ks=(3,), recommendations=DATA / "recs.csv",
                                 retrieval=False))
    assert kept.served is not None and kept.served.at[3].served["arp"] == pytest.approx(EXPECTED["rectools"]["3"]["AvgRecPopularity"])
    assert any(re.match(r"^(--no-retrieval|retrieval) ignored: it applies to a model", w) for w in kept.warnings)


PLUGIN = '''
from dataclasses import dataclass
from typing import Any

import numpy as np

from auditor.hookspecs import hookimpl


@dataclass(frozen=True)
class TopItemShare:
    name: str = "top_item_share"
    label: str = "share of slots held by the most popular item"
    display: str = "pct"
    definition: str = "top_item_share: filled slots holding the most popular item / filled slots"

    def bind(self, context: Any) -> Any:
        top = int(np.argmax(context.popularity))

        def measure(slots: Any) -> float:
            filled = slots.valid.sum()
            return float((slots.lists == top).sum() / filled) if filled else float("nan")

        return measure


@hookimpl
def popaudit_measures() -> list[Any]:
    return [TopItemShare()]
'''


def test_lists_alone_measure_plugin_list_measures(tmp_path: Path) -> None:
    plugin = tmp_path / "top_item.py"
    plugin.write_text(PLUGIN)
    report = tmp_path / "r.json"
    base = ["check", "--recommendations", DATA / "recs.csv", "--interactions", DATA / "train.csv", "-k", "3", "-q",
            "--plugin", plugin, "--json", report]
    # Item 101 is the log's most popular; recs.csv serves it once in its 45 top-3 slots (hand-counted below).
    lines = [line.split(",") for line in (DATA / "recs.csv").read_text().split()[1:]]
    expected = sum(item == "101" and int(rank) <= 3 for _user, item, rank in lines) / 45
    run = _invoke(*base, "--fail-on", f"top_item_share_served@3>{expected + 1e-9}")
    assert run.exit_code == 0, run.output
    served = json.loads(report.read_text())["retrieval"]["at"]["3"]
    assert served["served"]["top_item_share"] == pytest.approx(expected)
    # The popular list skips each user's training items: item 101 fills one of the 3 slots of
    # each served user who did not train on it (1 of the 15), so 1 of the 45 slots.
    train = [line.split(",") for line in (DATA / "train.csv").read_text().split()[1:]]
    listed = {user for user, _item, _rank in lines}
    untrained = listed - {user for user, item in train if item == "101"}
    assert len(listed) == 15 and len(untrained) == 1
    assert served["popular"]["top_item_share"] == pytest.approx(len(untrained) / 45)
    assert _invoke(*base, "--fail-on", f"top_item_share_served@3>={expected}").exit_code == 3


def test_served_lists_beside_anonymous_queries_are_said_not_measured(
        tmp_path: Path, dot_file: tuple[Path, Path, Path, Path, AuditResult]) -> None:
    model, log, _holdout, served, _alone = dot_file
    queries = tmp_path / "queries.npy"
    np.save(queries, np.random.default_rng(0).standard_normal((6, DIM)).astype(np.float32))
    result = run_audit(AuditConfig(model=model, interactions=log, queries=str(queries), ks=KS, probes=False,
                                   bootstrap=0, recommendations=served))
    assert result.retrieval is not None and "served" not in result.retrieval.at[10].norm_aware
    assert any("carry no user identity" in w and "served scoring is not measured" in w for w in result.warnings)
    assert result.served is not None and result.served.n_users == N_USERS


def test_lists_alone_held_out_accuracy(tmp_path: Path) -> None:
    # Each user's held-out item is their own rank-1 served item: the served lists hit it first
    # (every measure 1 at every K), save users 4 and 14, whose rank-1 item is one they trained
    # on: a held-out repeat of a training pair, a miss for every row, the served lists' too
    # (13/15); the most-popular list hits it only where it is the most popular item the user
    # did not train on. User 500 has no list: left out, counted.
    lines = [line.split(",") for line in (DATA / "recs.csv").read_text().split()[1:]]
    first = {user: item for user, item, rank in lines if rank == "1"}
    holdout = tmp_path / "holdout.csv"
    holdout.write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in first.items()) + "500,101\n")
    result = run_audit(AuditConfig(model=None, interactions=DATA / "train.csv", ks=(1, 5),
                                   recommendations=DATA / "recs.csv", holdout=holdout, bootstrap=0))
    accuracy = result.accuracy
    assert accuracy is not None and accuracy.n_users_evaluated == 15 and accuracy.n_users_not_in_training == 1
    assert accuracy.n_users_not_sampled == 0
    for k in (1, 5):
        served = accuracy.at[k]["served"]
        assert (served.recall, served.ndcg, served.hit_rate, served.mrr) == pytest.approx((13 / 15,) * 4)
    # The popular list skips each user's training items, as a model's does: its first item is
    # the log's most popular one the user did not train on (counts 111, 56, 33, 29, 21 for
    # items 101, 102, 103, 104, 106, all distinct, so no tie).
    train = [line.split(",") for line in (DATA / "train.csv").read_text().split()[1:]]
    counts: dict[str, int] = {}
    seen: dict[str, set[str]] = {}
    for user, item in train:
        counts[item] = counts.get(item, 0) + 1
        seen.setdefault(user, set()).add(item)
    order = sorted(counts, key=lambda item: (-counts[item], int(item)))
    top = {user: next(i for i in order if i not in seen.get(user, set())) for user in first}
    share = sum(top[user] == item for user, item in first.items()) / 15
    assert share == 1 / 15  # kept training items, every user's popular top-1 was 101, which no user's list opens with
    assert accuracy.at[1]["popular"].hit_rate == pytest.approx(share) and accuracy.popular_seen_excluded
    # No dot scoring and the served lists evaluated as served (QA batchlists F8b): the JSON claims no dot
    # incumbent, no dot tolerance, and no training items excluded from the lists evaluated.
    written = result.to_dict()["accuracy"]
    assert (written["incumbent"], written["tolerance"], written["seen_excluded"], written["popular_seen_excluded"]) == (
        None, None, False, True)
    assert accuracy.recommended is None and "accuracy" not in result.not_measured
    assert any("1 of the 16 held-out users" in w and "no served list" in w for w in result.warnings)
    flat = result.flat_metrics()
    assert flat["ndcg_served@5"] == pytest.approx(13 / 15) and flat["hit_rate_popular@1"] == pytest.approx(share)


def test_lists_alone_count_held_out_items_no_list_holds_as_misses(tmp_path: Path) -> None:
    # Each user holds out their rank-1 item and item 999999, in neither the log nor any list:
    # a real item never served, so a miss (as against a model's table, where it is a row never
    # served). Recall 1/2; NDCG@5 = 1 / (1 + 1/log2 3); NDCG@1 = 1 (one hit of the one possible),
    # over the 13 users whose rank-1 item is no training item of theirs (users 4 and 14 trained on
    # it: a held-out repeat, a miss for every row, served lists included), so 13/15 of those.
    lines = [line.split(",") for line in (DATA / "recs.csv").read_text().split()[1:]]
    first = {user: item for user, item, rank in lines if rank == "1"}
    holdout = tmp_path / "holdout.csv"
    holdout.write_text("user_id,item_id\n" + "".join(f"{u},{i}\n{u},999999\n" for u, i in first.items()))
    result = run_audit(AuditConfig(model=None, interactions=DATA / "train.csv", ks=(1, 5),
                                   recommendations=DATA / "recs.csv", holdout=holdout, bootstrap=0))
    accuracy = result.accuracy
    assert accuracy is not None and accuracy.n_users_evaluated == 15 and accuracy.n_dropped == 0
    assert accuracy.at[5]["served"].recall == pytest.approx(0.5 * 13 / 15)
    assert accuracy.at[5]["served"].ndcg == pytest.approx(13 / 15 / (1 + 1 / np.log2(3)))
    assert accuracy.at[1]["served"].ndcg == pytest.approx(13 / 15)
    assert accuracy.at[5]["served"].hit_rate == pytest.approx(13 / 15)
    assert any("15 held-out items" in w and "count as misses" in w for w in result.warnings)
    # The catalogue (coverage, Gini) is the same as without the unknown item.
    plain = run_audit(AuditConfig(model=None, interactions=DATA / "train.csv", ks=(1, 5),
                                  recommendations=DATA / "recs.csv", bootstrap=0))
    assert result.served is not None and plain.served is not None
    assert dict(result.served.at[5].served)["coverage"] == dict(plain.served.at[5].served)["coverage"]


def test_served_lists_holding_training_items_keep_them_among_poprsps_candidates(tmp_path: Path) -> None:
    """Ten users trained on head item 0 and one tail item, served [0, 1, own tail item]:
    the short head is {0, 1} (55 of 65 interactions), the tail 10 items. The lists hold
    training items, so every item is a candidate: P(head) = 20 / (10·2) = 1.0, P(tail) =
    10 / (10·10) = 0.1, PopRSP = 0.9 / 1.1 = 0.818 (with Elliot's − T_u, P(head) = 20 / 10 =
    2.0, a probability above 1, and 0.895)."""
    users = [u for u in range(10) for _ in (0, 1)] + list(range(100, 130)) + list(range(200, 215))
    items = [i for u in range(10) for i in (0, 2 + u)] + [0] * 30 + [1] * 15
    pq.write_table(pa.table({"user_id": users, "item_id": items}), tmp_path / "log.parquet")
    pq.write_table(pa.table({"user_id": [u for u in range(10) for _ in range(3)],
                             "item_id": [i for u in range(10) for i in (0, 1, 2 + u)],
                             "rank": [1, 2, 3] * 10}), tmp_path / "lists.parquet")
    ran = _invoke("check", "--recommendations", tmp_path / "lists.parquet", "--interactions", tmp_path / "log.parquet",
                  "-k", "3", "-q", "--json", tmp_path / "r.json")
    assert ran.exit_code == 0, ran.output
    served = json.loads((tmp_path / "r.json").read_text())["retrieval"]["at"]["3"]["served"]
    assert served["pop_rsp"] == pytest.approx(0.9 / 1.1)


def test_lists_alone_with_keep_seen_keep_training_items_in_the_popular_list(tmp_path: Path) -> None:
    """keep_seen applies to the popular baseline of lists alone as it does with a model: the
    list is then the log's top items for every user (item 101 first), which opens no user's
    served list, so the popular hit rate at K=1 of the rank-1 holdout is 0; the report says
    training items were kept (``popular_seen_excluded`` false, as ``diff`` compares)."""
    lines = [line.split(",") for line in (DATA / "recs.csv").read_text().split()[1:]]
    first = {user: item for user, item, rank in lines if rank == "1"}
    assert "101" not in first.values()
    holdout = tmp_path / "holdout.csv"
    holdout.write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in first.items()))
    result = run_audit(AuditConfig(model=None, interactions=DATA / "train.csv", ks=(1, 5), keep_seen=True,
                                   recommendations=DATA / "recs.csv", holdout=holdout, bootstrap=0))
    accuracy = result.accuracy
    assert accuracy is not None and accuracy.popular_seen_excluded is False and "training items kept" in accuracy.protocol
    assert accuracy.seen_excluded is False and accuracy.tolerance is None and accuracy.incumbent is None
    assert accuracy.at[1]["popular"].hit_rate == 0.0
    assert not any("ignored" in w and "keep" in w for w in result.warnings)


def test_diff_flags_the_popular_lists_training_items_of_lists_alone(tmp_path: Path) -> None:
    """Two lists-only reports, the popular list without and with each user's training items:
    ``accuracy.popular_seen_excluded`` differs, so ``diff`` compares none of the accuracy
    figures (``seen_excluded`` is false in both: the served lists are evaluated as served)."""
    from auditor.diff import diff_reports

    holdout = tmp_path / "holdout.csv"
    holdout.write_text("user_id,item_id\n" + "".join(
        f"{u},{i}\n" for u, i, rank in (line.split(",") for line in (DATA / "recs.csv").read_text().split()[1:])
        if rank == "1"))
    reports = [run_audit(AuditConfig(model=None, interactions=DATA / "train.csv", ks=(1, 5), keep_seen=keep,
                                     recommendations=DATA / "recs.csv", holdout=holdout, bootstrap=0)).to_dict()
               for keep in (False, True)]
    assert [r["accuracy"]["seen_excluded"] for r in reports] == [False, False]
    diff = diff_reports(reports[0], reports[1])
    ndcg = diff.metric("ndcg_served@5")
    assert ndcg.status == "incomparable" and "accuracy.popular_seen_excluded" in (ndcg.reason or "")

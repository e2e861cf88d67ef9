"""The user- and item-side measures wired into ``check`` and ``batch``: registered with the
built-ins (flat names, gates, report rows), their cut-offs as options and manifest cells,
the group NDCG and PopREO only with a holdout, and the gain/lose table in the result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.batch.manifest import read_manifest
from auditor.cli import cli
from auditor.flat import metric_names

N_USERS, N_ITEMS, DIM = 120, 300, 8


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small skewed two-tower model, its training log and a holdout."""
    root = tmp_path_factory.mktemp("groups")
    rng = np.random.default_rng(5)
    popularity = 1.0 / np.arange(1, N_ITEMS + 1) ** 0.9
    popularity /= popularity.sum()
    users = rng.integers(0, N_USERS, 4000)
    items = rng.choice(N_ITEMS, size=users.size, p=popularity)
    held = rng.random(users.size) < 0.2
    freq = np.bincount(items[~held], minlength=N_ITEMS)
    directions = rng.normal(size=(N_ITEMS, DIM))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    item_table = (directions * (1.0 + freq[:, None]) ** 0.4).astype(np.float32)
    user_table = rng.normal(size=(N_USERS, DIM)).astype(np.float32)
    np.add.at(user_table, users[~held], 0.3 * directions[items[~held]].astype(np.float32))
    torch.save({"user_embedding.weight": torch.from_numpy(user_table),
                "item_embedding.weight": torch.from_numpy(item_table)}, root / "model.pt")
    pq.write_table(pa.table({"user_id": users[~held], "item_id": items[~held]}), root / "train.parquet")
    pq.write_table(pa.table({"user_id": users[held], "item_id": items[held]}), root / "holdout.parquet")
    return root


def check(files: Path, tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / f"report-{len(list(tmp_path.iterdir()))}.json"
    ran = CliRunner().invoke(cli, ["check", str(files / "model.pt"), "--interactions", str(files / "train.parquet"),
                                   "-k", "10", "--no-probes", "--bootstrap", "0", "--json", str(out), *extra])
    assert ran.exit_code in (0, 3), ran.output
    return ran.exit_code, json.loads(out.read_text()), ran.stdout


def test_group_measures_have_flat_names_and_gates() -> None:
    names = metric_names([10])
    for name in ("gap_delta_niche_dot@10", "miscalibration_ratio@10", "pop_rsp_cosine@10", "aclt_alpha_0.5@10",
                 "ndcg_blockbuster_dot@10", "pop_reo_ratio@10"):
        assert name in names


def test_with_a_holdout_the_group_ndcg_averages_to_the_accuracy_section(files: Path, tmp_path: Path) -> None:
    code, report, _ = check(files, tmp_path, "--holdout", str(files / "holdout.parquet"),
                            "--fail-on", "pop_reo_dot@10>=0", "--fail-on", "ndcg_niche_dot@10>=0")
    assert code == 3  # pop_reo >= 0 always holds: the gate is evaluated on a measured value
    dot = report["retrieval"]["at"]["10"]["dot"]
    assert dot["pop_reo"] is not None and dot["pop_rsp"] is not None
    rows = report["retrieval"]["user_groups"]["10"]["dot"]
    assert [r["group"] for r in rows] == ["niche", "diverse", "blockbuster"]
    assert [dot[f"ndcg_{r['group']}"] for r in rows] == pytest.approx([r["ndcg"] for r in rows])
    # Every evaluated user trained (a held-out user without training is not queried), so each
    # is in a group: the groups' NDCG weighted by their evaluated users is the section's NDCG.
    evaluated = np.array([r["n_evaluated"] for r in rows])
    assert evaluated.sum() == report["accuracy"]["n_users_evaluated"]
    pooled = float(np.dot(evaluated, [r["ndcg"] for r in rows]) / evaluated.sum())
    assert pooled == pytest.approx(report["accuracy"]["at"]["10"]["dot"]["ndcg"])


def test_keep_seen_pop_rsp_counts_every_item_as_a_candidate(files: Path, tmp_path: Path) -> None:
    """With --keep-seen a trained item can fill a slot, so it stays in PopRSP's denominator:
    P(g) = served g slots / (queries · |g|), recomputed here from the tables by numpy."""
    _, report, _ = check(files, tmp_path, "--keep-seen")
    state = torch.load(files / "model.pt")
    users_t, items_t = (pq.read_table(files / "train.parquet").column(c).to_numpy() for c in ("user_id", "item_id"))
    queried = np.unique(users_t)
    scores = state["user_embedding.weight"].numpy()[queried] @ state["item_embedding.weight"].numpy().T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
    popularity = np.bincount(items_t, minlength=N_ITEMS)
    order = np.argsort(-popularity, kind="stable")
    mass = np.cumsum(popularity[order]) / popularity.sum()
    cut = popularity[order][np.searchsorted(mass, 0.8)]
    head = popularity >= cut  # the short head: items holding 80% of the mass, ties at the cut in
    a = head[top].sum() / (queried.size * head.sum())
    b = (~head[top]).sum() / (queried.size * (~head).sum())
    assert report["retrieval"]["n_queries"] == queried.size
    assert report["retrieval"]["at"]["10"]["dot"]["pop_rsp"] == pytest.approx(abs(a - b) / (a + b), rel=1e-12)


def test_without_a_holdout_the_holdout_measures_are_null_and_not_shown(files: Path, tmp_path: Path) -> None:
    code, report, stdout = check(files, tmp_path, "--format", "markdown", "--niche-fraction", "0.3",
                                 "--blockbuster-fraction", "0.1")
    assert code == 0
    dot = report["retrieval"]["at"]["10"]["dot"]
    assert dot["pop_reo"] is None and dot["ndcg_niche"] is None  # null, never 0
    assert dot["gap_delta_niche"] is not None and "PopRSP (short-head" in stdout
    assert "PopREO (short-head" not in stdout and "NDCG, niche users" not in stdout  # rows left out
    sizes = [r["n_users"] for r in report["retrieval"]["user_groups"]["10"]["dot"]]
    assert sum(sizes) == report["retrieval"]["n_queries"]
    assert sizes[0] >= 0.3 * sum(sizes) and sizes[2] >= 0.1 * sum(sizes)  # ties join their group
    assert "lowest 30% niche, highest 10% blockbuster" in report["retrieval"]["definitions"]["popularity_groups"]
    assert report["settings"]["groups"]["niche_fraction"] == 0.3


def test_the_gain_table_lists_the_top_items(files: Path, tmp_path: Path) -> None:
    _, report, _ = check(files, tmp_path, "--top-items", "5")
    shift = report["retrieval"]["exposure_shift"]["10"]
    assert shift["n"] == 5 and 0 < len(shift["gained"]) <= 5 and len(shift["lost"]) <= 5
    gains = [item["gain"] for item in shift["gained"]]
    assert gains == sorted(gains, reverse=True) and all(g > 0 for g in gains)
    assert all(item["exposure_dot"] - item["exposure_cosine"] == item["gain"] for item in shift["gained"])
    _, none, _ = check(files, tmp_path, "--top-items", "0")
    assert none["retrieval"]["exposure_shift"] == {}


def test_bad_cut_offs_are_usage_errors_and_manifest_cells(files: Path, tmp_path: Path) -> None:
    ran = CliRunner().invoke(cli, ["check", str(files / "model.pt"), "--head-mass", "0.7", "--tail-mass", "0.5"])
    assert ran.exit_code == 2 and "--head-mass + --tail-mass must be at most 1" in ran.output  # QA harms F6
    ran = CliRunner().invoke(cli, ["check", str(files / "model.pt"), "--niche-fraction", "1.5"])
    assert ran.exit_code == 2 and "--niche-fraction" in ran.output
    manifest = tmp_path / "m.csv"
    manifest.write_text("model,niche_fraction,short-head-mass\nmodel.pt,0.25,0.7\nmodel.pt,2,\n")
    rows = read_manifest(manifest).rows
    assert rows[0].settings == {"niche_fraction": 0.25, "short_head_mass": 0.7}
    assert rows[1].problems and "column 'niche_fraction'" in rows[1].problems[0]


def test_every_format_shows_who_pays_and_which_items_gain(files: Path, tmp_path: Path) -> None:
    _, report, console = check(files, tmp_path, "--top-items", "4", "--holdout", str(files / "holdout.parquet"),
                               "--markdown", str(tmp_path / "r.md"), "--html", str(tmp_path / "r.html"))
    first = report["retrieval"]["exposure_shift"][str(report["verdict"]["quoted_k"])]["gained"][0]
    markdown, html = (tmp_path / "r.md").read_text(), (tmp_path / "r.html").read_text()
    for text in (console, markdown, html):
        # The console wraps the Who-pays headers (10 columns with dot's lift over cosine): "NDCG" over "dot".
        assert "Who pays" in text and "Items dot serving favours" in text and "NDCG" in text
        assert "NDCG dot" in text or text is console
        assert "cosine" in text and ("ΔGAP dot − cosine" in text or text is console)
        assert f"+{first['gain']:,}" in text  # the first gained item's row
    assert (tmp_path / "r_files" / "exposure_gain.png").stat().st_size > 1000
    assert "exposure gain under dot-product serving" in html  # the figure, inline


def test_batch_columns_gates_and_manifest_cells(files: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "m.csv"
    manifest.write_text(f"model,niche_fraction,label\n{files / 'model.pt'},,default\n{files / 'model.pt'},0.4,wide\n")
    out = tmp_path / "r.parquet"
    ran = CliRunner().invoke(cli, ["batch", str(manifest), "-o", str(out), "--interactions", str(files / "train.parquet"),
                                   "-k", "10", "--no-probes", "--bootstrap", "0", "-q",
                                   "--fail-on", "aclt_dot@10>=0"])  # fmt: skip
    assert ran.exit_code == 3, ran.output  # ACLT is never negative: the gate trips on both rows
    rows = pq.read_table(out).to_pylist()
    assert [r["status"] for r in rows] == ["ok", "ok"]
    for r in rows:
        report = json.loads(r["report_json"])
        assert r["gap_delta_niche_dot@10"] == report["retrieval"]["at"]["10"]["dot"]["gap_delta_niche"]
        assert r["pop_reo_dot@10"] is None  # no holdout: null, never 0
    groups = [json.loads(r["report_json"])["settings"]["groups"]["niche_fraction"] for r in rows]
    assert groups == [0.2, 0.4]
    sizes = [json.loads(r["report_json"])["retrieval"]["user_groups"]["10"]["dot"][0]["n_users"] for r in rows]
    assert sizes[1] > sizes[0]  # a larger niche fraction, more niche users


def test_users_sharing_one_popular_ratio_are_said_to_have_no_groups(tmp_path: Path) -> None:
    """20 identical users trained on the same 4 items, all popular: no niche/blockbuster
    contrast. Every user is diverse, niche and blockbuster are empty and null, and the
    warnings and the Who-pays table say why (they were all called niche)."""
    rng = np.random.default_rng(5)
    torch.save({"user_embedding.weight": torch.from_numpy(np.tile(rng.normal(size=(1, 4)), (20, 1)).astype(np.float32)),
                "item_embedding.weight": torch.from_numpy(rng.normal(size=(50, 4)).astype(np.float32))},
               tmp_path / "model.pt")
    users = np.repeat(np.arange(20), 4)
    pq.write_table(pa.table({"user_id": users, "item_id": np.tile(np.arange(4), 20)}), tmp_path / "train.parquet")
    out = tmp_path / "r.json"
    ran = CliRunner().invoke(cli, ["check", str(tmp_path / "model.pt"), "--interactions", str(tmp_path / "train.parquet"),
                                   "-k", "3", "--no-probes", "--bootstrap", "0", "--json", str(out),
                                   "--format", "markdown"])
    assert ran.exit_code == 0, ran.output
    report = json.loads(out.read_text())
    rows = report["retrieval"]["user_groups"]["3"]["dot"]
    assert [(r["group"], r["n_users"]) for r in rows] == [("niche", 0), ("diverse", 20), ("blockbuster", 0)]
    assert report["retrieval"]["at"]["3"]["dot"]["gap_delta_niche"] is None
    assert any(w.startswith("all 20 users with training items share one popular ratio (1.00") for w in report["warnings"])
    assert "No user is niche or blockbuster: every user shares one popular ratio" in ran.stdout
    assert "tied_ratio" not in report["retrieval"]  # the warnings say it; the JSON is as it was


def test_the_who_pays_caption_reads_the_recorded_tie_not_the_row_sizes() -> None:
    """The same rows (empty niche and blockbuster) get the tie's caption only when the
    retrieval section records a tie."""
    from auditor.report.harms import group_table
    from auditor.sections import Retrieval

    rows = [{"group": g, "n_users": n, "gap_profile": 1.0, "gap_delta": 0.1, "miscalibration": 0.2, "ndcg": None}
            for g, n in (("niche", 0), ("diverse", 5), ("blockbuster", 0))]
    said = "every user shares one popular ratio"
    for tied, expected in ((None, False), (0.5, True)):
        table = group_table(Retrieval(5, "exact", {}, user_groups={3: {"dot": rows}}, tied_ratio=tied), 3)
        assert table is not None and [r[:2] for r in table.rows] == [("niche", "0"), ("diverse", "5"),
                                                                       ("blockbuster", "0")]
        assert (said in (table.caption or "")) is expected


def test_empty_end_groups_of_tiny_fractions_are_not_called_tied(files: Path, tmp_path: Path) -> None:
    """Fractions too small to hold one of the 120 users leave niche and blockbuster empty
    (⌊0.001·n⌋ = 0; n − ⌊(1 − 1e-12)·n + 1e-9⌋ = 0) while the users' popular ratios differ:
    no warning and no caption may say they share one ratio (the report read the tie from
    the row sizes by position, and said so)."""
    _, report, out = check(files, tmp_path, "--niche-fraction", "0.001", "--blockbuster-fraction", "1e-12",
                           "--format", "markdown")
    rows = report["retrieval"]["user_groups"]["10"]["dot"]
    assert [(r["group"], r["n_users"] > 0) for r in rows] == [("niche", False), ("diverse", True),
                                                              ("blockbuster", False)]
    assert not any("share one popular ratio" in w for w in report["warnings"])
    assert "Who pays" in out and "every user shares one popular ratio" not in out


def test_a_held_out_user_with_a_zero_vector_is_a_miss_not_left_out(files: Path, tmp_path: Path) -> None:
    """No --max-queries: a trained held-out user with a zero query vector is served nothing
    and counted as a miss (it was left out of the accuracy as "not among the queries"); the
    warning says so and names no sampling."""
    state = torch.load(files / "model.pt")
    held = pq.read_table(files / "holdout.parquet").column("user_id").to_numpy()
    trained = pq.read_table(files / "train.parquet").column("user_id").to_numpy()
    user = int(np.intersect1d(held, trained)[0])
    state["user_embedding.weight"][user] = 0
    torch.save(state, tmp_path / "zero.pt")
    out = tmp_path / "z.json"
    ran = CliRunner().invoke(cli, ["check", str(tmp_path / "zero.pt"), "--interactions", str(files / "train.parquet"),
                                   "--holdout", str(files / "holdout.parquet"), "-k", "10", "--no-probes",
                                   "--bootstrap", "0", "--json", str(out)])
    assert ran.exit_code in (0, 3), ran.output
    warnings = json.loads(out.read_text())["warnings"]
    assert not [w for w in warnings if "were not among the queries" in w]
    said = [w for w in warnings if "query vectors are zero" in w]
    assert len(said) == 1 and said[0].startswith("1 of ") and "as misses (NDCG 0)" in said[0]
    assert "max-queries" not in said[0] and "sampled" not in said[0]


def test_a_holdout_with_no_user_to_evaluate_is_not_measured_and_says_why(files: Path, tmp_path: Path) -> None:
    """Held-out user 0 has a user-table row but no training interaction: no one to average
    over, so accuracy is null with its reason (it was an empty table of headers)."""
    train = pq.read_table(files / "train.parquet")
    pq.write_table(train.filter(pc.not_equal(train["user_id"], 0)), tmp_path / "train.parquet")
    pq.write_table(pa.table({"user_id": [0, 0], "item_id": [3, 5]}), tmp_path / "new.parquet")
    out = tmp_path / "n.json"
    ran = CliRunner().invoke(cli, ["check", str(files / "model.pt"), "--interactions", str(tmp_path / "train.parquet"),
                                   "--holdout", str(tmp_path / "new.parquet"), "-k", "10", "--no-probes",
                                   "--bootstrap", "0", "--json", str(out)])
    assert ran.exit_code in (0, 3), ran.output
    report = json.loads(out.read_text())
    assert report["accuracy"] is None and report["retrieval"]["at"]["10"]["dot"]["head_share_1pct"] is not None
    assert report["not_measured"]["accuracy"] == (
        f"no held-out user of {tmp_path / 'new.parquet'} can be evaluated, so accuracy is undefined; its users: "
        "1 absent from the training log (no trained vector, no history)")

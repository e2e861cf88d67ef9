"""``--frequencies``: item counts computed elsewhere give the same figures as the log they
were counted from, say what needs the log itself, and work in batch manifests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from scipy import stats

from auditor.batch import run_batch
from auditor.cli import cli
from auditor.loading import count_item_ids
from auditor.values import LogSpec
from auditor.loading.frequencies import read_frequencies

N_ITEMS, N_USERS, DIM = 120, 80, 8


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    """A log (string item ids, one row each), its counts as SQL would give them, an item
    table whose norms grow with frequency, a user table as query file, and item ids."""
    rng = np.random.default_rng(5)
    items = np.minimum(rng.zipf(1.4, 6000) - 1, N_ITEMS - 1)
    users = rng.integers(0, N_USERS, items.size)
    ids = np.array([f"sku-{i:03d}" for i in range(N_ITEMS)])
    pq.write_table(pa.table({"user_id": users, "item_id": ids[items]}), tmp_path / "log.parquet")
    # GROUP BY item_id: count(*), count(DISTINCT user_id), rows in no particular order.
    grouped = pa.table({"user_id": users, "item_id": ids[items]}).group_by("item_id").aggregate(
        [("user_id", "count"), ("user_id", "count_distinct")])
    counts = grouped.rename_columns(["item_id", "n_interactions", "distinct_users"]).take(
        rng.permutation(grouped.num_rows))
    pq.write_table(counts, tmp_path / "counts.parquet")
    pacsv.write_csv(counts.select(["item_id", "n_interactions"]), tmp_path / "counts.csv")
    freq = np.bincount(items, minlength=N_ITEMS)
    table = rng.normal(size=(N_ITEMS, DIM)) * (1.0 + 0.4 * np.log1p(freq))[:, None]
    np.save(tmp_path / "items.npy", table.astype(np.float32))
    np.save(tmp_path / "queries.npy", rng.normal(size=(N_USERS, DIM)).astype(np.float32))
    (tmp_path / "ids.txt").write_text("".join(f"{i}\n" for i in ids))
    return tmp_path


def _check(d: Path, *args: str) -> dict[str, Any]:
    out = d / f"r{len(list(d.glob('r*.json')))}.json"
    base = ["check", str(d / "items.npy"), "--item-ids", str(d / "ids.txt"), "--queries", str(d / "queries.npy"),
            "-k", "5", "-k", "20", "--bootstrap", "200", "--no-probes", "--json", str(out), "-q"]
    result = CliRunner().invoke(cli, base + list(args))
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def test_read_frequencies_equals_counting_the_log(workspace: Path) -> None:
    from_log = count_item_ids(LogSpec(workspace / "log.parquet"))
    given = read_frequencies(workspace / "counts.parquet")  # columns found by name
    assert given.ids.tolist() == from_log.ids.tolist()  # sorted, as counting gives them
    assert given.counts.tolist() == from_log.counts.tolist()
    assert given.user_counts is not None and from_log.user_counts is not None
    assert given.user_counts.tolist() == from_log.user_counts.tolist()
    assert given.n_interactions == from_log.n_interactions == 6000
    assert given.n_users is None and from_log.n_users == len(np.unique(pq.read_table(workspace / "log.parquet")
                                                                     .column("user_id").to_numpy()))


@pytest.mark.parametrize("popularity", ["interactions", "users"])
def test_report_figures_equal_those_from_the_log(workspace: Path, popularity: str) -> None:
    log = _check(workspace, "--interactions", str(workspace / "log.parquet"), "--popularity", popularity)
    counts = _check(workspace, "--frequencies", str(workspace / "counts.parquet"), "--popularity", popularity)
    assert counts["frequency_norm"] == log["frequency_norm"]
    assert log["frequency_norm"]["spearman"] > 0.5
    for k in ("5", "20"):
        for scoring in ("dot", "cosine", "popular"):
            a, b = log["retrieval"]["at"][k][scoring], counts["retrieval"]["at"][k][scoring]
            assert b.pop("novelty") is None and a.pop("novelty") is not None
            assert a == b
    # Novelty needs the distinct users of the whole log, which per-item counts cannot give.
    assert "n_users" in counts["not_measured"]["novelty"] and counts["not_measured"]["novelty"].endswith(
        "--frequencies gives counts per item only: pass the log with --interactions")
    assert "novelty" not in log["not_measured"]
    assert counts["settings"]["frequencies"].endswith("counts.parquet")


def test_a_csv_of_counts_with_named_columns(workspace: Path) -> None:
    log = _check(workspace, "--interactions", str(workspace / "log.parquet"))
    counts = _check(workspace, "--frequencies", str(workspace / "counts.csv"), "--count-col", "n_interactions")
    assert counts["frequency_norm"]["spearman"] == log["frequency_norm"]["spearman"]
    # Without a distinct-users column, --popularity users cannot be measured.
    result = CliRunner().invoke(cli, ["check", str(workspace / "items.npy"), "--item-ids", str(workspace / "ids.txt"),
                                      "--frequencies", str(workspace / "counts.csv"), "--queries",
                                      str(workspace / "queries.npy"), "--popularity", "users", "-q"])
    assert result.exit_code == 1 and "Error:" in result.output
    assert (f"the counts file {workspace / 'counts.csv'} has no distinct-users column: name it with --user-count-col"
            in result.output)
    assert "--user-col" not in result.output  # the log's option: there is no log here


def test_the_missing_users_remedy_names_where_the_counts_came_from() -> None:
    from auditor.model import ItemStats
    from auditor.retrieval.popularity import no_user_counts, popularity_of

    base = ItemStats(frequencies=np.array([3, 1, 2]), n_interactions=6, source=Path("in.parquet"))
    head = "popularity users needs distinct users per item, but "
    tail = ", or use popularity interactions"
    assert no_user_counts(base) == head + "the interaction log in.parquet has no user column: pass user_col NAME" + tail
    ckpt = ItemStats(frequencies=base.frequencies, n_interactions=6, source=Path("m.pt"), from_checkpoint=True)
    assert no_user_counts(ckpt) == (head + "the checkpoint m.pt records interactions per item, not every (user, item) "
                                    "training pair: give the log it was trained on with interactions (its training "
                                    "part only, where it held some out)" + tail)
    counts = ItemStats(frequencies=base.frequencies, n_interactions=6, source=Path("c.csv"), from_counts_file=True)
    assert no_user_counts(counts).startswith(head + "the counts file c.csv has no distinct-users column: name it "
                                             "with user_count_col")
    with pytest.raises(Exception, match="counts file c.csv"):
        popularity_of(counts, "users")
    users = ItemStats(frequencies=base.frequencies, n_interactions=6, user_counts=np.array([2, 1, 1]))
    assert popularity_of(users, "users").tolist() == [2, 1, 1]
    assert popularity_of(users, "interactions").tolist() == [3, 1, 2]


def test_a_checkpoint_that_records_every_training_pair_gives_distinct_users() -> None:
    from auditor.loading.statistics import item_stats
    from auditor.model import InteractionPairs, ModelBundle
    from auditor.values import RowIdPolicy

    # Users 0, 1, 2 over 3 items: item 0 by users 0 (twice) and 1, item 1 by user 2, item 2 by nobody.
    pairs = InteractionPairs(np.array([0, 0, 1, 2]), np.array([0, 0, 0, 1]), np.array([10, 11, 12]))
    bundle = ModelBundle(source=Path("m.pt"), format="popaudit", item_table=np.ones((3, 2), np.float32),
                         item_frequencies=np.array([3, 1, 0]), train_pairs=pairs)
    stats = item_stats(bundle, None, None, RowIdPolicy(), [])
    assert stats is not None and stats.from_checkpoint
    assert stats.user_counts is not None and stats.user_counts.tolist() == [2, 1, 0] and stats.n_users == 3
    # A sample of the pairs (retrain keeps at most a million) does not give them: unknown, not undercounted.
    bundle.train_pairs = InteractionPairs(np.array([0, 1, 2]), np.array([0, 0, 1]), np.array([10, 11, 12]))
    sampled = item_stats(bundle, None, None, RowIdPolicy(), [])
    assert sampled is not None and sampled.user_counts is None and sampled.n_users is None


def test_counts_alone_say_why_accuracy_and_who_pays_are_not_measured(workspace: Path) -> None:
    # A user table queried with counts alone: which rows trained, and on what, is unknown. The
    # reasons name the log, not --queries (the rows are users), and the user-side measures say so too.
    import torch

    torch.save({"item_embedding.weight": torch.from_numpy(np.load(workspace / "items.npy")),
                "user_embedding.weight": torch.from_numpy(np.load(workspace / "queries.npy"))}, workspace / "m.pt")
    pq.write_table(pa.table({"user_id": [1, 2], "item_id": ["sku-003", "sku-010"]}), workspace / "hold.parquet")
    out = workspace / "users.json"
    result = CliRunner().invoke(cli, ["check", str(workspace / "m.pt"), "--item-ids", str(workspace / "ids.txt"),
                                      "--frequencies", str(workspace / "counts.parquet"), "--holdout",
                                      str(workspace / "hold.parquet"), "-k", "5", "--bootstrap", "0", "--no-probes",
                                      "--json", str(out), "-q"])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["accuracy"] is None and report["retrieval"]["population"]["source"] == "users"
    why = report["not_measured"]["accuracy"]
    # One clause, worded once (loading/counts_only.py), ends every reason that needs the log itself.
    assert "--queries" not in why and why.endswith(
        "--frequencies gives counts per item only: pass the log with --interactions")
    assert report["retrieval"]["at"]["5"]["dot"]["pop_rsp"] is None and report["retrieval"]["user_groups"] == {}
    assert report["not_measured"]["who_pays"].endswith(
        "--frequencies gives counts per item only: pass the log with --interactions")


def test_batch_manifest_frequencies_column(workspace: Path) -> None:
    manifest = workspace / "manifest.csv"
    manifest.write_text("model,frequencies,interactions\nitems.npy,counts.parquet,\nitems.npy,,log.parquet\n")
    defaults = {"ks": (5,), "bootstrap": 0, "probes": False, "item_ids": workspace / "ids.txt",
                "queries": str(workspace / "queries.npy")}
    run_batch(manifest, workspace / "results.parquet", defaults=defaults, inline=True)
    rows = pq.read_table(workspace / "results.parquet").to_pylist()
    assert [r["status"] for r in rows] == ["ok", "ok"], [r["error"] for r in rows]
    assert rows[0]["spearman"] == rows[1]["spearman"]
    # A row's frequencies replace a default --interactions (and the other way round).
    run_batch(manifest, workspace / "results2.parquet", inline=True,
              defaults={**defaults, "interactions": workspace / "log.parquet"})
    assert [r["status"] for r in pq.read_table(workspace / "results2.parquet").to_pylist()] == ["ok", "ok"]


def test_token_embeddings_with_token_counts(tmp_path: Path) -> None:
    """The README's language-model example: a token embedding table and token counts."""
    rng = np.random.default_rng(0)
    vocab, dim = 500, 16
    counts = np.floor(1e5 / np.arange(1, vocab + 1) ** 1.1).astype(np.int64)
    rng.shuffle(counts)
    # Frequent tokens end up with larger norms (the mechanism popaudit looks for).
    table = rng.normal(size=(vocab, dim)) * (0.2 + 0.2 * np.log1p(counts))[:, None]
    np.save(tmp_path / "token_embeddings.npy", table.astype(np.float32))
    pq.write_table(pa.table({"token_id": np.arange(vocab), "count": counts}), tmp_path / "token_counts.parquet")
    result = CliRunner().invoke(cli, [
        "check", str(tmp_path / "token_embeddings.npy"), "--frequencies", str(tmp_path / "token_counts.parquet"),
        "--json", str(tmp_path / "report.json"), "--bootstrap", "200",
    ])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report.json").read_text())
    norms = np.linalg.norm(table.astype(np.float32), axis=1)
    assert report["frequency_norm"]["spearman"] == pytest.approx(stats.spearmanr(counts, norms).statistic)
    assert report["frequency_norm"]["spearman"] > 0.5 and report["verdict"]["bias_detected"]
    assert report["inputs"]["n_interactions"] == int(counts.sum())
    # No user table and no log: retrieval would need history queries, and says so.
    assert "--frequencies gives counts per item only" in report["not_measured"]["retrieval"]
    assert "Wrote the JSON report" in result.output

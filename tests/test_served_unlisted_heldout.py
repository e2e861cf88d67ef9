"""Lists alone count a held-out user of the training log without a served list as a miss,
as a model's audit does (QA harms F1 remainder): the same lists give the same ``ndcg_<group>``
and held-out accuracy alone and beside a model. Known answers computed here with numpy
(RecBole's NDCG@K, Abdollahpouri et al.'s groups drawn among the log's users)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from auditor.cli import cli
from served_samples import N_ITEMS, N_USERS, served_groups_log

K = 3
UNLISTED = (1, 4, 6, 9, 15)


def _groups(popularity: np.ndarray, profiles: dict[int, set[int]]) -> dict[int, int]:
    cut = np.sort(popularity)[::-1][int(0.2 * N_ITEMS) - 1]
    popular = set(np.flatnonzero((popularity >= cut) & (popularity > 0)).tolist())
    ratio = {u: len(profiles[u] & popular) / len(profiles[u]) for u in profiles}
    ranked = sorted(ratio.values())
    n = len(ranked)
    low, high = ranked[math.floor(0.2 * n) - 1], ranked[n - (n - math.floor(0.8 * n))]
    return {u: 0 if r <= low else 2 if r >= high else 1 for u, r in ratio.items()}


def _ndcg(served: list[int], held: set[int]) -> float:
    dcg = sum(1 / np.log2(r + 2) for r, i in enumerate(served[:K]) if i in held)
    return float(dcg / sum(1 / np.log2(r + 2) for r in range(min(len(held), K))))


def _report(tmp_path: Path, *model: str) -> dict[str, Any]:
    out = tmp_path / "r.json"
    ran = CliRunner().invoke(cli, ["check", *model, "--recommendations", str(tmp_path / "lists.parquet"),
                                   "--interactions", str(tmp_path / "log.parquet"), "--holdout",
                                   str(tmp_path / "held.parquet"), "-k", str(K), "-q", "--json", str(out)],
                             catch_exceptions=False)
    assert ran.exit_code == 0, ran.output
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def _model(tmp_path: Path) -> str:
    import torch

    rng = np.random.default_rng(5)
    path = tmp_path / "model.pt"
    torch.save({"user_embedding.weight": torch.from_numpy(rng.standard_normal((N_USERS, 4)).astype(np.float32)),
                "item_embedding.weight": torch.from_numpy(rng.standard_normal((N_ITEMS, 4)).astype(np.float32))}, path)
    return str(path)


def _write(tmp_path: Path, lists: dict[int, list[int]], held: dict[int, set[int]]) -> None:
    """``lists.parquet`` (user, item, rank) and ``held.parquet`` (user, item) in ``tmp_path``."""
    rows = [(u, i, r + 1) for u, served in lists.items() for r, i in enumerate(served)]
    pq.write_table(pa.table({"user_id": [r[0] for r in rows], "item_id": [r[1] for r in rows],
                             "rank": [r[2] for r in rows]}), tmp_path / "lists.parquet")
    pairs = [(u, i) for u, h in held.items() for i in sorted(h)]
    pq.write_table(pa.table({"user_id": [p[0] for p in pairs], "item_id": [p[1] for p in pairs]}),
                   tmp_path / "held.parquet")


def test_unlisted_heldout_log_users_count_as_misses(tmp_path: Path) -> None:
    users, items = served_groups_log(tmp_path)
    profiles = {u: set(items[users == u].tolist()) for u in range(N_USERS)}
    unseen = {u: [i for i in range(N_ITEMS) if i not in profiles[u]] for u in range(N_USERS)}
    lists = {u: unseen[u][u % 5: u % 5 + K] for u in range(N_USERS) if u not in UNLISTED}
    # every user holds out two unseen items: the list's first for even users (a hit), two others for odd ones
    held = {u: {unseen[u][u % 5], unseen[u][-1]} if u % 2 == 0 else {unseen[u][-1], unseen[u][-2]}
            for u in range(N_USERS)}
    _write(tmp_path, lists, held)
    report = _report(tmp_path)

    popularity = np.bincount(items, minlength=N_ITEMS).astype(float)
    group = _groups(popularity, profiles)
    per_user = {u: _ndcg(lists.get(u, []), held[u]) for u in range(N_USERS)}  # no list: nothing served, 0
    assert all(per_user[u] == 0 for u in UNLISTED) and any(per_user[u] > 0 for u in lists)
    served = report["retrieval"]["at"][str(K)]["served"]
    for code, name in enumerate(("niche", "diverse", "blockbuster")):
        members = [u for u in range(N_USERS) if group[u] == code]
        assert math.isclose(served[f"ndcg_{name}"], float(np.mean([per_user[u] for u in members])), rel_tol=1e-12)
    accuracy = report["accuracy"]
    assert accuracy["n_users_evaluated"] == N_USERS
    assert math.isclose(accuracy["at"][str(K)]["served"]["ndcg"], float(np.mean(list(per_user.values()))),
                        rel_tol=1e-12)
    # the most-popular list is evaluated for every held-out log user too (its K most popular unseen items)
    order = np.lexsort((np.arange(N_ITEMS), -popularity))
    popular = {u: [int(i) for i in order if i not in profiles[u]][:K] for u in range(N_USERS)}
    assert math.isclose(accuracy["at"][str(K)]["popular"]["ndcg"],
                        float(np.mean([_ndcg(popular[u], held[u]) for u in range(N_USERS)])), rel_tol=1e-12)
    assert any(f"{len(UNLISTED)} held-out users of the training log have no served list" in w
               for w in report["warnings"])
    # beside a model, which serves the 5 an empty list: the same figures
    beside = _report(tmp_path, _model(tmp_path))
    for name in ("ndcg_niche", "ndcg_diverse", "ndcg_blockbuster"):
        assert math.isclose(beside["retrieval"]["at"][str(K)]["served"][name], served[name], rel_tol=1e-12)
    assert beside["accuracy"]["at"][str(K)]["served"] == accuracy["at"][str(K)]["served"]


def _lists_and_holdout(tmp_path: Path, extra_user: int) -> tuple[dict[int, list[int]], dict[int, set[int]]]:
    """Lists for every log user but UNLISTED, each user's held-out items, and ``extra_user``
    (never in the training log, no list) holding out two items."""
    users, items = served_groups_log(tmp_path)
    profiles = {u: set(items[users == u].tolist()) for u in range(N_USERS)}
    unseen = {u: [i for i in range(N_ITEMS) if i not in profiles[u]] for u in range(N_USERS)}
    lists = {u: unseen[u][:K] for u in range(N_USERS) if u not in UNLISTED}
    held = {u: {unseen[u][0], unseen[u][-1]} for u in range(N_USERS)} | {extra_user: {0, 1}}
    _write(tmp_path, lists, held)
    return lists, held


def test_heldout_user_absent_from_the_log_counts_as_not_in_training_on_both_routes(tmp_path: Path) -> None:
    # QA accuracy N1: lists alone counted a held-out user who never trained as "trained but not
    # queried" (n_users_not_sampled); beside a model whose user table has its row, the same user
    # is absent from the training log (n_users_not_in_training). One rule on both routes.
    import torch

    extra = 50
    lists, held = _lists_and_holdout(tmp_path, extra)
    alone = _report(tmp_path)
    accuracy = alone["accuracy"]
    counters = ("n_users_evaluated", "n_users_not_in_training", "n_users_not_sampled", "n_dropped_users", "n_dropped",
                "n_holdout_interactions", "n_pairs_evaluated")
    n_pairs = sum(len(h) for h in held.values())
    assert [accuracy[c] for c in counters] == [N_USERS, 1, 0, 0, 0, n_pairs, n_pairs - 2]
    assert any(f"1 of the {N_USERS + 1} held-out users in" in w and "has no served list" in w
               and "never appears in the training log" in w and "n_users_not_in_training" in w
               for w in alone["warnings"])
    assert accuracy["at"][str(K)]["served"]["ndcg"] == np.mean(
        [_ndcg(lists.get(u, []), held[u]) for u in range(N_USERS)])
    # beside a model whose table has a row for user 50 (rows 0..59, ids as rows): the same counters
    rng = np.random.default_rng(5)
    model = tmp_path / "model.pt"
    torch.save({"user_embedding.weight": torch.from_numpy(rng.standard_normal((60, 4)).astype(np.float32)),
                "item_embedding.weight": torch.from_numpy(rng.standard_normal((N_ITEMS, 4)).astype(np.float32))}, model)
    beside = _report(tmp_path, str(model))["accuracy"]
    assert [beside[c] for c in counters] == [accuracy[c] for c in counters]
    assert beside["at"][str(K)]["served"] == accuracy["at"][str(K)]["served"]


def test_heldout_user_without_list_beside_a_log_without_users_counts_as_not_in_training(tmp_path: Path) -> None:
    # A log that names no users (a counts file): no held-out user without a list can be one of
    # its users, so none is counted as having trained (n_users_not_sampled stays 0).
    _lists_and_holdout(tmp_path, 50)
    items = pq.read_table(tmp_path / "log.parquet")["item_id"].to_numpy()
    counts = np.bincount(items, minlength=N_ITEMS)
    pq.write_table(pa.table({"item_id": np.arange(N_ITEMS), "count": counts}), tmp_path / "freq.parquet")
    out = tmp_path / "f.json"
    ran = CliRunner().invoke(cli, ["check", "--recommendations", str(tmp_path / "lists.parquet"), "--frequencies",
                                   str(tmp_path / "freq.parquet"), "--holdout", str(tmp_path / "held.parquet"),
                                   "-k", str(K), "-q", "--json", str(out)], catch_exceptions=False)
    assert ran.exit_code == 0, ran.output
    report = json.loads(out.read_text())
    accuracy = report["accuracy"]
    n_unlisted = len(UNLISTED) + 1
    assert (accuracy["n_users_evaluated"], accuracy["n_users_not_in_training"], accuracy["n_users_not_sampled"]) == (
        N_USERS - len(UNLISTED), n_unlisted, 0)
    assert any(f"{n_unlisted} of the {N_USERS + 1} held-out users" in w and "the training log names no users" in w
               for w in report["warnings"])


def test_heldout_log_user_beside_lists_of_other_users_counts_as_trained_not_served(tmp_path: Path) -> None:
    # No served user is a user of the log ('u0', 'u1' against 0..19): a held-out log user without
    # a list trained, so it is never counted as absent from the log; user 50 is.
    served_groups_log(tmp_path)
    (tmp_path / "lists.csv").write_text("user_id,item_id,rank\nu0,3,1\nu0,5,2\nu1,2,1\n")
    (tmp_path / "held.csv").write_text("user_id,item_id\nu0,3\n0,7\n50,1\n")
    out = tmp_path / "r.json"
    ran = CliRunner().invoke(cli, ["check", "--recommendations", str(tmp_path / "lists.csv"), "--interactions",
                                   str(tmp_path / "log.parquet"), "--holdout", str(tmp_path / "held.csv"), "-k", "2",
                                   "-q", "--json", str(out)], catch_exceptions=False)
    assert ran.exit_code == 0, ran.output
    report = json.loads(out.read_text())
    accuracy = report["accuracy"]
    assert (accuracy["n_users_evaluated"], accuracy["n_users_not_in_training"], accuracy["n_users_not_sampled"],
            accuracy["n_dropped"]) == (1, 1, 1, 0)
    assert accuracy["at"]["2"]["served"]["ndcg"] == 1.0  # u0's held-out item 3 is its rank-1 item
    assert any("is a user of the training log without a served list" in w and "n_users_not_sampled" in w
               for w in report["warnings"])

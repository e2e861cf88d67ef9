"""Served lists' figures per user and per list do not depend on which path reads them
(QA harms F1, F2, F3): a user's group is drawn among the training log's users whoever has
a list, ACLT averages over users with a list, and PopRSP/PopREO drop a user's training
items from their candidates unless that user's own list re-serves some.

Known answers: figures computed here with numpy from the log and the lists (Abdollahpouri
et al.'s groups and GAP, Elliot's ACLT and PopRSP), against the JSON report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from served_samples import N_ITEMS, N_USERS, served_groups_log

K = 3


def _lists(users: np.ndarray, items: np.ndarray, listed: list[int]) -> dict[int, list[int]]:
    """Each listed user's K least-indexed items they did not train on (a fixed, simple serving)."""
    return {u: [i for i in range(N_ITEMS) if i not in set(items[users == u].tolist())][u % 5: u % 5 + K]
            for u in listed}


def _write(tmp_path: Path, lists: dict[int, list[int]], name: str = "lists.parquet") -> Path:
    rows = [(u, i, r + 1) for u, items in lists.items() for r, i in enumerate(items)]
    path = tmp_path / name
    pq.write_table(pa.table({"user_id": [r[0] for r in rows], "item_id": [r[1] for r in rows],
                             "rank": [r[2] for r in rows]}), path)
    return path


def _served(tmp_path: Path, lists: Path, *extra: object) -> dict[str, float]:
    out = tmp_path / "r.json"
    ran = CliRunner().invoke(cli, ["check", "--recommendations", str(lists), "--interactions",
                                   str(tmp_path / "log.parquet"), "-k", str(K), "-q", "--json", str(out),
                                   *map(str, extra)], catch_exceptions=False)
    assert ran.exit_code == 0, ran.output
    report = json.loads(out.read_text())
    served: dict[str, float] = report["retrieval"]["at"][str(K)]["served"]
    return served


def _groups(popularity: np.ndarray, profiles: dict[int, set[int]], among: list[int]) -> dict[int, int]:
    """Abdollahpouri et al.'s split drawn among ``among``: ⌊0.2·n⌋ niche, n − ⌊0.8·n⌋ blockbuster."""
    cut = np.sort(popularity)[::-1][int(0.2 * N_ITEMS) - 1]  # the top 20% of items, ties at the cut in
    popular = set(np.flatnonzero((popularity >= cut) & (popularity > 0)).tolist())
    assert len(popular) < 0.3 * N_ITEMS
    ratio = {u: len(profiles[u] & popular) / len(profiles[u]) for u in among}
    ranked = sorted(ratio.values())
    n = len(ranked)
    low, high = ranked[math.floor(0.2 * n) - 1], ranked[n - (n - math.floor(0.8 * n))]
    return {u: 0 if r <= low else 2 if r >= high else 1 for u, r in ratio.items()}


def _gap_delta(popularity: np.ndarray, profiles: dict[int, set[int]], lists: dict[int, list[int]],
               group: dict[int, int], code: int) -> float:
    members = [u for u in lists if group[u] == code]
    profile = np.mean([popularity[sorted(profiles[u])].mean() for u in members])
    listed = np.mean([popularity[lists[u]].mean() for u in members])
    return float((listed - profile) / profile)


def test_lists_alone_draw_user_groups_among_every_user_of_the_log(tmp_path: Path) -> None:
    """F1: the 6 users with the most popular profiles have no list. Their groups are still
    drawn among all 20 users of the log, so the 14 listed users keep the groups they have
    beside a model; drawn among the listed users only, some would change group and the
    niche ΔGAP would differ."""
    users, items = served_groups_log(tmp_path)
    popularity = np.bincount(items, minlength=N_ITEMS).astype(float)
    profiles = {u: set(items[users == u].tolist()) for u in range(N_USERS)}
    head = set(np.argsort(-popularity, kind="stable")[:6].tolist())
    by_ratio = sorted(range(N_USERS), key=lambda u: -len(profiles[u] & head) / len(profiles[u]))
    listed = sorted(by_ratio[6:])
    lists = _lists(users, items, listed)
    served = _served(tmp_path, _write(tmp_path, lists))
    every = _groups(popularity, profiles, list(range(N_USERS)))
    only_listed = _groups(popularity, profiles, listed)
    assert any(every[u] != only_listed[u] for u in listed)  # the old rule moves users: the test can tell
    for code, name in enumerate(("niche", "diverse", "blockbuster")):
        if any(every[u] == code for u in listed):
            assert served[f"gap_delta_{name}"] == pytest.approx(_gap_delta(popularity, profiles, lists, every, code))
    old = _gap_delta(popularity, profiles, lists, only_listed, 0)
    assert served["gap_delta_niche"] != pytest.approx(old)


def _model(tmp_path: Path) -> Path:
    import torch

    rng = np.random.default_rng(5)
    path = tmp_path / "model.pt"
    torch.save({"user_embedding.weight": torch.from_numpy(rng.standard_normal((N_USERS, 4)).astype(np.float32)),
                "item_embedding.weight": torch.from_numpy(rng.standard_normal((N_ITEMS, 4)).astype(np.float32))}, path)
    return path


def _long_tail(popularity: np.ndarray, mass: float = 0.8) -> np.ndarray:
    """Elliot's long tail: outside the most popular items holding ``mass`` (ties at the cut in the head)."""
    ordered = np.sort(popularity)[::-1]
    last = int(np.argmax(np.cumsum(ordered) / ordered.sum() >= mass - 1e-12))
    return ~((popularity >= ordered[last]) & (popularity > 0))


def test_aclt_averages_over_users_with_a_list_on_both_paths(tmp_path: Path) -> None:
    """F2: 5 of the 20 users have no served list. ACLT is the mean over the 15 lists of their
    long-tail items (Elliot), alone and beside the model (which serves the 5 an empty list):
    with full lists, ACLT = K · APLT in the same report. The old figure beside the model
    counted the 5 as lists of 0 long-tail items (15 / 20 of it). The group figures are the
    same on both paths (F1)."""
    users, items = served_groups_log(tmp_path)
    popularity = np.bincount(items, minlength=N_ITEMS).astype(float)
    lists = _lists(users, items, [u for u in range(N_USERS) if u % 4])
    path = _write(tmp_path, lists)
    tail = _long_tail(popularity)
    expected = float(np.mean([tail[items].sum() for items in lists.values()]))
    alone = _served(tmp_path, path)
    beside = _served(tmp_path, path, _model(tmp_path))
    assert expected != pytest.approx(expected * 15 / 20)
    for served in (alone, beside):
        assert served["aclt"] == pytest.approx(expected)
        assert served["aclt"] == pytest.approx(K * served["aplt"])
    for name in ("niche", "diverse", "blockbuster"):
        for measure in ("gap_delta", "miscalibration"):
            assert beside[f"{measure}_{name}"] == pytest.approx(alone[f"{measure}_{name}"], nan_ok=True)


def _pop_rsp(popularity: np.ndarray, profiles: dict[int, set[int]], lists: dict[int, list[int]]) -> float:
    """Elliot's PopRSP, a user's training items among their candidates only where their list re-serves one."""
    tail = _long_tail(popularity)
    recommended = np.zeros(2)
    candidates = np.zeros(2)
    for u, items in lists.items():
        recommended += [np.sum(~tail[items]), np.sum(tail[items])]
        allowed = np.ones(N_ITEMS, bool)
        if not profiles[u] & set(items):
            allowed[sorted(profiles[u])] = False
        candidates += [np.sum(~tail & allowed), np.sum(tail & allowed)]
    p = recommended / candidates
    return float(np.std(p) / np.mean(p))


def test_one_reserved_training_item_moves_one_users_candidates(tmp_path: Path) -> None:
    """F3: one slot of 60 re-serves a training item of its user. PopRSP counts that user's
    training items among their candidates, everyone else's not: the figure barely moves
    (the old rule dropped − T_u for all 20 users at once, and PopRSP fell by half)."""
    users, items = served_groups_log(tmp_path)
    popularity = np.bincount(items, minlength=N_ITEMS).astype(float)
    profiles = {u: set(items[users == u].tolist()) for u in range(N_USERS)}
    clean = _lists(users, items, list(range(N_USERS)))
    changed = {u: list(lst) for u, lst in clean.items()}
    changed[3][-1] = min(profiles[3])
    before = _served(tmp_path, _write(tmp_path, clean, "clean.parquet"))["pop_rsp"]
    out = tmp_path / "r.json"
    ran = CliRunner().invoke(cli, ["check", "--recommendations", str(_write(tmp_path, changed)), "--interactions",
                                   str(tmp_path / "log.parquet"), "-k", str(K), "-q", "--json", str(out)])
    assert ran.exit_code == 0, ran.output
    report = json.loads(out.read_text())
    after = report["retrieval"]["at"][str(K)]["served"]["pop_rsp"]
    assert before == pytest.approx(_pop_rsp(popularity, profiles, clean))
    assert after == pytest.approx(_pop_rsp(popularity, profiles, changed))
    assert abs(after - before) < 0.1 * before
    assert any(w.startswith("1 of the 20 served lists re-serve") for w in report["warnings"])


def test_keep_seen_makes_every_users_training_items_candidates_of_the_served_lists(tmp_path: Path) -> None:
    """N1: with --keep-seen, the model's own dot lists (training items allowed) written as
    served lists give dot's PopRSP beside the model and alone: every user's training items are
    candidates (Σ_u |g|), as for the scorings. The old rule counted them only for the users
    whose list re-serves one, another figure for the very same lists in one report."""
    import torch

    users, items = served_groups_log(tmp_path)
    popularity = np.bincount(items, minlength=N_ITEMS).astype(float)
    profiles = {u: set(items[users == u].tolist()) for u in range(N_USERS)}
    model = _model(tmp_path)
    weights = torch.load(model)
    scores = weights["user_embedding.weight"].numpy() @ weights["item_embedding.weight"].numpy().T
    dot = {u: np.argsort(-scores[u], kind="stable")[:K].tolist() for u in range(N_USERS)}
    reserving = [u for u in dot if profiles[u] & set(dot[u])]
    assert 0 < len(reserving) < N_USERS  # the two rules differ here
    tail = _long_tail(popularity)
    recommended = np.sum([[np.sum(~tail[lst]), np.sum(tail[lst])] for lst in dot.values()], axis=0)
    p = recommended / (N_USERS * np.array([np.sum(~tail), np.sum(tail)]))
    expected = float(np.std(p) / np.mean(p))
    assert expected != pytest.approx(_pop_rsp(popularity, profiles, dot))
    path = _write(tmp_path, dot)
    out = tmp_path / "beside.json"
    ran = CliRunner().invoke(cli, ["check", str(model), "--recommendations", str(path), "--interactions",
                                   str(tmp_path / "log.parquet"), "-k", str(K), "-q", "--keep-seen", "--json",
                                   str(out)], catch_exceptions=False)
    assert ran.exit_code == 0, ran.output
    at = json.loads(out.read_text())["retrieval"]["at"][str(K)]
    assert at["dot"]["pop_rsp"] == pytest.approx(expected)
    assert at["served"]["pop_rsp"] == pytest.approx(expected)
    assert _served(tmp_path, path, "--keep-seen")["pop_rsp"] == pytest.approx(expected)

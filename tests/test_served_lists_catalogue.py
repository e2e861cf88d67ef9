"""The catalogue of served lists audited alone (docs/served-lists.md, "Lists alone" and
the last paragraph): the items of the training log and of the lists. A model's items
never trained and never served are not in it, so a model's dot top-K audited alone gives
the model's dot figures only where they do not count the catalogue; a counts file that
lists every item (0 for those never trained) gives them all.

Known answers: 300 table rows, the last 3 never trained and too short to be served. Alone,
and for the served scoring beside the model (one figure for one file), the catalogue is 297 items, the top 1% is floor(2.97) = 2 items instead of 3, and coverage
divides by 297 instead of 300; the shares are counted here from the lists themselves."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from auditor.audit import run_audit
from auditor.config import AuditConfig

N_ITEMS, N_COLD, N_USERS, DIM, K = 300, 3, 50, 8, 10


def _files(tmp_path: Path) -> tuple[Path, Path, Path, np.ndarray, np.ndarray]:
    """Model, log, the model's dot top-K as a served-lists file, the lists and the counts."""
    import torch

    rng = np.random.default_rng(7)
    counts = np.zeros(N_ITEMS, dtype=np.int64)
    counts[: N_ITEMS - N_COLD] = (400 / np.arange(1, N_ITEMS - N_COLD + 1) ** 0.9).astype(np.int64) + 1
    assert counts[0] > counts[1] > counts[2] > counts[3]  # the head sets below hold no ties
    directions = rng.standard_normal((N_ITEMS, DIM))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    items = directions * np.log1p(counts)[:, None] + 1e-3 * directions * (counts == 0)[:, None]
    users = rng.standard_normal((N_USERS, DIM))
    rows = np.repeat(np.arange(N_ITEMS), counts)
    user_of = rng.integers(0, N_USERS, rows.size)
    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": user_of, "item_id": rows}), log)
    model = tmp_path / "model.pt"
    torch.save({"item_embedding.weight": torch.from_numpy(items.astype(np.float32)),
                "user_embedding.weight": torch.from_numpy(users.astype(np.float32))}, model)
    scores = users.astype(np.float32) @ items.astype(np.float32).T
    scores[user_of, rows] = -np.inf  # the audit serves no training item
    lists = np.argsort(-scores, axis=1, kind="stable")[:, :K]
    assert not np.isin(np.arange(N_ITEMS - N_COLD, N_ITEMS), lists).any()  # the cold items are never served
    served = tmp_path / "served.parquet"
    pq.write_table(pa.table({"user_id": np.repeat(np.arange(N_USERS), K), "item_id": lists.ravel(),
                             "rank": np.tile(np.arange(1, K + 1), N_USERS)}), served)
    return model, log, served, lists, counts


def _head_share(lists: np.ndarray, counts: np.ndarray, c: int) -> float:
    """The share of the slots that the c most frequent items fill."""
    head = np.argsort(-counts, kind="stable")[:c]
    return float(np.isin(lists, head).mean())


def test_lists_alone_measure_the_catalogue_of_the_log_and_the_lists(tmp_path: Path) -> None:
    model, log, served, lists, counts = _files(tmp_path)
    beside = run_audit(AuditConfig(model=model, interactions=log, recommendations=served, ks=(K,), probes=False,
                                   bootstrap=0))
    assert beside.retrieval is not None
    dot = beside.retrieval.at[K].dot
    alone = run_audit(AuditConfig(model=None, interactions=log, recommendations=served, ks=(K,)))
    assert alone.served is not None and alone.inputs.n_items == N_ITEMS - N_COLD == alone.served.n_catalogue
    figures = alone.served.at[K].served
    # The file is dot's top-K; beside the model the served scoring is the lists-alone one (QA13 harms F1, F2).
    assert dict(beside.retrieval.at[K].norm_aware["served"]) == pytest.approx(dict(figures))
    distinct = np.unique(lists).size
    # Figures that count the catalogue: the top 1% is 2 items alone, 3 beside the model.
    assert figures["head_share_1pct"] == pytest.approx(_head_share(lists, counts, 2))
    assert dot["head_share_1pct"] == pytest.approx(_head_share(lists, counts, 3))
    assert float(figures["head_share_1pct"] or 0) < float(dot["head_share_1pct"] or 0)
    assert figures["coverage"] == pytest.approx(distinct / (N_ITEMS - N_COLD))
    assert dot["coverage"] == pytest.approx(distinct / N_ITEMS)
    # Figures that do not count it agree.
    for name in ("arp", "gap_delta_niche", "miscalibration", "novelty"):
        assert figures[name] == pytest.approx(dot[name]), name


def test_a_counts_file_of_every_item_gives_the_models_catalogue(tmp_path: Path) -> None:
    model, log, served, lists, counts = _files(tmp_path)
    frequencies = tmp_path / "counts.csv"
    frequencies.write_text("item_id,count\n" + "".join(f"{i},{n}\n" for i, n in enumerate(counts)))
    beside = run_audit(AuditConfig(model=model, interactions=log, recommendations=served, ks=(K,), probes=False,
                                   bootstrap=0))
    alone = run_audit(AuditConfig(model=None, frequencies=frequencies, recommendations=served, ks=(K,)))
    assert beside.retrieval is not None and alone.served is not None and alone.served.n_catalogue == N_ITEMS
    dot, figures = beside.retrieval.at[K].dot, alone.served.at[K].served
    for name in ("head_share_1pct", "head_share_10pct", "head_share_20pct", "arp", "aplt", "gini", "coverage", "aclt"):
        assert figures[name] == pytest.approx(dot[name]), name
    assert figures["head_share_1pct"] == pytest.approx(_head_share(lists, counts, 3))


def _gap_delta(lists: np.ndarray, profiles: list[list[int]], pop: np.ndarray, users: np.ndarray) -> float:
    """ΔGAP of ``users`` (docs/measures.md): (GAP of the lists − GAP of the profiles) / GAP of the profiles."""
    listed = np.mean([pop[lists[u]].mean() for u in users])
    profiled = np.mean([pop[profiles[u]].mean() for u in users])
    return float((listed - profiled) / profiled)


def test_user_groups_count_the_catalogue(tmp_path: Path) -> None:
    """Users are grouped by their share of items in the top 20% of the catalogue: 4 of the
    model's 20 rows, 2 of the 10 items lists alone know, so the per-group ΔGAP differs
    while the ungrouped miscalibration, ARP and novelty do not (docs/served-lists.md)."""
    import torch

    profiles = [[0, 1], [2, 3], [4, 5], [0, 4], [1, 6], [2, 7], [8, 9], [3, 8], [0, 2], [5, 9]]
    users = [u for u, items in enumerate(profiles) for _ in items] + [0] * 12 + [0] * 11 + [1] * 9 + [1] * 9
    items = [i for p in profiles for i in p] + [0] * 12 + [1] * 11 + [2] * 9 + [3] * 9
    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": users, "item_id": items}), log)
    pop = np.bincount(items, minlength=20).astype(float)  # 15, 13, 12, 11, 2, 2, 1, 1, 2, 2; rows 10-19 never trained
    rng = np.random.default_rng(1)
    table, queries = np.abs(rng.normal(size=(20, 4))), np.abs(rng.normal(size=(10, 4)))
    table[10:] *= 1e-3
    model = tmp_path / "model.pt"
    torch.save({"item_embedding.weight": torch.tensor(table, dtype=torch.float32),
                "user_embedding.weight": torch.tensor(queries, dtype=torch.float32)}, model)
    scores = queries.astype(np.float32) @ table.astype(np.float32).T
    for u, p in enumerate(profiles):
        scores[u, p] = -np.inf
    lists = np.argsort(-scores, axis=1, kind="stable")[:, :3]
    assert lists.max() < 10  # the untrained rows are never served
    served = tmp_path / "served.parquet"
    pq.write_table(pa.table({"user_id": np.repeat(np.arange(10), 3), "item_id": lists.ravel(),
                             "rank": np.tile([1, 2, 3], 10)}), served)
    beside = run_audit(AuditConfig(model=model, interactions=log, recommendations=served, ks=(3,), probes=False,
                                   bootstrap=0))
    alone = run_audit(AuditConfig(model=None, interactions=log, recommendations=served, ks=(3,)))
    assert beside.retrieval is not None and alone.served is not None
    model_figures, lists_figures = beside.retrieval.at[3].dot, alone.served.at[3].served
    # Popular ratios: top 4 items {0..3} beside the model, top 2 {0, 1} alone; niche = the 2 lowest, ties in.
    model_ratio = np.array([np.isin(p, [0, 1, 2, 3]).mean() for p in profiles])
    lists_ratio = np.array([np.isin(p, [0, 1]).mean() for p in profiles])
    model_niche = np.flatnonzero(model_ratio <= np.sort(model_ratio)[1])  # users 2, 6, 9
    lists_niche = np.flatnonzero(lists_ratio <= np.sort(lists_ratio)[1])  # ratio 0: users 1, 2, 5, 6, 7, 9
    assert model_niche.tolist() == [2, 6, 9] and lists_niche.tolist() == [1, 2, 5, 6, 7, 9]
    assert model_figures["gap_delta_niche"] == pytest.approx(_gap_delta(lists, profiles, pop, model_niche))
    assert lists_figures["gap_delta_niche"] == pytest.approx(_gap_delta(lists, profiles, pop[:10], lists_niche))
    assert abs(float(model_figures["gap_delta_niche"] or 0) - float(lists_figures["gap_delta_niche"] or 0)) > 0.01
    for name in ("arp", "miscalibration", "novelty"):
        assert lists_figures[name] == pytest.approx(model_figures[name]), name

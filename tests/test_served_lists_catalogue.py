"""The catalogue of served lists audited alone (docs/served-lists.md, "Lists alone" and
the last paragraph): the items of the training log and of the lists. A model's items
never trained and never served are not in it, so a model's dot top-K audited alone gives
the model's dot figures only where they do not count the catalogue; a counts file that
lists every item (0 for those never trained) gives them all.

Known answers: 300 table rows, the last 3 never trained and too short to be served. Alone,
the catalogue is 297 items, the top 1% is floor(2.97) = 2 items instead of 3, and coverage
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
    assert dict(beside.retrieval.at[K].norm_aware["served"]) == pytest.approx(dict(dot))  # the file is dot's top-K

    alone = run_audit(AuditConfig(model=None, interactions=log, recommendations=served, ks=(K,)))
    assert alone.served is not None and alone.inputs.n_items == N_ITEMS - N_COLD == alone.served.n_catalogue
    figures = alone.served.at[K].served
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

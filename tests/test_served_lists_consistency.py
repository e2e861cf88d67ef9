"""Issue #21 item 4, "done when": a served-lists file made from a model's dot top-K gives
the same exposure figures as the audit of that model over the same users, at every K,
whether it is read against the model's rows or as a lists-only audit (no model), when
every table item is in the log or the lists (tests/test_served_lists_catalogue.py: when
not, the lists-only catalogue is smaller and the figures that count it differ)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from auditor.config import AuditConfig
from auditor.loading.alignment import align_counts
from auditor.loading.counting import count_item_ids
from auditor.values import LogSpec
from auditor.loading.population import population_of
from auditor.model import QueryPopulation
from auditor.loading.served_lists import lists_for, read_served_lists
from auditor.metrics.builtin_measures import EXPOSURE_MEASURES
from auditor.metrics.list_measures import ExposureMeasures
from auditor.model import ModelBundle
from auditor.retrieval import measure_retrieval
from auditor.retrieval.measure import RetrievalOutcome

KS = (1, 5, 10, 20)
N_ITEMS, N_USERS, DIM = 80, 30, 8


def _audit(tmp_path: Path) -> tuple[ModelBundle, AuditConfig, QueryPopulation, RetrievalOutcome, np.ndarray]:
    """A biased table (popular items longer), its Zipf log with raw item ids 5000 + a
    permutation, and the audit's dot lists for the training users."""
    rng = np.random.default_rng(21)
    popularity = (30 / np.arange(1, N_ITEMS + 1) ** 0.8).astype(int) + 1  # every item seen at least once
    directions = rng.standard_normal((N_ITEMS, DIM))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    items = (directions * np.log1p(popularity)[:, None]).astype(np.float32)
    users = rng.standard_normal((N_USERS, DIM)).astype(np.float32)
    raw_items = 5000 + rng.permutation(N_ITEMS)
    rows = np.repeat(np.arange(N_ITEMS), popularity)
    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": rng.integers(0, N_USERS, rows.size), "item_id": raw_items[rows]}), log)
    model = tmp_path / "items.npy"
    np.save(model, items)
    bundle = ModelBundle(source=model, format="npy", item_table=items, user_table=users, item_ids=raw_items)
    config = AuditConfig(model=model, interactions=log, ks=KS)
    stats = align_counts(count_item_ids(LogSpec(log)), config.item_rows(bundle))
    population = population_of(bundle, config)
    outcome = measure_retrieval(bundle, stats, config, population)
    return bundle, config, population, outcome, raw_items


def _write_dot_lists(path: Path, population: QueryPopulation, outcome: RetrievalOutcome, bundle: ModelBundle,
                     raw_items: np.ndarray, *, scores: bool) -> None:
    """The dot lists as a served-lists file, rows shuffled: rank, or the dot score itself."""
    dot = outcome.lists["dot"]
    query, slot = np.nonzero(dot >= 0)
    assert population.raw_ids is not None and bundle.user_table is not None
    order = np.random.default_rng(0).permutation(query.size)
    query, slot = query[order], slot[order]
    row = dot[query, slot]
    columns: dict[str, np.ndarray] = {"user_id": population.raw_ids[query], "item_id": raw_items[row]}
    if scores:
        vectors = population.vectors.astype(np.float64)
        columns["score"] = np.einsum("ij,ij->i", vectors[query], bundle.item_table[row].astype(np.float64))
        pacsv.write_csv(pa.table(columns), path)
    else:
        columns["rank"] = slot + 1
        pq.write_table(pa.table(columns), path)


def _exposure(measured: Any) -> dict[str, Any]:
    return {m.name: measured[m.name] for m in EXPOSURE_MEASURES}


@pytest.mark.parametrize("scores", [False, True], ids=["ranks-parquet", "scores-csv"])
def test_served_dot_lists_give_the_audits_dot_figures_at_every_k(tmp_path: Path, scores: bool) -> None:
    bundle, config, population, outcome, raw_items = _audit(tmp_path)
    path = tmp_path / ("served.csv" if scores else "served.parquet")
    _write_dot_lists(path, population, outcome, bundle, raw_items, scores=scores)
    counts = count_item_ids(LogSpec(tmp_path / "log.parquet"))
    stats = align_counts(counts, config.item_rows(bundle))
    assert population.raw_ids is not None

    # Against the model's rows: the very lists the audit measured.
    served = read_served_lists(LogSpec(path), items=config.item_rows(bundle), log_users=population.raw_ids)
    lists, missing = lists_for(served, population.raw_ids)
    assert missing == 0 and served.warnings == () and served.n_unknown_users == 0
    np.testing.assert_array_equal(lists, outcome.lists["dot"])
    assert outcome.popularity is not None
    # The exposure measures (the user-side ones also read each user's training items, which
    # served lists alone do not carry).
    measures = ExposureMeasures(outcome.popularity, stats.user_counts, stats.n_users, measures=EXPOSURE_MEASURES)
    for k in KS:
        assert measures.measure(lists[:, :k]) == pytest.approx(_exposure(outcome.retrieval.at[k].dot)), k

    # Lists only: the catalogue is the log's items (every table item is in the log), so
    # only the row numbering differs, and no figure depends on it.
    alone = read_served_lists(LogSpec(path), log_items=counts.ids, log_users=population.raw_ids)
    assert alone.catalogue and alone.items.n_items == N_ITEMS and alone.warnings == ()
    catalogue_stats = align_counts(counts, alone.items)
    measures = ExposureMeasures(catalogue_stats.frequencies, catalogue_stats.user_counts, catalogue_stats.n_users,
                                measures=EXPOSURE_MEASURES)
    for k in KS:
        figures = measures.measure(alone.lists[:, :k])
        assert figures == pytest.approx(_exposure(outcome.retrieval.at[k].dot)), k
    # The lists are biased (popular items have longer vectors): the figures compared are not trivial.
    dot, cosine = outcome.retrieval.at[10].dot, outcome.retrieval.at[10].cosine
    assert float(dot["arp"] or 0) > 1.3 * float(cosine["arp"] or 0) > 0
    assert float(dot["head_share_10pct"] or 0) > 2 * float(cosine["head_share_10pct"] or 0) > 0

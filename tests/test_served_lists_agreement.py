"""Served lists read by popaudit measure what Evidently and RecTools measure on the same
lists (issue #21 item 4). The libraries' figures were recorded by
tests/data/served_lists/make_expected.py (README.md there: versions and command); popaudit
reads the same files with its served-lists reader and measures them with its exposure
measures, under each library's convention (auditor/metrics/exposure.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from auditor.loading.alignment import align_counts
from auditor.loading.counting import count_item_ids
from auditor.values import LogSpec
from auditor.loading.served_lists import ServedLists, lists_for, read_served_lists
from auditor.metrics.exposure import AvgRecPopularity, GiniIndex, ItemCoverage, Novelty, overlap
from auditor.metrics.list_measures import ExposureMeasures
from auditor.model import ItemStats

DATA = Path(__file__).resolve().parent / "data" / "served_lists"
EXPECTED = json.loads((DATA / "expected.json").read_text())
KS = EXPECTED["ks"]


def _read(name: str) -> tuple[ServedLists, ItemStats]:
    """The lists of ``name`` over the catalogue of the training log and the lists, and the
    log's counts aligned to that catalogue (what a lists-only audit measures with)."""
    counts = count_item_ids(LogSpec(DATA / "train.csv"))
    served = read_served_lists(LogSpec(DATA / name), log_items=counts.ids)
    return served, align_counts(counts, served.items)


def test_the_fixture_holds_what_the_policies_are_about() -> None:
    served, stats = _read("recs.csv")
    assert served.n_users == 15 and served.k == 5 and served.matrix.n_short_lists == 2
    assert served.n_cold_items > 0  # items served that the log never saw: kept, popularity 0
    assert (stats.frequencies == 0).sum() == served.n_cold_items
    assert stats.n_users == 40 and stats.user_counts is not None
    assert (stats.user_counts < stats.frequencies).any()  # repeated (user, item) pairs: the two populars differ
    scored, _ = _read("recs_scores.csv")
    assert scored.order.kind == "score"
    np.testing.assert_array_equal(scored.lists, served.lists)


@pytest.mark.parametrize("k", KS)
def test_rectools_figures(k: int) -> None:
    # RecTools: popularity = interactions, cold items 0 (ARP) or one user (MIUF), catalogue
    # coverage over the items of the log and the lists: popaudit's defaults.
    expected = EXPECTED["rectools"][str(k)]
    served, stats = _read("recs.csv")
    assert stats.user_counts is not None and stats.n_users is not None
    lists = served.lists[:, :k]
    report = ExposureMeasures(stats.frequencies, stats.user_counts, stats.n_users).measure(lists)
    assert AvgRecPopularity(stats.frequencies).measure(lists) == pytest.approx(expected["AvgRecPopularity"])
    assert report["arp"] == pytest.approx(expected["AvgRecPopularity"])
    assert report["novelty"] == pytest.approx(expected["MeanInvUserFreq"])
    assert Novelty(stats.user_counts, stats.n_users).measure(lists) == pytest.approx(expected["MeanInvUserFreq"])
    assert report["coverage"] == pytest.approx(expected["CatalogCoverage_normalized"])
    # Intersection: the share of the other lists' top k found in these lists' top k; every
    # other list is full, so its denominator is k, as popaudit's overlap's. Read through the
    # same catalogue, the other lists' items outside it keep their slots, empty: they
    # cannot be shared, and the items after them stay in place.
    other = read_served_lists(LogSpec(DATA / "recs_other.csv"), items=served.items)
    aligned, missing = lists_for(other, served.user_ids)
    assert missing == 0 and other.matrix.n_short_lists == 0 and other.n_unknown_rows == 2
    assert overlap(aligned[:, :k], lists) == pytest.approx(expected["Intersection_other_in_lists"])


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("name, kind", [("recs.csv", "rank"), ("recs_scores.csv", "score")])
def test_evidently_figures(k: int, name: str, kind: str) -> None:
    # Evidently: popularity = distinct users, cold items dropped (ARP, novelty), coverage
    # among trained items, Gini over recommended items with n - 1.
    expected = EXPECTED[f"evidently_{kind}"][str(k)]
    served, stats = _read(name)
    assert stats.user_counts is not None and stats.n_users is not None
    lists, n = served.lists[:, :k], served.items.n_items
    assert AvgRecPopularity(stats.user_counts, cold="drop").measure(lists) == pytest.approx(expected["PopularityBias_apr"])
    coverage = ItemCoverage(n, trained=stats.frequencies > 0).measure(lists)
    assert coverage == pytest.approx(expected["PopularityBias_coverage"])
    gini = GiniIndex(n, over="recommended", unbiased=True).measure(lists)
    assert gini == pytest.approx(expected["PopularityBias_gini"])
    novelty = Novelty(stats.user_counts, stats.n_users, cold="drop").measure(lists)
    assert novelty == pytest.approx(expected["NoveltyMetric"])

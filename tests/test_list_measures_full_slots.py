"""Lists with every slot filled take the unmasked path (auditor/plugin_api.py Slots.all_valid):
the same numbers, to the bit, as the masked computation over the same lists."""

from __future__ import annotations

import numpy as np

from auditor.metrics.exposure import HeadShare
from auditor.metrics.item_kinds import item_kinds
from auditor.plugin_api import Slots


def _masked_mean(values: np.ndarray, lists: np.ndarray) -> np.ndarray:
    valid = lists >= 0
    total = np.where(valid, values[np.where(valid, lists, 0)], 0.0).sum(axis=1, dtype=np.float64)
    n = valid.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, total / np.maximum(n, 1), np.nan)


def test_full_lists_give_the_masked_figures_bit_for_bit() -> None:
    rng = np.random.default_rng(2)
    n_items = 500
    lists = np.stack([rng.permutation(n_items)[:100] for _ in range(60)])
    slots = Slots(lists, n_items)
    assert slots.all_valid and slots.safe is slots.lists and np.shares_memory(slots.safe, lists)  # no copy
    for values in (rng.random(n_items), rng.random(n_items).astype(np.float32) * 1e3,
                   rng.random(n_items) > 0.7, rng.integers(0, 10**6, n_items)):
        got, expected = slots.per_list_mean(values), _masked_mean(values, lists)
        assert got.dtype == expected.dtype == np.float64
        np.testing.assert_array_equal(got.view(np.int64), expected.view(np.int64))
    popularity = rng.integers(0, 100, n_items)
    head = HeadShare(popularity, 10.0)
    assert head.measure(slots) == float((head.mask[lists]).sum() / lists.size)


def test_lists_with_empty_slots_keep_the_mask() -> None:
    lists = np.array([[3, 1, -1], [-1, -1, -1], [0, 2, 4]])
    slots = Slots(lists, 5)
    assert not slots.all_valid and slots.safe.tolist() == [[3, 1, 0], [0, 0, 0], [0, 2, 4]]
    values = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    np.testing.assert_array_equal(slots.per_list_mean(values), [5.0, np.nan, 7.0])
    assert HeadShare(np.array([0, 0, 0, 0, 9]), 20.0).measure(slots) == 1 / 5  # item 4 in 5 filled slots
    groups = np.array([0, 1, 2])  # item row -> head, mid, tail
    kinds = item_kinds({f"g{code}": groups == code for code in range(3)})
    assert kinds.count(np.array([[0, 2, -1], [1, 1, 1]])).tolist() == [[1, 0, 1], [0, 3, 0]]

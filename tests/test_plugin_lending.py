"""F1: what a plugin is lent of the arrays the built-in figures read is read-only (an
in-place write raises and is reported naming the plugin), and the originals stay as they were."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from auditor.errors import PluginError
from auditor.metrics.builtin_measures import LIST_MEASURES
from auditor.metrics.list_measures import ExposureMeasures
from auditor.model import InteractionPairs, ItemStats, ModelBundle
from auditor.plugin_api import DeclaredListMeasure, ListContext
from auditor.plugins.lending import lend, unchanged_tensors
from auditor.plugins.manager import describe_failure


def _normalising(context: ListContext) -> None:
    table = context.item_table
    assert table is not None
    table /= np.linalg.norm(table, axis=1, keepdims=True)  # the careless in-place line


def test_a_list_measure_cannot_normalise_the_table_retrieval_reads() -> None:
    table = np.array([[3.0, 4.0], [0.0, 2.0], [1.0, 0.0]], dtype=np.float32)
    kept = table.copy()
    careless = DeclaredListMeasure("unit", "unit", "num2", "unit: 1", _normalising)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="read-only") as raised:
        ExposureMeasures(np.array([5, 2, 1]), measures=[*LIST_MEASURES, careless], item_table=table)
    np.testing.assert_array_equal(table, kept)  # before: every row divided by its norm (5, 2, 1)
    assert describe_failure(raised.value).startswith("it tried to change, in place, an array popaudit lends it read-only")
    assert "table /= np.linalg.norm(table, axis=1, keepdims=True)" in describe_failure(raised.value)


def test_a_lent_bundle_reads_the_same_values_and_writes_nothing() -> None:
    table = np.arange(6, dtype=np.float32).reshape(3, 2)
    pairs = InteractionPairs(np.array([0, 1]), np.array([2, 0]), np.array(["a", "b"]))
    bundle = ModelBundle(source=Path("m.npy"), format="npy", item_table=table, train_pairs=pairs)
    lent = lend(bundle)
    np.testing.assert_array_equal(lent.item_table, table)
    assert lent.train_pairs is not None and lent.train_pairs.item_rows.tolist() == [2, 0]
    for write in (lambda: lent.item_table.__setitem__(0, 9.0), lambda: lent.train_pairs.item_rows.sort()):  # type: ignore[union-attr]
        with pytest.raises(ValueError, match="read-only"):
            write()
    assert table.flags.writeable and table[0].tolist() == [0.0, 1.0] and pairs.item_rows.tolist() == [2, 0]
    stats = lend(ItemStats(frequencies=np.array([3, 2, 1]), n_interactions=6))
    with pytest.raises(ValueError, match="read-only"):
        stats.frequencies[0] = 0


def test_a_tensor_changed_in_place_is_named() -> None:
    weight = torch.ones(3, 2)
    bundle = ModelBundle(source=Path("m.pt"), format="state_dict", item_table=weight.numpy().copy(),
                         state_dict={"items.weight": weight})
    with unchanged_tensors(bundle, "plugin 'file:p.py' (hook popaudit_condition_evidence)"):
        weight.sum()  # reading is fine
    with pytest.raises(PluginError, match=r"plugin 'file:p\.py' \(hook popaudit_condition_evidence\) changed the "
                                          r"model's tensor 'items\.weight' in place"):
        with unchanged_tensors(bundle, "plugin 'file:p.py' (hook popaudit_condition_evidence)"):
            weight.mul_(0.5)

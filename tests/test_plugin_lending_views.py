"""N1 (retrain QA, second round): a read-only view binds numpy only; a plugin that writes
through ``torch.from_numpy`` / ``torch.as_tensor`` of a lent array is caught after its call
(a checksum of the lent arrays) and fails naming the plugin and the array, and a plugin
that only reads through torch runs with its figure as computed by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from auditor.errors import PluginError
from auditor.metrics.builtin_measures import LIST_MEASURES
from auditor.metrics.list_measures import ExposureMeasures
from auditor.model import ItemStats, ModelBundle
from auditor.plugin_api import DeclaredListMeasure, ListContext, Slots
from auditor.plugins.contributions import AttributedListMeasure, RegisteredMeasures, compute_measures
from auditor.plugins.manager import describe_failure

TABLE = np.array([[3.0, 4.0], [0.0, 2.0], [1.0, 0.0]], dtype=np.float32)
POPULARITY = np.array([5, 2, 1])


def _measurer(bind: Any) -> ExposureMeasures:
    measure = AttributedListMeasure("file:p.py", DeclaredListMeasure("unit", "unit", "num2", "unit: 1", bind))
    return ExposureMeasures(POPULARITY.copy(), measures=[*LIST_MEASURES, measure], item_table=TABLE.copy())  # type: ignore[list-item]


def _torch_normalises(context: ListContext) -> Any:
    rows = torch.from_numpy(context.item_table)  # the read-only flag does not bind torch
    rows /= rows.norm(dim=1, keepdim=True)
    return lambda slots: 1.0


def _as_tensor_zeroes(context: ListContext) -> Any:
    torch.as_tensor(context.popularity).mul_(0)
    return lambda slots: 1.0


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
@pytest.mark.parametrize(("bind", "array"), [(_torch_normalises, "context.item_table"),
                                             (_as_tensor_zeroes, "context.popularity")])
def test_a_list_measure_writing_through_torch_fails_named(bind: Any, array: str) -> None:
    # before: no error, and retrieval then read a unit-norm table (dot served as cosine)
    with pytest.raises(PluginError, match=rf"plugin 'file:p\.py' \(hook popaudit_measures, list measure 'unit'\) "
                                          rf"changed, in place, the array '{array}' popaudit lends it read-only, "
                                          r"through a view that ignores numpy's read-only flag \(torch\.from_numpy"):
        _measurer(bind)


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_a_list_measure_sorting_the_lists_through_torch_fails_named() -> None:
    def sorts(slots: Slots) -> float:
        torch.from_numpy(slots.lists).neg_()
        return 0.0

    measurer = _measurer(lambda context: sorts)
    with pytest.raises(PluginError, match=r"list measure 'unit'\) changed, in place, the array 'slots\.lists'"):
        measurer.measure(np.array([[0, 1], [2, 0]]))


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_a_list_measure_reading_through_torch_runs() -> None:
    def mean_norm(context: ListContext) -> Any:
        norms = torch.from_numpy(context.item_table).norm(dim=1)
        return lambda slots: float(norms[torch.from_numpy(np.array(slots.lists))].mean())

    value = _measurer(mean_norm).measure(np.array([[0, 1], [2, 0]]))["unit"]
    assert value == pytest.approx(np.mean([5.0, 2.0, 1.0, 5.0]))  # norms of rows 0, 1, 2, 0


class _AuditMeasure:
    name = "m"
    description = "writes through torch"

    def __init__(self, write: Any) -> None:
        self.write = write

    def compute(self, bundle: ModelBundle, stats: ItemStats, result: Any) -> float:
        self.write(bundle, stats)
        return 1.0


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
@pytest.mark.parametrize(("write", "array"), [
    (lambda bundle, stats: torch.from_numpy(bundle.item_table).mul_(0.5), "bundle.item_table"),
    (lambda bundle, stats: torch.as_tensor(stats.frequencies).zero_(), "stats.frequencies"),
])
def test_an_audit_measure_writing_through_torch_fails_named(write: Any, array: str) -> None:
    bundle = ModelBundle(source=Path("m.npy"), format="npy", item_table=TABLE.copy())
    stats = ItemStats(frequencies=POPULARITY.copy(), n_interactions=8)
    registered = RegisteredMeasures(audit=(("file:p.py", _AuditMeasure(write)),))
    with pytest.raises(PluginError, match=rf"plugin 'file:p\.py' \(hook popaudit_measures \(measure 'm'\)\) changed, "
                                          rf"in place, the array '{array}'"):
        compute_measures(registered, bundle, stats, result=None)
    kept = _AuditMeasure(lambda bundle, stats: float(torch.from_numpy(bundle.item_table).sum()))
    assert compute_measures(RegisteredMeasures(audit=(("file:p.py", kept),)), bundle, stats, None) == {"m": 1.0}


def _numpy_error(write: Any) -> ValueError:
    lent = np.arange(4.0).view()
    lent.flags.writeable = False
    with pytest.raises(ValueError) as raised:
        write(lent)
    return raised.value


@pytest.mark.parametrize("write", [
    lambda a: a.__setitem__(0, 1.0), lambda a: a.__itruediv__(2.0), lambda a: np.add(a, 1, out=a), lambda a: a.sort(),
    lambda a: a.partition(1), lambda a: a.put(0, 1.0), lambda a: np.random.default_rng(0).shuffle(a),
    lambda a: a.byteswap(inplace=True), lambda a: np.copyto(a, 0.0), lambda a: a.fill(0.0),
])
def test_numpy_read_only_errors_are_said_as_a_write_to_a_lent_array(write: Any) -> None:
    assert describe_failure(_numpy_error(write)).startswith(
        "it tried to change, in place, an array popaudit lends it read-only")


def test_a_plugins_own_read_only_error_keeps_its_text() -> None:
    # N3, before: "it tried to change, in place, an array popaudit lends it read-only ...", its text lost
    own = ValueError("cannot write the cache: /srv/cache is mounted read-only")
    assert describe_failure(own) == "ValueError: cannot write the cache: /srv/cache is mounted read-only"
    assert describe_failure(ValueError("array is read-only, says my own store")).startswith("ValueError: array is")

"""RecBole-like checkpoints made without RecBole (refusals, hostile cases), and RecBole's
test metrics computed with popaudit's own functions.

RecBole's trainer saves ``{"config": Config, "state_dict", "other_parameter", ...}`` with
``torch.save``; its ``Config`` (``recbole.config.configurator.Config``) pickles as a plain
object whose ``final_config_dict`` holds the run's settings. :func:`write_checkpoint`
pickles a stand-in class of that name (registered in ``sys.modules`` only while saving),
which popaudit's restricted reader reads exactly as it reads RecBole's own.
"""

from __future__ import annotations

import enum
import sys
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from auditor.loading.recbole_split import RecBoleSplit
from auditor.metrics.accuracy import accuracy_at
from auditor.retrieval.scorings import multi_scoring_topk

DEFAULTS: dict[str, Any] = {
    "USER_ID_FIELD": "user_id",
    "ITEM_ID_FIELD": "item_id",
    "TIME_FIELD": "timestamp",
    "field_separator": "\t",
    "load_col": {"inter": ["user_id", "item_id", "timestamp"]},
    "eval_args": {"split": {"RS": [0.8, 0.1, 0.1]}, "order": "TO", "group_by": "user",
                  "mode": {"valid": "full", "test": "full"}},
}  # fmt: skip
"""Settings a RecBole run records (RecBole's Config fills every one)."""


class ModelType(enum.Enum):
    """Stand-in for ``recbole.utils.enum_type.ModelType`` (pickled as ``ModelType(value)``)."""

    GENERAL = 1
    SEQUENTIAL = 2


class Config:
    """Stand-in for ``recbole.config.configurator.Config``: what its pickle holds."""

    def __init__(self, model: str, settings: Mapping[str, Any]) -> None:
        self.model, self.dataset = model, "fake"
        self.final_config_dict = {"model": model, "dataset": "fake", **settings}


@contextmanager
def _recbole_names() -> Iterator[None]:
    """Make the stand-ins picklable under RecBole's module names, then forget them."""
    names = ("recbole", "recbole.config", "recbole.config.configurator", "recbole.utils", "recbole.utils.enum_type")
    saved = {n: sys.modules.get(n) for n in names}
    modules = {n: types.ModuleType(n) for n in names}
    modules["recbole.config.configurator"].Config = Config  # type: ignore[attr-defined]
    modules["recbole.utils.enum_type"].ModelType = ModelType  # type: ignore[attr-defined]
    originals = (Config.__module__, ModelType.__module__)
    Config.__module__, ModelType.__module__ = "recbole.config.configurator", "recbole.utils.enum_type"
    sys.modules.update(modules)
    try:
        yield
    finally:
        Config.__module__, ModelType.__module__ = originals
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def write_checkpoint(
    path: Path,
    model: str,
    settings: Mapping[str, Any],
    n_users: int,
    n_items: int,
    *,
    dim: int = 4,
    other_parameter: Mapping[str, Any] | None = None,
    model_type: int | None = 1,
    seed: int = 0,
    item_view: str | None = None,
    tables: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, torch.Tensor]:
    """A checkpoint of ``model`` with tables of ``n_users``/``n_items`` ids (plus the
    padding row 0) and ``settings`` over :data:`DEFAULTS` (a None value drops one);
    ``item_view``: also a state entry of that name viewing the item table's rows 2:;
    ``tables``: the (user, item) tables, padding row included (else random)."""
    rng = np.random.default_rng(seed)
    users, items = tables if tables is not None else (rng.normal(size=(n_users + 1, dim)),
                                                     rng.normal(size=(n_items + 1, dim)))  # fmt: skip
    state = {
        "user_embedding.weight": torch.from_numpy(np.asarray(users, dtype=np.float32)),
        "item_embedding.weight": torch.from_numpy(np.asarray(items, dtype=np.float32)),
    }
    if item_view is not None:
        state[item_view] = state["item_embedding.weight"][2:]
    merged = {k: v for k, v in {**DEFAULTS, **settings}.items() if v is not None}
    with _recbole_names():
        if model_type is not None:
            merged["MODEL_TYPE"] = ModelType(model_type)
        checkpoint = {"config": Config(model, merged), "epoch": 1, "state_dict": state,
                      "other_parameter": dict(other_parameter or {})}  # fmt: skip
        torch.save(checkpoint, path)
    return state


def write_inter(path: Path, n_users: int, n_items: int, per_user: int = 5, seed: int = 0) -> None:
    """A RecBole .inter file: every user ``per_user`` distinct items at increasing times;
    users and items numbered by RecBole in order of first appearance (user u, item i first)."""
    rng = np.random.default_rng(seed)
    lines = ["user_id:token\titem_id:token\ttimestamp:float"]
    lines += [f"u{k % n_users}\ti{k % n_items}\t{k}" for k in range(max(n_users, n_items))]  # every id, in order
    for user in range(n_users):
        for item in rng.choice(n_items, size=per_user, replace=False):
            lines.append(f"u{user}\ti{item}\t{1000 + int(rng.integers(0, 10**6))}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def accuracy(users: np.ndarray, items: np.ndarray, split: RecBoleSplit, alpha: float) -> dict[str, float]:
    """RecBole's test metrics @10 and @20, computed by popaudit: the held-out test users'
    top 20 among the items RecBole does not mask, under scoring ``alpha`` (1 dot, 0 cosine)."""
    evaluated, indptr, held = split.held_out()
    masked = split.masked()
    lists = multi_scoring_topk(users[evaluated], items, 20, [alpha], exclude=masked)[alpha][1]
    out: dict[str, float] = {}
    for k, value in accuracy_at(lists, indptr, held, [10, 20]).items():
        out |= {f"recall@{k}": value.recall, f"ndcg@{k}": value.ndcg, f"hit@{k}": value.hit_rate, f"mrr@{k}": value.mrr}
    return out


def assert_recboles(found: dict[str, float], recorded: dict[str, Any]) -> None:
    """Equal to RecBole's unrounded figures, and to its printed 4 decimals (half a unit of
    the last digit: RecBole rounds its own float sums, so 0.54375 may print as 0.5438)."""
    assert set(found) == set(recorded["test"]) == set(recorded["test_exact"])
    for name, value in found.items():
        assert value == pytest.approx(recorded["test_exact"][name], abs=1e-10), name
        assert abs(value - recorded["test"][name]) <= 0.5e-4 + 1e-12, name

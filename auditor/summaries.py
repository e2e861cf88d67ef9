"""The results of the edges that reports summarise, as plain values at the bottom of the
import graph: an experiment grid (:class:`ExperimentResult`), the mitigations
experiment (:class:`MitigationResult`) and the statuses of a batch results table.

The edges that produce them (:mod:`auditor.train`, :mod:`auditor.batch`) and the report
that summarises them (:mod:`auditor.report`) both import them from here, so the report
never imports an edge. Nothing here imports the rest of popaudit but its errors.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from auditor import __version__
from auditor.errors import InputError

STATUS_OK = "ok"
"""A batch results row whose audit finished (``status`` column)."""
STATUS_ERROR = "error"
"""A batch results row whose audit failed; its ``error`` column says why."""

ANGLE_EDGES = np.arange(-0.5, 181.0, 1.0)
"""Histogram bins of update angles: 1° wide, centred on 0°, 1°, ..., 180°."""

SERVED_LISTS = (
    "the users trained on (by their user-table rows, sampled as check samples them above its query limit; users "
    "absent from the training data are not queried), each without their training items, exact search: the lists "
    "popaudit check serves with its defaults"
)
"""Which lists every experiment's exposure figures count (the grids' head shares, the
mitigations' exposure): ``check``'s serving contract, written into results.json and
results.md."""


@dataclass(frozen=True)
class ExperimentSizes:
    """The synthetic data (when no log is given; results.json writes those fields null
    when the runs trained on a log: :func:`sizes_dict`) and the reference training config
    every setting starts from (:func:`auditor.train.experiments.reference_config`)."""

    n_users: int = 1000
    n_items: int = 1000
    n_interactions: int = 50_000
    zipf: float = 1.0
    epochs: int = 5
    batch_size: int = 256
    dim: int = 32
    lr: float = 10.0
    temperature: float = 0.1
    init_std: float = 0.1
    k: int = 100
    n_bootstrap: int = 1000

    def __post_init__(self) -> None:
        if self.k < 1:
            raise InputError(f"k must be at least 1, got {self.k}")
        if self.n_bootstrap < 0:
            raise InputError(f"n_bootstrap must be >= 0, got {self.n_bootstrap}")


SYNTHETIC_SIZES = ("n_users", "n_items", "n_interactions", "zipf")
"""The fields of :class:`ExperimentSizes` that describe the synthetic data alone."""


def sizes_dict(sizes: ExperimentSizes, data: dict[str, Any]) -> dict[str, Any]:
    """``sizes`` as results.json writes them: the synthetic data's fields null when the
    runs trained on a log (``data`` names its kind other than ``synthetic``), so that a
    reader never takes the generator's defaults for the log's sizes (those are ``data``'s)."""
    out = asdict(sizes)
    if data and data.get("kind") != "synthetic":
        out.update(dict.fromkeys(SYNTHETIC_SIZES))
    return out


@dataclass
class ExperimentResult:
    """The measures of one experiment grid, ready to write as JSON, Markdown and plots."""

    name: str
    sizes: ExperimentSizes
    seeds: list[int]
    rows: list[dict[str, Any]]
    """One per setting (or learning rate): its config, per-seed runs and summary."""
    data: dict[str, Any] = field(default_factory=dict)
    """:func:`auditor.train.experiments.data_description` of what the runs trained on."""

    @property
    def k(self) -> int:
        """The cut-off the runs measured (``sizes.k``, at most 10% of the catalogue:
        :func:`auditor.train.measures.served_k`); older results: ``sizes.k`` within the catalogue."""
        if self.rows and "k" in self.rows[0]["runs"][0]:
            return int(self.rows[0]["runs"][0]["k"])
        return min(self.sizes.k, int(self.data.get("n_items", self.sizes.n_items)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "experiment": self.name,
            "tool": {"name": "popaudit", "version": __version__},
            "seeds": list(self.seeds),
            "data": dict(self.data),
            "sizes": sizes_dict(self.sizes, self.data),
            "angle_histogram_edges": ANGLE_EDGES.tolist(),
            "lists": SERVED_LISTS,
            "rows": self.rows,
        }


@dataclass
class MitigationResult:
    """Accuracy against exposure per mitigation, ready to write."""

    sizes: ExperimentSizes
    seeds: list[int]
    fraction: float
    split: str
    alphas: tuple[float, ...]
    rows: list[dict[str, Any]]
    """One per mitigation: name, label, kind (training|serving|baseline), model,
    config, per-seed measures and their summary."""
    data: dict[str, Any] = field(default_factory=dict)
    name: str = "mitigations"

    @property
    def k(self) -> int:
        return int(self.rows[0]["runs"][0]["k"]) if self.rows else self.sizes.k

    def to_dict(self) -> dict[str, Any]:
        return {
            "experiment": self.name,
            "tool": {"name": "popaudit", "version": __version__},
            "seeds": list(self.seeds),
            "data": dict(self.data),
            "holdout": {"fraction": self.fraction, "split": self.split},
            "alphas": list(self.alphas),
            "k": self.k,
            "lists": SERVED_LISTS,
            "sizes": sizes_dict(self.sizes, self.data),
            "rows": self.rows,
        }


__all__ = [
    "ANGLE_EDGES", "ExperimentResult", "ExperimentSizes", "MitigationResult", "STATUS_ERROR", "STATUS_OK",
    "SYNTHETIC_SIZES", "sizes_dict",
]  # fmt: skip

"""The audit result: typed sections that serialise to the JSON of docs/report.md (schema_version 1).

Renderers, gates and batch read this object; ``to_dict`` is the JSON report and
``flat_metrics`` the flat names (``spearman``, ``head_share_1pct_dot@100``, ...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from auditor import __version__
from auditor.flat import flat_metrics_from_report
from auditor.plain import asdict
from auditor.sections import (
    ACCURACY_MEASURES,
    SCORINGS,
    Accuracy,
    CutoffMeasures,
    ListMeasureInfo,
    ListMeasures,
    Population,
    RankingAccuracy,
    Retrieval,
    ScoringChange,
    SEVERITIES,
    Severity,
    builtin_list_measures,
)
from auditor.served_section import ServedCutoff, ServedSection, served_dict, served_retrieval_dict

from auditor.trace_section import TrainingSection

if TYPE_CHECKING:  # the probes package loads torch; the result and its renderers need not
    from pathlib import Path

    from auditor.probe_results import ProbeOutcome

SCHEMA_VERSION = 1
Status = Literal["holds", "violated", "unknown"]
# The sufficient conditions (docs/theory.md §2): ids are the keys of ``AuditResult.conditions``,
# the JSON report and the batch columns, so they are spelled here only.
C1, C2, C3, C4, C5 = "C1", "C2", "C3", "C4", "C5"
CONDITION_NAMES: dict[str, str] = {
    C1: "plain SGD",
    C2: "parameter-linear encoder",
    C3: "non-shared parameters",
    C4: "cosine-based loss",
    C5: "sufficiently large learning rate",
}
CONDITION_IDS: tuple[str, ...] = tuple(CONDITION_NAMES)
ORTHOGONALITY_IDS: tuple[str, ...] = (C1, C2, C3, C4)
"""Together these make every update orthogonal to the embedding (norms can only grow)."""


@dataclass
class Inputs:
    """What was audited: files, table keys and sizes (the report's ``inputs``)."""

    model: str
    interactions: str | None
    item_table: str | None
    user_table: str | None
    n_items: int
    dim: int
    n_interactions: int | None
    format: str = ""
    item_ids: str | None = None
    n_users: int | None = None
    n_unmapped_interactions: int = 0
    item_id_mapping: str = ""
    """How raw item ids of the log were mapped to table rows (the rule, in words)."""
    user_id_mapping: str | None = None
    """The same for user ids, when user rows were matched to log users."""
    item_id_fingerprint: str | None = None
    """The item mapping by content: ``sha256:`` of its raw ids in row order as text (docs/report.md);
    None where rows are taken as ids (or an offset), which ``item_id_mapping`` states whole."""
    user_id_fingerprint: str | None = None
    """The same for the user mapping."""
    row_ids_assumed: bool = False
    """True when item rows were taken to be the raw ids because nothing else was given."""
    n_untrained_user_rows: int | None = None
    """User-table rows of users absent from the training log (not queried; None: unknown)."""
    split: str | None = None
    """How the training log and the holdout were obtained when popaudit reproduced a
    framework's own evaluation split (RecBole's ``eval_args``); None otherwise."""
    written_back: bool | None = None
    """Whether ``popaudit mitigate`` writes this model back in its format (False: a model a
    plugin's loader built, whose item vectors are encoder outputs; None: not known)."""
    rescaled_alpha: float | None = None
    """The α the model carries when it is a ``popaudit mitigate`` output (its sidecar says so)."""
    rescaled_from: str | None = None
    """The original table that output was rescaled from (None: not one, or a chain of outputs)."""


@dataclass
class DecileRow:
    """Norm summary of one popularity decile (1 = least popular)."""

    decile: int
    freq_min: int
    freq_max: int
    n: int
    norm_median: float
    norm_mean: float


@dataclass
class FrequencyNorm:
    """Frequency-norm statistics (the report's ``frequency_norm``); NaN: undefined."""

    spearman: float
    spearman_ci: tuple[float, float]
    spearman_p: float
    pearson_log: float
    kendall: float
    loglog_slope: float | None
    n_items: int
    n_cold: int
    deciles: list[DecileRow]
    cold_norm_median: float | None = None
    warm_norm_median: float | None = None
    n_bootstrap: int = 0
    undefined_reason: str | None = None
    """Why ρ could not be computed, in plain words (None when it was)."""
    ci_method: str = ""
    """How ``spearman_ci`` was computed (empty when no CI was computed)."""
    n_bootstrap_undefined: int = 0
    """Of the ``n_bootstrap`` resamples, those whose ρ is undefined (every drawn item with
    one frequency or one norm), left out of the percentile interval."""
    ci_undefined_reason: str | None = None
    """Why ``spearman_ci`` is null although ρ is defined (too many resamples left out)."""


@dataclass
class ServedVectorsSection:
    """The vectors a model serves with, when they are not its stored tables' dot products
    (the report's ``served``): RecBole's graph models (propagated, or the checkpoint's
    cache), SimpleX (aggregated users, cosine), a model that adds an item bias (its factors
    with the bias as one more column, ``bias``); or, with ``as_served`` False, the stored
    tables standing in for what popaudit cannot rebuild (a graph model's cache missing, an
    item encoder no plugin runs). Retrieval, accuracy and the verdict use them (its
    correlation too: :mod:`auditor.mechanism`); ``frequency_norm`` is the served item vectors'
    (what dot serving sees), beside the top-level one of the stored item table (the training mechanism)."""

    model: str
    """The model's name as its framework records it (``LightGCN``)."""
    source: str
    """``tables`` (the stored tables: the model serves with them, or with something popaudit
    cannot rebuild, then warned about), ``cache``, ``propagated``, ``simplex`` or ``bias``."""
    description: str
    scoring: str
    """How the model compares the served vectors: ``dot`` or ``cosine`` (its own scoring)."""
    as_served: bool
    """True when the audited vectors are the ones the model serves with."""
    frequency_norm: FrequencyNorm | None = None
    """The served item vectors' statistics; None when they are the stored table."""
    not_served: str | None = None
    """When ``as_served`` is False: why the served vectors could not be rebuilt and what
    to give to get them (the warning's words); every figure is then of the stored tables."""
    item_bias_spearman: float | None = None
    """``bias``: Spearman ρ of the item bias the model adds to every score against training
    frequency (the measure ``item_bias_spearman``), what the verdict quotes; None otherwise."""
    score: str | None = None
    """``bias``: the model's own score as a formula (``u·i + b_i``, ``cos(u,i) + b_i``, ...),
    which the 'dot' lists rank; None otherwise."""


@dataclass
class Condition:
    """One mechanism condition (C1-C5): its status and the evidence for it."""

    name: str
    status: Status
    evidence: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Verdict:
    """The audit's conclusion, decided from the finished sections."""

    bias_detected: bool
    severity: Severity
    summary: str
    recommendations: list[str] = field(default_factory=list)
    quoted_k: int | None = None
    """The cut-off K whose dot/cosine skew decided the severity (None: no retrieval)."""
    rule: str = ""
    """The severity rule, in words."""
    first_seen_k: int | None = None
    """The smallest served K (the first slots a user sees), quoted beside ``quoted_k``
    when it is another K (None: it is the same K, or no retrieval). Kept out of the JSON
    report (schema_version 1 is unchanged); docs/report.md, "Which K is quoted", says
    how it is chosen."""
    assessed: bool = True
    """Whether anything graded the severity (the frequency–norm correlation, or the harm to
    serving): false, severity ``none`` claims nothing (no log, a constant table and no
    retrieval, served lists that were not measured)."""
    gate: str | None = None
    """The ``--fail-on`` expression that trips exactly on an audit graded low or worse
    (:data:`auditor.harm.SEVERITY_GATE`; None where nothing graded the severity); what
    ``check`` suggests for CI. Kept out of the JSON report, as ``first_seen_k``."""
    weak: str | None = None
    """The sentence the summary opens with when dot-product serving is less accurate than the
    most-popular list (:func:`auditor.verdict.weak_model`), for the headline to say it too
    (None: it is not). Kept out of the JSON report, as ``first_seen_k``: the summary holds it."""
    graded_head: int = 1
    """The head whose dot/cosine skew graded the severity, the top ``graded_head``% of items
    (:data:`auditor.harm.HEADS`: 10 when the top 10% reach a higher band than the top 1%), for
    the headline to quote the same head. Kept out of the JSON report, as ``first_seen_k``:
    the summary names it."""
    graded_by: str = "model"
    """What graded the severity: ``model`` (its own serving) or ``served`` (the served lists:
    alone in a lists-only audit, or beside the model when they graded worse,
    :func:`auditor.lists_verdict.with_served_lists`)."""
    served_k: int | None = None
    """Beside a model, the K of the served lists' worst amplification, which the headline
    quotes (None: no served lists measured beside a model). Kept out of the JSON report,
    as ``first_seen_k``: the summary names it."""


@dataclass
class PlotData:
    """Arrays the renderers plot; not part of the JSON report."""

    norms: np.ndarray | None = None
    frequencies: np.ndarray | None = None
    exposure: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)
    """scoring -> K -> exposure count per item row."""
    update_angles: np.ndarray | None = None


@dataclass(frozen=True)
class ReplacedGlobal:
    """A global a model file's pickle named that popaudit replaced by an inert placeholder
    (``auditor.loading.pickle_globals`` classifies them)."""

    name: str
    """``module.qualname`` as the pickle names it (``posix.system``)."""
    severity: str
    """``runs-code`` (would run code under a real unpickle) or ``inert`` (names a class)."""
    count: int
    """How many times the pickle names it."""


@dataclass(frozen=True, kw_only=True)
class MeasuredSections:
    """What one audit measured, before the verdict and the plugin measures: what plugin
    measures and :func:`auditor.verdict.decide_verdict` read."""

    inputs: Inputs
    frequency_norm: FrequencyNorm | None
    retrieval: Retrieval | None = None
    accuracy: Accuracy | None = None
    conditions: dict[str, Condition] | None = None
    probes: ProbeOutcome | None = None
    """The numeric probes' typed results (:mod:`auditor.probe_results`); None: not run."""
    settings: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    not_measured: dict[str, str] = field(default_factory=dict)
    """Section -> why it was not measured (e.g. ``retrieval``: no queries)."""
    plot_data: PlotData = field(default_factory=PlotData, repr=False)
    replaced_globals: tuple[ReplacedGlobal, ...] | None = None
    """Globals the model file's pickle named and popaudit replaced; None when the file was
    not read by popaudit's restricted unpickler (a plugin's loader)."""
    served_vectors: ServedVectorsSection | None = None
    """The vectors the model serves with (RecBole checkpoints); None for other models."""
    training: TrainingSection | None = None
    """What a training trace showed (``check --trace``); None without one."""
    served: ServedSection | None = None
    """The served lists given as ``recommendations`` (None: none given)."""


@dataclass(frozen=True, kw_only=True)
class AuditResult(MeasuredSections):
    """Everything one audit found, assembled once; ``to_dict`` is the JSON report."""

    verdict: Verdict
    measures: dict[str, Any] = field(default_factory=dict)
    """Extra measures registered by plugins: name -> JSON-serialisable value."""
    measure_descriptions: dict[str, str] = field(default_factory=dict)
    """Each of ``measures``' own ``description`` (what it measures, when it is null), for
    the reports' tables; not in the JSON, which holds findings, not a plugin's wording."""
    read_files: dict[str, Path] = field(default_factory=dict, repr=False, compare=False)
    """Every file the audit read, by the setting naming it: no report of it may replace one (not in the JSON)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON report (docs/report.md, schema_version 1); NaN/inf become null."""
        out: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "popaudit", "version": __version__},
            "inputs": asdict(self.inputs),
            "frequency_norm": asdict(self.frequency_norm) if self.frequency_norm else None,
            "retrieval": None,
            "accuracy": None,
            "conditions": (
                {key: asdict(c) for key, c in self.conditions.items()} if self.conditions else None
            ),
            "probes": None if self.probes is None else self.probes.to_dict(),
            "verdict": {k: v for k, v in asdict(self.verdict).items() if k not in _NOT_IN_JSON},
            "measures": self.measures,
            "settings": self.settings,
            "warnings": list(self.warnings),
            "not_measured": dict(self.not_measured),
            "replaced_globals": None if self.replaced_globals is None else [asdict(g) for g in self.replaced_globals],
            "served_vectors": None if self.served_vectors is None else asdict(self.served_vectors),
        }
        if self.training is not None:  # additive: only reports of an audit given a trace carry it
            out["training"] = self.training.to_dict()
        if self.retrieval is not None:
            retrieval = asdict(self.retrieval)
            del retrieval["list_measures"]  # presentation, not a finding
            del retrieval["tied_ratio"]  # for the Who-pays table; the warnings say it (the JSON as it was)
            retrieval["at"] = {str(k): _cutoff_dict(cut) for k, cut in self.retrieval.at.items()}
            if retrieval["recall"] is not None:
                retrieval["recall"] = {str(k): v for k, v in retrieval["recall"].items()}
            for key in ("user_groups", "exposure_shift"):
                retrieval[key] = {str(k): v for k, v in retrieval[key].items()}
            out["retrieval"] = retrieval
        elif self.served is not None and self.served.at:  # lists alone: the served lists are the scoring
            out["retrieval"] = served_retrieval_dict(self.served, str(self.settings.get("popularity", "interactions")))
        if self.served is not None:
            out["served"] = served_dict(self.served)
        if self.accuracy is not None:
            accuracy = asdict(self.accuracy)
            accuracy["at"] = {str(k): v for k, v in accuracy["at"].items()}
            out["accuracy"] = accuracy
        report: dict[str, Any] = json_safe(out)
        return report

    def flat_metrics(self) -> dict[str, float | None]:
        """Flat metric names (docs/measures.md) for ``--fail-on`` gates and batch columns:
        derived from the JSON report, as for a report read back from disk."""
        return flat_metrics_from_report(self.to_dict())


_NOT_IN_JSON = frozenset({"first_seen_k", "gate", "weak", "graded_head", "served_k"})
"""Verdict fields the reports read but the JSON report (schema_version 1) does not hold."""


def _cutoff_dict(cut: CutoffMeasures) -> dict[str, Any]:
    """One cut-off's JSON: norm-aware scorings sit beside dot, cosine and popular."""
    out: dict[str, Any] = {name: dict(getattr(cut, name)) for name in SCORINGS}
    out["overlap_dot_cosine"] = cut.overlap_dot_cosine
    out.update({f"overlap_served_{name}": value for name, value in cut.overlap_served.items()})
    return {**out, **{name: dict(measures) for name, measures in cut.norm_aware.items()}}


def json_safe(value: Any) -> Any:
    """Make a nested structure JSON-safe: numpy scalars to Python, NaN/inf to None."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return [json_safe(v) for v in value.tolist()]
    if isinstance(value, np.bool_):  # before the number checks: json cannot write it
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    return value


__all__ = [
    "ACCURACY_MEASURES", "Accuracy", "AuditResult", "CONDITION_IDS", "CONDITION_NAMES", "Condition", "CutoffMeasures",
    "DecileRow", "FrequencyNorm", "Inputs", "ListMeasureInfo", "ListMeasures", "MeasuredSections", "ORTHOGONALITY_IDS",
    "PlotData", "Population", "RankingAccuracy", "Retrieval", "SCHEMA_VERSION", "SCORINGS", "ScoringChange",
    "ServedCutoff", "ServedSection", "ServedVectorsSection",
    "SEVERITIES", "Severity", "Status", "Verdict", "builtin_list_measures", "json_safe",
]  # fmt: skip

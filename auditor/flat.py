"""The flat metric names (docs/report.md): the one derivation, from a JSON report. An
audit's :meth:`~auditor.result.AuditResult.flat_metrics` is this function of its own
``to_dict()``, so a report read back from disk gates, fills batch columns and compares
exactly like the audit that wrote it. Each name also records where it comes from
(:class:`FlatEntry`), which the diff's direction table and comparability rules read."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from auditor.config import DEFAULT_ALPHAS
from auditor.alpha import alpha_scoring
from auditor.report_reader import ReportReader, report_as_read
from auditor.sections import (
    ACCURACY_MEASURES, BUILTIN_LIST_MEASURES, GROUP_LIST_MEASURES, OVERLAP_SERVED, SCORINGS, SERVED, SEVERITIES,
    share_ratio,
)

Section = Literal["frequency_norm", "retrieval", "accuracy", "inputs", "measures", "training", "served", "verdict"]
CORRELATIONS = ("spearman", "pearson_log", "kendall", "loglog_slope")
"""The frequency–norm section's correlations, each a flat name of its own."""
BASE_METRICS = (
    "spearman",
    "spearman_ci_lo",
    "spearman_ci_hi",
    "spearman_p",
    "pearson_log",
    "kendall",
    "loglog_slope",
    "served_spearman",
    "served_loglog_slope",
    "training_spearman",
    "training_angle_share_90_1",
    "unsafe_globals",
    "head_share_log",
    "severity_level",
)
"""The flat names that stand alone (no scoring, no K); the rest are ``<measure>_<scoring>@K``."""
BIAS_SOURCE = "bias"
"""``served_vectors.source`` of a model that adds an item bias: its ``served_…`` figures are null."""
RATIO = "ratio"
"""The pseudo-scoring of ``<measure>_ratio@K`` (dot / cosine)."""
FRACTIONS = frozenset({
    "head_share_1pct", "head_share_10pct", "head_share_20pct", "aplt", "coverage", "gini", *ACCURACY_MEASURES,
    "overlap_dot_cosine", *(f"overlap_served_{s}" for s in OVERLAP_SERVED), "spearman_p", "head_share_log",
    "training_angle_share_90_1",
})
"""The figures (measures, under any scoring but the ratio, and names alone) that are fractions
in [0, 1]: a share, a rate, a p-value. The reports print the shares as percentages (3.6%);
the JSON and every gate read the fraction (0.036)."""
CORRELATION_FIGURES = frozenset({"spearman", "spearman_ci_lo", "spearman_ci_hi", "pearson_log", "kendall",
                                 "served_spearman", "training_spearman", "item_bias_spearman"})
"""The figures that are correlations in [-1, 1] (the log–log slope is not bounded)."""


@dataclass(frozen=True)
class FlatEntry:
    """One flat metric: its value and origin."""

    value: float | None
    section: Section
    measure: str
    """The list or accuracy measure (``head_share_1pct``, ``ndcg``), or the name itself."""
    scoring: str | None = None
    """``dot``, ``cosine``, ``popular``, ``alpha_<a>``, ``ratio`` (None: not per scoring)."""
    k: int | None = None




def metric_names(
    ks: Iterable[int],
    extra: Iterable[str] = (),
    alphas: Iterable[float] = DEFAULT_ALPHAS,
    list_measures: Iterable[str] | None = None,
) -> list[str]:
    """Every flat metric name a ``check`` with cut-offs ``ks``, norm-aware exponents
    ``alphas``, the registered ``list_measures`` (default: the built-in ones) and the
    audit measures ``extra`` can produce (accuracy names need a held-out log)."""
    return list(_unmeasured(ks, extra, alphas, list_measures))


_BASE_SECTIONS: dict[str, Section] = {
    **dict.fromkeys(BASE_METRICS[:9], "frequency_norm"), "training_spearman": "training",
    "training_angle_share_90_1": "training", "unsafe_globals": "inputs", "head_share_log": "served",
    "severity_level": "verdict",
}  # fmt: skip
"""The section each name of :data:`BASE_METRICS` is read from (:func:`flat_entries`)."""


def _unmeasured(ks: Iterable[int], extra: Iterable[str], alphas: Iterable[float],
                list_measures: Iterable[str] | None) -> dict[str, FlatEntry]:
    """Every name of :func:`metric_names`, in its order, with its origin and no value: the
    one list of names a gate accepts and the diff and ``flat_metrics_from_report`` fill."""
    out = {name: FlatEntry(None, _BASE_SECTIONS[name], name) for name in BASE_METRICS}
    scorings = [*SCORINGS, *dict.fromkeys(alpha_scoring(a) for a in alphas), SERVED, RATIO]
    list_measures = list({**BUILTIN_LIST_MEASURES, **GROUP_LIST_MEASURES} if list_measures is None else list_measures)
    for k in ks:
        for metric in list_measures:
            out.update({f"{metric}_{s}@{k}": FlatEntry(None, "retrieval", metric, s, k) for s in scorings})
        out[f"overlap_dot_cosine@{k}"] = FlatEntry(None, "retrieval", "overlap_dot_cosine", None, k)
        out[f"recall@{k}"] = FlatEntry(None, "retrieval", "index_recall", None, k)
        for s in OVERLAP_SERVED:
            out[f"overlap_served_{s}@{k}"] = FlatEntry(None, "retrieval", f"overlap_served_{s}", None, k)
        for metric in ACCURACY_MEASURES:
            out.update({f"{metric}_{s}@{k}": FlatEntry(None, "accuracy", metric, s, k) for s in scorings})
    out.update({name: FlatEntry(None, "measures", name) for name in extra})
    return out


def _severity_level(verdict: dict[str, Any] | None) -> float | None:
    """The verdict's severity as its rank (0 none, 1 low, 2 moderate, 3 high): a gate
    ``severity_level>=1`` trips exactly on a run the verdict grades low or worse. None where
    nothing graded it (``assessed`` false: a ``none`` that claims nothing)."""
    if not verdict or verdict.get("assessed") is False or verdict.get("severity") not in SEVERITIES:
        return None
    return float(SEVERITIES.index(verdict["severity"]))


def flat_entries(report: dict[str, Any], named: str = "the report") -> dict[str, FlatEntry]:
    """Every flat metric of ``report`` with its origin, in ``flat_metrics`` order.
    ReportError naming ``named`` (the report, or its file) and the field where a figure it
    reads is neither a finite number nor null, or a section it reads is of the wrong kind:
    a corrupt or edited report is refused where it is read, never read as "not measured"."""
    read = ReportReader(named)
    flat: dict[str, FlatEntry] = {}
    fn = read.obj(report.get("frequency_norm"), "frequency_norm")
    for name in CORRELATIONS:
        flat[name] = FlatEntry(read.figure(fn, name, "frequency_norm"), "frequency_norm", name)
    if fn:
        ci = read.listed(fn.get("spearman_ci"), "frequency_norm.spearman_ci", length=2) or [None, None]
        for i, end in enumerate(("lo", "hi")):
            flat[f"spearman_ci_{end}"] = FlatEntry(read.figure(ci, i, "frequency_norm.spearman_ci"), "frequency_norm",
                                                   f"spearman_ci_{end}")
        flat["spearman_p"] = FlatEntry(read.figure(fn, "spearman_p", "frequency_norm"), "frequency_norm", "spearman_p")
    # What dot serving sees: the served vectors where the model serves with others than its
    # table (RecBole's graph models), else the stored table itself.
    served = read.obj(report.get("served_vectors"), "served_vectors") or {}
    served_fn = read.obj(served.get("frequency_norm"), "served_vectors.frequency_norm")
    # Stored tables standing in for vectors the model serves otherwise: what it serves is unknown.
    where = "served_vectors.frequency_norm" if served_fn else "frequency_norm"
    served_fn = None if served.get("as_served") is False else served_fn or fn
    # An item bias: ‖[i, b_i]‖ grows with |b_i| whichever items the bias favours, so no norm ρ is
    # comparable with a bias-free model's; null, and the gate points at item_bias_spearman.
    served_fn = None if served.get("source") == BIAS_SOURCE else served_fn
    for name in ("spearman", "loglog_slope"):
        flat[f"served_{name}"] = FlatEntry(read.figure(served_fn, name, where), "frequency_norm", f"served_{name}")
    _training_entries(read, read.obj(report.get("training"), "training"), flat)
    # Served lists alone: the top-1% items' share of the training popularity, what the verdict compares them with.
    served = read.obj(report.get("served"), "served")
    flat["head_share_log"] = FlatEntry(read.figure(served, "head_share_log", "served"), "served", "head_share_log")
    verdict = read.obj(report.get("verdict"), "verdict")
    flat["severity_level"] = FlatEntry(_severity_level(verdict), "verdict", "severity_level")
    _retrieval_entries(read, read.obj(report.get("retrieval"), "retrieval"), flat)
    _accuracy_entries(read, read.obj(report.get("accuracy"), "accuracy"), flat)
    replaced = read.listed(report.get("replaced_globals"), "replaced_globals")
    unsafe = None if replaced is None else float(sum(
        (read.obj(g, f"replaced_globals.{i}") or {}).get("severity") == "runs-code" for i, g in enumerate(replaced)))
    flat["unsafe_globals"] = FlatEntry(unsafe, "inputs", "unsafe_globals")
    measures = read.obj(report.get("measures"), "measures") or {}
    for name, value in measures.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):  # numeric measures are flat metrics
            flat[name] = FlatEntry(read.figure(measures, name, "measures"), "measures", name)
    return flat


def _retrieval_entries(read: ReportReader, retrieval: dict[str, Any] | None, flat: dict[str, FlatEntry]) -> None:
    """The list measures per scoring and K, their dot / cosine ratios, the overlaps, and
    the approximate index's recall."""
    retrieval = retrieval or {}
    for key, cut in read.cutoffs(retrieval.get("at"), "retrieval.at").items():
        k, where = int(key), f"retrieval.at.{key}"
        cut = read.obj(cut, where, null=False)
        scorings = {name: measures for name, measures in cut.items() if isinstance(measures, dict)}
        for scoring, measures in scorings.items():
            for metric in measures:
                value = read.figure(measures, metric, f"{where}.{scoring}")
                flat[f"{metric}_{scoring}@{k}"] = FlatEntry(value, "retrieval", metric, scoring, k)
        # Every other value of a cut-off is a figure: overlap_dot_cosine, overlap_served_*.
        overlaps = {name: read.figure(cut, name, where) for name in cut if name not in scorings}
        for metric, value in (scorings.get("dot") or {}).items():
            ratio = share_ratio(value, (scorings.get("cosine") or {}).get(metric))
            flat[f"{metric}_ratio@{k}"] = FlatEntry(ratio, "retrieval", metric, RATIO, k)
        flat[f"overlap_dot_cosine@{k}"] = FlatEntry(overlaps.get("overlap_dot_cosine"), "retrieval",
                                                    "overlap_dot_cosine", None, k)
        for name in OVERLAP_SERVED:
            if f"overlap_served_{name}" in cut:
                flat[f"overlap_served_{name}@{k}"] = FlatEntry(
                    overlaps[f"overlap_served_{name}"], "retrieval", f"overlap_served_{name}", None, k)
    recall = read.cutoffs(retrieval.get("recall"), "retrieval.recall")
    for key in recall:
        k = int(key)
        flat[f"recall@{k}"] = FlatEntry(read.figure(recall, key, "retrieval.recall"), "retrieval", "index_recall", None, k)


def _accuracy_entries(read: ReportReader, accuracy: dict[str, Any] | None, flat: dict[str, FlatEntry]) -> None:
    """The held-out accuracy per scoring and K, and its dot / cosine ratios."""
    for key, by_scoring in read.cutoffs((accuracy or {}).get("at"), "accuracy.at").items():
        k, where = int(key), f"accuracy.at.{key}"
        by_scoring = read.obj(by_scoring, where, null=False)
        for scoring, values in by_scoring.items():
            values = read.obj(values, f"{where}.{scoring}", null=False)
            figures = {name: read.figure(values, name, f"{where}.{scoring}") for name in values}
            for metric in ACCURACY_MEASURES:
                flat[f"{metric}_{scoring}@{k}"] = FlatEntry(figures.get(metric), "accuracy", metric, scoring, k)
        if "dot" in by_scoring and "cosine" in by_scoring:
            for metric in ACCURACY_MEASURES:
                ratio = share_ratio(by_scoring["dot"].get(metric), by_scoring["cosine"].get(metric))
                flat[f"{metric}_ratio@{k}"] = FlatEntry(ratio, "accuracy", metric, RATIO, k)


def _training_entries(read: ReportReader, training: dict[str, Any] | None, flat: dict[str, FlatEntry]) -> None:
    """A training trace's (``check --trace``) last ρ and pooled 90° ± 1° share of update
    angles; None without a trace, or for a trace of another model (its figures are not this
    model's)."""
    training = training or {}
    points = read.listed(training.get("points"), "training.points") or []
    rhos = [read.figure(read.obj(p, f"training.points.{i}", null=False), "spearman", f"training.points.{i}")
            for i, p in enumerate(points)]
    share = read.figure(read.obj(training.get("angles"), "training.angles"), "share_90_1", "training.angles")
    # Another model's trace (matches_model false) says nothing about this one.
    if training.get("matches_model") is False:
        rhos, share = [], None
    last = [rho for rho in rhos if rho is not None]
    flat["training_spearman"] = FlatEntry(last[-1] if last else None, "training", "training_spearman")
    flat["training_angle_share_90_1"] = FlatEntry(share, "training", "training_angle_share_90_1")


def flat_metrics_from_report(report: dict[str, Any]) -> dict[str, float | None]:
    """The flat metrics of a JSON report: equal to ``AuditResult.flat_metrics()`` of the
    result that wrote it. Every name a ``--fail-on`` gate of its settings accepts is
    there (:func:`gateable_names`), ``None`` where nothing was measured, so a caller's
    ``flat["ndcg_dot@10"] is not None`` reads "not measured" instead of raising KeyError."""
    return {name: entry.value for name, entry in gateable_entries(report_as_read(report)).items()}


def gateable_entries(report: dict[str, Any], named: str = "the report") -> dict[str, FlatEntry]:
    """:func:`flat_entries`, then every other name a gate of the report's settings accepts
    with its origin and no value: the names of ``flat_metrics_from_report`` and of the diff."""
    flat = flat_entries(report, named)
    return {**flat, **{name: entry for name, entry in _report_names(report).items() if name not in flat}}


def gateable_names(report: dict[str, Any]) -> list[str]:
    """The flat names a gate accepts for the audit of ``report``: :func:`metric_names` of
    its settings' cut-offs and norm-aware exponents, with the built-in list measures and
    its own audit measures (the numbers and the nulls; a plugin's list measures are in the
    report wherever its lists were measured)."""
    return list(_report_names(report))


def _report_names(report: dict[str, Any]) -> dict[str, FlatEntry]:
    settings = report.get("settings") or {}
    ks = [k for k in settings.get("ks") or () if isinstance(k, int) and not isinstance(k, bool)]
    alphas = [a for a in settings.get("alphas") or DEFAULT_ALPHAS if isinstance(a, (int, float))]
    measures = [name for name, value in (report.get("measures") or {}).items()
                if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))]
    return _unmeasured(ks, measures, alphas, None)

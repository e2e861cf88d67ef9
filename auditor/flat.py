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
from auditor.sections import (
    ACCURACY_MEASURES, BUILTIN_LIST_MEASURES, GROUP_LIST_MEASURES, OVERLAP_SERVED, SCORINGS, SERVED, SEVERITIES,
    finite_figure, share_ratio,
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
RATIO = "ratio"
"""The pseudo-scoring of ``<measure>_ratio@K`` (dot / cosine)."""


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
    names = list(BASE_METRICS)
    scorings = [*SCORINGS, *dict.fromkeys(alpha_scoring(a) for a in alphas), SERVED]
    list_measures = list({**BUILTIN_LIST_MEASURES, **GROUP_LIST_MEASURES} if list_measures is None else list_measures)
    for k in ks:
        for metric in list_measures:
            names += [f"{metric}_{s}@{k}" for s in scorings] + [f"{metric}_ratio@{k}"]
        names += [f"overlap_dot_cosine@{k}", f"recall@{k}"] + [f"overlap_served_{s}@{k}" for s in OVERLAP_SERVED]
        for metric in ACCURACY_MEASURES:
            names += [f"{metric}_{s}@{k}" for s in scorings] + [f"{metric}_ratio@{k}"]
    return names + list(extra)


def _severity_level(verdict: dict[str, Any] | None) -> float | None:
    """The verdict's severity as its rank (0 none, 1 low, 2 moderate, 3 high): a gate
    ``severity_level>=1`` trips exactly on a run the verdict grades low or worse. None where
    nothing graded it (``assessed`` false: a ``none`` that claims nothing)."""
    if not verdict or verdict.get("assessed") is False or verdict.get("severity") not in SEVERITIES:
        return None
    return float(SEVERITIES.index(verdict["severity"]))


def flat_entries(report: dict[str, Any]) -> dict[str, FlatEntry]:
    """Every flat metric of ``report`` with its origin, in ``flat_metrics`` order."""
    flat: dict[str, FlatEntry] = {}
    fn = report.get("frequency_norm")
    for name in CORRELATIONS:
        flat[name] = FlatEntry(finite_figure(fn.get(name)) if fn else None, "frequency_norm", name)
    if fn:
        ci = fn.get("spearman_ci") or [None, None]
        flat["spearman_ci_lo"] = FlatEntry(finite_figure(ci[0]), "frequency_norm", "spearman_ci_lo")
        flat["spearman_ci_hi"] = FlatEntry(finite_figure(ci[1]), "frequency_norm", "spearman_ci_hi")
        flat["spearman_p"] = FlatEntry(finite_figure(fn.get("spearman_p")), "frequency_norm", "spearman_p")
    # What dot serving sees: the served vectors where the model serves with others than its
    # table (RecBole's graph models), else the stored table itself.
    served = report.get("served_vectors") or {}
    # Stored tables standing in for vectors the model serves otherwise: what it serves is unknown.
    served_fn = None if served.get("as_served") is False else served.get("frequency_norm") or fn
    for name in ("spearman", "loglog_slope"):
        flat[f"served_{name}"] = FlatEntry(finite_figure(served_fn.get(name)) if served_fn else None, "frequency_norm",
                                           f"served_{name}")
    _training_entries(report.get("training"), flat)
    # Served lists alone: the top-1% items' share of the training popularity, what the verdict compares them with.
    served = report.get("served") or {}
    flat["head_share_log"] = FlatEntry(finite_figure(served.get("head_share_log")), "served", "head_share_log")
    flat["severity_level"] = FlatEntry(_severity_level(report.get("verdict")), "verdict", "severity_level")
    retrieval = report.get("retrieval")
    if retrieval:
        for key, cut in (retrieval.get("at") or {}).items():
            k = int(key)
            scorings = {name: measures for name, measures in cut.items() if isinstance(measures, dict)}
            for scoring, measures in scorings.items():
                for metric, value in measures.items():
                    flat[f"{metric}_{scoring}@{k}"] = FlatEntry(finite_figure(value), "retrieval", metric, scoring, k)
            for metric, value in (scorings.get("dot") or {}).items():
                ratio = share_ratio(value, (scorings.get("cosine") or {}).get(metric))
                flat[f"{metric}_ratio@{k}"] = FlatEntry(ratio, "retrieval", metric, RATIO, k)
            flat[f"overlap_dot_cosine@{k}"] = FlatEntry(
                finite_figure(cut.get("overlap_dot_cosine")), "retrieval", "overlap_dot_cosine", None, k
            )
            for name in OVERLAP_SERVED:
                if f"overlap_served_{name}" in cut:
                    flat[f"overlap_served_{name}@{k}"] = FlatEntry(
                        finite_figure(cut[f"overlap_served_{name}"]), "retrieval", f"overlap_served_{name}", None, k)
        for key, value in (retrieval.get("recall") or {}).items():
            flat[f"recall@{int(key)}"] = FlatEntry(finite_figure(value), "retrieval", "index_recall", None, int(key))
    accuracy = report.get("accuracy")
    for key, by_scoring in ((accuracy.get("at") or {}).items() if accuracy else ()):
        k = int(key)
        for scoring, values in by_scoring.items():
            for metric in ACCURACY_MEASURES:
                flat[f"{metric}_{scoring}@{k}"] = FlatEntry(finite_figure(values.get(metric)), "accuracy", metric, scoring, k)
        if "dot" in by_scoring and "cosine" in by_scoring:
            for metric in ACCURACY_MEASURES:
                ratio = share_ratio(by_scoring["dot"].get(metric), by_scoring["cosine"].get(metric))
                flat[f"{metric}_ratio@{k}"] = FlatEntry(ratio, "accuracy", metric, RATIO, k)
    replaced = report.get("replaced_globals")
    unsafe = None if replaced is None else float(sum(g.get("severity") == "runs-code" for g in replaced))
    flat["unsafe_globals"] = FlatEntry(unsafe, "inputs", "unsafe_globals")
    for name, value in (report.get("measures") or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[name] = FlatEntry(finite_figure(value), "measures", name)
    return flat


def _training_entries(training: dict[str, Any] | None, flat: dict[str, FlatEntry]) -> None:
    """A training trace's (``check --trace``) last ρ and pooled 90° ± 1° share of update
    angles; None without a trace, or for a trace of another model (its figures are not this
    model's)."""
    # Another model's trace (matches_model false) says nothing about this one.
    usable = training if training and training.get("matches_model") is not False else {}
    rhos = [p["spearman"] for p in usable.get("points") or [] if p.get("spearman") is not None]
    share = (usable.get("angles") or {}).get("share_90_1")
    flat["training_spearman"] = FlatEntry(finite_figure(rhos[-1]) if rhos else None, "training", "training_spearman")
    flat["training_angle_share_90_1"] = FlatEntry(finite_figure(share), "training", "training_angle_share_90_1")


def flat_metrics_from_report(report: dict[str, Any]) -> dict[str, float | None]:
    """The flat metrics of a JSON report: equal to ``AuditResult.flat_metrics()`` of the
    result that wrote it. Every name a ``--fail-on`` gate of its settings accepts is
    there (:func:`gateable_names`), ``None`` where nothing was measured, so a caller's
    ``flat["ndcg_dot@10"] is not None`` reads "not measured" instead of raising KeyError."""
    flat = {name: entry.value for name, entry in flat_entries(report).items()}
    return {**flat, **{name: None for name in gateable_names(report) if name not in flat}}


def gateable_names(report: dict[str, Any]) -> list[str]:
    """The flat names a gate accepts for the audit of ``report``: :func:`metric_names` of
    its settings' cut-offs and norm-aware exponents, with the built-in list measures and
    its own audit measures (the numbers and the nulls; a plugin's list measures are in the
    report wherever its lists were measured)."""
    settings = report.get("settings") or {}
    ks = [k for k in settings.get("ks") or () if isinstance(k, int) and not isinstance(k, bool)]
    alphas = [a for a in settings.get("alphas") or DEFAULT_ALPHAS if isinstance(a, (int, float))]
    measures = [name for name, value in (report.get("measures") or {}).items()
                if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))]
    return metric_names(ks, measures, alphas)

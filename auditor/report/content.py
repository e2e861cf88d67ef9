"""Format-neutral report content: the headline sentence, number formatting and tables.

The Markdown and HTML renderers (and anything else that writes a report for people, such as
experiment or batch summaries) build their text from these pieces, so every format says the
same thing with the same numbers. Nothing here knows about markup: cells are plain strings.

Reusable pieces:

* :func:`headline` - the verdict and severity in one sentence with the numbers behind it.
* :mod:`auditor.report.formatting` - :class:`Table` and the number formatting; ``*_table`` builders.
* :func:`not_measured_reason` - why a section is missing from a result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

from auditor.report import accuracy as accuracy_view
from auditor.report.accuracy import scoring_label
from auditor.report.labels import INPUT_LABELS, probe_title as probe_title, probes_tables as probes_tables  # re-exported
from auditor.report.measure_rows import measure_cells, shown_rows
from auditor.report.population import population_rows
from auditor.report import served_lists as lists_view
from auditor.report.formatting import (
    MISSING, Table, finite, flatten, fmt_interval, fmt_num, fmt_pct, fmt_range, fmt_ratio, fmt_skew_pair, fmt_value,
    join_words,
)
from auditor.result import (
    CONDITION_IDS,
    AuditResult,
    CutoffMeasures,
    FrequencyNorm,
    Inputs,
    ListMeasureInfo,
    Retrieval,
)
from auditor.mechanism import graded_correlation
from auditor.sections import share_ratio
from auditor.wording import correlation_figures, no_list_served, partly_saturated, pct_pair, saturated_said_at

SECTIONS = ("frequency_norm", "retrieval", "conditions", "probes")
"""The optional result sections; each missing one gets a 'not measured' line."""

SECTION_TITLES = {
    "frequency_norm": "Frequency and norm",
    "retrieval": "Retrieval skew",
    "accuracy": accuracy_view.TITLE,
    "conditions": "Conditions C1–C5",
    "probes": "Probes",
}


def not_measured_reason(result: AuditResult, section: str) -> str:
    """Why ``section`` is absent from ``result`` (the recorded reason, or a fallback)."""
    reason = (result.not_measured.get(section) or "").strip().rstrip(".")
    return reason or "no reason was recorded by the audit"


def model_name(result: AuditResult) -> str:
    """The audited model's file name (its last path component; a lists-only audit's lists file)."""
    model = result.inputs.model or (result.served.source if result.served is not None else "") or "model"
    return model.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or model


def condition_groups(result: AuditResult) -> dict[str, list[str]]:
    """Condition ids grouped by status (holds / violated / unknown), in C1..C5 order."""
    groups: dict[str, list[str]] = {"holds": [], "violated": [], "unknown": []}
    for key, condition in sorted((result.conditions or {}).items()):
        groups.setdefault(condition.status, []).append(key)
    return groups


def verdict_phrase(result: AuditResult) -> str:
    """``Popularity bias detected (severity high)`` or its negative."""
    verdict = result.verdict
    if verdict.bias_detected:
        return f"Popularity bias detected{' in the served lists' * (verdict.graded_by == 'served')} (severity {verdict.severity})"
    if not verdict.assessed:
        return "Popularity bias not assessed"
    return f"No popularity bias detected (severity {verdict.severity})"


SEVERITY_DOC = "docs/report.md"
SEVERITY_POINTER = (
    "Severity grades how many more of the top-K slots the top-1% items get under dot product than under cosine, "
    "and the top-10% items up to moderate (where that was not measured, or neither serves them, how closely "
    f"norms track popularity); the full rule: section \"Severity\" of popaudit's {SEVERITY_DOC}."
)
"""The one line every report for people gives about severity: its rule is explained once,
in :data:`SEVERITY_DOC`, not repeated in each report (the JSON report keeps the rule
itself as ``verdict.rule``)."""


def headline(result: AuditResult) -> str:
    """The verdict and severity in one sentence, with the numbers behind it.

    Quotes Spearman ρ with its 95% CI, the top-1% head share of dot-product vs cosine
    retrieval at the K that decided the severity, and which conditions hold; a section that was not
    measured is named as such instead. Equal to ``"{phrase}: {evidence}."`` of
    :func:`headline_parts`.
    """
    phrase, evidence = headline_parts(result)
    return f"{phrase}: {evidence}."


def headline_parts(result: AuditResult) -> tuple[str, str]:
    """The headline split as (verdict phrase, the evidence after it), for formats that
    emphasise the verdict."""
    if lists_view.lists_only(result):
        return verdict_phrase(result), lists_view.headline_evidence(result)
    weak = result.verdict.weak  # as the summary: a model less accurate than the most-popular list is said first
    parts: list[str] = [] if weak is None else [weak[:1].lower() + weak[1:].rstrip(".")]
    correlation = graded_correlation(result)  # the served vectors' where they stand in for the stored table
    if (fn := correlation.figures) is not None:
        lo, hi = fn.spearman_ci
        bounded = finite(lo) is not None and finite(hi) is not None
        rho_text, *bounds = (correlation_figures(fn.spearman, *((lo, hi) if bounded else ()))
                             if finite(fn.spearman) is not None else [fmt_num(fn.spearman, 2)])
        ci = f", 95% CI {bounds[0]} to {bounds[1]}" if bounds else ""
        parts.append(f"item norm vs training frequency Spearman ρ = {rho_text}{ci}{correlation.whose()}")
    else:
        parts.append("frequency–norm correlation not measured")
    k, first_k = quoted_cutoffs(result)
    if result.retrieval is not None and k is not None and not result.retrieval.saturated.get(k):
        parts += [_skew_text(result.retrieval, k, first_k, result.verdict.graded_head), *lists_view.beside(result)]
    elif result.retrieval is not None and (full := saturated_said_at(
            result.retrieval, sorted(k for k, on in result.retrieval.saturated.items() if on),
            result.inputs.n_items)):  # served lists beside the model may grade it
        served = result.verdict.graded_by == "served"
        parts += [full if served else f"{full}, so severity rests on the correlation", *lists_view.beside(result)]
    else:
        parts += ["retrieval not measured", *lists_view.beside(result)]  # the lists grade without it (Served N1)
    if result.conditions:
        groups = condition_groups(result)
        pieces = []
        for status in ("holds", "violated", "unknown"):
            ids = groups.get(status, [])
            if ids:
                verb = ("holds" if len(ids) == 1 else "hold") if status == "holds" else status
                pieces.append(f"{join_words(ids)} {verb}")
        parts.append("conditions: " + ", ".join(pieces))
    else:
        parts.append("conditions not assessed")
    if result.inputs.row_ids_assumed:
        parts.append("item ids taken as table rows (no id mapping given)")
    return verdict_phrase(result), "; ".join(parts)


def quoted_cutoffs(result: AuditResult) -> tuple[int | None, int | None]:
    """The K the headline quotes and the first-seen K quoted beside it, as the verdict
    decided them (``quoted_k``, ``first_seen_k``; :mod:`auditor.verdict` holds the rule).

    A verdict that names no K although retrieval was measured was not decided by popaudit
    (one built by hand): the largest measured K is quoted, the smallest beside it.
    """
    retrieval, verdict = result.retrieval, result.verdict
    if retrieval is None or not retrieval.at:
        return None, None
    if verdict.quoted_k in retrieval.at:
        first = verdict.first_seen_k if verdict.first_seen_k in retrieval.at else None
        return verdict.quoted_k, first
    ks = sorted(k for k in retrieval.at if not retrieval.saturated.get(k))  # a saturated K measures no harm
    return (ks[-1], (ks[0] if len(ks) > 1 else None)) if ks else (None, None)


def _skew_text(retrieval: Retrieval, k: int, first_k: int | None, head: int = 1) -> str:
    """The top-``head``% head share (the verdict's ``graded_head``; the top 1%'s beside a wider
    head's) of dot vs cosine lists at ``k`` (and at ``first_k``, the first slots a user sees)."""
    if empty := no_list_served(retrieval):  # as the summary: every list is empty, no share to quote
        return f"{empty}, so severity rests on the correlation"
    cut, name = retrieval.at[k], f"head_share_{head}pct"
    dot, cos = cut.dot.get(name), cut.cosine.get(name)
    if head == 1 and finite(dot) == 0 and finite(cos) == 0:  # as the summary: the top 10% quoted instead
        top10 = pct_pair(finite(cut.dot.get("head_share_10pct")), finite(cut.cosine.get("head_share_10pct")))
        return (f"at K={k} neither dot-product nor cosine retrieval gives the top-1% items a slot, while the top-10% "
                f"items fill {top10[0]} of dot-product slots vs {top10[1]} under cosine, so severity rests on the "
                "correlation")
    times = f" ({fmt_ratio(r)})" if (r := share_ratio(dot, cos)) is not None else ""
    if first_k is not None:
        raw = retrieval.at[first_k].dot.get(name), retrieval.at[first_k].cosine.get(name)
        dot1, cos1 = fmt_skew_pair(*raw)
        times += f"; at K={first_k}, the first slots a user sees: {dot1} vs {cos1}"
        times += f" ({fmt_ratio(r1)})" if (r1 := share_ratio(*raw)) is not None else ""
    if head != 1:
        times += f"; the top-1% items: {fmt_pct(cut.dot.get('head_share_1pct'))} vs {fmt_pct(cut.cosine.get('head_share_1pct'))}"
    if some := retrieval.n_saturated.get(k, 0):  # their lists are the same under any scoring
        times += f"; {partly_saturated(k, some, retrieval.n_queries, retrieval.n_no_candidates)}"
    shown = fmt_skew_pair(dot, cos)
    return f"at K={k} the top-{head}% items fill {shown[0]} of dot-product slots vs {shown[1]} under cosine" + times


def frequency_norm_table(fn: FrequencyNorm) -> Table:
    """The frequency–norm statistics as rows of (statistic, value)."""
    lo, hi = fn.spearman_ci
    left_out = fn.n_bootstrap_undefined
    left_out_text = f"; {fmt_num(left_out)} with an undefined ρ left out" if left_out else ""
    rows = [
        ("Spearman ρ", fmt_num(fn.spearman)),
        (
            f"Spearman ρ, 95% bootstrap CI ({fmt_num(fn.n_bootstrap)} resamples{left_out_text})"
            if fn.n_bootstrap
            else "Spearman ρ, 95% CI",
            fmt_interval(lo, hi, resamples=fn.n_bootstrap),
        ),
        # A p-value of exactly 0 is a float underflow, not certainty.
        ("Spearman p-value", "< 1e-300" if fn.spearman_p == 0 else fmt_num(fn.spearman_p)),
        ("Pearson r on log(1 + frequency)", fmt_num(fn.pearson_log)),
        ("Kendall τ", fmt_num(fn.kendall)),
        ("log–log slope (norm on frequency)", fmt_num(fn.loglog_slope)),
        ("items", fmt_num(fn.n_items)),
        ("cold items (frequency 0)", fmt_num(fn.n_cold)),
    ]
    if fn.cold_norm_median is not None or fn.warm_norm_median is not None:
        rows.append(("median norm, cold items", fmt_num(fn.cold_norm_median)))
        rows.append(("median norm, items seen in training", fmt_num(fn.warm_norm_median)))
    return Table(("statistic", "value"), tuple(rows), (False, True))


def deciles_table(fn: FrequencyNorm) -> Table:
    """Norm medians and means by popularity decile (1 = least frequent)."""
    rows = tuple(
        (
            str(row.decile),
            fmt_range(row.freq_min, row.freq_max),
            fmt_num(row.n),
            fmt_num(row.norm_median),
            fmt_num(row.norm_mean),
        )
        for row in fn.deciles
    )
    return Table(
        ("decile", "frequency range", "items", "median norm", "mean norm"),
        rows,
        (True, True, True, True, True),
        "Items grouped by training frequency rank; decile 1 is the least frequent. Tied "
        "frequencies share a decile, so with many ties some deciles are empty (not listed).",
    )


RATIO_HEADER = "dot / cosine"
"""The header of the headline ratio column of every per-K retrieval table."""


def cutoff_table(k: int, cut: CutoffMeasures, measures: Mapping[str, ListMeasureInfo]) -> Table:
    """One K: each list measure (``measures``: name -> label and display, in order) under
    dot and cosine, their ratio, then the norm-aware scorings and most-popular.

    The ratio (the headline's number) comes right after the two lists it compares, so it
    stays in view however many norm-aware scorings follow (a report read in a window
    1280 px wide, or a terminal, never scrolls it away)."""
    rows: list[tuple[str, ...]] = []
    scorings = {"dot": cut.dot, "cosine": cut.cosine, **cut.norm_aware, "popular": cut.popular}
    for metric, info in shown_measures(cut, measures).items():
        cells = measure_cells(metric, info.display, [listed.get(metric) for listed in scorings.values()])
        cells.insert(2, fmt_ratio(share_ratio(cut.dot.get(metric), cut.cosine.get(metric))))
        rows.append((info.label, *cells))
    rows.append(("overlap of dot and cosine lists", fmt_pct(cut.overlap_dot_cosine), *[""] * len(scorings)))
    for name, value in cut.overlap_served.items():
        rows.append((f"share of the {name} lists in the served lists", fmt_pct(value), *[""] * len(scorings)))
    headers = [scoring_label(name) for name in scorings]
    headers.insert(2, RATIO_HEADER)
    return Table(
        ("measure", *headers),
        tuple(rows),
        (False, *[True] * (len(scorings) + 1)),
        f"Top-{k} lists.",
    )


def shown_measures(cut: CutoffMeasures, measures: Mapping[str, ListMeasureInfo]) -> dict[str, ListMeasureInfo]:
    """The list measures a K's table shows: a user- or item-side measure the audit could
    not measure (no training profiles, no holdout, an empty user group, a probability
    0/0: null under every scoring) is left out rather than shown empty; every other
    measure is shown, measured or not."""
    return shown_rows(cut.scorings().values(), measures)


def retrieval_summary_table(retrieval: Retrieval) -> Table:
    """How retrieval was run: who was queried, index, recall of approximate indexes."""
    rows = population_rows(retrieval) or [
        ("queries", fmt_num(retrieval.n_queries)),
        ("query source", retrieval.queries or MISSING),
    ]
    rows += [
        ("index", retrieval.index),
        ("popularity measured by", retrieval.popularity),
        ("queries with zero vectors (skipped)", fmt_num(retrieval.n_zero_queries)),
    ]
    for k, value in sorted((retrieval.recall or {}).items()):
        rows.append((f"recall@{k} of the approximate index vs exact search", fmt_pct(value)))
    return Table(("retrieval setting", "value"), tuple(rows), (False, False))


def conditions_table(result: AuditResult) -> Table:
    """C1–C5: id, name, status, evidence (conditions present in the result)."""
    conditions = result.conditions or {}
    order = [c for c in CONDITION_IDS if c in conditions] + sorted(set(conditions) - set(CONDITION_IDS))
    rows = tuple(
        (key, conditions[key].name, conditions[key].status, conditions[key].evidence) for key in order
    )
    return Table(("id", "condition", "status", "evidence"), rows)


def inputs_table(inputs: Inputs) -> Table:
    """Every input field (files and sizes), in declaration order."""
    labels = INPUT_LABELS | {
        "model": "model file",
        "interactions": "interactions file",
        "item_table": "item table",
        "user_table": "user table",
        "n_items": "items",
        "dim": "embedding dimension",
        "n_interactions": "interactions",
        "format": "model format",
        "item_ids": "item ids file",
        "n_users": "users",
        "n_unmapped_interactions": "interactions with unknown items (dropped)",
        "item_id_mapping": "item id → row",
        "user_id_mapping": "user id → row",
        "item_id_fingerprint": "item ids by content",
        "user_id_fingerprint": "user ids by content",
        "row_ids_assumed": "item rows assumed to be ids",
        "split": "training log and holdout",
        "n_untrained_user_rows": "user-table rows never in the training log (not queried)",
    }
    values = {f.name: getattr(inputs, f.name) for f in fields(inputs)}
    for optional in ("split", "item_id_fingerprint", "user_id_fingerprint"):
        if values.get(optional) is None:  # a reproduced evaluation split (RecBole), a mapping by ids
            values.pop(optional, None)
    rows = tuple(
        (labels.get(name, name), MISSING if value == "" else fmt_value(value))
        for name, value in values.items()
    )
    return Table(("input", "value"), rows, (False, False))


def settings_table(settings: Mapping[str, Any], ran: Mapping[str, str] | None = None) -> Table:
    """The audit settings (K, index, seeds, ...) flattened to one row per setting; ``ran``:
    what an ``auto`` setting resolved to (``index`` ``auto`` ran ``exact``), said beside it."""
    ran = ran or {}

    def shown(key: str, value: Any) -> str:
        text = "none" if value == {} else fmt_value(value)
        return f"{text} (ran: {ran[key]})" if text == "auto" and key in ran else text

    return Table(("setting", "value"), tuple((key, shown(key, value)) for key, value in flatten(settings)),
                 (False, False))  # fmt: skip


def settings_ran(result: AuditResult) -> dict[str, str]:
    """What the ``auto`` settings resolved to in this run: the index retrieval used and the
    source of its queries (``users``, ``history`` or ``file``)."""
    retrieval = result.retrieval
    if retrieval is None:
        return {}
    ran = {"index": retrieval.index}
    if retrieval.population is not None:
        ran["queries"] = retrieval.population.source
    return ran


def definitions_table(definitions: Mapping[str, str]) -> Table:
    """The definitions a retrieval run chose (e.g. popularity, head), one per row.

    A definition that repeats its term as a ``term:`` prefix loses the prefix."""
    rows = []
    for term, text in definitions.items():
        text = str(text)
        head, sep, rest = text.partition(": ")
        stem = term.lower().replace(" ", "_").split("_")[0]
        if sep and len(head) <= 40 and head.lower().replace(" ", "_").startswith(stem):
            text = rest
        rows.append((term, text))
    return Table(("term", "definition"), tuple(rows))


def measures_table(
    measures: Mapping[str, Any], descriptions: Mapping[str, str], shown: Callable[[Any], str] = fmt_value
) -> Table:
    """Extra measures from plugins: name, value (as ``shown`` writes it) and what the
    measure says it measures (which also says when it is null: ``n/a`` alone would not)."""
    rows = tuple((k, shown(v), descriptions.get(k, "")) for k, v in measures.items())
    return Table(("measure", "value", "what it measures"), rows)


def other_not_measured(result: AuditResult) -> list[tuple[str, str]]:
    """``not_measured`` entries that are not one of the main sections."""
    return [(key, why) for key, why in result.not_measured.items() if key not in SECTIONS]


def sorted_cutoffs(retrieval: Retrieval) -> list[tuple[int, CutoffMeasures]]:
    """The retrieval cut-offs in increasing K."""
    return sorted(retrieval.at.items())

"""Format-neutral report content: the headline sentence, number formatting and tables.

The Markdown and HTML renderers (and anything else that writes a report for people,
such as experiment or batch summaries) build their text from these pieces, so every
format says the same thing with the same numbers. Nothing here knows about markup:
cells are plain strings and each format escapes them itself.

Reusable pieces:

* :func:`headline` - the verdict and severity in one sentence with the numbers behind it.
* :func:`fmt_num`, :func:`fmt_pct`, :func:`fmt_ratio` - consistent number formatting.
* :class:`Table` - headers, rows of plain strings, which columns are numeric, a caption.
* ``*_table`` builders - one per report section.
* :func:`not_measured_reason` - why a section is missing from a result.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from auditor.result import AuditResult, CutoffMeasures, FrequencyNorm, Inputs, Retrieval
from auditor.verdict import quoted_cutoff

MISSING = "n/a"
"""What a value that is absent (None, NaN) reads as."""

CONDITION_IDS = ("C1", "C2", "C3", "C4", "C5")
SECTIONS = ("frequency_norm", "retrieval", "conditions", "probes")
"""The optional result sections; each missing one gets a 'not measured' line."""

SECTION_TITLES = {
    "frequency_norm": "Frequency and norm",
    "retrieval": "Retrieval skew",
    "conditions": "Conditions C1–C5",
    "probes": "Probes",
}

# Retrieval list measures: label and format (pct: percentage; numN: N decimals).
MEASURE_LABELS: dict[str, tuple[str, str]] = {
    "head_share_1pct": ("head share, top 1% of items", "pct"),
    "head_share_10pct": ("head share, top 10% of items", "pct"),
    "head_share_20pct": ("head share, top 20% of items", "pct"),
    "arp": ("ARP (mean training frequency of recommended items)", "num1"),
    "aplt": ("APLT (long-tail share per list)", "pct"),
    "gini": ("Gini index of exposure", "num3"),
    "coverage": ("catalogue coverage", "pct"),
    "novelty": ("novelty (bits)", "num2"),
}


@dataclass(frozen=True)
class Table:
    """A table of plain-string cells; each format renders and escapes it.

    ``numeric[i]`` right-aligns column i; shorter than ``headers`` means the rest are text.
    """

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...] = ()
    caption: str = ""

    def is_numeric(self, column: int) -> bool:
        """Whether column ``column`` holds numbers (right-aligned)."""
        return column < len(self.numeric) and self.numeric[column]


def _finite(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def fmt_num(value: Any, digits: int = 3) -> str:
    """A number for people: ints with thousands separators, floats to ``digits`` places.

    None and NaN read as ``n/a``; tiny non-zero values (p-values) use scientific notation.
    """
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    number = _finite(value)
    if number is None:
        return MISSING
    if number == 0:
        return f"{0:.{digits}f}"
    if abs(number) < 10 ** (-digits):
        return f"{number:.2e}"
    if abs(number) >= 1000:
        return f"{number:,.1f}"
    return f"{number:.{digits}f}"


def fmt_pct(value: Any) -> str:
    """A share in [0, 1] as a percentage (one decimal; two below 1%)."""
    number = _finite(value)
    if number is None:
        return MISSING
    percent = 100.0 * number
    return f"{percent:.2f}%" if 0 < abs(percent) < 1 else f"{percent:.1f}%"


def fmt_ratio(value: Any) -> str:
    """A ratio such as dot/cosine, as ``4.16×``."""
    number = _finite(value)
    return MISSING if number is None else f"{number:.2f}×"


def fmt_scalar(value: Any) -> str:
    """A loose scalar (a setting, a probe detail): ints with separators, floats to 4
    significant digits (``10``, ``0.007035``, ``5.684e-14``), booleans as yes/no."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return MISSING if value is None else ("yes" if value else "no")
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    number = _finite(value)
    return MISSING if number is None else format(number, ".4g")


def fmt_value(value: Any, limit: int = 160) -> str:
    """Any JSON-like value in one line (numbers via :func:`fmt_scalar`, long text cut at
    ``limit``)."""
    if isinstance(value, str):
        text = value
    elif value is None or isinstance(value, (bool, int, float, np.generic)):
        return fmt_scalar(value)
    elif isinstance(value, (list, tuple)) and all(isinstance(v, (int, float, str)) for v in value):
        text = ", ".join(v if isinstance(v, str) else fmt_scalar(v) for v in value)
    else:
        text = json.dumps(value, default=str, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fmt_range(low: Any, high: Any) -> str:
    """``3–7``, or a single value when both ends are equal."""
    return fmt_num(low) if low == high else f"{fmt_num(low)}–{fmt_num(high)}"


def ratio(numerator: Any, denominator: Any) -> float | None:
    """``numerator / denominator``, or None when either is missing or the divisor is 0."""
    a, b = _finite(numerator), _finite(denominator)
    if a is None or b is None or b == 0:
        return None
    return a / b


def not_measured_reason(result: AuditResult, section: str) -> str:
    """Why ``section`` is absent from ``result`` (the recorded reason, or a fallback)."""
    reason = (result.not_measured.get(section) or "").strip().rstrip(".")
    return reason or "no reason was recorded by the audit"


def model_name(result: AuditResult) -> str:
    """The audited model's file name (its last path component)."""
    model = result.inputs.model or "model"
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
        return f"Popularity bias detected (severity {verdict.severity})"
    return f"No popularity bias detected (severity {verdict.severity})"


def headline(result: AuditResult) -> str:
    """The verdict and severity in one sentence, with the numbers behind it.

    Quotes Spearman ρ with its 95% CI, the top-1% head share of dot-product vs cosine
    retrieval at the largest K, and which conditions hold; a section that was not
    measured is named as such instead. Equal to ``"{phrase}: {evidence}."`` of
    :func:`headline_parts`.
    """
    phrase, evidence = headline_parts(result)
    return f"{phrase}: {evidence}."


def headline_parts(result: AuditResult) -> tuple[str, str]:
    """The headline split as (verdict phrase, the evidence after it), for formats that
    emphasise the verdict."""
    parts: list[str] = []
    fn = result.frequency_norm
    if fn is not None:
        lo, hi = fn.spearman_ci
        ci = f", 95% CI {fmt_num(lo, 2)} to {fmt_num(hi, 2)}" if _finite(lo) is not None else ""
        parts.append(f"item norm vs training frequency Spearman ρ = {fmt_num(fn.spearman, 2)}{ci}")
    else:
        parts.append("frequency–norm correlation not measured")
    k = quoted_cutoff(result)
    if result.retrieval is not None and k is not None:
        cut = result.retrieval.at[k]
        dot, cos = cut.dot.head_share_1pct, cut.cosine.head_share_1pct
        r = ratio(dot, cos)
        times = f" ({fmt_ratio(r)})" if r is not None else ""
        parts.append(
            f"at K={k} the top-1% items fill {fmt_pct(dot)} of dot-product slots "
            f"vs {fmt_pct(cos)} under cosine{times}"
        )
    else:
        parts.append("retrieval not measured")
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
    return verdict_phrase(result), "; ".join(parts)


def frequency_norm_table(fn: FrequencyNorm) -> Table:
    """The frequency–norm statistics as rows of (statistic, value)."""
    lo, hi = fn.spearman_ci
    rows = [
        ("Spearman ρ", fmt_num(fn.spearman)),
        (
            f"Spearman ρ, 95% bootstrap CI ({fmt_num(fn.n_bootstrap)} resamples)"
            if fn.n_bootstrap
            else "Spearman ρ, 95% CI",
            f"{fmt_num(lo)} to {fmt_num(hi)}",
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


def cutoff_table(k: int, cut: CutoffMeasures) -> Table:
    """One K: each list measure under dot, cosine and most-popular, with dot/cosine."""
    rows: list[tuple[str, ...]] = []
    for metric, (label, kind) in MEASURE_LABELS.items():
        values = [getattr(getattr(cut, scoring), metric) for scoring in ("dot", "cosine", "popular")]
        cells = [fmt_pct(v) if kind == "pct" else fmt_num(v, int(kind[3:])) for v in values]
        rows.append((label, *cells, fmt_ratio(ratio(values[0], values[1]))))
    rows.append(("overlap of dot and cosine lists", fmt_pct(cut.overlap_dot_cosine), "", "", ""))
    return Table(
        ("measure", "dot product", "cosine", "most popular", "dot / cosine"),
        tuple(rows),
        (False, True, True, True, True),
        f"Top-{k} lists.",
    )


def retrieval_summary_table(retrieval: Retrieval) -> Table:
    """How retrieval was run: queries, index, recall of approximate indexes."""
    rows = [
        ("queries", fmt_num(retrieval.n_queries)),
        ("query source", retrieval.queries or MISSING),
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


def probes_tables(probes: Mapping[str, Any]) -> list[tuple[str, str, Table]]:
    """(key, title, table) per probe: update angles first, then one table of the probe
    setup (top-level scalars), then each other probe with nested keys dotted."""
    out: list[tuple[str, str, Table]] = []
    angles = probes.get("update_angles")
    if isinstance(angles, Mapping):
        rows = [
            ("items updated", fmt_num(angles.get("n"))),
            ("median angle", _degrees(angles.get("median"))),
            ("share within 90° ± 1°", fmt_pct(angles.get("share_90pm1"))),
            ("share within 90° ± 10°", fmt_pct(angles.get("share_90pm10"))),
        ]
        known = {"n", "median", "share_90pm1", "share_90pm10", "histogram"}
        rows += [(k, fmt_value(v)) for k, v in flatten(angles) if k.split(".")[0] not in known]
        table = Table(("statistic", "value"), tuple(rows), (False, True))
        out.append(("update_angles", "Update angles (one probe step)", table))
    others = [(k, v) for k, v in probes.items() if k != "update_angles"]
    setup = [(k, fmt_value(v)) for k, v in others if not isinstance(v, Mapping)]
    if setup:
        out.append(("setup", "Probe setup", Table(("setting", "value"), tuple(setup))))
    for name, value in others:
        if isinstance(value, Mapping):
            rows = [(k, fmt_value(v)) for k, v in flatten(value)]
            out.append((name, probe_title(name), Table(("statistic", "value"), tuple(rows))))
    return out


def probe_title(key: str) -> str:
    """``c3_cross_jacobian`` -> ``C3 cross jacobian``."""
    words = key.replace("_", " ").strip()
    if len(words) > 1 and words[0] == "c" and words[1].isdigit():
        words = "C" + words[1:]
    return words[:1].upper() + words[1:]


def _degrees(value: Any) -> str:
    text = fmt_num(value, 2)
    return text if text == MISSING else f"{text}°"


def inputs_table(inputs: Inputs) -> Table:
    """Every input field (files and sizes), in declaration order."""
    labels = {
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
    }
    values = {f.name: getattr(inputs, f.name) for f in fields(inputs)}
    rows = tuple(
        (labels.get(name, name), MISSING if value == "" else fmt_value(value))
        for name, value in values.items()
    )
    return Table(("input", "value"), rows, (False, False))


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested mappings as ``(dotted.key, value)`` pairs, in insertion order."""
    items: list[tuple[str, Any]] = []
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            items.extend(flatten(value, f"{name}."))
        else:
            items.append((name, value))
    return items


def settings_table(settings: Mapping[str, Any]) -> Table:
    """The audit settings (K, index, seeds, ...) flattened to one row per setting."""
    rows = tuple((key, fmt_value(value)) for key, value in flatten(settings))
    return Table(("setting", "value"), rows, (False, False))


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


def measures_table(measures: Mapping[str, Any]) -> Table:
    """Extra measures from plugins: name and value."""
    rows = tuple((k, fmt_value(v)) for k, v in measures.items())
    return Table(("measure", "value"), rows)


def other_not_measured(result: AuditResult) -> list[tuple[str, str]]:
    """``not_measured`` entries that are not one of the main sections."""
    return [(key, why) for key, why in result.not_measured.items() if key not in SECTIONS]


def sorted_cutoffs(retrieval: Retrieval) -> list[tuple[int, CutoffMeasures]]:
    """The retrieval cut-offs in increasing K."""
    return sorted(retrieval.at.items())


def join_words(words: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]

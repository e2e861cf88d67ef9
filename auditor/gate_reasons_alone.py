"""Why a gate on a name without a K has no value (the other half of
:func:`auditor.gate_reasons.why_unmeasured`): a frequency–norm correlation or its CI, the
served vectors' figures, the training trace's, ``unsafe_globals``, ``head_share_log``,
``severity_level`` and an audit measure (a plugin's, or ``item_bias_spearman``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from auditor.errors import setting
from auditor.flat import BASE_METRICS, BIAS_SOURCE, CORRELATIONS
from auditor.sections import finite_figure
from auditor.served_section import LISTS_ONLY_FORMAT, with_the_model

ITEM_BIAS = "item_bias_spearman"
"""The built-in audit measure of a model's per-item bias against training frequency."""


def _one_norm_hint(fn: Mapping[str, Any], report: Mapping[str, Any]) -> str:
    """Where ρ is undefined because every item has one norm (the table ``mitigate --alpha 0``
    writes, or any L2-normalised one; the wording of ``frequency_norm.undefined_reason``):
    the gate that still judges such a model, the verdict's grade, and its value here."""
    if "the same norm" not in str(fn.get("undefined_reason") or ""):
        return ""
    verdict = report.get("verdict") or {}
    graded = (f" (graded {verdict.get('severity')} on this run)" if verdict.get("assessed")
              else " on a run that measures retrieval (this one graded nothing)")
    return (f". The norms carry no popularity here (a table rescaled to one norm, as mitigate {setting('alpha')} 0 "
            "writes, has none), so no correlation gate applies: gate the verdict's grade with "
            f"{setting('fail_on')} 'severity_level>=1'{graded} instead")


def _why_bias(name: str, report: Mapping[str, Any]) -> str:
    """Why a ``served_…`` correlation is null for a model with an item bias, and the gates that read it."""
    rho = finite_figure((report.get("measures") or {}).get("item_bias_spearman"))
    here = f", ρ = {rho:.3f} here" if rho is not None else ""
    return (f"{name} is not comparable for a model that adds an item bias: the served vectors [i, b_i] have norms "
            "√(‖i‖²+b_i²), which grow with |b_i| whether the bias favours popular or rare items; gate item_bias_spearman "
            f"(the bias against training frequency{here}) and spearman (the factors' norms) instead")


def why_alone(name: str, report: Mapping[str, Any]) -> str:
    """Why a name without a K (a correlation, its CI, the trace's figures, an audit
    measure) has no value."""
    not_measured = report.get("not_measured") or {}
    fn = report.get("frequency_norm")
    if name.startswith("served_"):
        if (report.get("served_vectors") or {}).get("as_served") is False:
            return "the stored tables stand in for the vectors the model serves with, so what it serves is unknown"
        if (report.get("served_vectors") or {}).get("source") == BIAS_SOURCE:
            return _why_bias(name, report)
        name = name.removeprefix("served_")
    if name in (*CORRELATIONS, "spearman_p", "spearman_ci_lo", "spearman_ci_hi"):
        if not fn:
            return "frequency–norm not measured: " + str(not_measured.get("frequency_norm") or "it needs a model's item table")
        if name.startswith("spearman_ci") and not fn.get("undefined_reason"):  # ρ itself defined: the CI's own reason
            if fn.get("ci_undefined_reason") or not fn.get("n_bootstrap"):
                return str(fn.get("ci_undefined_reason") or f"no CI without a bootstrap ({setting('bootstrap')} 0)")
        return str(fn.get("undefined_reason") or f"{name} is undefined here") + _one_norm_hint(fn, report)
    if name.startswith("training_"):
        training = report.get("training")
        if not training:
            return f"no training trace (pass {setting('trace')})"
        if training.get("matches_model") is False:
            return "the training trace is of another model"
        return "the training trace holds no " + ("ρ" if name == "training_spearman" else "update angles (step records)")
    if (report.get("inputs") or {}).get("format") == LISTS_ONLY_FORMAT and name in _model_only(not_measured):
        return _why_no_model(name, not_measured)
    if name == "unsafe_globals":
        return str(not_measured.get("replaced_globals") or  # a report written before the reason was recorded
                   f"the model was unpickled in full ({setting('trust_pickle')}), so the globals it named were not recorded")
    if name == "head_share_log":
        return f"measured for served lists ({setting('recommendations')}), alone or beside a model"
    if name == "severity_level":
        reasons = [str(not_measured[key]) for key in ("frequency_norm", "retrieval", "served") if not_measured.get(key)]
        return "nothing graded the severity (the verdict's assessed is false)" + (f": {reasons[0]}" if reasons else "")
    if name not in not_measured and name not in BASE_METRICS and name not in (report.get("measures") or {}):
        # Not null: absent. No measure of that name was registered in that run (a plugin not loaded there).
        return (f"no measure named {name} was registered in its audit (a plugin's measure whose plugin that run did "
                f"not load; {setting('plugins')} PATH loads it): the name is absent from the report, not null")
    if name == ITEM_BIAS and not not_measured.get(name):  # most models: no bias term, no numeric failure
        return _why_no_item_bias(report)
    return str(not_measured.get(name) or f"not measured: the audit measure {name} returned no finite number in this "
               "run (None, NaN or an infinite value: null in the JSON report, which no gate compares)")


def _model_only(not_measured: Mapping[str, Any]) -> set[str]:
    """The names without a K that only a model has: its pickle's globals, the built-in
    item-bias measure and every audit measure a lists-only run lists as taking a model."""
    listed = re.search(r"audit measures \(([^)]*)\) take a model", str(not_measured.get("measures") or ""))
    return {"unsafe_globals", ITEM_BIAS, *(listed.group(1).split(", ") if listed else ())}


def _why_no_model(name: str, not_measured: Mapping[str, Any]) -> str:
    """Why a model-only name has no value on a run of served lists alone."""
    if name == "unsafe_globals":
        return f"no model: served lists alone were audited, so no model file was read whose globals could be recorded; " \
               f"{with_the_model()}"
    return f"{not_measured.get('measures') or f'no model: served lists alone have no model to measure {name} on'}; " \
           f"{with_the_model()}"


def _why_no_item_bias(report: Mapping[str, Any]) -> str:
    """Why ``item_bias_spearman`` is null: the model adds no item bias to its scores (most
    models), the training frequencies are unknown, or the bias is one value for every item."""
    if (report.get("served_vectors") or {}).get("source") != BIAS_SOURCE:
        return (f"the model has no item bias (no per-item b_i added to its scores: served_vectors.source is not "
                f"{BIAS_SOURCE!r}), so there is no bias to correlate with training frequency; gate spearman (the "
                "item norms) instead")
    if not report.get("frequency_norm"):
        return f"no item frequencies to correlate the item bias with: pass {setting('interactions')}"
    return "the item bias is the same for every item, so its Spearman ρ with training frequency is undefined"

"""What plugins contribute to an audit: extra measures and declared condition verdicts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pluggy

from auditor.errors import PluginError, setting
from auditor.plugins.calls import as_list, attribute_failure, hook_results, require_attributes
from auditor.plugins.manager import PLUGIN_FAILURES

if TYPE_CHECKING:  # the result types load numpy: imported where used, not for --help
    from auditor.result import Condition


def collect_measures(pm: pluggy.PluginManager) -> list[Any]:
    """Extra measures from every plugin; a name given twice, or the name of a built-in
    metric (:func:`builtin_metric_clash`), is a PluginError.

    Each measure must have ``name``, ``description`` and ``compute``.
    """
    return [measure for _, measure in _measures(pm)]


def compute_measures(pm: pluggy.PluginManager, bundle: Any, stats: Any, result: Any) -> dict[str, Any]:
    """Every plugin measure's value for one audit, by name (for ``AuditResult.measures``).

    A measure whose ``compute`` raises is a PluginError naming the measure and its plugin
    (an AuditError keeps its class, with them prefixed to its message).
    """
    values: dict[str, Any] = {}
    for plugin, measure in _measures(pm):
        try:
            value = measure.compute(bundle, stats, result)
        except PLUGIN_FAILURES as exc:
            error = attribute_failure(pm, f"popaudit_measures (measure {measure.name!r})", exc, plugin)
            if error is exc:
                raise
            raise error from exc
        try:  # the report is JSON: a value that cannot be written must fail here, named
            json.dumps(_json_safe(value), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise PluginError(
                f"measure {measure.name!r} of plugin {plugin!r} returned a {type(value).__name__}, "
                f"which is not JSON-serialisable ({exc}); return a number, string, list or dict"
            ) from exc
        values[str(measure.name)] = value
    return values


def _json_safe(value: Any) -> Any:
    from auditor.result import json_safe  # numpy and the result types load on demand

    return json_safe(value)


def builtin_metric_clash(name: str) -> str | None:
    """Why a plugin measure may not be called ``name``, or None when it may.

    Plugin measures share one namespace with the built-in flat metrics
    (``AuditResult.flat_metrics``: the ``--fail-on`` names and the batch columns), where a
    plugin value would silently replace the built-in one. Refused: every name
    :func:`auditor.gate.metric_names` gives for any cut-off (``spearman``,
    ``head_share_1pct_dot@10``, ``recall@7``, ...) and the bare built-in measure names
    (``gini``, ``head_share_1pct_dot``, ``overlap_dot_cosine``, ...).
    """
    from auditor.gate import metric_names  # loads the result types (numpy): on demand
    from auditor.result import LIST_MEASURES

    stem, at, cutoff = name.partition("@")
    if at:
        if cutoff.isascii() and cutoff.isdigit() and name in metric_names([int(cutoff)]):
            return f"the built-in metric {name!r} (cut-off {int(cutoff)})"
        return None
    bare = {*metric_names(()), *LIST_MEASURES, *(n.partition("@")[0] for n in metric_names([1]))}
    return f"the built-in metric {name!r}" if stem in bare else None


def _measures(pm: pluggy.PluginManager) -> list[tuple[str, Any]]:
    measures: dict[str, tuple[str, Any]] = {}
    for result in hook_results(pm, "popaudit_measures"):
        for measure in as_list(result, "popaudit_measures"):
            require_attributes(result, "popaudit_measures", measure, ("name", "description"), ("compute",))
            name = str(measure.name)
            clash = builtin_metric_clash(name)
            if clash is not None:
                raise PluginError(
                    f"plugin {result.plugin!r} (hook popaudit_measures) defines measure {name!r}, which "
                    f"clashes with {clash}: its value would replace the built-in one in {setting('fail_on')} "
                    "gates, reports and batch columns; rename the measure"
                )
            if name in measures:
                raise PluginError(
                    f"measure {name!r} is defined by both plugin {measures[name][0]!r} "
                    f"and plugin {result.plugin!r} (hook popaudit_measures)"
                )
            measures[name] = (result.plugin, measure)
    return list(measures.values())


@dataclass
class DeclaredConditions:
    """Condition verdicts declared by plugins (hook ``popaudit_condition_evidence``)."""

    conditions: dict[str, Condition] = field(default_factory=dict)
    """Condition id (C1..C5) -> :class:`auditor.result.Condition`, ``details["source"]``
    naming the plugin."""
    warnings: list[str] = field(default_factory=list)
    """Declarations that lost to an earlier plugin's different verdict."""


def collect_condition_evidence(pm: pluggy.PluginManager, bundle: Any) -> DeclaredConditions:
    """Merge the plugins' declared verdicts for ``bundle``; the first plugin called wins.

    Values may be :class:`auditor.result.Condition` objects or mappings with ``name``,
    ``status`` and ``evidence``; keys must be C1..C5 and statuses holds/violated/unknown.
    """
    declared = DeclaredConditions()
    for result in hook_results(pm, "popaudit_condition_evidence", bundle=bundle):
        if not isinstance(result.value, Mapping):
            raise PluginError(
                f"plugin {result.plugin!r} returned {type(result.value).__name__} from hook "
                "popaudit_condition_evidence; expected a mapping such as {'C3': Condition(...)}"
            )
        for key, value in result.value.items():
            condition = _as_condition(result.plugin, key, value)
            previous = declared.conditions.get(key)
            if previous is None:
                declared.conditions[key] = condition
            elif previous.status != condition.status:
                declared.warnings.append(
                    f"{key}: plugin {result.plugin!r} declared {condition.status}, "
                    f"plugin {previous.details['source']!r} {previous.status}; kept the latter"
                )
    return declared


def _as_condition(plugin: str, key: object, value: object) -> Condition:
    from auditor.result import CONDITION_IDS, Condition

    where = f"plugin {plugin!r} (hook popaudit_condition_evidence)"
    if key not in CONDITION_IDS:
        raise PluginError(f"{where} declared unknown condition {key!r}; use one of {', '.join(CONDITION_IDS)}")
    if isinstance(value, Condition):
        condition = value
    elif isinstance(value, Mapping) and {"name", "status", "evidence"} <= set(value):
        condition = Condition(
            name=str(value["name"]),
            status=value["status"],
            evidence=str(value["evidence"]),
            details=dict(value.get("details") or {}),
        )
    else:
        raise PluginError(f"{where} gave {key} as {value!r}; expected a Condition")
    if condition.status not in ("holds", "violated", "unknown"):
        raise PluginError(f"{where} gave {key} status {condition.status!r}; expected holds, violated or unknown")
    details = dict(condition.details)
    details["source"] = plugin
    return Condition(condition.name, condition.status, condition.evidence, details)

"""What plugins (and the built-ins, through the same hooks) contribute to an audit:
measures and declared condition verdicts."""

from __future__ import annotations

import json
import numbers
import re
from contextlib import nullcontext
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import pluggy

from auditor.flat import BASE_METRICS, metric_names
from auditor.sections import ACCURACY_MEASURES
from auditor.errors import PluginError, setting
from auditor.plugins.calls import as_list, attribute_failure, hook_results, require_attributes
from auditor.plugins.manager import BUILTIN_PREFIX, PLUGIN_FAILURES, reraise_interrupt

if TYPE_CHECKING:  # the result types load numpy: imported where used, not for --help
    from auditor.result import Condition


@dataclass(frozen=True)
class RegisteredMeasures:
    """The measures of every plugin and built-in (hook ``popaudit_measures``), checked."""

    audit: tuple[tuple[str, Any], ...] = ()
    """(plugin, measure) of each audit measure: one value per audit (``compute``)."""
    lists: tuple[Any, ...] = ()
    """Each list measure (``bind``), built-ins first: measured on every scoring's lists at
    every K; failures inside it name its plugin."""

    @property
    def audit_names(self) -> list[str]:
        return [str(measure.name) for _, measure in self.audit]

    @property
    def list_names(self) -> list[str]:
        return [str(measure.name) for measure in self.lists]


def collect_measures(pm: pluggy.PluginManager) -> RegisteredMeasures:
    """Every plugin's and built-in's measures; a malformed measure, a name given twice,
    or a name that would shadow a built-in metric (:func:`builtin_metric_clash`) is a
    PluginError naming the plugin.

    An audit measure has ``name``, ``description`` and ``compute``; a list measure
    ``name``, ``label``, ``display``, ``definition`` and ``bind`` (auditor.hookspecs).
    """
    audit: dict[str, tuple[str, Any]] = {}
    lists: dict[str, tuple[str, Any]] = {}
    for result in hook_results(pm, "popaudit_measures"):
        for measure in as_list(result, "popaudit_measures"):
            is_list = callable(getattr(measure, "bind", None))
            if is_list:
                require_attributes(result, "popaudit_measures", measure, LIST_ATTRIBUTES, ("bind",))
            else:
                require_attributes(result, "popaudit_measures", measure, ("name", "description"), ("compute",))
            name = str(measure.name)
            taken = audit.get(name) or lists.get(name)
            if taken is not None:
                raise PluginError(
                    f"measure {name!r} is defined by both plugin {taken[0]!r} "
                    f"and plugin {result.plugin!r} (hook popaudit_measures)"
                )
            (lists if is_list else audit)[name] = (result.plugin, measure)
    for plugin, measure in lists.values():
        _check_list_measure(plugin, measure)
    for name, (plugin, _) in audit.items():
        clash = builtin_metric_clash(name, list(lists))
        if clash is not None:
            raise PluginError(
                f"plugin {plugin!r} (hook popaudit_measures) defines measure {name!r}, which "
                f"clashes with {clash}: its value would replace the built-in one in {setting('fail_on')} "
                "gates, reports and batch columns; rename the measure"
            )
    ordered = sorted(lists.values(), key=lambda entry: not entry[0].startswith(BUILTIN_PREFIX))  # stable
    return RegisteredMeasures(
        audit=tuple(audit.values()),
        lists=tuple(AttributedListMeasure(plugin, measure) for plugin, measure in ordered),
    )


def measure_descriptions(registered: RegisteredMeasures) -> dict[str, str]:
    """Each audit measure's ``description``, by name (for ``AuditResult.measure_descriptions``)."""
    return {str(measure.name): str(getattr(measure, "description", "") or "") for _plugin, measure in registered.audit}


def compute_measures(registered: RegisteredMeasures, bundle: Any, stats: Any, result: Any) -> dict[str, Any]:
    """Every audit measure's value for one audit, by name (for ``AuditResult.measures``).

    A measure whose ``compute`` raises is a PluginError naming the measure and its plugin
    (an AuditError keeps its class, with them prefixed to its message).
    """
    from auditor.plugins.lending import lend, lend_result, unchanged_tensors  # loads numpy

    values: dict[str, Any] = {}
    lent_bundle, lent_stats = lend(bundle), lend(stats)
    for plugin, measure in registered.audit:
        where = f"popaudit_measures (measure {measure.name!r})"
        builtin = plugin.startswith(BUILTIN_PREFIX)
        lent = result if builtin else lend_result(result)
        try:  # only a plugin's call is watched: the checksums cost a pass over the arrays
            with nullcontext() if builtin else unchanged_tensors(bundle, f"plugin {plugin!r} (hook {where})", stats):
                value = measure.compute(lent_bundle, lent_stats, lent)
        except PLUGIN_FAILURES as exc:
            reraise_interrupt(exc)
            _raise_attributed(where, exc, plugin)
        try:  # the report is JSON: a value that cannot be written must fail here, named
            json.dumps(_json_safe(value), allow_nan=False)
            if isinstance(value, int) and not isinstance(value, bool):
                float(value)  # a flat metric: it must be a float64 (10**400 is not)
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            why = {RecursionError: "a container that holds itself", OverflowError: "a number beyond a 64-bit float's range"}
            why_text = next((text for kind, text in why.items() if isinstance(exc, kind)), str(exc))
            raise PluginError(
                f"measure {measure.name!r} of plugin {plugin!r} returned a {type(value).__name__}, "
                f"which is not JSON-serialisable ({why_text}); return a number, string, list or dict"
            ) from exc
        values[str(measure.name)] = value
    return values


def _json_safe(value: Any) -> Any:
    from auditor.result import json_safe  # numpy and the result types load on demand

    return json_safe(value)


def builtin_metric_clash(name: str, list_measures: Iterable[str]) -> str | None:
    """Why an audit measure may not be called ``name``, or None when it may.

    Measures share one namespace with the flat metrics (``AuditResult.flat_metrics``:
    the ``--fail-on`` names and the batch columns), where a measure's value would
    silently replace another. Refused: every name :func:`auditor.flat.metric_names`
    gives for any cut-off with the registered ``list_measures``, e.g. ``spearman``, ``head_share_1pct_dot@10``, ``recall@7``, and the bare
    stems of those names (``gini``, ``head_share_1pct_dot``, ``overlap_dot_cosine``, ...).
    """
    stem, at, cutoff = name.partition("@")
    if at:
        if cutoff.isascii() and cutoff.isdigit() and name in metric_names([int(cutoff)], list_measures=list_measures):
            return f"the built-in metric {name!r} (cut-off {int(cutoff)})"
        return None
    list_measures = list(list_measures)
    names = metric_names([1], list_measures=list_measures)
    bare = {*metric_names(()), *list_measures, *(n.partition("@")[0] for n in names)}
    return f"the built-in metric {name!r}" if stem in bare else None


LIST_ATTRIBUTES = ("name", "label", "display", "definition")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DISPLAY = re.compile(r"pct|num[0-9]")


def _check_list_measure(plugin: str, measure: Any) -> None:
    """PluginError unless the list measure's name makes valid flat names of its own
    (``<name>_<scoring>@K`` may not be another metric's) and its display is known."""

    where = f"plugin {plugin!r} (hook popaudit_measures) defines list measure {measure.name!r}"
    if not _IDENTIFIER.fullmatch(measure.name):
        raise PluginError(f"{where}: a list measure's name must be letters, digits and underscores "
                          "(it becomes <name>_<scoring>@K)")
    if measure.name in {*BASE_METRICS, *ACCURACY_MEASURES, "overlap_dot"}:
        raise PluginError(f"{where}, whose flat names <name>_<scoring>@K would be built-in metrics' names; rename it")
    if not _DISPLAY.fullmatch(measure.display):
        raise PluginError(f"{where} with display {measure.display!r}; use 'pct' or 'numN' (N decimals, 0-9)")


class AttributedListMeasure:
    """A registered list measure whose failures, and malformed values, name its plugin."""

    def __init__(self, plugin: str, measure: Any) -> None:
        self.plugin = plugin
        self.measure = measure
        self.name, self.label, self.display, self.definition = (str(getattr(measure, a)) for a in LIST_ATTRIBUTES)

    def bind(self, context: Any) -> Callable[[Any], float | None] | None:
        """The measure built for one audit (None: not measurable there). A plugin's calls are
        watched (:class:`~auditor.plugins.lending.ArrayWatch`): the context's and the slots'
        arrays must be as lent after each, whatever view the plugin wrote through."""
        watch = None if self.plugin.startswith(BUILTIN_PREFIX) else _watch(context, "context")
        who = f"plugin {self.plugin!r} (hook popaudit_measures, list measure {self.name!r})"
        try:
            scorer = self.measure.bind(context)
        except PLUGIN_FAILURES as exc:
            reraise_interrupt(exc)
            _raise_attributed(f"popaudit_measures (list measure {self.name!r})", exc, self.plugin)
        if watch is not None:
            watch.check(who)
        if scorer is None:
            return None
        if not callable(scorer):
            raise PluginError(f"list measure {self.name!r} of plugin {self.plugin!r} returned "
                              f"{type(scorer).__name__} from bind(); expected a callable(slots) -> float or None")

        def measure(slots: Any) -> float | None:
            slots_watch = None if watch is None else _watch(slots, "slots")
            try:
                value = scorer(slots)
            except PLUGIN_FAILURES as exc:
                reraise_interrupt(exc)
                _raise_attributed(f"popaudit_measures (list measure {self.name!r})", exc, self.plugin)
            if watch is not None and slots_watch is not None:
                watch.check(who)
                slots_watch.check(who)
            if value is None:
                return None
            if type(value) is float:  # the common answer, without the ABC check below
                return value
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise PluginError(f"list measure {self.name!r} of plugin {self.plugin!r} returned "
                                  f"{type(value).__name__}; return a float (NaN allowed) or None")
            return float(value)

        return measure


def _watch(lent: Any, name: str) -> Any:
    """An ArrayWatch of ``lent``'s arrays (a Slots' exposure counts computed first, so that
    they are watched too)."""
    from auditor.plugins.lending import ArrayWatch, named_arrays  # loads numpy

    getattr(lent, "counts", None)
    return ArrayWatch(named_arrays(lent, name))


def _raise_attributed(where: str, exc: BaseException, plugin: str) -> NoReturn:
    """Raise ``exc`` as a failure of ``plugin`` in ``where`` (an AuditError keeps its class)."""
    error = attribute_failure(where, exc, plugin)
    if error is exc:
        raise exc
    raise error from exc


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
    from auditor.plugins.lending import implementers, lend, unchanged_tensors  # loads numpy

    declared = DeclaredConditions()
    with unchanged_tensors(bundle, implementers(pm, "popaudit_condition_evidence")):
        answers = hook_results(pm, "popaudit_condition_evidence", bundle=lend(bundle))
    for result in answers:
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

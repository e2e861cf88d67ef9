"""Gates (``--fail-on``): ``metric OP value`` expressions over the flat metric names, and
the one policy that ``check`` and ``batch`` apply to them.

* Names: the flat metrics for the run's cut-offs, of the registered list measures and
  audit measures (built-in and plugins', :func:`gates_for`), and every name other
  settings would produce (:func:`well_formed`: another K or α). Expressions are parsed
  and their names checked before any audit runs, so a typo is a usage error
  (:class:`~auditor.errors.GateError`, exit 2) listing the valid names rather than a
  silently passing gate; so is a threshold that is not a finite number.
* Evaluation: a gate trips when its condition holds in a run (a ``check``, or one
  audited batch row). A run that did not measure the metric leaves the gate
  unevaluated there; a gate that no run measured, or that had no run at all, is an
  :class:`UnmeasuredGateError` (exit 1): a gate that cannot be evaluated fails the
  build rather than pass it. That error comes before a tripped gate's exit 3, and says
  each gate's own reason (:func:`why_unmeasured`, from the run's JSON report).
* A K above the catalogue is clamped to the catalogue's size and its figures are filed
  under that K: a gate reads only the K it names, so ``…@10`` on a 6-item catalogue is
  unmeasured and says to gate ``…@6``. Its figures are the whole catalogue's lists, and a
  gate's name is the figure's name in every report, batch column and diff.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from auditor.errors import GateError, UnmeasuredGateError, setting
from auditor.config import DEFAULT_ALPHAS
from auditor.alpha import ALPHA_PREFIX, alpha_scoring, scoring_alpha
from auditor.flat import BASE_METRICS, RATIO, metric_names
from auditor.sections import (
    ACCURACY_MEASURES, BUILTIN_LIST_MEASURES, GROUP_LIST_MEASURES, OVERLAP_SERVED, SCORINGS, SERVED, finite_figure,
)

_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
}
_EXPR = re.compile(r"^\s*([A-Za-z_][\w@.]*)\s*(>=|<=|==|!=|>|<)\s*([-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
                   r"|(?i:inf|infinity|nan)))\s*$")
"""``METRIC OP NUMBER``; NUMBER as Python writes a float, ``inf`` and ``nan`` included so that
every non-finite threshold, spelled or overflowing (``1e400``), is refused for one reason."""
RATIO_RULE = "every <metric>_ratio@K is dot / cosine (accuracy ratios included)"
"""The one direction of every ratio, said wherever gate names are listed."""
@dataclass(frozen=True)
class Gate:
    """One parsed gate expression."""

    metric: str
    op: str
    threshold: float

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.threshold:g}"


@dataclass(frozen=True)
class GateOutcome:
    """One gate evaluated: the metric's value (None: not measured) and whether it tripped."""

    gate: Gate
    value: float | None
    tripped: bool

    def describe(self) -> str:
        """One line for the console, e.g. ``spearman>0.3: 0.41 (TRIPPED)``."""
        if self.value is None:
            return f"{self.gate}: not measured"
        state = "TRIPPED" if self.tripped else "ok"
        return f"{self.gate}: {self.value:.4g} ({state})"


def parse_gates(
    expressions: Iterable[str], valid_names: Iterable[str], *, option: str = "fail_on", rule: str | None = RATIO_RULE,
    well_formed: Callable[[str], bool] | None = None,
) -> list[Gate]:
    """Parse every expression; all problems are reported together in one GateError.

    ``option``: the setting the expressions came from, as messages name it (the
    training monitor's alerts use the same syntax under their own setting); ``rule``: what
    the list of valid names adds (``--fail-on``'s ratio rule; None for names without it);
    ``well_formed``: names outside ``valid_names`` that are accepted all the same, because
    other settings would measure them (a K not asked for): this run leaves them
    unmeasured, which fails the gate with the reason (exit 1) where a typo is exit 2."""
    valid = list(valid_names)
    known = set(valid)
    gates: list[Gate] = []
    problems: list[str] = []
    for expr in expressions:
        match = _EXPR.match(expr)
        if not match:
            problems.append(f"{expr!r} is not 'METRIC OP NUMBER' (OP one of > >= < <= == !=)")
            continue
        name, op, number = match.groups()
        if name not in known and not (well_formed is not None and well_formed(name)):
            problems.append(f"{expr!r}: unknown metric {name!r}")
            continue
        threshold = float(number)
        if not math.isfinite(threshold):  # x > inf never holds, x < inf always (but for a ratio's +inf)
            overflow = f" (it overflows to {threshold:g})" if number[-1].isdigit() else ""
            problems.append(f"{expr!r}: the threshold {number} is not a finite number{overflow}; give a finite "
                            "NUMBER (a ratio that is infinite, cosine serving none of the head, trips every '>' gate)")
            continue
        gates.append(Gate(name, op, threshold))
    if problems:
        shown = ", ".join(valid[:12]) + (f", ... ({len(valid)} in all)" if len(valid) > 12 else "")
        raise GateError(f"invalid {setting(option)}: " + "; ".join(problems) + f". Valid metrics: {shown}"
                        + (f"; {rule}" if rule else ""))
    return gates


def gates_for(
    expressions: Iterable[str],
    ks: Iterable[int],
    measures: Iterable[str] = (),
    alphas: Iterable[float] = DEFAULT_ALPHAS,
    list_measures: Iterable[str] | None = None,
) -> list[Gate]:
    """Parse gates for a run with cut-offs ``ks``, audit ``measures`` and
    ``list_measures`` (their names; list measures default to the built-in ones) and
    norm-aware ``alphas``: the valid names of ``check`` and ``batch`` alike. GateError
    lists every problem; a :func:`well_formed` name these settings do not measure (another
    K or α) is an UnmeasuredGateError (exit 1) saying what would measure it, before any
    audit runs."""
    ks, alphas = sorted(set(ks)), list(alphas)
    names = metric_names(ks, measures, alphas, list_measures)
    gates = parse_gates(expressions, names, well_formed=lambda name: well_formed(name, list_measures))
    known = set(names)
    unasked = {gate: _why_not_asked(per_k_name(gate.metric, list_measures), ks, alphas) for gate in gates
               if gate.metric not in known}
    if unasked:
        require_measured(list(unasked), [], where="with these settings", reasons=unasked)
    return gates


def evaluate_gates(gates: Iterable[Gate], metrics: Mapping[str, float | None]) -> list[GateOutcome]:
    """Evaluate each gate; a metric that was not measured never trips (reported as such)."""
    outcomes = []
    for gate in gates:
        value = metrics.get(gate.metric)
        tripped = value is not None and _OPERATORS[gate.op](value, gate.threshold)
        outcomes.append(GateOutcome(gate, value, tripped))
    return outcomes


def require_measured(
    gates: Sequence[Gate], runs: Iterable[Sequence[GateOutcome]], *, where: str,
    reasons: Mapping[Gate, str] | None = None,
) -> None:
    """UnmeasuredGateError naming every gate that no run measured (``runs``: the
    outcomes of each run, from :func:`evaluate_gates`), each with its reason (``reasons``,
    from :func:`why_unmeasured`; else "not measured ``where``")."""
    measured = {outcome.gate for outcomes in runs for outcome in outcomes if outcome.value is not None}
    missing = [gate for gate in dict.fromkeys(gates) if gate not in measured]
    if missing:
        said = [f"{gate}: {(reasons or {}).get(gate) or f'not measured {where}'}" for gate in missing]
        raise UnmeasuredGateError(f"cannot evaluate {setting('fail_on')} {'; '.join(said)}")


# ------------------------------------------------------------------ why a gate has no value
_PER_K = re.compile(r"^(?P<stem>[A-Za-z_][\w.]*)@(?P<k>[1-9]\d*)$")
_UNSCORED = ("overlap_dot_cosine", "recall", *(f"overlap_served_{s}" for s in OVERLAP_SERVED))
"""The per-K names without a scoring: the dot/cosine overlap, the index's recall, the served lists' overlaps."""
_CORRELATIONS = ("spearman", "spearman_p", "pearson_log", "kendall", "loglog_slope")


@dataclass(frozen=True)
class PerK:
    """A per-K flat name taken apart: ``<measure>_<scoring>@K``, or an unscored name
    (``recall@K``: ``scoring`` None)."""

    stem: str
    measure: str
    scoring: str | None
    k: int

    def at(self, k: int, scoring: str | None = None) -> str:
        """The same figure's name at cut-off ``k`` (and, given, under ``scoring``)."""
        scoring = scoring or self.scoring
        return f"{self.measure}_{scoring}@{k}" if scoring else f"{self.measure}@{k}"


def per_k_name(name: str, list_measures: Iterable[str] | None = None) -> PerK | None:
    """``name`` taken apart when it is a per-K flat name that some run would produce: a
    list measure (``list_measures``, default the built-in ones) or accuracy measure under
    dot, cosine, popular, served, ratio or a norm-aware α in [0, 1] (as ``alpha_<α>``
    writes it), at any K; None for anything else (a typo)."""
    match = _PER_K.match(name)
    if match is None:
        return None
    stem, k = match["stem"], int(match["k"])
    if stem in _UNSCORED:
        return PerK(stem, stem, None, k)
    measures = {*({**BUILTIN_LIST_MEASURES, **GROUP_LIST_MEASURES} if list_measures is None else list_measures),
                *ACCURACY_MEASURES}
    for scoring in (*SCORINGS, SERVED, RATIO):
        measure = stem.removesuffix(f"_{scoring}")
        if measure != stem and measure in measures:
            return PerK(stem, measure, scoring, k)
    measure, _, alpha = stem.rpartition(f"_{ALPHA_PREFIX}")
    exponent = scoring_alpha(ALPHA_PREFIX + alpha) if measure in measures else None
    if exponent is not None and 0 <= exponent <= 1 and alpha_scoring(exponent) == ALPHA_PREFIX + alpha:
        return PerK(stem, measure, ALPHA_PREFIX + alpha, k)
    return None


def well_formed(name: str, list_measures: Iterable[str] | None = None) -> bool:
    """Whether ``name`` is a flat name some run would produce (:data:`BASE_METRICS`, or
    :func:`per_k_name`), though not every run does: a gate on it is accepted and fails,
    where unmeasured, with :func:`why_unmeasured`'s reason."""
    return name in BASE_METRICS or per_k_name(name, list_measures) is not None


def why_unmeasured(name: str, report: Mapping[str, Any]) -> str:
    """Why the flat metric ``name`` has no value in the JSON ``report`` (an audit's
    ``to_dict()``): a K or α the run did not ask for, a K clamped to the catalogue, a
    section not measured (the report's own reason), a ratio that is undefined (two zeros,
    signed figures), a CI without a bootstrap, an undefined correlation. One clause, to
    follow the gate in an error message."""
    parsed = per_k_name(name, _list_measures_of(report))
    return _why_per_k(parsed, report) if parsed is not None else _why_alone(name, report)


def _list_measures_of(report: Mapping[str, Any]) -> set[str]:
    """The list measures ``report`` measured (plugins' included) and the built-in ones."""
    cuts = ((report.get("retrieval") or {}).get("at") or {}).values()
    found = {measure for cut in cuts for scoring in cut.values() if isinstance(scoring, dict) for measure in scoring}
    return found | set(BUILTIN_LIST_MEASURES) | set(GROUP_LIST_MEASURES)


def _why_per_k(name: PerK, report: Mapping[str, Any]) -> str:
    """Why a per-K figure is missing: its section not measured, then the settings (what would
    measure it), then what its section holds at its K."""
    settings = report.get("settings") or {}
    exponent = _alpha_of(name)
    if exponent in (0.0, 1.0):
        return _why_not_asked(name, (name.k,), ())
    part = "accuracy" if name.measure in ACCURACY_MEASURES and name.scoring is not None else "retrieval"
    section = report.get(part)
    if not section:
        return f"{part} not measured: " + str((report.get("not_measured") or {}).get(part) or "no such section in the report")
    clamped = _why_clamped(name, report)
    if clamped:
        return clamped
    # A report that does not record its settings asked for what it holds.
    unasked = _why_not_asked(name, settings.get("ks") or (name.k,), settings.get("alphas") or [exponent or 0.0])
    if unasked:
        return unasked
    cut = (section.get("recall") if name.measure == "recall" and name.scoring is None else section.get("at")) or {}
    if str(name.k) not in cut:
        return _why_no_cut(name, section)
    figures = cut[str(name.k)]
    if name.scoring == RATIO:
        return _why_no_ratio(name, figures, report)
    if isinstance(figures, dict) and (name.scoring or name.measure) not in figures:  # a scoring, or an overlap
        if name.scoring == SERVED or name.measure.startswith("overlap_served_"):
            return _why_no_served(name, cut)
        lists_only = (report.get("not_measured") or {}).get("dot_cosine")  # served lists audited without a model
        if lists_only and name.scoring != "popular":
            return f"{name.scoring or name.measure} not measured: {lists_only}"
        return f"{name.scoring or name.measure} was not measured at K={name.k}"
    return _why_null(name.measure, section, report)


def _alpha_of(name: PerK) -> float | None:
    """The norm-aware exponent of ``name``'s scoring (None: not an ``alpha_<α>`` scoring)."""
    return scoring_alpha(name.scoring) if name.scoring and name.scoring.startswith(ALPHA_PREFIX) else None


def _why_not_asked(name: PerK | None, ks: Iterable[int], alphas: Iterable[float]) -> str:
    """Why the settings (cut-offs ``ks``, norm-aware ``alphas``) do not measure ``name``,
    and what would; "" when they ask for it. α 0 and 1 are not measured apart: they are
    cosine's and dot's own lists."""
    if name is None:
        return "not measured with these settings"
    exponent = _alpha_of(name)
    if exponent in (0.0, 1.0):
        same = "cosine" if exponent == 0 else "dot"
        return f"α={exponent:g} is {same} serving, not measured apart: gate {name.at(name.k, same)} instead"
    if name.k not in set(ks):
        return f"K={name.k} was not asked for (add {setting('ks')} {name.k})"
    if exponent is not None and exponent not in set(alphas):
        return f"α={exponent:g} was not asked for (add {setting('alphas')} {exponent:g})"
    return ""


def _why_clamped(name: PerK, report: Mapping[str, Any]) -> str:
    """Where a K past the catalogue (or past every served list, audited alone) was
    measured instead, and the gate that reads it; "" when it was not clamped."""
    n_items = (report.get("inputs") or {}).get("n_items")
    if isinstance(n_items, int) and 0 < n_items < name.k:  # retrieval files a clamped K under the catalogue's size
        return (f"K={name.k} exceeds the catalogue ({n_items} items) and was clamped to {n_items}: its figures are "
                f"filed under K={n_items} (gate {name.at(n_items)})")
    said = [str(w) for w in report.get("warnings") or () if str(w).startswith(f"cut-off K={name.k} exceeds")]
    filed = re.findall(r"K=(\d+)", said[0])[-1:] if said else []
    return f"{said[0]} (gate {name.at(int(filed[0]))})" if filed and int(filed[0]) != name.k else ""


def _why_no_served(name: PerK, cut: Mapping[str, Any]) -> str:
    """Why the served lists have no figure at K: none were given, or they are shorter."""
    served = [int(k) for k, figures in cut.items() if isinstance(figures, dict) and SERVED in figures]
    if not served:
        return f"no served lists were given (pass {setting('recommendations')})"
    return (f"the served lists are shorter than K={name.k}, which is not measured for them "
            f"(gate {name.at(max(served))})")


def _why_no_cut(name: PerK, section: Mapping[str, Any]) -> str:
    """Why a measured section has nothing at the gate's K."""
    if name.measure == "recall" and name.scoring is None:  # the index's recall against exact search
        return "recall@K measures an approximate index against exact search, and this run searched exactly"
    return f"the {name.stem} figures were not measured at K={name.k}"


def _why_no_ratio(name: PerK, cut: Mapping[str, Any], report: Mapping[str, Any]) -> str:
    """Why dot / cosine has no value: one of the two is missing, both are 0, or one is signed."""
    dot, cosine = (finite_figure((cut.get(s) or {}).get(name.measure)) for s in ("dot", "cosine"))
    if dot is None or cosine is None:
        return why_unmeasured(name.at(name.k, "dot" if dot is None else "cosine"), report)
    figures = f"{name.at(name.k, 'dot')} and {name.at(name.k, 'cosine')}"
    if dot < 0 or cosine < 0:
        return (f"a ratio of two signed figures is undefined (dot {dot:.4g}, cosine {cosine:.4g}: it does not say "
                f"which is larger); gate {figures} instead")
    return f"a ratio of two zeros is undefined (dot and cosine are both 0); gate {figures} instead"


def _why_null(measure: str, section: Mapping[str, Any], report: Mapping[str, Any]) -> str:
    """Why a measure that was measured has a null value: the report's reason, or the clause
    of its definition that says when it is null."""
    said = (report.get("not_measured") or {}).get(measure)
    if said:
        return f"{measure}: {said}"
    definition = str((section.get("definitions") or {}).get(measure) or "")
    clause = definition[definition.rfind("null"):].rstrip(". ") if "null" in definition else ""
    return f"{measure} is {clause}" if clause else f"{measure} has no value in this run (see the report's warnings)"


def _why_alone(name: str, report: Mapping[str, Any]) -> str:
    """Why a name without a K (a correlation, its CI, the trace's figures, an audit
    measure) has no value."""
    not_measured = report.get("not_measured") or {}
    fn = report.get("frequency_norm")
    if name.startswith("served_"):
        if (report.get("served_vectors") or {}).get("as_served") is False:
            return "the stored tables stand in for the vectors the model serves with, so what it serves is unknown"
        name = name.removeprefix("served_")
    if name in (*_CORRELATIONS, "spearman_ci_lo", "spearman_ci_hi"):
        if not fn:
            return "frequency–norm not measured: " + str(not_measured.get("frequency_norm") or "it needs a model's item table")
        if name.startswith("spearman_ci") and not fn.get("undefined_reason"):  # ρ itself defined: the CI's own reason
            if fn.get("ci_undefined_reason") or not fn.get("n_bootstrap"):
                return str(fn.get("ci_undefined_reason") or f"no CI without a bootstrap ({setting('bootstrap')} 0)")
        return str(fn.get("undefined_reason") or f"{name} is undefined here")
    if name.startswith("training_"):
        training = report.get("training")
        if not training:
            return f"no training trace (pass {setting('trace')})"
        if training.get("matches_model") is False:
            return "the training trace is of another model"
        return "the training trace holds no " + ("ρ" if name == "training_spearman" else "update angles (step records)")
    if name == "unsafe_globals":
        return f"the model was unpickled in full ({setting('trust_pickle')}), so the globals it named were not recorded"
    if name == "head_share_log":
        return f"measured for served lists audited alone ({setting('recommendations')} without a model)"
    return str(not_measured.get(name) or f"not measured: the audit measure {name} returned no value in this run")


def unmeasured_reasons(
    gates: Iterable[Gate], metrics: Mapping[str, float | None], report: Callable[[], Mapping[str, Any]],
) -> dict[Gate, str]:
    """:func:`why_unmeasured` for each gate whose metric has no value in ``metrics``, read
    from the JSON ``report()`` (made only when a gate needs it)."""
    missing = [gate for gate in gates if metrics.get(gate.metric) is None]
    made = report() if missing else {}
    return {gate: why_unmeasured(gate.metric, made) for gate in missing}

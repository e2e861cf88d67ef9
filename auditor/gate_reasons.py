"""Why a gate (``--fail-on``) has no value, the half of the gate policy that explains: the
names some run would produce though this one does not (:func:`well_formed`: another K or
α, so a gate on one fails as not measured, exit 1, where a typo is exit 2), what these
settings do not ask for (:func:`why_not_asked`, said before any audit runs), and why a
figure is missing from a JSON report (:func:`why_unmeasured`: a section not measured, a K
clamped to the catalogue, a ratio of two zeros or of signed figures, a CI without a
bootstrap), for ``check``, ``batch`` (each row's report) and ``diff`` (both reports).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from auditor.alpha import ALPHA_PREFIX, scoring_alpha
from auditor.errors import setting
from auditor.flat import CORRELATIONS, RATIO
from auditor.sections import (
    ACCURACY_MEASURES, BUILTIN_LIST_MEASURES, GROUP_LIST_MEASURES, SERVED, TIED_GROUPS, USER_GROUP_NAMES, WHO_PAYS,
    finite_figure,
)
from auditor.gate_names import PerK, compares_scorings, per_k_name
from auditor.gate_reasons_alone import why_alone
from auditor.wording import partly_saturated

Key = TypeVar("Key")


def why_unmeasured(name: str, report: Mapping[str, Any]) -> str:
    """Why the flat metric ``name`` has no value in the JSON ``report`` (an audit's
    ``to_dict()``): a K or α the run did not ask for, a K clamped to the catalogue, a
    section not measured (the report's own reason), a ratio that is undefined (two zeros,
    signed figures), a CI without a bootstrap, an undefined correlation. One clause, to
    follow the gate in an error message."""
    parsed = per_k_name(name, list_measures_of(report))
    return _why_per_k(parsed, report) if parsed is not None else why_alone(name, report)


def list_measures_of(report: Mapping[str, Any]) -> set[str]:
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
        return why_not_asked(name, (name.k,), ())
    part = "accuracy" if name.measure in ACCURACY_MEASURES and name.scoring is not None else "retrieval"
    section = report.get(part)
    if not section:
        return f"{part} not measured: " + str((report.get("not_measured") or {}).get(part) or "no such section in the report")
    clamped = _why_clamped(name, report)
    if clamped:
        return clamped
    # A report that does not record its settings asked for what it holds.
    unasked = why_not_asked(name, settings.get("ks") or (name.k,), settings.get("alphas") or [exponent or 0.0])
    if unasked:
        return unasked
    cut = (section.get("recall") if name.measure == "recall" and name.scoring is None else section.get("at")) or {}
    if str(name.k) not in cut:
        return _why_no_cut(name, section)
    figures = cut[str(name.k)]
    if name.scoring == RATIO:  # undefined (two zeros, signed figures) at any K, else void at a saturated one
        return _why_no_ratio(name, figures, report) or why_saturated(name, report) or f"{name.stem} was not measured"
    if why_saturated(name, report):  # an overlap
        return why_saturated(name, report)
    if isinstance(figures, dict) and (name.scoring or name.measure) not in figures:  # a scoring, or an overlap
        if name.scoring == SERVED or name.measure.startswith("overlap_served_"):
            return _why_no_served(name, cut)
        said = (report.get("not_measured") or {}).get(name.scoring or "")  # e.g. alpha_<a> under an approximate index
        if said:
            return f"{name.scoring} not measured: {said}"
        lists_only = (report.get("not_measured") or {}).get("dot_cosine")  # served lists audited without a model
        if lists_only and name.scoring != "popular":
            return f"{name.scoring or name.measure} not measured: {lists_only}"
        return f"{name.scoring or name.measure} was not measured at K={name.k}"
    return _why_group_null(name, section, report) or _why_null(name.measure, section, report)


def _alpha_of(name: PerK) -> float | None:
    """The norm-aware exponent of ``name``'s scoring (None: not an ``alpha_<α>`` scoring)."""
    return scoring_alpha(name.scoring) if name.scoring and name.scoring.startswith(ALPHA_PREFIX) else None


def why_not_asked(name: PerK | None, ks: Iterable[int], alphas: Iterable[float], *, named_ks: Iterable[float] = (),
                  named_alphas: Iterable[float] = (), whole: bool = True,
                  catalogue: Mapping[str, Any] | None = None) -> str:
    """Why the settings (cut-offs ``ks``, norm-aware ``alphas``) do not measure ``name``,
    and what would; "" when they ask for it. α 0 and 1 are not measured apart: they are
    cosine's and dot's own lists. ``-k`` and ``--alpha`` replace their defaults, so with
    ``whole`` the advice gives the whole list to pass: the values measured now, then
    ``named_ks``/``named_alphas`` (every value the run's gates name), so that following
    it drops no figure another gate, the verdict or the trade-off reads. ``whole=False``:
    the bare value (a batch says per row where it goes: cells keep their other values).
    With the ``catalogue`` read (:func:`why_past_catalogue`), a K past it is advised the K
    that measures it, never one the catalogue clamps."""
    if name is None:
        return "not measured with these settings"
    exponent = _alpha_of(name)
    if exponent in (0.0, 1.0):
        same = "cosine" if exponent == 0 else "dot"
        return f"α={exponent:g} is {same} serving, not measured apart: gate {name.at(name.k, same)} instead"
    ks = list(ks)
    if name.k not in set(ks):
        if catalogue is not None:  # a K the catalogue clamps names no K: nor does it join the list to pass
            named_ks = [k for k in named_ks if k <= catalogue["n_items"]]
            if name.k > catalogue["n_items"]:
                return why_past_catalogue(name, ks, named_ks, catalogue, whole)
        return f"K={name.k} was not asked for ({_add('ks', name.k, ks, named_ks, whole)})" + _served_length(name, whole)
    alphas = list(alphas)
    if exponent is not None and exponent not in set(alphas):
        return f"α={exponent:g} was not asked for ({_add('alphas', exponent, alphas, named_alphas, whole)})"
    return ""


def why_past_catalogue(name: PerK, ks: list[int], named_ks: Iterable[float], catalogue: Mapping[str, Any],
                       whole: bool) -> str:
    """The advice for a gate at a K not asked for and past the catalogue (``catalogue``: its
    ``n_items``, and for the asked Ks below it ``saturated`` and ``graded_up_to`` as the
    retrieval will record them): the K its figures are filed under, ``n_items``, or, for a
    comparison of scorings, which measures nothing there (every list holds every candidate), the
    largest asked K that grades, else ``graded_up_to``; said once the model is read, before
    anything is measured, so that following it runs (QA13 report F3)."""
    n_items, graded = catalogue["n_items"], catalogue.get("graded_up_to")
    said = f"K={name.k} exceeds the catalogue ({n_items} items), which clamps it to {n_items}"
    if not compares_scorings(name):
        added = "" if n_items in ks else f" ({_add('ks', n_items, ks, named_ks, whole)})"
        return f"{said}: gate {name.at(n_items)}{added}"
    said += f", where every list holds every candidate: {name.stem} measures nothing there"
    saturated = catalogue.get("saturated") or {}
    below = [k for k in sorted(ks, reverse=True) if k < n_items and not saturated.get(k, False)]
    if below:
        return f"{said}; gate {name.at(below[0])}"
    if isinstance(graded, int) and graded >= 1:
        return (f"{said}; gate it at K={graded}, the largest K that holds fewer than every candidate for most "
                f"queries with a candidate: {name.at(graded)} ({_add('ks', graded, ks, named_ks, whole)})")
    return (f"{said}; no K can tell the scorings apart: at K=1 already at least half the queries with a candidate "
            "have that one candidate left, so every scoring serves them the same item")


def _served_length(name: PerK, whole: bool) -> str:
    """What else a served figure at a K not asked for needs: lists that long, which only
    reading them tells (after the advice, so that following it is no surprise); "" for
    other figures, and for a batch row (``whole`` false: its advice says it per row)."""
    if not whole or not (name.scoring == SERVED or name.measure.startswith("overlap_served_")):
        return ""
    return (f"; the served lists are measured at K={name.k} only if the longest of them holds {name.k} items or "
            f"more: a K past every list is not measured, and the gate then names the K to gate instead")


def why_each_not_asked(names: Mapping[Key, PerK | None], ks: Iterable[int], alphas: Iterable[float],
                       catalogue: Mapping[str, Any] | None = None) -> dict[Key, str]:
    """:func:`why_not_asked` of each of ``names`` (a gate's per-K name by its key), each
    advice giving the whole list of cut-offs and α to pass: those measured now and every
    one that any of ``names`` asks for, so one command measures them all (with the
    ``catalogue`` read, none it clamps)."""
    named = named_values(names.values())
    return {key: why_not_asked(name, ks, alphas, named_ks=named["ks"], named_alphas=named["alphas"],
                               catalogue=catalogue) for key, name in names.items()}


def why_inputs_lack(name: str, given: Mapping[str, Any]) -> str:
    """Why the inputs and options a run was given (``given``: the run's settings by their
    config names, ``trace``, ``recommendations``, ``bootstrap``) never measure ``name``,
    said before any audit runs, as a K or α not asked for; "" when they may. What only the
    inputs' contents decide (a checkpoint may carry its own held-out split) is
    :func:`why_sections_unread`'s, once they are read."""
    if name.startswith("training_") and given.get("trace") is None:
        return f"no training trace (pass {setting('trace')})"
    if name.removeprefix("served_") in ("spearman_ci_lo", "spearman_ci_hi") and given.get("bootstrap") == 0:
        return f"no CI without a bootstrap ({setting('bootstrap')} 0)"
    if given.get("recommendations") is None:
        if name == "head_share_log":
            return why_alone(name, {})
        parsed = per_k_name(name)
        if parsed is not None and (parsed.scoring == SERVED or parsed.measure.startswith("overlap_served_")):
            return f"no served lists were given (pass {setting('recommendations')})"
    return ""


def section_of(name: str, list_measures: Iterable[str] | None = None) -> str | None:
    """The report section that holds the flat figure ``name``: ``accuracy``, ``retrieval``
    or ``frequency_norm`` (the served vectors' ``served_…`` figures and the rest: None)."""
    parsed = per_k_name(name, list_measures)
    if parsed is not None:
        return "accuracy" if parsed.measure in ACCURACY_MEASURES and parsed.scoring is not None else "retrieval"
    return "frequency_norm" if name in (*CORRELATIONS, "spearman_p", "spearman_ci_lo", "spearman_ci_hi") else None


def why_sections_unread(names: Iterable[str], not_measured: Mapping[str, str],
                        list_measures: Iterable[str] | None = None) -> dict[str, str]:
    """Once a model's inputs are read, before any figure is measured: why each of ``names``
    whose section those inputs leave unmeasured (``not_measured``, the inputs' reasons: no
    held-out interactions, ``--no-retrieval``, counts without the log) has no value."""
    report = {"not_measured": dict(not_measured)}
    return {name: why_unmeasured(name, report) for name in names
            if section_of(name, list_measures) in not_measured}


def named_values(names: Iterable[PerK | None]) -> dict[str, list[float]]:
    """The cut-offs (``ks``) and norm-aware α (``alphas``) that ``names`` (gates' per-K
    names) ask for: what a whole-list advice adds to the values measured now."""
    wanted = [name for name in names if name is not None]
    return {"ks": [float(n.k) for n in wanted], "alphas": [a for a in map(_alpha_of, wanted) if a is not None]}


def _add(option: str, value: float, measured: list[Any], named: Iterable[float], whole: bool) -> str:
    """The advice to measure ``value`` of ``option`` (``ks``, ``alphas``): "add -k 20", and
    with ``whole`` (and values measured now), the whole list, since the option replaces them."""
    said = f"add {setting(option)} {value:g}"
    rest = pass_them_all(option, value, measured, named) if whole else ""
    return f"{said}; {rest}" if rest else said


def pass_them_all(option: str, value: float, measured: Iterable[float], named: Iterable[float]) -> str:
    """"-k replaces the cut-offs measured now (10, 100), so pass them all: -k 10 -k 100 -k 20":
    the option replaces its values, so adding ``value`` means passing them with it and every
    value another gate names (``named``); "" when nothing is measured now (nothing to drop)."""
    measured = list(measured)
    if not measured:
        return ""
    wanted = list(dict.fromkeys([*measured, *(v for v in named if v not in (0.0, 1.0) or option == "ks"), value]))
    flag = setting(option)
    what = "cut-offs" if option == "ks" else "α"
    return (f"{flag} replaces the {what} measured now ({', '.join(f'{v:g}' for v in measured)}), so pass "
            "them all: " + " ".join(f"{flag} {v:g}" for v in wanted))


def _why_clamped(name: PerK, report: Mapping[str, Any]) -> str:
    """Where a K past the catalogue (or past every served list, audited alone) was
    measured instead, and the gate that reads it; "" when it was not clamped."""
    n_items = (report.get("inputs") or {}).get("n_items")
    if isinstance(n_items, int) and 0 < n_items < name.k:  # retrieval files a clamped K under the catalogue's size
        return (f"K={name.k} exceeds the catalogue ({n_items} items) and was clamped to {n_items}: its figures are "
                f"filed under K={n_items} ({_gate_at(name, n_items, report)})")
    said = [str(w) for w in report.get("warnings") or () if str(w).startswith(f"cut-off K={name.k} exceeds")]
    filed = re.findall(r"K=(\d+)", said[0])[-1:] if said else []
    return f"{said[0]} ({_gate_at(name, int(filed[0]), report)})" if filed and int(filed[0]) != name.k else ""


def why_saturated(name: PerK, report: Mapping[str, Any]) -> str:
    """Why a comparison of scorings (:func:`compares_scorings`) measures nothing at a K that
    ``retrieval.saturated`` records (:data:`~auditor.harm.SATURATED_SHARE`), and the K to gate
    instead; "" when it measures something."""
    retrieval = report.get("retrieval") or {}
    if not compares_scorings(name) or not (retrieval.get("saturated") or {}).get(str(name.k)):
        return ""
    held = partly_saturated(name.k, int((retrieval.get("n_saturated") or {}).get(str(name.k)) or 0),
                            *queries_of(retrieval))
    what = "the ratio" if name.scoring == RATIO else "the overlap"
    return f"{held}: dot and cosine serve the same items, {what} measures nothing; {_gate_below(name, name.k, report)}"


def queries_of(retrieval: Mapping[str, Any]) -> tuple[int, int]:
    """A JSON retrieval section's queries and, of them, those with no candidate left."""
    return int(retrieval.get("n_queries") or 0), int(retrieval.get("n_no_candidates") or 0)


def _gate_below(name: PerK, k: int, report: Mapping[str, Any]) -> str:
    """The gate at the largest measured K below ``k`` that is not saturated and where a ratio
    is defined (not 0 / 0, not signed: followed, it is measured), or the advice to measure a
    smaller one."""
    flags = (report.get("retrieval") or {}).get("saturated") or {}
    fine = sorted((int(kk) for kk, saturated in flags.items() if not saturated and int(kk) < k), reverse=True)
    undefined = ""
    for below in fine:
        at = PerK(name.stem, name.measure, name.scoring, below)
        section = ((report.get(section_of(at.at(below)) or "retrieval") or {}).get("at") or {}).get(str(below))
        why = _why_no_ratio(at, section or {}, report) if name.scoring == RATIO else ""
        if not why:
            return f"gate {name.at(below)}"
        undefined = undefined or f"; at K={below}, {why}"  # the largest K's reason and its gates
    return _unmeasured_below(name, k, report.get("retrieval") or {}) + undefined


def _unmeasured_below(name: PerK, k: int, retrieval: Mapping[str, Any]) -> str:
    """The advice where no measured K below ``k`` grades: the largest K that would
    (``retrieval.graded_up_to``) and its gate, or why no K can tell the scorings apart."""
    graded = retrieval.get("graded_up_to", -1)  # absent: a report from before the field
    if isinstance(graded, int) and 1 <= graded < k and str(graded) not in (retrieval.get("saturated") or {}):
        return (f"gate it at K={graded}, the largest K that holds fewer than every candidate for most queries with "
                f"a candidate: {name.at(graded)} (add {setting('ks')} {graded})")
    if graded is None or k <= 1:
        return ("no K can tell the scorings apart: at K=1 already at least half the queries with a candidate have "
                "that one candidate left, so every scoring serves them the same item")
    return (f"gate it at a K below {k} that holds fewer than every candidate for most queries (add "
            f"{setting('ks')} with it)")


def _gate_at(name: PerK, k: int, report: Mapping[str, Any]) -> str:
    """The gate that reads ``name``'s figures filed under ``k``, with the cut-off to add
    where the run did not ask for ``k``: gates are checked against the asked cut-offs
    before an audit runs, so ``…@6`` alone would be refused as not asked for. A comparison
    of scorings at a saturated ``k`` is advised a K below (:func:`why_saturated`)."""
    if why_saturated(PerK(name.stem, name.measure, name.scoring, k), report):
        return f"K={k} holds every candidate: {name.stem} measures nothing there; {_gate_below(name, k, report)}"
    settings = report.get("settings") or {}
    asked = settings.get("ks_asked", settings.get("ks"))  # lists alone record the measured Ks apart
    gate = f"gate {name.at(k)}"
    return gate if not isinstance(asked, list) or k in asked else f"{gate} and add {setting('ks')} {k}"


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
    """Why dot / cosine has no value: one of the two is missing, both are 0, or one is signed
    ("" when it has one)."""
    dot, cosine = (finite_figure((cut.get(s) or {}).get(name.measure)) for s in ("dot", "cosine"))
    if dot is None or cosine is None:
        return why_unmeasured(name.at(name.k, "dot" if dot is None else "cosine"), report)
    figures = f"{name.at(name.k, 'dot')} and {name.at(name.k, 'cosine')}"
    if dot < 0 or cosine < 0:
        return (f"a ratio of two signed figures is undefined (dot {dot:.4g}, cosine {cosine:.4g}: it does not say "
                f"which is larger); gate {figures} instead")
    if dot == 0 and cosine == 0:
        return f"a ratio of two zeros is undefined (dot and cosine are both 0); gate {figures} instead"
    return ""


def _why_group_null(name: PerK, section: Mapping[str, Any], report: Mapping[str, Any]) -> str:
    """Why a user group's figure is null although each user's training items are known: every
    user ties at one popular ratio (the report's own warning), the group is empty under the
    cut-offs, or none of its users has a list (or, for its NDCG, held-out items); "" otherwise."""
    group = next((g for g in USER_GROUP_NAMES if name.measure.endswith(f"_{g}")), None)
    if group is None or WHO_PAYS in (report.get("not_measured") or {}):
        return ""
    if group != "diverse":
        tied = [str(w) for w in report.get("warnings") or () if TIED_GROUPS in str(w)]
        if tied:
            return f"{name.measure}: {tied[0]}"
    definitions = section.get("definitions") or {}
    served = name.scoring in (None, "served") and "served_user_group_sizes" in definitions  # its own groups (QA13)
    drawn = str(definitions.get("served_user_group_sizes" if served else "user_group_sizes") or "")
    size = re.search(rf"([\d,]+) {group} \(", drawn)
    if size and int(size.group(1).replace(",", "")) == 0:
        remedy = (f"a larger {setting(group + '_fraction')}" if group != "diverse" else
                  f"a smaller {setting('niche_fraction')} or {setting('blockbuster_fraction')}")
        return (f"{name.measure}: the {group} group is empty under the cut-offs ({drawn.split(' (asked')[0]}): "
                f"{remedy} draws users into it")
    if size and name.measure.startswith("ndcg_"):
        return ""  # the definition's clause: without a holdout, or none of its users has held-out items
    if size:
        return (f"{name.measure}: none of the {size.group(1)} {group} users has a non-empty "
                f"{name.scoring or 'served'} list at K={name.k}")
    return ""


def _why_null(measure: str, section: Mapping[str, Any], report: Mapping[str, Any]) -> str:
    """Why a measure that was measured has a null value: the report's reason, or the clause
    of its definition that says when it is null."""
    definition = str((section.get("definitions") or {}).get(measure) or "")
    clause = definition[definition.rfind("null"):].rstrip(". ") if "null" in definition else ""
    not_measured = report.get("not_measured") or {}
    # A measure null without each user's training items: the audit's own reason why they are unknown.
    said = not_measured.get(measure) or (not_measured.get(WHO_PAYS) if "training items" in clause else None)
    if said:
        return f"{measure}: {said}"
    if clause:
        return f"{measure} is {clause}"
    # A plugin's list measure: its function returned None or a value that is not finite.
    return (f"{measure} has no value in this run: its function returned None, NaN or an infinite value there (null "
            "in the JSON report), which no gate compares")

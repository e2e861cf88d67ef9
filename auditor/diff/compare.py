"""Two JSON reports compared (docs/diff.md): every flat metric side by side with its
change and direction, the verdict's and conditions' changes, and the settings that make
figures incomparable.

Comparability, one rule per setting:

* ``schema_version`` (or a file that is not a popaudit report): **refused**, a
  :class:`~auditor.errors.ReportError` naming the file; nothing is compared.
* a figure one report has no value for (another K, no model, no holdout) is listed as only
  in the other report; one neither has a value for is listed as measured in neither.
* the verdict's severity graded by a model (dot vs cosine serving) and by served lists
  (served vs the training log's own share: ``verdict.graded_by`` ``served``, alone or beside
  a model) follow different rules: their change has no direction (``not comparable``), unless
  both reports took the worse of a model's and its served lists' grades; nor has it when either severity was graded at a K the
  other report did not measure (another ``-k`` list, or no retrieval at all: the same model
  would read "more bias" only because a new K was graded), or on a top-1% share a setting below flags, or
  when ``check`` could not assess either (``verdict.assessed`` false).
* cut-offs: a figure at a K that only one report measured is listed as only in that
  report (never compared); the shared Ks are compared.
* ``retrieval.popularity`` (interactions or distinct users): every figure that depends
  on it (:func:`~auditor.diff.directions.depends_on_popularity`) is **flagged**.
* ``retrieval.population`` source or seen-item handling, the served vectors
  (:mod:`auditor.diff.served`): every figure of the model's own lists is flagged (not those
  of served lists given to popaudit).
* ``retrieval.index`` (exact or approximate) and a catalogue size that moves a top-p% head
  cut (:mod:`auditor.diff.rules`): the figures of retrieved lists, and of the moved heads.
* the raw id → row mapping (:func:`~auditor.diff.id_mappings.id_mapping_flags`: by the ids'
  content where both reports record it): every figure of the model (item mapping) or of its
  lists (user mapping), and the verdict graded on them.
* a list measure's definition (``retrieval.definitions``): that measure's figures are flagged;
  a changed ``popularity_groups`` definition flags the user- and item-side measures.
* the held-out set (``accuracy.holdout``, ``n_holdout_interactions``, ``seen_excluded``, ``repeats``,
  ``popular_seen_excluded``) or the users evaluated (``accuracy.protocol``,
  :func:`~auditor.diff.rules.accuracy_flags`): every accuracy figure, and the group NDCG and PopREO, are flagged.

A flagged figure keeps both values but no change (``delta`` None), so no gate on its change
can pass silently. Differences that leave figures comparable (another model file or training log, more
queries, a catalogue size that moves no head cut) are listed as notes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from auditor.diff.directions import Direction, direction
from auditor.diff.figures import check_figures, check_tagged, unassessed_reason
from auditor.diff.comparability import Flag, SettingChange, comparability
from auditor.flat import FlatEntry, flat_entries, gateable_entries
from auditor.report_reader import report_as_read
from auditor.errors import ReportError
from auditor.result import CONDITION_IDS, CONDITION_NAMES, SEVERITIES, json_safe
from auditor.served_section import LISTS_ONLY_FORMAT

Status = Literal["compared", "only_base", "only_new", "incomparable", "not_measured"]
Basis = Literal["model", "served lists"]
"""What a report's severity judges: a model's dot vs cosine serving, or served lists against
the training log (``verdict.graded_by`` ``served``, or ``inputs.format``
:data:`~auditor.sections.LISTS_ONLY_FORMAT`): :func:`_basis`."""
VerdictDirection = Literal["less bias", "more bias", "unchanged", "not comparable"]
ROUNDOFF = 2.0**-23
"""float32's relative round-off: a base this small next to the new value is 0 (:func:`from_zero`)."""


@dataclass(frozen=True)
class MetricChange:
    """One flat metric in both reports."""

    name: str
    base: float | None
    new: float | None
    delta: float | None
    """new − base (None: either is missing, or the figure is not comparable)."""
    relative: float | None
    """delta / |base|: 0 when unchanged (0 → 0 included); None when the base is 0 or within
    float32 round-off of 0 (:func:`from_zero`) and the figure moved, or is infinite."""
    direction: Direction
    status: Status
    reason: str | None = None
    """Why the figure is not compared (the settings that differ)."""

    def to_dict(self) -> dict[str, Any]:
        """The fields, and ``infinite``: which of them are +∞ or −∞ (``"+inf"``, ``"-inf"``; a
        dot/cosine ratio over a cosine share of 0), since JSON writes them as null, which
        alone would read as not measured."""
        out = asdict(self)
        infinite = {name: "+inf" if value > 0 else "-inf" for name in ("base", "new", "delta", "relative")
                    if isinstance(value := out[name], float) and math.isinf(value)}
        return {**out, "infinite": infinite} if infinite else out


@dataclass(frozen=True)
class VerdictChange:
    """The verdicts of both reports; ``direction`` by severity (none < low < moderate < high),
    ``not comparable`` when the two severities judge different things (``Basis``) or either
    was graded at a K the other report did not measure (``reason`` says which)."""

    base_severity: str
    new_severity: str
    base_bias_detected: bool
    new_bias_detected: bool
    base_quoted_k: int | None
    new_quoted_k: int | None
    base_recommended: str | None
    new_recommended: str | None
    direction: VerdictDirection
    base_basis: Basis = "model"
    new_basis: Basis = "model"
    reason: str | None = None
    """Why the change has no direction (``not comparable``): the bases, or the cut-offs."""

    @property
    def changed(self) -> bool:
        return (self.base_severity, self.base_bias_detected, self.base_recommended, self.base_basis) != (
            self.new_severity, self.new_bias_detected, self.new_recommended, self.new_basis)  # fmt: skip


@dataclass(frozen=True)
class ConditionChange:
    """One condition's status in both reports (None: the report has no conditions)."""

    id: str
    name: str
    base: str | None
    new: str | None

    @property
    def changed(self) -> bool:
        return self.base != self.new


@dataclass(frozen=True)
class ReportDiff:
    """Two reports compared (module docstring)."""

    metrics: tuple[MetricChange, ...]
    verdict: VerdictChange
    conditions: tuple[ConditionChange, ...]
    settings: tuple[SettingChange, ...] = ()
    base_model: str = ""
    new_model: str = ""
    notes: tuple[str, ...] = field(default=())
    graded: MetricChange | None = None
    """The verdicts' ``severity_level`` (0 none … 3 high): what its gates read, last in the
    JSON's ``metrics`` and in the table of every figure; not in ``metrics`` (the verdict's
    change shows it, and the lead does not count it twice); incomparable where the verdicts are."""

    def metric(self, name: str) -> MetricChange:
        """The change of one flat metric (KeyError when neither report has it)."""
        for change in (*self.metrics, *([self.graded] if self.graded else [])):
            if change.name == name:
                return change
        raise KeyError(name)

    def flat(self) -> dict[str, float | None]:
        """What diff gates read: ``NAME`` (the new value), ``NAME.delta``, ``NAME.rel``."""
        out: dict[str, float | None] = {}
        for change in (*self.metrics, *([self.graded] if self.graded else [])):
            out[change.name] = change.new
            out[f"{change.name}.delta"] = change.delta
            out[f"{change.name}.rel"] = change.relative
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: an infinite figure (a dot/cosine ratio over a cosine share of 0) and
        its change are written as null, as every report writes non-finite numbers, and named
        in the metric's ``infinite`` (:meth:`MetricChange.to_dict`)."""
        return json_safe({
            "base_model": self.base_model,
            "new_model": self.new_model,
            "verdict": {**asdict(self.verdict), "changed": self.verdict.changed},
            "conditions": [{**asdict(c), "changed": c.changed} for c in self.conditions],
            "settings": [asdict(s) for s in self.settings],
            "notes": list(self.notes),
            # The verdict's grade last: what severity_level gates read (the lead does not count it).
            "metrics": [m.to_dict() for m in (*self.metrics, *([self.graded] if self.graded else []))],
        })


def diff_reports(base: dict[str, Any], new: dict[str, Any], *, base_name: str | None = None,
                 new_name: str | None = None) -> ReportDiff:
    """Compare two JSON reports (``AuditResult.to_dict()``, docs/report.md); ReportError
    when either is not a popaudit report or their schema versions differ. ``base_name`` and
    ``new_name`` (the files read) are named in those errors."""
    # Read once where they come in (report_reader.report_as_read): every reader below sees JSON's "10" keys and checked sections.
    base, new = _checked_report(base, "base", base_name), _checked_report(new, "new", new_name)
    if base["schema_version"] != new["schema_version"]:
        raise ReportError(f"the reports have schema versions {base['schema_version']} ({_side('base', base_name)}) "
                          f"and {new['schema_version']} ({_side('new', new_name)}): their figures are not "
                          "comparable; audit both with one popaudit version")  # fmt: skip
    try:
        return _compared(base, new)
    except (AttributeError, TypeError, ValueError, KeyError) as exc:  # a field of the wrong type
        files = "" if base_name is None or new_name is None else f" {base_name} and {new_name}"
        raise ReportError(f"the reports{files} carry popaudit's tag but not its structure "
                          f"({type(exc).__name__}: {exc}); compare reports written by popaudit check") from None


def _side(side: str, name: str | None) -> str:
    """A report in parentheses: ``base``, or ``base, before.json`` when the file is known."""
    return side if name is None else f"{side}, {name}"


def _compared(base: dict[str, Any], new: dict[str, Any]) -> ReportDiff:
    # Every name a gate accepts (gateable_entries): one a report lacks is listed, never a KeyError.
    entries_base, entries_new = gateable_entries(base), gateable_entries(new)
    flags, settings, notes = comparability(base, new)
    # The verdict's grade (severity_level) is compared as the verdict, with its own comparability.
    metrics = [
        _change(name, entries_base.get(name), entries_new.get(name), flags)
        for name in dict.fromkeys([*entries_base, *entries_new])
        if (entries_base.get(name) or entries_new[name]).section != "verdict"
    ]
    verdict = _verdict(base, new, flags)
    apart: list[Flag] = [] if verdict.reason is None else [(lambda _entry: True, f"the verdicts: {verdict.reason}")]
    graded = _change("severity_level", entries_base.get("severity_level"), entries_new.get("severity_level"), apart)
    if graded.status == "compared" and graded.delta:  # a higher grade is more bias, as the verdict's change says
        graded = replace(graded, direction="more bias" if graded.delta > 0 else "less bias")
    return ReportDiff(
        metrics=tuple(metrics),
        graded=graded,
        verdict=verdict,
        conditions=_conditions(base, new),
        settings=tuple(settings),
        base_model=str((base.get("inputs") or {}).get("model", "")),
        new_model=str((new.get("inputs") or {}).get("model", "")),
        notes=tuple(notes),
    )


def _checked_report(report: Any, side: str, name: str | None) -> dict[str, Any]:
    """``report`` as read (:func:`~auditor.report_reader.report_as_read`); ReportError unless it is a
    popaudit report, naming the file when known."""
    named = f"the {side} report" if name is None else f"{side} report {name}"
    if isinstance(report, (str, bytes, os.PathLike)):  # a file's path: not read here (QA11 diffapi F6)
        raise ReportError(f"diff_reports takes the reports as dicts (json.load of each file, or "
                          f"auditor.diff.read_report(PATH, {side!r})); {named} is a {type(report).__name__}: {report!r}")
    check_tagged(report, named)
    report = report_as_read(report, named)
    check_figures(report, named)
    return report


def figures_apart(base: dict[str, Any], new: dict[str, Any]) -> Callable[[FlatEntry], tuple[str, ...]]:
    """Why ``diff`` would not compare a figure (the :class:`FlatEntry` the returned function
    is given) between these two reports (each as read, or its
    :func:`~auditor.diff.comparability.comparability_view`): each reason in diff's words
    (``retrieval.index differs ("exact" vs "ivf")``), one item each, so a reader never splits
    text (a quoted definition may hold "; "); () where it compares it. The verdict's grade
    (``severity_level``) follows the verdicts' comparability. A report that records nothing
    (``{}``: no report) compares with any."""
    try:  # a report that is no popaudit report's structure records nothing diff reads
        flags = comparability(base, new)[0] if base and new else []
    except (AttributeError, TypeError, ValueError, KeyError):
        flags = []

    def apart(entry: FlatEntry) -> tuple[str, ...]:
        if entry.section != "verdict":
            return tuple(reason for affects, reason in flags if affects(entry))
        try:
            reason = _verdict(base, new, flags).reason if base and new else None
        except (AttributeError, TypeError, ValueError, KeyError):
            reason = None
        return () if reason is None else (f"the verdicts: {reason}",)

    return apart


def _change(name: str, base: FlatEntry | None, new: FlatEntry | None, flags: list[Flag]) -> MetricChange:
    entry = base or new
    assert entry is not None
    a, b = (base.value if base else None), (new.value if new else None)
    # A name without a value (a lists-only report's spearman: no model) is a figure the report does not have.
    if a is None or b is None:
        status: Status = "not_measured" if a is None and b is None else "only_new" if a is None else "only_base"
        return MetricChange(name, a, b, None, None, "unknown", status)
    reasons = [reason for affects, reason in flags if affects(entry)]
    if reasons:
        return MetricChange(name, a, b, None, None, "unknown", "incomparable", "; ".join(reasons))
    unchanged = a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)  # a float written and read back
    delta = 0.0 if unchanged else b - a  # ∞ on both sides is no change either (∞ − ∞ is NaN)
    # From 0, from round-off of 0 or from an infinite ratio, a change has no relative size;
    # no change (0 → 0 included) is 0 relative.
    relative = 0.0 if unchanged else None if from_zero(a, b) or not math.isfinite(a) else delta / abs(a)
    return MetricChange(name, a, b, delta, relative, direction(entry, delta), "compared")


def from_zero(base: float, new: float) -> bool:
    """Whether ``base`` is 0 for the change to ``new``: 0, or smaller than float32 round-off
    of ``new`` (|base| ≤ 2⁻²³·|new|, :data:`ROUNDOFF`), where a figure computed from float32
    vectors cannot tell it from 0. ``check`` now writes the log–log slope of norms equal to
    within rounding as exactly 0; reports of earlier versions carry it as noise (6e-10
    against 0.26 read +4·10¹⁰ %), which this still reads as 0."""
    return base == 0 or (math.isfinite(new) and abs(base) <= ROUNDOFF * abs(new))


def _basis(report: dict[str, Any]) -> Basis:
    """What the report's severity judges (:data:`Basis`), as the report says: served lists
    where they graded it (``verdict.graded_by`` ``served``: alone, or beside a model when they
    grade worse than its own serving, QA11 diffapi F2) or the report is a lists-only audit
    (earlier versions wrote ``graded_by`` ``model`` for one); else the model's own serving."""
    lists_only = (report.get("inputs") or {}).get("format") == LISTS_ONLY_FORMAT
    return "served lists" if lists_only or (report.get("verdict") or {}).get("graded_by") == "served" else "model"


def _worse_of_both(report: dict[str, Any]) -> bool:
    """Whether the severity is the worse of a model's own grade and that of the served lists
    beside it (docs/report.md, "Served lists beside a model grade too"): one rule, whichever
    of the two graded worse (``graded_by``)."""
    served = report.get("served")
    return (report.get("inputs") or {}).get("format") != LISTS_ONLY_FORMAT and isinstance(served, dict) and bool(served)


def _bases_apart(base: dict[str, Any], new: dict[str, Any]) -> str | None:
    """Why the two severities follow different rules (None: one rule): a model's own serving
    against served lists, unless both graded the worse of the two (:func:`_worse_of_both`)."""
    basis_base, basis_new = _basis(base), _basis(new)
    if basis_base == basis_new or (_worse_of_both(base) and _worse_of_both(new)):
        return None
    graded = {"model": "the model's own serving (dot against cosine)",
              "served lists": "the served lists (their top-1% share against the training log's)"}
    return f"the base's severity was graded by {graded[basis_base]}, the new one's by {graded[basis_new]}: two rules"


def _verdict(base: dict[str, Any], new: dict[str, Any], flags: list[Flag]) -> VerdictChange:
    vb, vn = base.get("verdict") or {}, new.get("verdict") or {}
    sb, sn = str(vb["severity"]), str(vn["severity"])  # one of SEVERITIES (figures.check_figures)
    step = SEVERITIES.index(sn) - SEVERITIES.index(sb)
    basis_base, basis_new = _basis(base), _basis(new)
    reason = unassessed_reason(vb, vn) or _bases_apart(base, new) or _graded_elsewhere(base, new) \
        or _graded_on_flagged(base, new, flags)
    moved: VerdictDirection = (
        "not comparable" if reason is not None
        else "unchanged" if step == 0 else "less bias" if step < 0 else "more bias"
    )  # fmt: skip
    return VerdictChange(
        base_severity=sb, new_severity=sn,
        base_bias_detected=bool(vb.get("bias_detected")), new_bias_detected=bool(vn.get("bias_detected")),
        base_quoted_k=vb.get("quoted_k"), new_quoted_k=vn.get("quoted_k"),
        base_recommended=(base.get("accuracy") or {}).get("recommended"),
        new_recommended=(new.get("accuracy") or {}).get("recommended"),
        direction=moved, base_basis=basis_base, new_basis=basis_new, reason=reason,
    )  # fmt: skip


def _graded_elsewhere(base: dict[str, Any], new: dict[str, Any]) -> str | None:
    """Why two severities of one basis are not comparable: either was graded (its quoted K)
    at a cut-off the other report did not measure, none at all included (a report without
    retrieval grades by the correlation alone); None when both graded Ks are shared."""
    cut_offs = {side: {int(k) for k in ((report.get("retrieval") or {}).get("at") or {})}
                for side, report in (("base", base), ("new", new))}  # fmt: skip
    for side, report, other in (("new", new, "base"), ("base", base, "new")):
        k = (report.get("verdict") or {}).get("quoted_k")  # an int or None (report_reader.report_as_read)
        if k is None or k in cut_offs[other]:
            continue
        if not cut_offs[other]:  # QA9 diff F2: the other severity is the correlation's alone, which caps at moderate
            return (f"the {side} report's severity was graded at K={k}, and the {other} measured no cut-off "
                    f"(no retrieval: its severity is graded by the norm–popularity correlation alone)")
        return (f"cut-offs differ, and the {side} report's severity was graded at K={k}, "
                f"which the {other} did not measure")
    return None


def _graded_on_flagged(base: dict[str, Any], new: dict[str, Any], flags: list[Flag]) -> str | None:
    """Why two severities of one basis are not comparable: the top-1% share either was graded
    on is a figure a differing setting makes incomparable (another popularity definition
    defines another top 1%, another item mapping another popularity per row), or, graded at
    no K, the correlation; None when it is compared."""
    for report in (new, base):
        scoring = "served" if _basis(report) == "served lists" else "dot"
        k = (report.get("verdict") or {}).get("quoted_k")
        name = f"head_share_1pct_{scoring}@{k}" if isinstance(k, int) else "spearman"
        entry = flat_entries(report).get(name)
        reasons = [] if entry is None else [reason for affects, reason in flags if affects(entry)]
        if reasons:
            return f"the severity is graded on {name}, which is not compared: {'; '.join(reasons)}"
    return None


def _conditions(base: dict[str, Any], new: dict[str, Any]) -> tuple[ConditionChange, ...]:
    cb, cn = base.get("conditions") or {}, new.get("conditions") or {}
    out = []
    for key in CONDITION_IDS:
        b, n = cb.get(key) or {}, cn.get(key) or {}
        name = b.get("name") or n.get("name") or CONDITION_NAMES[key]  # neither audited a model: the name anyway
        out.append(ConditionChange(key, str(name), b.get("status"), n.get("status")))
    return tuple(out)

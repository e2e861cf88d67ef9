"""Which figures of two reports are comparable (docs/diff.md, "Comparability"): the one
rule ``popaudit diff`` applies (:func:`comparability`) and that the batch summary applies
to two rows (:func:`auditor.diff.compare.figure_apart` on each row's
:func:`comparability_view`), so that both say "not comparable" for the same figures, with
the same reasons. The rules themselves are :mod:`auditor.diff.compare`'s module docstring."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from auditor.diff.directions import depends_on_popularity
from auditor.diff.id_mappings import id_mapping_flags
from auditor.diff.notes import Note, comparable_notes
from auditor.diff.rules import accuracy_flags, catalogue_flags, index_flags, resampling_flags, sample_flags
from auditor.diff.served import served_vector_flags
from auditor.flat import FlatEntry
from auditor.protocol import POPULATION, POPULATION_KEYS, SERVED_LISTS_APART, of_model_lists, of_served_lists
from auditor.protocol import report_population, served_lists_measured

GROUP_MEASURES = ("gap_delta_*", "miscalibration*", "ndcg_niche", "ndcg_diverse", "ndcg_blockbuster", "pop_rsp",
                  "pop_reo", "aclt")  # fmt: skip
HOLDOUT_MEASURES = ("ndcg_niche", "ndcg_diverse", "ndcg_blockbuster", "pop_reo")


@dataclass(frozen=True)
class SettingChange:
    """A setting that differs between the reports, and what that does to the comparison."""

    setting: str
    base: Any
    new: Any
    effect: str


VIEW_SECTIONS = ("schema_version", "tool", "inputs", "settings", "retrieval", "accuracy", "served", "served_vectors",
                 "verdict")
"""The sections of a report :func:`comparability` and the verdict's comparability read."""
_UNREAD_RETRIEVAL = ("exposure_shift", "user_groups")


def comparability_view(report: dict[str, Any]) -> dict[str, Any]:
    """The parts of a report (as read, :func:`auditor.report_reader.report_as_read`) that decide
    which of its figures compare with another report's: what a caller comparing many
    reports two at a time keeps of each (a fraction of it) instead of the whole report."""
    view = {name: report[name] for name in VIEW_SECTIONS if name in report}
    retrieval = view.get("retrieval")
    if isinstance(retrieval, dict):
        view["retrieval"] = {k: v for k, v in retrieval.items() if k not in _UNREAD_RETRIEVAL}
    return view


Flag = tuple[Callable[[FlatEntry], bool], str]


def comparability(base: dict[str, Any], new: dict[str, Any]) -> tuple[list[Flag], list[SettingChange], list[str]]:
    """The flags (which figures a differing setting makes incomparable, and why), the
    settings that differ and the notes in diff's words (module docstring)."""
    flags, settings, notes = _judged(base, new)
    return flags, settings, [note.text for note in notes]


def _judged(base: dict[str, Any], new: dict[str, Any]) -> tuple[list[Flag], list[SettingChange], list[Note]]:
    """:func:`comparability`, its notes in their parts (:class:`~auditor.diff.notes.Note`)."""
    flags: list[Flag] = []
    settings: list[SettingChange] = []

    def differs(setting: str, a: Any, b: Any, affects: Callable[[FlatEntry], bool], effect: str) -> None:
        if a != b:
            settings.append(SettingChange(setting, a, b, effect))
            shown = [json.dumps(v, ensure_ascii=False, default=str) for v in (a, b)]  # "exact", null: as reports spell them
            flags.append((affects, f"{setting} differs ({shown[0]} vs {shown[1]})"))

    rb, rn = base.get("retrieval") or {}, new.get("retrieval") or {}
    if rb and rn:
        differs("retrieval.popularity", rb.get("popularity"), rn.get("popularity"),
                lambda e: e.section in ("retrieval", "accuracy", "served") and depends_on_popularity(e),
                "figures that depend on the popularity definition are not compared")
        pb, pn = report_population(base), report_population(new)  # the one rule (auditor.protocol), batch's too
        for key in POPULATION_KEYS:
            differs(f"{POPULATION}.{key}", pb[key], pn[key], of_model_lists,
                    "figures of the model's own lists are not compared: they serve other queries or candidates")
        lb, ln = served_lists_measured(base), served_lists_measured(new)  # the served lists' population
        if lb is not None and ln is not None:
            differs(SERVED_LISTS_APART, lb, ln, of_served_lists, "figures of the served lists are not compared: they "
                    "are over other users' lists (beside a model, the served scoring's are the queried users')")
        index_flags(rb, rn, differs)
        sample_flags(rb, rn, differs)
        db, dn = rb.get("definitions") or {}, rn.get("definitions") or {}
        for name in sorted(_list_measures(rb) & _list_measures(rn)):
            differs(f"retrieval.definitions.{name}", db.get(name), dn.get(name),
                    lambda e, name=name: e.section == "retrieval" and e.measure == name,  # type: ignore[misc]
                    f"the figures of {name} are not compared: it is defined differently")
        differs("retrieval.definitions.popularity_groups", db.get("popularity_groups"), dn.get("popularity_groups"),
                lambda e: _named(e, GROUP_MEASURES), "the user- and item-side measures are not compared")
    id_mapping_flags(base, new, differs)
    resampling_flags(base, new, differs)
    served_vector_flags(base, new, differs)
    catalogue_flags(base, new, differs)
    ab, an = base.get("accuracy") or {}, new.get("accuracy") or {}
    if ab and an:
        accuracy_flags(ab, an, differs, _held_out)
    # A setting row already names both values (inputs.n_items where a head cut moved): no note too.
    notes = [n for n in comparable_notes(base, new, _held_out)
             if not any(n.text.startswith(f"{s.setting} differs") for s in settings)]
    return flags, settings, notes


def _held_out(entry: FlatEntry) -> bool:
    """A figure measured on the held-out set."""
    return entry.section == "accuracy" or _named(entry, HOLDOUT_MEASURES)


def comparability_notes(base: dict[str, Any], new: dict[str, Any]) -> tuple[Note, ...]:
    """Diff's notes for two reports (each as read, or its :func:`comparability_view`): the
    differences that leave the shared figures comparable (another training log, other cut-offs,
    ...), each in its parts and with the figures it bears on (:class:`~auditor.diff.notes.Note`,
    whose ``text`` is diff's words); () where a report records nothing or is no popaudit report's structure."""
    try:
        return tuple(_judged(base, new)[2]) if base and new else ()
    except (AttributeError, TypeError, ValueError, KeyError):
        return ()


def _named(entry: FlatEntry, patterns: tuple[str, ...]) -> bool:
    return any(fnmatchcase(entry.measure, p) for p in patterns)


def _list_measures(retrieval: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for cut in (retrieval.get("at") or {}).values():
        for measures in cut.values():
            if isinstance(measures, dict):
                names.update(measures)
    return names


__all__ = ["Flag", "GROUP_MEASURES", "HOLDOUT_MEASURES", "SettingChange", "comparability", "comparability_notes",
           "comparability_view"]

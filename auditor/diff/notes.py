"""Diff's notes: differences between two reports that leave the shared figures comparable
(cut-offs, a section only one report measured, another accuracy tolerance, and the inputs:
another model file, training popularity (a log, a count file given by ``--frequencies``, a
checkpoint's recorded counts: :func:`popularity_notes`), served-lists file, catalogue size,
log size, number of queries, one sampled report against one that queried every user
(:func:`sample_notes`), another declaration about training (:func:`declared_notes`)). Which
figures a difference makes incomparable is :mod:`auditor.diff.rules`'."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, NamedTuple

from auditor.diff.directions import depends_on_popularity
from auditor.diff.rules import _sample, _settings, one_held_out_set, retrieved, same_split_by_another_route
from auditor.flat import FlatEntry
from auditor.protocol import of_model_lists, of_served_lists

Concerns = Callable[[FlatEntry], bool]
"""The compared figures a note bears on (a :class:`FlatEntry` predicate, as a flag's)."""


def no_figure(entry: FlatEntry) -> bool:
    """A note on figures not compared (other cut-offs) or on no figure (the tolerance)."""
    return False


def every_figure(entry: FlatEntry) -> bool:
    """A note on what every figure is of (another model, another catalogue)."""
    return True


def against_popularity(entry: FlatEntry) -> bool:
    """A figure measured against the training popularity (every one but plain accuracy)."""
    return entry.section != "accuracy" or depends_on_popularity(entry)


class Note(NamedTuple):
    """One of diff's notes in its parts (diff says ``SUBJECT (VALUES): EFFECT``), and the
    compared figures it bears on (:attr:`concerns`), whose change is to be read with it:
    none where it is about figures not compared (other cut-offs, a section only one report
    measured) or about no figure (the accuracy tolerance, a declaration)."""

    subject: str
    values: str = ""
    effect: str = ""
    concerns: Concerns = no_figure

    @property
    def text(self) -> str:
        """The note in diff's words."""
        return self.subject + (f" ({self.values})" if self.values else "") + (f": {self.effect}" if self.effect else "")


def sample_notes(base: dict[str, Any], new: dict[str, Any]) -> list[Note]:
    """A note where one report sampled its queries and the other queried them all: the
    figures are compared, but the sampled ones may move with the sample, the verdict too."""
    samples = [_sample(r.get("retrieval") or {}) for r in (base, new)]
    if (samples[0] is None) == (samples[1] is None) or not all(r.get("retrieval") for r in (base, new)):
        return []
    side, drawn = ("base", samples[0]) if samples[0] is not None else ("new", samples[1])
    assert drawn is not None
    return [Note(f"only the {side} report sampled its queries",
                 f"{drawn.get('n_queries')} of {drawn.get('n_eligible')}, seed {drawn.get('seed')}",
                 "its figures of the model's own lists, and the verdict graded on them, may move with the sample",
                 of_model_lists)]


def comparable_notes(base: dict[str, Any], new: dict[str, Any], held_out: Concerns) -> list[Note]:
    """Differences that leave the shared figures comparable, said once: cut-offs, sections
    only one report measured, and the inputs (:func:`input_notes`); ``held_out``: the
    figures measured on the held-out set (what the holdout's notes bear on)."""
    rb, rn = base.get("retrieval") or {}, new.get("retrieval") or {}
    ab, an = base.get("accuracy") or {}, new.get("accuracy") or {}
    notes: list[Note] = []
    kb, kn = set((rb.get("at") or {})), set((rn.get("at") or {}))
    if kb != kn:
        notes.append(Note("cut-offs differ", f"base K = {_ks(kb)}, new K = {_ks(kn)}",
                          "figures at a K only one report measured are listed, not compared"))
    if bool(rb) != bool(rn):
        notes.append(Note(f"only the {'base' if rb else 'new'} report measured retrieval"))
    if bool(ab) != bool(an):
        notes.append(Note(f"only the {'base' if ab else 'new'} report measured accuracy (a holdout)"))
    if ab and an and ab.get("tolerance") != an.get("tolerance"):  # QA9 diff F7: the choice moved, not the model
        notes.append(Note("accuracy.tolerance differs", f"{_shown(ab.get('tolerance'))} vs {_shown(an.get('tolerance'))}",
                          "the recommended scoring is chosen under another accuracy tolerance (the share of dot's NDCG "
                          "it must keep), so it may change while no figure does"))
    if ab and an and same_split_by_another_route(ab, an):  # QA11 diffapi F5: compared, and said why
        notes.append(Note("accuracy.holdout differs", f"{_shown(ab.get('holdout'))} vs {_shown(an.get('holdout'))}",
                          f"one held-out set by its fingerprint, read by another route "
                          f"({_shown(ab.get('n_holdout_interactions'))} vs {_shown(an.get('n_holdout_interactions'))} "
                          "held-out rows); its pairs hold no repeat of a training pair, so the accuracy figures are "
                          "compared", held_out))
    elif ab and an and one_held_out_set(ab, an) and ab.get("n_holdout_interactions") != an.get("n_holdout_interactions"):
        notes.append(Note("accuracy.n_holdout_interactions differs",
                          f"{_shown(ab.get('n_holdout_interactions'))} vs {_shown(an.get('n_holdout_interactions'))}",
                          "one held-out set by its fingerprint, read from rows that differ only in repeated pairs or rows "
                          "left out (an empty id, an item without a table row); the evaluation counts each distinct pair "
                          "once, so the accuracy figures are compared", held_out))
    return notes + input_notes(base, new)


def _ks(keys: set[str]) -> str:
    return ", ".join(sorted(keys, key=int)) or "none"


def input_notes(base: dict[str, Any], new: dict[str, Any]) -> list[Note]:
    """The inputs that differ but leave the figures comparable, one note each."""
    notes = _file_notes(base, new, (("inputs", "model", "another model", every_figure),))
    notes += popularity_notes(base, new)
    notes += _file_notes(base, new, (
        ("served", "source", "other served lists", of_served_lists),
        ("inputs", "n_items", "another catalogue size", every_figure),
        ("inputs", "n_interactions", "another training log size", against_popularity),
        ("retrieval", "n_queries", "another number of queries", of_model_lists),
    ))  # fmt: skip
    notes += sample_notes(base, new) + declared_notes(base, new)
    rb, rn = base.get("retrieval") or {}, new.get("retrieval") or {}
    if rb.get("index") == rn.get("index") and rb.get("recall") != rn.get("recall"):
        notes.append(Note("retrieval.recall differs", f"{rb.get('recall')} vs {rn.get('recall')}",
                          "the same approximate index found other shares of the exact lists", retrieved))
    return notes


def declared_notes(base: dict[str, Any], new: dict[str, Any]) -> list[Note]:
    """A note where what the user declared about training differs (``settings.declared``:
    the optimizer, momentum, weight decay, learning rate, loss; QA11 diffapi F4): the
    conditions that read a declaration (C1, C4, C5) may change with it, not with the model,
    and the figures are compared. A report that records none (an older one) says nothing."""
    db, dn = (_settings(r).get("declared") for r in (base, new))
    if not isinstance(db, dict) or not isinstance(dn, dict) or db == dn:
        return []
    shown = [json.dumps(d, ensure_ascii=False, default=str) if d else "none declared" for d in (db, dn)]
    moved = ", ".join(sorted(k for k in {*db, *dn} if db.get(k) != dn.get(k)))
    return [Note("settings.declared differs", f"{shown[0]} vs {shown[1]}: {moved}",
                 "what was declared about the model's training changed, so the conditions that read it (C1 plain SGD, "
                 "C4 cosine-based loss, C5 sufficiently large learning rate) may change with the declaration, "
                 "not with the model")]


_COUNTED_ELSEWHERE = re.compile(r".*\(counted elsewhere: (.+)\)")
_RECORDED = "(as recorded in the checkpoint)"
_MAY_DIFFER = "popularity, the reference of most figures, may differ"


def popularity_source(report: dict[str, Any]) -> tuple[str, str] | None:
    """Where the report's training popularity came from: ("inputs.interactions", log),
    ("settings.frequencies", count file) or ("the counts recorded in", checkpoint); None if unsaid.
    A lists-only report files either file as ``inputs.interactions``; its ``frequency`` says which."""
    inputs, settings = report.get("inputs") or {}, report.get("settings") or {}
    said = str(settings.get("frequency") or "")
    elsewhere = _COUNTED_ELSEWHERE.fullmatch(said)
    counts = settings.get("frequencies") or (elsewhere.group(1) if elsewhere else None)
    if counts:
        return "settings.frequencies", str(counts)
    if inputs.get("interactions"):
        return "inputs.interactions", str(inputs["interactions"])
    if said.endswith(_RECORDED) and inputs.get("model"):
        return "the counts recorded in", str(inputs["model"])
    return None


def popularity_notes(base: dict[str, Any], new: dict[str, Any]) -> list[Note]:
    """A note where both reports read a training popularity from different sources (a log,
    a count file, a checkpoint's counts): every popularity-dependent figure is measured
    against it. One report without a source says nothing to compare."""
    sb, sn = popularity_source(base), popularity_source(new)
    if sb is None or sn is None or sb == sn:
        return []
    (kb, fb), (kn, fn) = sb, sn
    if kb == kn == "inputs.interactions":
        return [Note("inputs.interactions differs", f"{fb} vs {fn}", f"another training log: {_MAY_DIFFER}",
                     against_popularity)]
    if kb == kn == "settings.frequencies":
        return [Note("settings.frequencies differs", f"{fb} vs {fn}", f"other training counts: {_MAY_DIFFER}",
                     against_popularity)]
    if kb == kn:
        return []  # both counts recorded in a checkpoint: the inputs.model note says the checkpoints differ
    return [Note("training popularity differs", f"{kb} {fb} vs {kn} {fn}", f"counted from another source: {_MAY_DIFFER}",
                 against_popularity)]


def _file_notes(base: dict[str, Any], new: dict[str, Any],
                keys: tuple[tuple[str, str, str, Concerns], ...]) -> list[Note]:
    """A note for each (section, key, what another value is, what it bears on) that differs."""
    notes: list[Note] = []
    for section, key, what, concerns in keys:
        a, b = ((r.get(section) or {}).get(key) for r in (base, new))
        # A file only one report read (a model, served lists): its figures are that report's alone, listed so.
        if a != b and (a not in (None, "") and b not in (None, "") or not isinstance(a or b, str)):
            notes.append(Note(f"{section}.{key} differs", f"{_shown(a)} vs {_shown(b)}", what, concerns))
    return notes


def _shown(value: Any) -> str:
    return "none" if value in (None, "") else str(value)

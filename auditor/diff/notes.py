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
from typing import Any

from auditor.diff.rules import _sample, _settings, one_held_out_set, same_split_by_another_route


def sample_notes(base: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """A note where one report sampled its queries and the other queried them all: the
    figures are compared, but the sampled ones may move with the sample, the verdict too."""
    samples = [_sample(r.get("retrieval") or {}) for r in (base, new)]
    if (samples[0] is None) == (samples[1] is None) or not all(r.get("retrieval") for r in (base, new)):
        return []
    side, drawn = ("base", samples[0]) if samples[0] is not None else ("new", samples[1])
    assert drawn is not None
    return [f"only the {side} report sampled its queries ({drawn.get('n_queries')} of {drawn.get('n_eligible')}, "
            f"seed {drawn.get('seed')}): its figures of the model's own lists, and the verdict graded on them, "
            "may move with the sample"]


def comparable_notes(base: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Differences that leave the shared figures comparable, said once: cut-offs, sections
    only one report measured, and the inputs (:func:`input_notes`)."""
    rb, rn = base.get("retrieval") or {}, new.get("retrieval") or {}
    ab, an = base.get("accuracy") or {}, new.get("accuracy") or {}
    notes: list[str] = []
    kb, kn = set((rb.get("at") or {})), set((rn.get("at") or {}))
    if kb != kn:
        notes.append(f"cut-offs differ (base K = {_ks(kb)}, new K = {_ks(kn)}): figures at a K only one report "
                     f"measured are listed, not compared")  # fmt: skip
    if bool(rb) != bool(rn):
        notes.append(f"only the {'base' if rb else 'new'} report measured retrieval")
    if bool(ab) != bool(an):
        notes.append(f"only the {'base' if ab else 'new'} report measured accuracy (a holdout)")
    if ab and an and ab.get("tolerance") != an.get("tolerance"):  # QA9 diff F7: the choice moved, not the model
        notes.append(f"accuracy.tolerance differs ({_shown(ab.get('tolerance'))} vs {_shown(an.get('tolerance'))}): "
                     "the recommended scoring is chosen under another accuracy tolerance (the share of dot's NDCG "
                     "it must keep), so it may change while no figure does")
    if ab and an and same_split_by_another_route(ab, an):  # QA11 diffapi F5: compared, and said why
        notes.append(f"accuracy.holdout differs ({_shown(ab.get('holdout'))} vs {_shown(an.get('holdout'))}): one held-out "
                     f"set by its fingerprint, read by another route ({_shown(ab.get('n_holdout_interactions'))} vs "
                     f"{_shown(an.get('n_holdout_interactions'))} held-out rows); its pairs hold no repeat of a training "
                     "pair, so the accuracy figures are compared")
    elif ab and an and one_held_out_set(ab, an) and ab.get("n_holdout_interactions") != an.get("n_holdout_interactions"):
        notes.append(f"accuracy.n_holdout_interactions differs ({_shown(ab.get('n_holdout_interactions'))} vs "
                     f"{_shown(an.get('n_holdout_interactions'))}): one held-out set by its fingerprint, read from "
                     "rows that differ only in repeated pairs or rows left out (an empty id, an item without a table "
                     "row); the evaluation counts each distinct pair once, so the accuracy figures are compared")
    return notes + input_notes(base, new)


def _ks(keys: set[str]) -> str:
    return ", ".join(sorted(keys, key=int)) or "none"


def input_notes(base: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The inputs that differ but leave the figures comparable, one note each."""
    notes = _file_notes(base, new, (("inputs", "model", "another model"),))
    notes += popularity_notes(base, new)
    notes += _file_notes(base, new, (
        ("served", "source", "other served lists"),
        ("inputs", "n_items", "another catalogue size"),
        ("inputs", "n_interactions", "another training log size"),
        ("retrieval", "n_queries", "another number of queries"),
    ))  # fmt: skip
    notes += sample_notes(base, new) + declared_notes(base, new)
    rb, rn = base.get("retrieval") or {}, new.get("retrieval") or {}
    if rb.get("index") == rn.get("index") and rb.get("recall") != rn.get("recall"):
        notes.append(f"retrieval.recall differs ({rb.get('recall')} vs {rn.get('recall')}): the same approximate "
                     "index found other shares of the exact lists")
    return notes


def declared_notes(base: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """A note where what the user declared about training differs (``settings.declared``:
    the optimizer, momentum, weight decay, learning rate, loss; QA11 diffapi F4): the
    conditions that read a declaration (C1, C4, C5) may change with it, not with the model,
    and the figures are compared. A report that records none (an older one) says nothing."""
    db, dn = (_settings(r).get("declared") for r in (base, new))
    if not isinstance(db, dict) or not isinstance(dn, dict) or db == dn:
        return []
    shown = [json.dumps(d, ensure_ascii=False, default=str) if d else "none declared" for d in (db, dn)]
    moved = ", ".join(sorted(k for k in {*db, *dn} if db.get(k) != dn.get(k)))
    return [f"settings.declared differs ({shown[0]} vs {shown[1]}: {moved}): what was declared about the model's "
            "training changed, so the conditions that read it (C1 plain SGD, C4 cosine-based loss, C5 sufficiently large "
            "learning rate) may change with the declaration, "
            "not with the model"]


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


def popularity_notes(base: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """A note where both reports read a training popularity from different sources (a log,
    a count file, a checkpoint's counts): every popularity-dependent figure is measured
    against it. One report without a source says nothing to compare."""
    sb, sn = popularity_source(base), popularity_source(new)
    if sb is None or sn is None or sb == sn:
        return []
    (kb, fb), (kn, fn) = sb, sn
    if kb == kn == "inputs.interactions":
        return [f"inputs.interactions differs ({fb} vs {fn}): another training log: {_MAY_DIFFER}"]
    if kb == kn == "settings.frequencies":
        return [f"settings.frequencies differs ({fb} vs {fn}): other training counts: {_MAY_DIFFER}"]
    if kb == kn:
        return []  # both counts recorded in a checkpoint: the inputs.model note says the checkpoints differ
    return [f"training popularity differs ({kb} {fb} vs {kn} {fn}): counted from another source: {_MAY_DIFFER}"]


def _file_notes(base: dict[str, Any], new: dict[str, Any], keys: tuple[tuple[str, str, str], ...]) -> list[str]:
    notes: list[str] = []
    for section, key, what in keys:
        a, b = ((r.get(section) or {}).get(key) for r in (base, new))
        # A file only one report read (a model, served lists): its figures are that report's alone, listed so.
        if a != b and (a not in (None, "") and b not in (None, "") or not isinstance(a or b, str)):
            notes.append(f"{section}.{key} differs ({_shown(a)} vs {_shown(b)}): {what}")
    return notes


def _shown(value: Any) -> str:
    return "none" if value in (None, "") else str(value)

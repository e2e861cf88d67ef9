"""Comparability of the raw id → row mappings (``inputs.item_id_mapping``, ``user_id_mapping``):
another item mapping gives every item row another popularity and every query other seen
items, so every figure of the model is flagged; another user mapping gives every query
another user's seen items, so the figures of the model's own lists are flagged.

A mapping is compared by its content, ``inputs.item_id_fingerprint`` / ``user_id_fingerprint``
(the ids in row order, hashed: docs/report.md), where both reports record one: the same ids
under two file names are one mapping, a file rewritten in place with other ids another (QA11
diffapi N2), and rows taken as ids (the ids 0..n−1, or N..n−1+N by ``--id-offset N``) the same
mapping as an id file listing those ids in order (QA12 scale N2). Rows as ids by one rule on
both sides are one mapping whatever the tables' sizes (row = id − N for every id: the
catalogue's size is diff's ``inputs.n_items``), and so is an id list holding N, N+1, ... in
row order, whose sentence says it is that rule (QA12 scale N3). Else, for reports written before the
fingerprint, the recorded rule is compared, not its spelling (:func:`id_mapping`)."""

from __future__ import annotations

import re
from typing import Any

from auditor.diff.rules import Differs, retrieved
from auditor.flat import FlatEntry
from auditor.served_section import LISTS_ONLY_FORMAT

ID_MAPPINGS = {
    "item": ("every figure of the model is not compared: another item mapping gives every item row another "
             "popularity, and every query other seen items"),
    "user": ("figures of the model's own lists are not compared: another user mapping gives every query another "
             "user's seen items"),
}
"""What another raw id → row mapping (``inputs.item_id_mapping``, ``user_id_mapping``) does."""
_CLI_FLAG = re.compile(r"--([a-z]+(?:-[a-z]+)+)")
_ROWS_AS_IDS = re.compile(r"(item|user) table row = raw \1 id(?: − 0 \(id_offset 0\)| \(assumed: [^)]*\))")
"""Rows taken as ids, assumed or by an offset of 0 (row = id − 0): one rule (QA11 diffapi N3)."""
_BY_OFFSET = re.compile(r"(item|user) table row = raw \1 id(?: − -?\d+ \(id_offset -?\d+\))?")
"""A rule mapping every id alike whatever the table's size: rows as ids, or by an offset."""
_IN_ORDER = re.compile(r" \(the rows audited hold the ids (?P<first>\d+)\.\.\d+ in order: row = raw (?:item|user) id − "
                       r"(?P=first)\)$")
"""An id list (a file, a checkpoint's) holding N..last in row order (auditor.idmap.IN_ORDER_CLAUSE):
the rule row = id − N, one with rows taken as ids by that offset whatever the sizes (QA12 scale N3)."""


def id_mapping(report: dict[str, Any], what: str) -> str | None:
    """The report's ``what`` (item, user) id → row mapping as one comparable rule: its
    recorded description with the CLI's and the API's spellings of a setting made one
    (``--item-ids`` is ``item_ids``), rows as ids one rule whether assumed, told
    (``assume_row_ids``: it only lifts the check) or given as ``--id-offset 0``, and the model
    file and log named by role (ids stored in a checkpoint are one rule whichever checkpoint
    stored them). None: unrecorded, or a lists-only report (no table rows: its served lists
    are read by raw id)."""
    inputs = report.get("inputs") or {}
    said = inputs.get(f"{what}_id_mapping")
    if inputs.get("format") == LISTS_ONLY_FORMAT:
        return None
    if not isinstance(said, str) or not said:
        return None if inputs.get(f"{what}_ids") is None else f"{what} rows mapped through {inputs[f'{what}_ids']}"
    said = _CLI_FLAG.sub(lambda m: m.group(1).replace("-", "_"), said).replace(", assume_row_ids", "")
    if (in_order := _IN_ORDER.search(said)) is not None:  # ids N..last in row order: row = id − N, an offset rule
        said = f"{what} table row = raw {what} id − {in_order['first']} (id_offset {in_order['first']})"
    if _ROWS_AS_IDS.fullmatch(said):
        return f"{what} table row = raw {what} id"
    for path, role in ((inputs.get("model"), "the model file"), (inputs.get("interactions"), "the training log")):
        if isinstance(path, str) and path:
            said = said.replace(path, role)
    return said


def id_fingerprint(report: dict[str, Any], what: str) -> str | None:
    """The report's ``what`` mapping by content (``inputs.<what>_id_fingerprint``); None where
    the report was written before it (or, before QA12 scale N2, rows were taken as ids)."""
    fingerprint = (report.get("inputs") or {}).get(f"{what}_id_fingerprint")
    return fingerprint if isinstance(fingerprint, str) else None


def _model_figure(entry: FlatEntry) -> bool:
    """A figure measured on the model's table rows: its correlations with popularity, its
    item biases, its training trace and its own lists (their accuracy included)."""
    return entry.section in ("frequency_norm", "measures", "training") or retrieved(entry)


def id_mapping_flags(base: dict[str, Any], new: dict[str, Any], differs: Differs) -> None:
    """Flag the figures another id mapping moves (QA11 diffapi F1: one model and log read with
    rows as ids, then through ``--item-ids``, moved spearman 0.978 → 0.035 and read "less
    bias", "settings agree"): an item mapping every figure of the model, a user mapping its
    lists. One offset rule on both sides is one mapping; else two mappings compare by content
    where both fingerprints are recorded; else rules that cannot be shown to agree (reports
    written before the fingerprint: a file against rows as ids, two files) differ: popaudit
    cannot know they map alike."""
    for what, affects in (("item", _model_figure), ("user", retrieved)):
        mb, mn = id_mapping(base, what), id_mapping(new, what)
        if mb is None or mn is None:
            continue
        fb, fn = id_fingerprint(base, what), id_fingerprint(new, what)
        by_content = fb is not None and fn is not None  # the ids themselves, whichever file, checkpoint or rule gave them
        if (mb == mn and _BY_OFFSET.fullmatch(mb)) or (fb == fn if by_content else mb == mn):
            continue  # one mapping (row = id − N on both sides, whichever ids each table holds)
        if mb == mn:  # one wording over other ids (a file rewritten in place)
            differs(f"inputs.{what}_id_fingerprint", fb, fn, affects, ID_MAPPINGS[what])
        else:  # shown as recorded (the rules say more than two digests)
            said = [(r.get("inputs") or {}).get(f"{what}_id_mapping") or mapped for r, mapped in ((base, mb), (new, mn))]
            differs(f"inputs.{what}_id_mapping", said[0], said[1], affects, ID_MAPPINGS[what])

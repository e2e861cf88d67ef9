"""Whether the ids of served lists line up with the training log's (docs/served-lists.md,
"Ids that do not line up"): one policy for both ways in.

A file whose ids are spelled otherwise than the log's (``i460`` against ``460``, ``u0``
against ``0``) still reads: every exposure figure would then describe the spelling (no
served item is popular, no served user has training items), not the service. So:

* **items, lists alone**: refused when no listed item is an item of the log, or when more
  than :data:`UNMATCHED_SLOTS_FLOOR` of the served slots name items the log never saw;
  below that the share is a warning (the reader's, listed first). Beside a model, whose
  rows know items too, when more than that share name items neither the log nor the
  model's item table knows (the grade would count them by raw id).
* **users beside a model**: refused when no user of the lists is a user of the log (no
  list lines up with a queried user).
* **users, lists alone**: the lists are measured (their exposure needs no user), but
  when no served user is a user of the log, the figures that need each user's training
  items are said not to be measured (:func:`unmatched_users_reason`) and the most-popular
  list keeps training items.

Every refusal names the file, the column and one id of each side.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from auditor.errors import IdMappingError
from auditor.values import lookup_rows

UNMATCHED_SLOTS_FLOOR = 0.5
"""Without a model, the largest share of served slots (rows) naming items the training log
never saw that is measured; beyond it the audit refuses: items new since training are a
minority of a real service's slots, and a majority means the ids do not line up."""


def spelled_id(value: object) -> str:
    """One id as a message shows it: text quoted (so ``'1'`` and ``1`` differ), at most 40 characters."""
    if isinstance(value, (str, bytes)):
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        return repr(text[:40] + ("…" if len(text) > 40 else ""))
    return str(value.item() if isinstance(value, np.generic) else value)


def _sides(listed: object, logged: object) -> str:
    return f"the lists spell them as {spelled_id(listed)}, the log as {spelled_id(logged)}"


def refuse_unmatched_items(path: Path, column: str, item_ids: np.ndarray, item_codes: np.ndarray,
                           log_items: np.ndarray | None, code_rows: np.ndarray | None = None) -> None:
    """IdMappingError when no listed item (``item_ids``, each row's code in ``item_codes``) is an
    item of the training log, or when more than :data:`UNMATCHED_SLOTS_FLOOR` of the served slots
    name items it never saw. Beside a model (``code_rows``: each item's table row, -1: none) an item
    with a row is known too: the lists' grade counts by raw id the items neither knows (QA "Served
    N3"), so a majority of them is refused as lists alone refuse it, never graded."""
    if log_items is None or not len(log_items) or not item_codes.size:
        return
    logged = np.asarray(log_items)
    known = lookup_rows(item_ids, logged) >= 0
    if code_rows is not None:
        known |= np.asarray(code_rows) >= 0
    unmatched = ~known[item_codes]
    share = float(unmatched.mean())
    if share <= UNMATCHED_SLOTS_FLOOR:
        return
    where, sides = f"{path} (column {column!r})", _sides(item_ids[int(np.argmin(known))], logged[0])
    if code_rows is not None:
        raise IdMappingError(
            f"{int(unmatched.sum()):,} of the {unmatched.size:,} served slots in {where} ({share:.1%}) name items "
            f"neither the training log nor the model's item table knows, more than the {UNMATCHED_SLOTS_FLOOR:.0%} an "
            f"audit measures: the ids evidently do not line up ({sides}); give lists whose item ids are the training "
            "log's and the model's"
        )
    if not known.any():
        raise IdMappingError(
            f"none of the {item_ids.size:,} items in {where} is an item of the training log ({logged.size:,} items): "
            f"the ids evidently do not match ({sides}); give lists whose item ids are the training log's"
        )
    raise IdMappingError(
        f"{int(unmatched.sum()):,} of the {unmatched.size:,} served slots in {where} ({share:.1%}) name items the "
        f"training log never saw, more than the {UNMATCHED_SLOTS_FLOOR:.0%} an audit measures: the ids evidently do "
        f"not line up ({sides}); give lists whose item ids are the training log's"
    )


def refuse_unmatched_users(
    source: Path, column: str, user_ids: np.ndarray, log_users: np.ndarray | None, *, untrained_scored: bool = False
) -> None:
    """Beside a model: IdMappingError when no user of the lists is a user of the training
    log: no list lines up with a queried user, and measuring the lists would measure the
    failed join (empty lists, a coverage of 0), not the service. ``untrained_scored``:
    RecBole's route, whose test users who never trained have lists scored for accuracy
    alone, so lists of those users only are no id mismatch, only nothing to expose."""
    if log_users is None or not len(log_users) or (lookup_rows(user_ids, np.asarray(log_users)) >= 0).any():
        return
    if untrained_scored:
        raise IdMappingError(
            f"none of the {user_ids.size:,} users in {source} (column {column!r}) is a trained user of RecBole's split: "
            "the lists of its test users who never trained count in accuracy alone, so no exposure figure would "
            "measure the service; give the trained users' lists too (or, if these users are no test users, lists "
            f"whose user ids are the training log's: {_sides(user_ids[0], log_users[0])})"
        )
    raise IdMappingError(
        f"none of the {user_ids.size:,} users in {source} (column {column!r}) is a user of the training log, so no "
        f"served list lines up with a queried user: the ids evidently do not match ({_sides(user_ids[0], log_users[0])})"
        "; give lists whose user ids are the training log's"
    )


def unmatched_users_reason(source: Path, column: str, user_ids: np.ndarray, log_users: np.ndarray | None) -> str | None:
    """Lists alone: why the figures that need each served user's training items are not
    measured when no user of the lists is a user of the log (None: some are, or the log
    names no users)."""
    if log_users is None or not len(log_users) or (lookup_rows(user_ids, np.asarray(log_users)) >= 0).any():
        return None
    return (f"none of the {user_ids.size:,} users in {source} (column {column!r}) is a user of the training log "
            f"({_sides(user_ids[0], log_users[0])}), so no served user's training items are known: the figures per "
            "user group and the user- and item-side measures are not measured, and the most-popular list keeps "
            "training items")

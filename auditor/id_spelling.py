"""How raw ids can be spelled apart, and what to tell a user whose ids match nothing:
decimals (``3.0``) beside integers, zero padding (``007``) beside plain integers, and the
advice never to pass an id-file option that was passed (then its file is what to rewrite)."""

from __future__ import annotations

import numpy as np

from auditor.errors import setting


def whole_decimals(ids: np.ndarray) -> bool:
    """True when every text id is a whole decimal ("3.0", "-12.00"): an integer column
    written as floats (pandas does so for a column holding missing values). Such ids are
    text (:mod:`auditor.loading.id_text`), so they name no table row; error path only."""
    return (mask := decimal_spelled(ids)) is not None and bool(mask.all())


def decimal_spelled(ids: np.ndarray) -> np.ndarray | None:
    """Which ids are whole decimals ("3.0") when every id is text spelling an integer, as a
    whole decimal or plainly ("10"), and some are decimals: such ids stay text, so they name
    no integer's row (the sibling of :func:`zero_padded`); else None. Error path only."""
    if ids.size == 0 or ids.dtype != object:
        return None
    head, dot, tail = (np.char.partition(np.char.strip(ids.astype(str)), ".")[:, k] for k in range(3))
    digits = np.char.isdigit(np.char.lstrip(head, "-"))
    decimal = (dot == ".") & digits & (np.char.str_len(tail) > 0) & (np.char.strip(tail, "0") == "")
    return decimal if np.all(decimal | (digits & (dot == ""))) and np.any(decimal) else None


def zero_padded(ids: np.ndarray) -> np.ndarray | None:
    """Which ids are zero-padded ("007", "-01") when every id is text spelling an integer
    (digits after an optional minus) and some are padded: such ids stay text
    (:mod:`auditor.loading.id_text`), so they name no integer's row; else None. Error path only."""
    if ids.size == 0 or ids.dtype != object:
        return None
    text = np.char.strip(ids.astype(str))
    negative = np.char.startswith(text, "-")
    body = np.where(negative, np.char.lstrip(text, "-"), text)
    digits = np.char.isdigit(body) & (np.char.str_len(text) - np.char.str_len(body) == negative)
    padded = np.char.startswith(body, "0") & ((np.char.str_len(body) > 1) | negative)
    return padded if np.all(digits) and np.any(padded) else None


def _spelled_pair(text_ids: np.ndarray, mask: np.ndarray, plain: np.ndarray) -> tuple[str, str]:
    """One id spelled apart (``mask``: zero-padded or a whole decimal) and the plain integer
    it spells ("007", 7; "3.0", 3), the other side's first id where it has none."""
    text = np.char.strip(text_ids.astype(str))
    try:
        same = mask & np.isin(np.char.partition(text, ".")[:, 0].astype(np.int64), plain)
    except (OverflowError, ValueError):  # beyond int64: no pair shown
        same = np.zeros_like(mask)
    at = int(np.argmax(same)) if same.any() else int(np.argmax(mask))
    return repr(str(text[at])), str(int(text[at].partition(".")[0]) if same.any() else plain.flat[0])


def spelled_apart(log_ids: np.ndarray, row_ids: np.ndarray | None, row_source: object) -> str | None:
    """Why ids do not match, when one side spells the other's integers as text: whole
    decimals ("3.0", every id or some) or zero-padded integers ("007", some or all) beside
    integers ("3", "7"); else None. The one place these spellings are told apart, for item and user
    ids alike, whether no id matched or most did not (:func:`auditor.idmap.check_mapped_share`)."""
    if row_ids is None:
        return None
    log_ids, row_ids = np.asarray(log_ids), np.asarray(row_ids)
    if ((whole_decimals(row_ids) and log_ids.dtype.kind in "iu")
            or (whole_decimals(log_ids) and row_ids.dtype.kind in "iu")):
        return (
            f"one of the log and {row_source} writes every id as a decimal (3.0), the other as an integer (3); "
            "a decimal id is text, so none match: write both the same way (pandas: .astype(\"Int64\") for a "
            "column of integers holding missing values)"
        )
    sides = ((row_ids, log_ids, f"the ids of {row_source}", "the log's"),
             (log_ids, row_ids, "the log's ids", f"those of {row_source}"))
    for text, plain, text_side, plain_side in sides:  # some decimals (QA12 logs verify-2 N5), all told above
        if plain.dtype.kind in "iu" and plain.size and (mask := decimal_spelled(text)) is not None:
            example, integer = _spelled_pair(text, mask, plain)
            return (
                f"some of {text_side} are written as decimals ({example}), {plain_side} as integers ({integer}); a "
                "decimal id is text, so it matches no integer id: write both the same way (pandas: "
                ".astype(\"Int64\") for a column of integers holding missing values)"
            )
    for padded, plain, padded_side, plain_side in sides:
        if plain.dtype.kind in "iu" and plain.size and (mask := zero_padded(padded)) is not None:
            example, integer = _spelled_pair(padded, mask, plain)
            return (
                f"{padded_side} are zero-padded ({example}), {plain_side} are not ({integer}); a zero-padded id is "
                "text, so it matches no integer id: write both the same way"
            )
    return None


def why_none_match(log_ids: np.ndarray, row_ids: np.ndarray | None, row_source: object, what: str) -> str:
    """What to do when no ``what`` id of a log names a table row: the spelling that keeps
    them apart (:func:`spelled_apart`), else the raw ids to give, never through an option
    ``row_source`` says was given (QA12 logs F2: a padded --item-ids was told to "pass
    --item-ids")."""
    if (apart := spelled_apart(log_ids, row_ids, row_source)) is not None:
        return apart
    option = setting(what + "_ids")
    if row_ids is None:
        return f"pass {option} FILE with the raw {what} id of each row"
    log_ids, row_ids = np.asarray(log_ids), np.asarray(row_ids)
    spelled = [repr(i) if isinstance(i, str) else str(i) for i in (*log_ids.flat[:1], *row_ids.flat[:1])]
    ids = f" (the log: {spelled[0]}; {row_source}: {spelled[1]})" if len(spelled) == 2 else ""
    return (f"the log's {what}s are not the model's {what}s, or are spelled otherwise{ids}; "
            + raw_ids_advice(what, row_source, "the log"))


def raw_ids_advice(what: str, mapping: object, source: object) -> str:
    """Give the raw id of each row as ``source`` spells them: through the id-file option,
    unless ``mapping`` is that option already given (then its file is what to rewrite)."""
    option = setting(what + "_ids")
    if str(mapping).startswith(f"{option} "):
        return f"list in {mapping} the raw {what} id of each row as {source} spells it"
    return f"pass {option} FILE with the raw {what} id of each row as {source} spells it"


def whole_decimals_fix(what: str) -> str:
    """How to fix ids that are all whole decimals (:func:`whole_decimals`), in words."""
    return (
        f"they are written as decimals (3.0), as pandas writes an integer column holding missing values, "
        f"and a decimal id is text, not a row number; write the column as integers (pandas: "
        f".astype(\"Int64\")) or pass {setting(what + '_ids')} FILE with each {what}-table row's id spelled the same"
    )

"""Where a log's empty ids are: the first data row of each kind, for a warning.

An empty id is a null, an empty or whitespace-only text cell, or a NaN in a float
column (:func:`auditor.loading.id_text.blank_as_null`): every reader leaves those rows
out or counts them alike, and every warning names how many, the column and the first row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from auditor.loading.logs import Log, open_log
from auditor.values import LogSpec


def first_blank_rows(log_spec: LogSpec, want_item: bool, want_user: bool) -> tuple[int | None, int | None]:
    """The first data row (from 1, after any header) with an empty item id, and with an
    empty user id beside an item id: a second pass, made only when counting found such
    rows, and stopped once both are found."""
    log, seen = open_log(log_spec), 0
    first_item: int | None = None
    first_user: int | None = None
    for items, users in log.batches(as_strings=True):
        item_blank = np.asarray(items.is_null().to_numpy(zero_copy_only=False))
        user_blank = np.asarray(users.is_null().to_numpy(zero_copy_only=False)) & ~item_blank if users is not None else None
        if first_item is None and item_blank.any():
            first_item = seen + 1 + int(np.argmax(item_blank))
        if first_user is None and user_blank is not None and user_blank.any():
            first_user = seen + 1 + int(np.argmax(user_blank))
        seen += len(items)
        if (first_item is not None or not want_item) and (first_user is not None or not want_user):
            break
    return first_item, first_user


def first_empty_cell(items: pa.Array, users: pa.Array, log: Log, seen: int) -> str:
    """" ('item_id' column, first at data row N)" for a batch's first row with an empty
    item or user id (``seen``: data rows before the batch); "" when there is none."""
    blank_item = np.asarray(items.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    blank = blank_item | np.asarray(users.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if not blank.any():
        return ""
    at = int(np.argmax(blank))
    return f" ({(log.item_col if blank_item[at] else log.user_col)!r} column, first at data row {seen + at + 1})"

"""The users of a log.

:func:`eligible_users` streams a log once and returns the distinct users with at least
one interaction on a table row, in order of first appearance (memory: the distinct
users, merged rarely).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from auditor.loading.alignment import mapped_pairs
from auditor.values import ItemRows
from auditor.loading.logs import Log
from auditor.loading.merging import Merger
from auditor.progress import SILENT, Progress


def _first_appearance(t: pa.Table) -> pa.Table:
    return t.group_by("u").aggregate([("p", "min")]).rename_columns(["u", "p"])


def eligible_users(log: Log, mapping: ItemRows, as_strings: bool, progress: Progress = SILENT) -> pa.Array:
    """Distinct users with a mapped interaction, in order of first appearance."""
    merger = Merger(_first_appearance)
    seen = 0
    with progress.track("Users of the training log", total=log.total_rows) as advance:
        for items, users in log.batches(as_strings):
            assert users is not None
            batch_users, _ = mapped_pairs(items, users, mapping, log)
            unique = pc.unique(batch_users)  # first-appearance order within the batch
            merger.add(pa.table({"u": unique, "p": pa.array(np.arange(seen, seen + len(unique)))}))
            seen += len(unique)
            advance(len(items))
    merged = merger.flush()
    if merged is None or merged.num_rows == 0:
        return pa.array([], pa.int64())
    return merged.sort_by("p").column("u").combine_chunks()

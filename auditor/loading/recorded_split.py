"""What a popaudit checkpoint's recorded split (``retrain --holdout-fraction``) left out of
its held-out pairs, said beside the accuracy that is measured on them.

The split (:mod:`auditor.train.split`) takes each user's latest fraction of interactions
out of training, then drops the held-out (user, item) pairs that repeat a training pair
(or each other): the pairs evaluated are fewer than the interactions held out, and a
user whose held-out interactions all repeat is not evaluated. The checkpoint's config
records both counts; a report of its recorded holdout says them, so 20% asked is never
read as 20% evaluated. ``retrain`` words the split it just made by the same sentence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from auditor.errors import InteractionsError, setting
from auditor.wording import plural

if TYPE_CHECKING:
    from auditor.model import ModelBundle


@dataclass(frozen=True)
class SplitCounts:
    """The counts a checkpoint's config records of its split, read in one place: the
    sentence below and the accuracy section's counts (``HeldOut``) both come from here."""

    held: int
    """Interactions the split took out of training (repeats included)."""
    pairs: int
    """Distinct held-out pairs stored (what is evaluated)."""
    repeats: int
    """Held-out interactions left out as repeats of a training pair (or an earlier held-out one)."""
    emptied: int
    """Users with two or more interactions who kept no held-out pair."""
    fraction: object = None
    """The fraction asked, as recorded."""


def recorded_split_counts(config: Mapping[str, Any] | None) -> SplitCounts | None:
    """The recorded split's counts (None: the config records no split, or not as integers)."""
    split = config.get("holdout") if isinstance(config, Mapping) else None
    if not isinstance(split, Mapping):
        return None
    held, pairs, repeats = (_count(split.get(key)) for key in ("n_holdout_interactions", "n_holdout_pairs",
                                                                 "n_repeats_dropped"))
    if held is None or pairs is None or repeats is None:
        return None
    emptied = _count(split.get("n_users_without_holdout")) or 0
    return SplitCounts(held, pairs, repeats, emptied, split.get("fraction"))


def _count(value: object) -> int | None:
    """A recorded count: a non-negative int (a bool or anything else is not one)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def recorded_split_notes(config: Mapping[str, Any] | None, source: str) -> tuple[str, ...]:
    """The sentence on the recorded split's dropped repeats and emptied users (none when
    nothing was dropped, or the config records no split)."""
    counts = recorded_split_counts(config)
    if counts is None or not counts.repeats:
        return ()
    held, pairs, repeats, emptied = counts.held, counts.pairs, counts.repeats, counts.emptied
    users = (f"; {plural(emptied, 'user')} with two or more interactions kept no held-out pair and "
             f"{'is' if emptied == 1 else 'are'} not evaluated" if emptied else "")
    return (
        f"{source}: the split took {plural(held, 'interaction')} out of training (fraction {counts.fraction}), "
        f"but {repeats:,} of them repeat{'s' if repeats == 1 else ''} one of the user's training pairs (or an earlier "
        f"held-out one) and {'is' if repeats == 1 else 'are'} left out, so {pairs:,} distinct held-out "
        f"{'pair is' if pairs == 1 else 'pairs are'} evaluated{users}",
    )


def split_drops_repeats(config: Mapping[str, Any] | None) -> bool:
    """Whether a checkpoint's config records popaudit's own split (``retrain
    --holdout-fraction``), whose stored pairs hold no repeat of a training pair: the
    accuracy on them says so (``Accuracy.repeats``), where a held-out file keeps its
    repeats as misses."""
    split = config.get("holdout") if isinstance(config, Mapping) else None
    return isinstance(split, Mapping) and isinstance(split.get("n_repeats_dropped"), int)


def refuse_whole_log_counts(frequencies: np.ndarray, bundle: ModelBundle, log: object) -> None:
    """InteractionsError when ``log``'s interactions per item row are exactly the
    checkpoint's recorded training counts plus its recorded holdout: the whole log it was
    split from, given where its training part belongs (the count-level form of the test
    :func:`auditor.loading.holdout_queries.overlap_warnings` makes on pairs, for commands that
    count items only)."""
    held, trained = bundle.holdout_pairs, bundle.item_frequencies
    if held is None or trained is None or not len(held) or trained.shape != frequencies.shape:
        return
    if np.array_equal(frequencies, np.asarray(trained, dtype=np.int64) + np.bincount(held.item_rows,
                                                                                   minlength=frequencies.size)):
        raise whole_log_error(log, f"{bundle.source} (recorded holdout)", f"{len(held):,}, and every training count")


def whole_log_error(log: object, holdout: str, held: str) -> InteractionsError:
    """The refusal of a training ``log`` that holds every held-out pair of a checkpoint's
    recorded ``holdout`` (``held``: how many, in words): the whole log it was split from."""
    return InteractionsError(
        f"the training log {log} holds every held-out pair of {holdout} ({held}): it is the whole log the "
        "checkpoint was split from, not its training part, so the held-out pairs would count as training and could "
        f"never be hit. Leave out {setting('interactions')} (the checkpoint records its training pairs), or pass the "
        "training part only"
    )


__all__ = [
    "SplitCounts", "empty_holdout_reason", "recorded_split_counts", "recorded_split_notes", "refuse_whole_log_counts",
    "split_drops_repeats", "whole_log_error",
]


def empty_holdout_reason(config: Mapping[str, Any] | None) -> str:
    """Why a recorded split kept no held-out pair, from its counts: users with a single
    interaction keep it for training, and held-out interactions that repeat a training pair
    are dropped. The one wording of ``retrain``'s notice, ``check``'s "not measured" reason
    and ``experiment mitigations``' refusal."""
    split = config.get("holdout") if isinstance(config, Mapping) else None
    split = split if isinstance(split, Mapping) else {}
    counts, single = recorded_split_counts(config), _count(split.get("n_users_one_interaction"))
    why: list[str] = []
    if single:
        why.append(f"{plural(single, 'user')} with a single interaction keep{'s' if single == 1 else ''} it for "
                   "training (a user needs two or more to hold one out)")
    if counts is not None and counts.repeats:
        one = counts.repeats == 1
        why.append(f"{'the' if one else 'all'} {plural(counts.repeats, 'held-out interaction')} "
                   f"{'repeats' if one else 'repeat'} one of the user's training pairs (or an earlier held-out one) "
                   f"and {'is' if one else 'are'} dropped")
    fraction = f" (fraction {split['fraction']})" if "fraction" in split else ""
    return (f"the held-out split{fraction} kept no (user, item) pair to measure accuracy on"
            + (": " + "; ".join(why) if why else ""))

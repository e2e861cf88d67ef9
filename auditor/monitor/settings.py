"""The monitor's arguments checked before it watches anything: its settings' ranges, the
counts it is given (an array in row order or a mapping raw id -> count with ``item_ids``),
and the item rows of a batch. Every problem is a :class:`~auditor.errors.TrainingError`
naming the argument at fault; counts keyed by ids that partly miss ``item_ids`` are a
:class:`MonitorInputWarning` with the numbers.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from auditor.errors import TrainingError


class MonitorInputWarning(UserWarning):
    """The monitor's inputs are usable but partly off (counts for ids that are not item ids)."""


class TrainingDivergedWarning(UserWarning):
    """Item rows of the watched table became NaN or infinite (training diverged)."""


def check_settings(interval: int, k: int, head_percent: float, max_exact_items: int, sample_items: int) -> None:
    """TrainingError for monitor settings out of range."""
    if interval < 0:
        raise TrainingError(f"interval must be 0 (epoch records only) or a positive number of steps, got {interval}")
    if k < 1 or not 0 < head_percent <= 100 or max_exact_items < 3 or not 3 < sample_items <= max_exact_items:
        raise TrainingError(
            "k must be at least 1, head_percent in (0, 100], and 3 < sample_items <= max_exact_items"
        )


def start_point(
    start_step: int | None, start_epoch: int | None, resume: bool, config: Mapping[str, Any] | None
) -> tuple[int, int, Mapping[str, Any] | None]:
    """The step and epoch a monitor starts at (0 and 1 unless a resumed run's are given), and
    its header config: a new trace that starts later records them (``start_step``,
    ``start_epoch``), so ``check --trace`` knows its records begin mid-run."""
    step = 0 if start_step is None else int(start_step)
    epoch = 1 if start_epoch is None else int(start_epoch)
    if step < 0 or epoch < 1:
        raise TrainingError(f"start_step must be 0 or more and start_epoch 1 or more, got {start_step} and {start_epoch}")
    if not resume and (step or epoch > 1):
        config = {**(config or {}), "start_step": step, "start_epoch": epoch}
    return step, epoch, config


def rho_sample(n: int, max_exact_items: int, sample_items: int, rng: np.random.Generator) -> torch.Tensor | None:
    """The fixed rows ρ and the slope are taken on above ``max_exact_items`` (None: every row)."""
    if n <= max_exact_items:
        return None
    return torch.from_numpy(np.sort(rng.choice(n, sample_items, replace=False)).astype(np.int64))


def given_counts(counts: Any, item_ids: Sequence[Any] | None, n: int) -> np.ndarray:
    """Counts per row from an array (row order, one dimension) or a mapping raw id -> count
    (with ``item_ids``, one per row). A mapping none of whose ids is an item id is refused
    (an int key never equals a str id: ``value_counts().to_dict()`` against text ids); one
    whose ids partly miss warns with how many ids and interactions are left out."""
    if item_ids is not None and len(item_ids) != n:
        raise TrainingError(f"item_ids has {len(item_ids)} entries but the item table has {n} rows")
    if isinstance(counts, Mapping):
        if item_ids is None:
            raise TrainingError("counts given as a mapping of item ids need item_ids: the raw id of each table row")
        out = _mapped(counts, item_ids)
    else:
        try:
            out = np.asarray(counts, dtype=np.float64)
        except (TypeError, ValueError):
            raise TrainingError("counts must be numbers (interactions per item row)") from None
        if out.ndim != 1:
            raise TrainingError(f"counts must be one number per item row (1-D), got shape {tuple(out.shape)}")
    if out.shape[0] != n:
        raise TrainingError(f"counts has {out.shape[0]} entries but the item table has {n} rows")
    if not np.isfinite(out).all() or (out < 0).any():
        raise TrainingError("counts must be finite and non-negative")
    return out


def _mapped(counts: Mapping[Any, Any], item_ids: Sequence[Any]) -> np.ndarray:
    """The mapping's counts in row order, the ids it holds that are not item ids checked."""
    try:
        out = np.array([float(counts.get(i, 0)) for i in item_ids], dtype=np.float64)
        total = float(sum(float(v) for v in counts.values()))
    except (TypeError, ValueError):
        raise TrainingError("counts must map item ids to numbers (interactions per item)") from None
    ids = set(item_ids)
    missed = [key for key in counts if key not in ids]
    if not missed:
        return out
    lost = total - float(out.sum())
    if len(missed) == len(counts):
        kinds = sorted({type(k).__name__ for k in counts}), sorted({type(i).__name__ for i in item_ids})
        raise TrainingError(
            f"none of the {len(counts):,} ids of counts is one of item_ids (counts' ids are "
            f"{'/'.join(kinds[0])}, item_ids' {'/'.join(kinds[1])}): give counts keyed by the item ids of the table rows"
        )
    warnings.warn(
        f"{len(missed):,} of the {len(counts):,} ids of counts are not item ids ({lost:,.0f} of {total:,.0f} "
        "interactions): those counts are left out of ρ and the head share",
        MonitorInputWarning, stacklevel=4,
    )
    return out


def batch_rows(items: torch.Tensor | np.ndarray | Sequence[int]) -> torch.Tensor:
    """A batch's item rows as int64, refusing non-integer values (rows 1.7, 2.9 are no rows)."""
    tensor = torch.as_tensor(items).detach().reshape(-1)
    if tensor.is_floating_point() or tensor.is_complex():
        if tensor.is_complex() or not bool((tensor == torch.round(tensor)).all()):
            raise TrainingError("batch item rows must be whole numbers (row indices of the item table)")
    elif tensor.dtype == torch.bool:
        raise TrainingError("batch item rows must be row indices of the item table, not a boolean mask")
    return tensor.to(torch.int64, copy=True)


def ids_digest(item_ids: Sequence[Any] | None) -> str | None:
    """sha256 of the item ids in row order, one per line (the trace header's ``item_ids_sha256``)."""
    if item_ids is None:
        return None
    return hashlib.sha256("\n".join(str(i) for i in item_ids).encode("utf-8")).hexdigest()


def second_fit(trace: Any) -> TrainingError:
    """The error of an adapter's callback given to a second ``fit``: its monitor would start
    a new trace over the first fit's records (the writer replaces a trace) and count the
    steps from 0 again, so C5 would see one fit's updates as the whole training."""
    where = f" in {trace}" if trace is not None else ""
    return TrainingError(
        f"this popaudit callback already watched a fit (its records are{where}); a second fit would replace them "
        "and count its steps from 0: give each fit a new callback with its own trace"
    )


def divergence_note(first: tuple[int, int], last: tuple[int, int], n_items: int) -> str:
    """The end record's words on a run whose item rows became NaN or infinite, from (step, rows)
    of the first record that found any and of the last record: the count at the last, which is
    how training ended (the first record's may be a small part of it), and where it began."""
    def rows(n: int) -> str:
        return f"{n:,} row" + ("" if n == 1 else "s")

    said = f"training diverged: {last[1]:,} of {n_items:,} item rows NaN or infinite"
    if first[0] == last[0]:
        return f"{said} at step {last[0]}, the last record and the first to find any"
    return f"{said} at the last record (step {last[0]}); first at step {first[0]} ({rows(first[1])})"


def process_rank() -> tuple[int, int, bool]:
    """(rank, world size, settled) of torch.distributed's default process group (settled: it
    exists, so the answer is final). Before one exists, the launcher's ``RANK`` and
    ``WORLD_SIZE`` (torchrun's) stand in, so a monitor made before ``init_process_group`` is
    judged as one made after; without them (0, 1), until a group appears."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size()), True
    rank, world = os.environ.get("RANK", ""), os.environ.get("WORLD_SIZE", "")
    if rank.isdigit() and world.isdigit() and int(rank) < int(world):
        return int(rank), int(world), False
    return 0, 1, False


def shard_counts(world: int) -> TrainingError:
    """The error of running counts under several processes: each rank sees only its shard of
    every global batch, so ρ, the head share and their alerts would judge part of the data
    (and ranks could disagree about stopping)."""
    return TrainingError(
        f"training runs on {world} processes: running counts would count only one rank's shard of each batch; "
        "give counts (interactions per item row of the whole training data)"
    )


def check_ranks(given: bool) -> tuple[int, bool]:
    """The one multi-process policy: a monitor is made on global rank 0 only (it alone writes
    the trace and the trackers), with its counts given. A monitor made on another rank, or
    with running counts under several processes, is a TrainingError. Returns the number of
    processes: above 1, a step moves every rank's batch rows and rank 0 sees only its own, so
    the update angles compare the whole table around the step (``growth_basis`` ``step``);
    and whether a process group gave it (else the monitor asks again at its next step or
    record: :func:`process_rank`)."""
    rank, world, settled = process_rank()
    if world <= 1:
        return 1, settled
    if rank != 0:
        raise TrainingError(
            f"this is process rank {rank} of {world}: make the monitor on rank 0 only (every rank would write the "
            "same trace), and pass its should_stop to the other ranks"
        )
    if not given:
        raise shard_counts(world)
    return world, settled

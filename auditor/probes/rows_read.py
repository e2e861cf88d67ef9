"""Which embedding rows every item of the catalogue reads (C3 over the whole catalogue).

A sample of item gradients shows sharing when it finds it, but its absence in a sample
says nothing of the other items: a tower that maps a few cold items onto one shared
"unknown" row passes any sample that misses them. When every item-tower parameter is the
weight of an ``nn.Embedding`` the tower calls with the items' indices, the rows each item
reads are found for the whole catalogue by one forward pass over all item ids (in blocks,
under ``no_grad``), with a forward pre-hook recording each lookup's indices; sharing is
then known exactly: two items reading one row share it (their gradients both move it).

The recording is trusted only where a gradient agrees with it: on the first block, the
rows of each table a random projection of the outputs moves must be exactly the rows the
block's items were recorded reading (a tower reading ``weight`` outside ``forward``, or
ignoring a lookup, fails this and the probe answers None: not read).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from auditor.model import LiveModel
from auditor.probes.supports import shared_entries

BLOCK_ITEMS = 65_536
"""Items encoded per forward pass (bounds the activations the recording pass holds)."""
GRADIENT_CHECK_ITEMS = 1024
"""Items of the first block whose gradient checks the recorded rows."""
ITEMS_CHECKED_ALONE = 4
"""Of those, items whose own gradient is checked against their own recorded rows (each check
is one backward pass filling a dense gradient of every table: a few, not one per item)."""


@dataclass(frozen=True)
class RowsRead:
    """The embedding rows read by every item of the catalogue, and who shares one."""

    n_items: int
    sharing_items: int
    """Items reading a row that another item also reads."""
    shared_group: tuple[int, ...]
    """The item rows reading one shared row (the first such row; at most 8 items)."""


def rows_read(live: LiveModel, module: torch.nn.Module, n_items: int) -> RowsRead | None:
    """The rows every item reads, or None where they cannot be recorded (a parameter that is
    no embedding table, a lookup not indexed by the items, TorchScript modules)."""
    params = list(live.item_parameters(module))
    tables = [m for m in module.modules() if type(m) is torch.nn.Embedding and any(m.weight is p for p in params)]
    if not tables or len(tables) != len(params) or n_items < 1:
        return None
    device = tables[0].weight.device
    seen: list[list[torch.Tensor]] = [[] for _ in tables]
    handles = [t.register_forward_pre_hook(_recorder(seen[k])) for k, t in enumerate(tables)]
    read: list[list[np.ndarray]] = [[] for _ in tables]
    try:
        with torch.no_grad():
            for start in range(0, n_items, BLOCK_ITEMS):
                rows = torch.arange(start, min(n_items, start + BLOCK_ITEMS), dtype=torch.int64, device=device)
                for calls in seen:
                    calls.clear()
                live.encode_items(module, rows)
                block = [_per_item(calls, len(rows)) for calls in seen]
                if any(b is None for b in block):
                    return None
                for k, b in enumerate(block):
                    read[k].append(b)  # type: ignore[arg-type]
    finally:
        for h in handles:
            h.remove()
    first = [r[0][:GRADIENT_CHECK_ITEMS] for r in read]
    if not _gradient_agrees(live, module, tables, first):
        return None
    return _sharing([np.concatenate(r) for r in read], tables, n_items)


def _recorder(calls: list[torch.Tensor]) -> Callable[[torch.nn.Module, tuple[object, ...]], None]:
    """A forward pre-hook appending each lookup's indices to ``calls``."""

    def hook(_module: torch.nn.Module, args: tuple[object, ...]) -> None:
        if args and isinstance(args[0], torch.Tensor):
            calls.append(args[0].detach())
    return hook


def _per_item(calls: list[torch.Tensor], m: int) -> np.ndarray | None:
    """The (m, k) rows of one table the block's m items read, each call's indices one item
    per leading entry; None where a call is not indexed by the items."""
    if not calls:
        return np.zeros((m, 0), dtype=np.int64)
    cols = []
    for idx in calls:
        if idx.dtype not in (torch.int32, torch.int64) or idx.dim() == 0 or idx.shape[0] != m:
            return None
        cols.append(idx.reshape(m, -1).cpu().numpy().astype(np.int64))
    return np.concatenate(cols, axis=1)


def _gradient_agrees(
    live: LiveModel, module: torch.nn.Module, tables: list[torch.nn.Embedding], read: list[np.ndarray],
) -> bool:
    """Whether the rows a random projection of the first items' outputs moves in each table are
    exactly the rows recorded for them, over all of them together and for each of
    :data:`ITEMS_CHECKED_ALONE` spread among them (a tower adding a row every item reads,
    such as the table's mean, moves rows beyond each item's own); a padding row, never
    moved, left out."""
    m = read[0].shape[0]
    rows = torch.arange(m, dtype=torch.int64, device=tables[0].weight.device)
    out = live.encode_items(module, rows)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    projected = out * weights.to(out.device, out.dtype)
    weights_of = [t.weight for t in tables]
    alone = np.unique(np.linspace(0, m - 1, min(m, ITEMS_CHECKED_ALONE)).astype(np.int64))
    checks = [(projected.sum(), slice(None))] + [(projected[i].sum(), slice(i, i + 1)) for i in alone]
    for k, (target, which) in enumerate(checks):
        grads = torch.autograd.grad(target, weights_of, allow_unused=True, retain_graph=k < len(checks) - 1)
        for table, grad, recorded in zip(tables, grads, read):
            moved = np.zeros(0, np.int64) if grad is None else np.flatnonzero(
                grad.detach().ne(0).any(dim=1).cpu().numpy())
            expected = np.unique(recorded[which])
            if table.padding_idx is not None:
                expected = expected[expected != table.padding_idx]
            if not np.array_equal(moved, expected):
                return False
    return True


def _sharing(read: list[np.ndarray], tables: list[torch.nn.Embedding], n_items: int) -> RowsRead:
    """Items reading a common row of any table (each table's rows offset into one key space;
    a row an item reads twice counted once for it, a padding row for nobody)."""
    keys, owners = [], []
    offset = 0
    for table, rows in zip(tables, read):
        ordered = np.sort(rows, axis=1)
        first = np.ones(ordered.shape, dtype=bool)
        first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]  # an item's repeated row once
        if table.padding_idx is not None:
            first &= ordered != table.padding_idx
        keys.append(ordered[first] + offset)
        owners.append(np.broadcast_to(np.arange(n_items, dtype=np.int64)[:, None], ordered.shape)[first])
        offset += int(table.num_embeddings)
    shared, firsts, seconds = shared_entries(np.concatenate(keys), np.concatenate(owners))
    if shared.size == 0:
        return RowsRead(n_items=n_items, sharing_items=0, shared_group=())
    first = shared == shared[0]  # the lowest shared row: its readers
    group = np.unique(np.concatenate([firsts[first], seconds[first]]))[:8]
    return RowsRead(n_items=n_items, sharing_items=int(np.unique(np.concatenate([firsts, seconds])).size),
                    shared_group=tuple(int(i) for i in group))

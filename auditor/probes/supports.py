"""Which sampled items share item-tower parameters, from their gradient supports (C3).

The cross-Jacobian of a few random items proves sharing when it finds it, but its
absence over a sample of 8 items says little: a hashed tower's items share a bucket row
with some other item almost always, and with any one given item rarely. So C3 looks
further: each candidate item's gradient ∇_θ⟨f(i), r_i⟩ (r_i Gaussian, so no parameter
the item moves cancels out) marks the parameter entries it touches; two items touching
the same entry share parameters, and are the pairs worth probing. When no candidate
shares, the same supports say whether the tower proves non-sharing by its structure:
every item moving one slice of each parameter tensor along some axis, at the item's own
row plus a fixed offset (an id table indexed one row per item, a padding row first; the
columns of a linear layer over one-hot ids), or every item of the catalogue having been
compared.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from auditor.probes.copies import ItemFunction


@dataclass(frozen=True)
class SupportSearch:
    """The outcome of comparing the gradient supports of ``n_items`` candidate items."""

    n_items: int
    sharing_pairs: tuple[tuple[int, int], ...]
    """Item rows of pairs found to move a common parameter entry (at most a few)."""
    n_sharing_items: int
    """Candidates that share an entry with at least one other candidate."""
    indexed_per_item: bool
    """Every candidate moves one slice per parameter tensor, at its own row plus a fixed offset."""


def support_search(
    f: ItemFunction, params: dict[str, torch.Tensor], rows: torch.Tensor, *, seed: int = 0, max_pairs: int = 4,
) -> SupportSearch:
    """Compare the gradient supports of the items ``rows`` (one backward pass each)."""
    leaves = {name: p.detach().requires_grad_(True) for name, p in params.items()}
    out = f(leaves)
    m = int(out.shape[0])
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    weights = weights.to(out.device, out.dtype)
    shapes = [tuple(p.shape) for p in leaves.values()]
    starts = np.concatenate([[0], np.cumsum([p.numel() for p in leaves.values()])])
    supports: list[np.ndarray] = []
    # offsets[t][a]: the (index along axis a of tensor t) − item row of each item's support,
    # None where an item's support spans several indices along that axis
    offsets: list[list[set[int | None]]] = [[set() for _ in shape] for shape in shapes]
    items = rows.cpu().numpy()
    for i in range(m):
        grads = torch.autograd.grad(
            (out[i] * weights[i]).sum(), list(leaves.values()), retain_graph=True, allow_unused=True,
        )
        touched: list[np.ndarray] = []
        for t, g in enumerate(grads):
            at = np.zeros(0, np.int64) if g is None else np.flatnonzero(g.detach().reshape(-1).cpu().numpy() != 0)
            if at.size == 0:
                continue
            touched.append(at + starts[t])
            for axis, index in enumerate(np.unravel_index(at, shapes[t]) if shapes[t] else ()):
                unique = np.unique(index)
                offsets[t][axis].add(int(unique[0]) - int(items[i]) if unique.size == 1 else None)
            if not shapes[t] and not offsets[t]:  # a scalar every item moves: no row of its own
                offsets[t].append({None})
        supports.append(np.concatenate(touched) if touched else np.zeros(0, dtype=np.int64))
    pairs, n_sharing = _sharing(supports, items, max_pairs)
    return SupportSearch(n_items=m, sharing_pairs=pairs, n_sharing_items=n_sharing,
                         indexed_per_item=_indexed(offsets))


def _indexed(offsets: list[list[set[int | None]]]) -> bool:
    """Whether every parameter tensor an item moved is indexed by the item along some axis:
    each item's support one index along it, at the item's row plus the same offset for all
    (an id table's row i, or a linear layer over one-hot ids: its weight's column i)."""
    moved = [axes for axes in offsets if any(axes_set for axes_set in axes)]
    return bool(moved) and all(
        any(len(seen) == 1 and None not in seen for seen in axes) for axes in moved
    )


def shared_entries(entry: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The entries two owners have in common, each owner listing an entry once: (the entry,
    one owner, another owner) per consecutive pair of owners of one entry, by entry."""
    order = np.lexsort((owner, entry))
    entry, owner = entry[order], owner[order]
    same = entry[1:] == entry[:-1]
    return entry[:-1][same], owner[:-1][same], owner[1:][same]


def _sharing(
    supports: list[np.ndarray], items: np.ndarray, max_pairs: int,
) -> tuple[tuple[tuple[int, int], ...], int]:
    """(up to ``max_pairs`` pairs of item rows moving a common entry, how many items share)."""
    lengths = np.array([s.size for s in supports], dtype=np.int64)
    if lengths.sum() == 0:
        return (), 0
    _, firsts, seconds = shared_entries(np.concatenate(supports), np.repeat(np.arange(len(supports)), lengths))
    sharing = np.unique(np.concatenate([firsts, seconds]))
    found = np.unique(np.stack([firsts, seconds], axis=1), axis=0) if firsts.size else np.zeros((0, 2), np.int64)
    pairs = tuple((int(items[a]), int(items[b])) for a, b in found[:max_pairs])
    return pairs, int(sharing.size)

"""The served-lists set-up of the tests of lists beside a model (sampled queries, no
queries): 40 users, 50 items; item 0 trained by 24 of them (6% of 400 interactions, the top
1%); half the users are served item 0 first, half no head item (10% of the top-5 slots:
1.67x, +4 points, moderate); a 4-wide model beside them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

N_USERS, N_ITEMS, K = 40, 50, 5


def write_head_lists(folder: Path, absent_users: bool = False, equal_norms: bool = True) -> tuple[Path, float, float]:
    """train.csv, recs.csv and model.pt in ``folder``; with ``absent_users``, 20 users the log
    does not hold are served item 0 too (lists of their own). Returns the folder, the head
    item's share of the log users' served slots and its share of the training log."""
    rng = np.random.default_rng(2)
    rows = []
    for u in range(N_USERS):
        others = rng.choice(np.arange(1, N_ITEMS), size=10 if u >= 24 else 9, replace=False)
        rows += [(u, int(i)) for i in ([0] if u < 24 else []) + sorted(others.tolist())]
    (folder / "train.csv").write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in rows))
    lists = {u: ([0, 1, 2, 3, 4] if u % 2 == 0 else [5, 6, 7, 8, 9]) for u in range(N_USERS)}
    absent = {1000 + a: [0, 10, 11, 12, 13] for a in range(20)} if absent_users else {}
    (folder / "recs.csv").write_text("user_id,item_id,rank\n" + "".join(
        f"{u},{i},{r + 1}\n" for u, items in {**lists, **absent}.items() for r, i in enumerate(items)))
    items = rng.normal(size=(N_ITEMS, 4))
    if equal_norms:  # dot serves cosine's lists: no harm of its own, no correlation to grade
        items /= np.linalg.norm(items, axis=1, keepdims=True)
    torch.save({"user_embedding.weight": torch.from_numpy(rng.normal(size=(N_USERS, 4)).astype(np.float32)),
                "item_embedding.weight": torch.from_numpy(items.astype(np.float32))}, folder / "model.pt")
    counts = np.bincount([i for _, i in rows], minlength=N_ITEMS)
    assert int(np.argmax(counts)) == 0 and (counts == counts.max()).sum() == 1  # one head item: item 0
    served = sum(items[:K].count(0) for items in lists.values()) / (N_USERS * K)
    return folder, served, counts[0] / counts.sum()

"""An item tower that ends in ``.float()`` (conditions QA F2): the probes' own float64 copy
made the user tower return float64 beside the item tower's float32, and the loss's u @ qᵀ
refused the mix, so the update and C4 probes were lost. Both towers' outputs now reach
the loss in one dtype, the coarser (what training ran in).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from auditor.conditions import assess_conditions
from auditor.config import DeclaredTraining
from auditor.model import ModelBundle
from auditor.probes.copies import one_dtype
from live_towers import TinyLive, Towers

N_ITEMS, N_USERS, DIM = 40, 30, 8


def _audit(out_dtype: torch.dtype | None):  # type: ignore[no-untyped-def]
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM, "embedding", out_dtype=out_dtype), lr=0.5)
    with torch.no_grad():
        items = live.encode_items(live.module, torch.arange(N_ITEMS)).double().numpy()
    bundle = ModelBundle(source=Path("m.pt"), format="popaudit", item_table=items, live=live,
                         user_table=live.module.user_emb.weight.detach().numpy())
    return assess_conditions(bundle, None, None, DeclaredTraining(), seed=1)


def test_float32_item_output_keeps_the_update_and_c4_probes() -> None:
    cast, plain = _audit(torch.float32), _audit(None)
    assert cast.probes is not None and plain.probes is not None
    assert not cast.probes.errors, cast.probes.errors  # was: c4 and update, "expected m1 and m2 to have the same dtype"
    assert not [w for w in cast.warnings if "could not run" in w]
    assert cast.probes.update is not None and cast.probes.gradient_alignment is not None
    # an id table on a cosine loss: every angle at 90°, C4 measured at float32's tolerance
    assert cast.probes.update.angle_summary.share_90pm1 == 1.0
    assert cast.probes.gradient_alignment.tolerance == 1e-4 and cast.probes.gradient_alignment.orthogonal
    assert cast.conditions["C4"].status == "holds" and "gradient alignment" in cast.conditions["C4"].evidence
    # the same step as the uncast tower's, up to float32 rounding of the loss's inputs
    g32 = np.median(cast.probes.update.growth)
    g64 = np.median(plain.probes.update.growth)
    assert abs(g32 - g64) <= 1e-5 * g64, (g32, g64)


def test_one_dtype_takes_the_coarser_of_the_two() -> None:
    u, q = one_dtype(torch.zeros(2, 3, dtype=torch.float64), torch.zeros(2, 3, dtype=torch.float32))
    assert u.dtype == q.dtype == torch.float32
    u, q = one_dtype(torch.zeros(2, 3, dtype=torch.bfloat16), torch.zeros(2, 3, dtype=torch.float64))
    assert u.dtype == q.dtype == torch.bfloat16
    same = torch.zeros(2, 3, dtype=torch.float64)
    assert one_dtype(same, same)[0] is same

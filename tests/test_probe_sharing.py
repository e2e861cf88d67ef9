"""C3 from sampled items: sharing found through gradient supports (plugins QA F1).

A hashed item tower (item i = B[h1(i)] + B[h2(i)]) shares a bucket row between items that
collide; a random sample of 8 items rarely holds a colliding pair, so the probe compares
the gradient supports of its 64 candidate items and measures the pairs found sharing.
Known answers: a pair sharing one of its two buckets has J_iJ_jᵀ = I and J_iJ_iᵀ = 2I,
ratio exactly 1/2; an id table and a per-item scaled table own one row per item (holds).
Towers built of embedding tables have the rows every item reads recorded for the whole
catalogue (``probes/rows_read.py``, tests/test_probe_rows_read.py), which decide; the
gradient supports decide the others: every item's up to 512 items, else a sample of 64,
whose one-row-per-item structure no longer stands for the catalogue (unknown).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from auditor.conditions.c2_c3_encoder import assess_c3
from auditor.model import ModelBundle
from auditor.probes import run_probes
from auditor.probes.copies import item_function
from auditor.probes.supports import support_search
from live_towers import TinyLive, Towers

N_USERS, DIM = 20, 4


def _paired_hashes(n_items: int) -> torch.Tensor:
    """Item i owns buckets (2i, 2i+1), except that each odd item's first bucket is its
    even partner's: every item shares exactly one bucket with exactly one other item."""
    h = torch.stack([2 * torch.arange(n_items), 2 * torch.arange(n_items) + 1], dim=1)
    h[1::2, 0] = h[0::2, 0][: len(h[1::2])]
    return h


def _c3(live: TinyLive, n_items: int, seed: int) -> tuple[str, dict[str, object]]:
    status, cross, _ = _c3_with_tower(live, n_items, seed)
    return status, cross


def _c3_with_tower(live: TinyLive, n_items: int, seed: int) -> tuple[str, dict[str, object], dict[str, object]]:
    table = live.encode_items(live.module, torch.arange(n_items)).detach().double().numpy()
    bundle = ModelBundle(source=Path("m.pt"), format="popaudit", item_table=table.astype(np.float32), live=live,
                         user_table=live.module.user_emb.weight.detach().numpy())
    outcome = run_probes(live, bundle, None, seed=seed, batch_size=8)
    c3 = assess_c3(("unknown", "static"), outcome)
    assert outcome.layers is not None
    return c3.status, c3.details["cross_jacobian"], outcome.layers.to_dict()  # type: ignore[return-value]


def test_support_search_finds_exactly_the_colliding_pairs() -> None:
    live = TinyLive(Towers(12, N_USERS, DIM, "hashed", hashes=_paired_hashes(12)))
    rows = torch.tensor([0, 1, 2, 4, 5, 9])
    f, params = item_function(live, live.module, rows)
    search = support_search(f, params, rows)
    assert search.sharing_pairs == ((0, 1), (4, 5))  # 2 and 9 have no partner among the rows
    assert search.n_sharing_items == 4 and not search.indexed_per_item


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hashed_tower_is_violated_with_the_exact_ratio(seed: int) -> None:
    # 200 items: a random 8 of them hold a colliding pair only ~13% of the time.
    live = TinyLive(Towers(200, N_USERS, DIM, "hashed", hashes=_paired_hashes(200)))
    status, cross, tower = _c3_with_tower(live, 200, seed)
    assert status == "violated"
    assert cross["max_offdiag_relative"] == pytest.approx(0.5, abs=1e-12)
    assert cross["max_isotropy_deviation"] == pytest.approx(0.0, abs=1e-12)
    # every item shares its first bucket with its partner: all 200 read a shared row
    assert tower["rows_read_items"] == 200 and tower["rows_sharing_items"] == 200
    assert tower["rows_shared_group"] == [0, 1]


def test_id_table_and_scaled_table_hold_for_every_item() -> None:
    for encoder in ("embedding", "scaled"):
        live = TinyLive(Towers(200, N_USERS, DIM, encoder))
        status, cross, tower = _c3_with_tower(live, 200, 0)
        assert status == "holds", encoder
        assert tower["rows_read_items"] == 200 and tower["rows_sharing_items"] == 0
        assert cross["support_items"] == 0  # the rows read decided: no sample compared


def test_disjoint_hashed_rows_hold_when_every_item_is_read() -> None:
    disjoint = torch.stack([2 * torch.arange(200), 2 * torch.arange(200) + 1], dim=1)
    live = TinyLive(Towers(200, N_USERS, DIM, "hashed", hashes=disjoint))
    status, cross, tower = _c3_with_tower(live, 200, 0)
    assert status == "holds" and tower["rows_read_items"] == 200 and tower["rows_sharing_items"] == 0


def test_linear_layer_over_one_hot_ids_holds_when_every_item_is_compared() -> None:
    # W·e_i moves only column i of W; no embedding table, so the rows read are not recorded
    # and the gradient supports of all 200 items (at most 512) are compared.
    towers = Towers(200, N_USERS, DIM, "dense-linear", n_features=200)
    towers.features = torch.eye(200, dtype=torch.float64)
    status, cross, tower = _c3_with_tower(TinyLive(towers), 200, 0)
    assert status == "holds" and tower["rows_read_items"] == 0
    assert cross["support_items"] == 200 and cross["support_exhaustive"] is True


def test_one_hot_columns_of_a_large_catalogue_are_unknown_from_a_sample() -> None:
    # 600 items (> 512): 64 sampled supports, one column each, say nothing of the others.
    towers = Towers(600, N_USERS, DIM, "dense-linear", n_features=600)
    towers.features = torch.eye(600, dtype=torch.float64)
    status, cross, _ = _c3_with_tower(TinyLive(towers), 600, 0)
    assert status == "unknown" and cross["support_items"] == 64
    assert cross["support_indexed_per_item"] is True and cross["support_exhaustive"] is False


def test_a_recorded_one_hot_encoder_vouches_for_the_catalogue_the_sample_indexes() -> None:
    # popaudit's own onehot-linear gathers W's column i (no lookup to record): the recorded
    # architecture says every item owns its column, which the sample's one column each confirms.
    towers = Towers(600, N_USERS, DIM, "dense-linear", n_features=600)
    towers.features = torch.eye(600, dtype=torch.float64)
    live = TinyLive(towers)
    table = live.encode_items(towers, torch.arange(600)).detach().numpy().astype(np.float32)
    bundle = ModelBundle(source=Path("m.pt"), format="popaudit", item_table=table, live=live,
                         user_table=towers.user_emb.weight.detach().numpy())
    outcome = run_probes(live, bundle, None, seed=0, batch_size=8)
    recorded = ("holds", "recorded item encoder 'onehot-linear': one-hot inputs are orthogonal")
    c3 = assess_c3(recorded, outcome)
    assert c3.status == "holds" and "which says it of every item" in c3.evidence
    # a table alone in a state dict is no such record: a plugin's tower may map items onto rows
    c3 = assess_c3(("holds", "the only item-side tensor is the embedding table"), outcome)
    assert c3.status == "unknown"


def test_a_scale_every_item_shares_is_found() -> None:
    # g·E[i] with one learned g: J_i J_jᵀ = E[i]E[j]ᵀ·(∂/∂g part), shared by every pair.
    class ScaledByG(TinyLive):
        def encode_items(self, module: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
            return module.g * module.items(rows)

        def item_parameters(self, module: torch.nn.Module) -> list[torch.nn.Parameter]:
            return [*module.item_params()]

    towers = Towers(200, N_USERS, DIM, "embedding")
    towers.g = torch.nn.Parameter(torch.tensor(1.5, dtype=torch.float64))
    status, cross = _c3(ScaledByG(towers), 200, 0)
    assert status == "violated" and cross["max_offdiag_relative"] > 0

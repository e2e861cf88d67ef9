"""Hostile ``popaudit mitigate`` runs on RecBole checkpoints (issue #21 item 3): models whose
served vectors a rescaled stored table would not change, or that popaudit cannot compute,
are refused naming the model, what it scores with and the way out; nothing is written.

Checkpoints are made by the cases (tests/recbole_helpers.py pickles a stand-in for
RecBole's ``Config``), with a RecBole ``.inter`` file beside them where a case needs one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from recbole_helpers import write_checkpoint, write_inter

from .corpus import EXIT_ERROR, Built, Case, params, run_case

N_USERS, N_ITEMS = 6, 8


def _mitigate(model: str, out: str, settings: Mapping[str, Any] | None = None, *extra: str,
              other: Mapping[str, Any] | None = None, inter: bool = False) -> Any:
    def build(d: Path) -> Built:
        write_checkpoint(d / "fake.pth", model, dict(settings or {}), N_USERS, N_ITEMS, other_parameter=other)
        if inter:
            write_inter(d / "fake.inter", N_USERS, N_ITEMS)
        return Built(["mitigate", "fake.pth", "--alpha", "0.5", "-o", out, *extra])

    return build


_CACHE = {"restore_user_e": torch.zeros(N_USERS + 1, 4), "restore_item_e": torch.zeros(N_ITEMS + 1, 4)}
CASES = [
    Case("mitigate-recbole-graph-as-checkpoint", _mitigate("LightGCN", "o.pth", {"n_layers": 2}), EXIT_ERROR,
         r"fake\.pth is a RecBole LightGCN checkpoint: the model scores with the mean of layers .* give -o a "
         r"\.npy or \.parquet name"),
    Case("mitigate-recbole-graph-without-cache-or-log", _mitigate("LightGCN", "o.npy", {"n_layers": 2}), EXIT_ERROR,
         r"caches no restore_item_e: pass --interactions with the \.inter file RecBole read"),
    Case("mitigate-recbole-graph-unreproducible-split",
         _mitigate("LightGCN", "o.npy", {"n_layers": 2, "eval_args": {"split": {"RS": [0.8, 0.1, 0.1]}, "order": "RO",
                                                                      "group_by": "user", "mode": "full"}},
                   "--interactions", "fake.inter", inter=True),
         EXIT_ERROR, r"eval_args order 'RO'"),
    Case("mitigate-recbole-learned-layers-without-cache", _mitigate("NGCF", "o.npy"), EXIT_ERROR,
         r"RecBole NGCF checkpoint: .*popaudit cannot compute its served item vectors: .*caches no "
         r"restore_user_e/restore_item_e"),
    Case("mitigate-recbole-cosine-scorer", _mitigate("SimpleX", "o.npy"), EXIT_ERROR,
         r"RecBole SimpleX checkpoint: the model scores with the cosine .*ignores item norms already"),
    Case("mitigate-recbole-mlp-scorer", _mitigate("NeuMF", "o.npy"), EXIT_ERROR,
         r"RecBole NeuMF checkpoint: the model scores with an MLP .*not with dot products of item vectors"),
    Case("mitigate-recbole-tables-as-npy", _mitigate("BPR", "o.npy"), EXIT_ERROR,
         r"RecBole BPR checkpoint: .*its served item vectors are its stored table: .*give -o a \.pth name"),
    Case("mitigate-recbole-stale-cache", _mitigate("BPR", "o.pth", other=_CACHE), EXIT_ERROR,
         r"caches served item vectors \(other_parameter restore_item_e\) that RecBole would keep serving"),
    Case("mitigate-recbole-into-safetensors", _mitigate("BPR", "o.safetensors"), EXIT_ERROR,
         r"-o o\.safetensors names a safetensors file but fake\.pth is a PyTorch file"),
]


@pytest.mark.parametrize("case", params(CASES))
def test_recbole_mitigate(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)

"""Tensors that name neither tower (conditions QA11 F6): where they can be layers over the
embeddings (a shared ``projection``, an MLP named ``tower``), the stored id table may not be
what the model serves, and the audit says so as it does for item-named tensors; biases,
scalars, counters and normalisation statistics map no vector and say nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from auditor import AuditConfig, run_audit
from auditor.result import AuditResult
from scoring_samples import DIM, N_ITEMS, N_USERS, zipf_log

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data"


def _state(**extra: torch.Tensor) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(1)
    return {"user_embedding.weight": torch.tensor(rng.normal(size=(N_USERS, DIM)), dtype=torch.float32),
            "item_embedding.weight": torch.tensor(rng.normal(size=(N_ITEMS, DIM)), dtype=torch.float32), **extra}


def _audit(tmp_path: Path, state: dict[str, Any]) -> AuditResult:
    torch.save({"model_state_dict": state}, tmp_path / "m.pt")
    return run_audit(AuditConfig(model=tmp_path / "m.pt", interactions=zipf_log(tmp_path), ks=(5,), bootstrap=0,
                                 probes=False))


def _stand_in_warnings(result: AuditResult) -> list[str]:
    return [w for w in result.warnings if w.startswith("audited the stored id table")]


def test_a_neutral_projection_may_be_the_item_tower(tmp_path: Path) -> None:
    result = _audit(tmp_path, _state(**{"projection.weight": torch.eye(DIM), "projection.bias": torch.zeros(DIM)}))
    # before: no warning (the names hold no "item"); C2/C3 said only "not attributable to either tower"
    assert _stand_in_warnings(result) == [
        "audited the stored id table `item_embedding.weight` only: the checkpoint's tensors `projection.weight`, "
        f"which name neither tower but can be layers over the {DIM}-wide item embeddings, are ignored, so these, "
        "audited as the served ones, may not be the item vectors the model in m.pt serves; to audit those, give a plugin "
        "that loads its item encoder (plugins)"]
    served = result.served_vectors
    assert served is not None and served.description == "the stored id table `item_embedding.weight`"
    # a warning, not a verdict: such layers may be the query side's alone (a sequence model's encoder)
    assert served.as_served and not result.verdict.summary.startswith("This audit is of")
    assert result.conditions["C2"].status == "unknown" and "not attributable" in result.conditions["C2"].evidence


def test_a_neutrally_named_mlp_may_be_the_item_tower(tmp_path: Path) -> None:
    mlp = torch.nn.Sequential(torch.nn.Linear(DIM, 32), torch.nn.ReLU(), torch.nn.Linear(32, DIM))
    state = _state(**{f"tower.{k}": v.detach() for k, v in mlp.state_dict().items()})
    (warning,) = _stand_in_warnings(_audit(tmp_path, state))
    assert "the checkpoint's tensors `tower.0.weight`, `tower.2.weight`, which name neither tower" in warning
    assert "so these, audited as the served ones, may not be the item vectors" in warning


def test_ordinary_extra_tensors_stay_silent(tmp_path: Path) -> None:
    # a temperature, a global bias, normalisation statistics and a counter, an id map, a
    # matrix none of whose axes is the embedding width: none maps an embedding
    extra = {"temperature": torch.tensor(0.1), "global_bias": torch.zeros(1), "fc.bias": torch.zeros(DIM),
             "norm.running_mean": torch.zeros(DIM), "norm.running_var": torch.ones(DIM),
             "norm.num_batches_tracked": torch.tensor(7), "item_ids": torch.arange(N_ITEMS),
             "other.weight": torch.zeros(DIM + 1, DIM + 2)}
    result = _audit(tmp_path, _state(**extra))
    assert not _stand_in_warnings(result) and result.served_vectors is None, result.warnings


def test_the_sample_checkpoints_stay_silent(tmp_path: Path) -> None:
    for name in ("biased", "control"):
        result = run_audit(AuditConfig(model=SAMPLE / f"{name}.pt", interactions=SAMPLE / "interactions.parquet",
                                       ks=(5,), bootstrap=0, probes=False))
        assert not _stand_in_warnings(result), result.warnings

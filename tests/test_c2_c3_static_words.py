"""C2/C3 from the file alone name a live encoder as needed only where there is none (plugins
QA verify, cosmetic): a plugin's tower with weights beside its table was probed with its
live encoder, so `details.static` must not say one is needed to check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from auditor.conditions.c2_c3_encoder import static_c2_c3
from auditor.conditions.facts import read_config
from auditor.model import ModelBundle

NEEDED = "a live encoder (a popaudit retrain checkpoint, or a plugin's popaudit_live_model) is needed to check"


def _tower(fmt: str = "qa_scaled") -> ModelBundle:
    """A plugin-built bundle whose state dict holds a projection beside the item table."""
    table = np.eye(4, dtype=np.float32)
    state = {"item.emb.weight": torch.eye(4), "item.proj.weight": torch.eye(4)}
    return ModelBundle(source=Path("m.pt"), format=fmt, item_table=table, item_key="item.emb.weight",
                       state_dict=state)


def test_tensors_beside_the_table_need_a_live_encoder_only_without_one() -> None:
    bundle = _tower()
    (c2, _), (c3, without) = static_c2_c3(bundle, read_config(None))
    assert c2 == c3 == "unknown" and without.endswith(NEEDED)
    (c2, _), (c3, with_live) = static_c2_c3(bundle, read_config(None), live=True)
    assert c2 == c3 == "unknown" and NEEDED not in with_live
    assert with_live == ("the item side has tensors besides `item.emb.weight` (`item.proj.weight`): the encoder is "
                         "more than a table; the file alone does not show it; the live encoder's numeric probes "
                         "check it where they run")


def test_no_structure_names_the_live_encoder_when_there_is_one() -> None:
    bundle = ModelBundle(source=Path("m.x"), format="custom", item_table=np.eye(3, dtype=np.float32))
    (_, without), _ = static_c2_c3(bundle, read_config(None))
    (_, with_live), _ = static_c2_c3(bundle, read_config(None), live=True)
    assert without == "no live encoder and no structure to inspect in the custom file"
    assert with_live.startswith("no structure to inspect in the custom file; the file alone does not show it")


def test_a_torchscript_file_is_not_sent_to_a_torchscript_encoder() -> None:
    """Conditions QA F7: a TorchScript MLP tower was told "a live encoder (popaudit checkpoint,
    TorchScript, plugin) is needed", but popaudit never runs TorchScript modules itself."""
    bundle = _tower("torchscript")
    (c2, text), _ = static_c2_c3(bundle, read_config(None))
    assert c2 == "unknown" and "TorchScript" not in text and NEEDED not in text
    assert text.endswith("popaudit does not run the torchscript module itself (which of its methods encode items "
                         "and users, and the loss, are not recorded); a plugin's popaudit_live_model wrapping it "
                         "runs the numeric checks (plugins/README.md)")


def test_c3_evidence_quotes_both_jackknife_standard_errors() -> None:
    """Conditions QA F8: the square tower's C3 evidence quoted one "jackknife standard error 0"
    (the off-diagonal's) beside the isotropy deviation 0.883 that decided it, whose error is 0.040."""
    from auditor.conditions.c2_c3_encoder import assess_c3
    from auditor.probe_results import CrossJacobian, ProbeOutcome

    c3 = CrossJacobian(items=tuple(range(8)), n_items=8, n_pairs=28, max_offdiag_relative=0.0,
                       median_offdiag_relative=0.0, max_isotropy_deviation=0.883, n_items_without_parameters=0,
                       tolerance=1e-9, shared=False, isotropic=False, dim=16, n_coordinates=8,
                       max_offdiag_standard_error=0.0, max_isotropy_standard_error=0.040)
    probe = ProbeOutcome(dtype="float64", seed=0, batch_source="test", batch_size=0, cross_jacobian=c3)
    cond = assess_c3(("unknown", "static"), probe)
    assert cond.status == "violated"
    assert ("on 8 of 16 output coordinates, sampled (jackknife standard errors: 0 of the largest ‖J_iJ_jᵀ‖ ratio, "
            "0.04 of the largest deviation from αI)") in cond.evidence, cond.evidence

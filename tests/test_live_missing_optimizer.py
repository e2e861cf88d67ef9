"""N4 (retrain QA, third round): a popaudit checkpoint whose config records no optimizer (or
no lr) makes the update probe say so in a sentence, not a bare ``KeyError: 'optimizer'``."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from auditor.errors import ProbeError
from auditor.probe_results import ProbeFailure
from auditor.probes.run import _attempt
from auditor.train.live import PopauditLiveModel


@pytest.mark.parametrize(("config", "missing"), [
    ({"loss": "softmax", "lr": 0.1}, "'optimizer'"),
    ({"loss": "softmax", "optimizer": "adam"}, "'lr'"),
    ({"loss": "softmax"}, "'optimizer' and no 'lr'"),
])
def test_a_config_without_optimizer_is_a_sentence(config: dict[str, Any], missing: str) -> None:
    live = PopauditLiveModel(torch.nn.Linear(2, 2), config)  # type: ignore[arg-type]
    errors: dict[Any, ProbeFailure] = {}
    assert _attempt(errors, "update", lambda: live.make_optimizer(live.module)) is None  # type: ignore[arg-type]
    # before: "KeyError: 'optimizer'"
    assert errors["update"].message == (
        f"the checkpoint's config records no {missing}: the update probe steps the item tower with the optimizer "
        "training used and cannot rebuild it (the conditions still read the declared optimizer and lr)")
    with pytest.raises(ProbeError):
        live.make_optimizer(live.module)


"""Built-in plugin: a live model for checkpoints written by ``popaudit retrain``."""

from __future__ import annotations

from auditor.hookspecs import hookimpl
from auditor.model import LiveModel, ModelBundle


@hookimpl
def popaudit_live_model(bundle: ModelBundle) -> LiveModel | None:
    """A :class:`~auditor.train.live.PopauditLiveModel` for ``format == "popaudit"``."""
    if bundle.format != "popaudit":
        return None
    from auditor.train.live import PopauditLiveModel

    return PopauditLiveModel.from_bundle(bundle)

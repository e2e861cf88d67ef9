"""C1-C5 verdicts from optimizer state, configs, flags, structure, probes and plugins.

Optimizer state dicts come from real torch optimizers (stepped once), so the keys are
the ones torch actually writes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pluggy
import pytest
import torch

from auditor import hookspecs
from auditor.conditions import assess_conditions, classify_loss, config_value
from auditor.config import DeclaredTraining
from auditor.errors import PluginError
from auditor.hookspecs import hookimpl
from auditor.model import ItemStats, ModelBundle
from auditor.optimizers import recognise_optimizer
from auditor.result import CONDITION_NAMES, Condition
from condition_bundles import DIM, N_ITEMS, N_USERS, seeded_tables, stepped, table_bundle
from live_towers import TinyLive, Towers

NONE = DeclaredTraining()


def _state(cls: type[torch.optim.Optimizer], **kw: Any) -> dict[str, Any]:
    item, user = seeded_tables()
    return stepped(cls([item, user], **kw))


def _c(bundle: ModelBundle, declared: DeclaredTraining = NONE, **kw: Any) -> tuple[dict[str, Condition], list[str]]:
    out = assess_conditions(bundle, None, None, declared, run_probes=False, **kw)
    assert set(out.conditions) == set(CONDITION_NAMES)
    assert all(c.name == CONDITION_NAMES[k] for k, c in out.conditions.items())
    return out.conditions, out.warnings


# ---------------------------------------------------------------------------- C1


@pytest.mark.parametrize(
    ("cls", "kw", "status", "words"),
    [
        (torch.optim.SGD, {"lr": 0.5}, "holds", ["SGD", "lr=0.5", "momentum=0"]),
        (torch.optim.SGD, {"lr": 0.5, "momentum": 0.9}, "violated", ["momentum 0.9"]),
        (torch.optim.SGD, {"lr": 0.5, "momentum": 0.9, "nesterov": True}, "violated", ["Nesterov"]),
        (torch.optim.SGD, {"lr": 0.5, "weight_decay": 1e-4}, "violated", ["weight decay 0.0001"]),
        (torch.optim.Adam, {}, "violated", ["Adam rescales", "betas=(0.9, 0.999)"]),
        (torch.optim.AdamW, {}, "violated", ["AdamW", "weight decay 0.01 (decoupled)"]),
        (torch.optim.Adagrad, {}, "violated", ["Adagrad"]),
        (torch.optim.RMSprop, {}, "violated", ["RMSprop"]),
        (torch.optim.Adadelta, {}, "violated", ["Adadelta"]),
        (torch.optim.NAdam, {}, "violated", ["NAdam"]),
        (torch.optim.Adamax, {}, "violated", ["Adamax"]),
        (torch.optim.ASGD, {}, "violated", ["ASGD"]),
    ],
)
def test_c1_from_real_optimizer_state(cls: type, kw: dict, status: str, words: list[str]) -> None:
    conds, _ = _c(table_bundle(_state(cls, **kw)))
    c1 = conds["C1"]
    assert c1.status == status, c1.evidence
    for word in words:
        assert word in c1.evidence, c1.evidence


def test_adam_and_adamw_are_told_apart_by_torch_keys() -> None:
    kinds = [g.kind for g in recognise_optimizer(_state(torch.optim.Adam))]
    assert kinds == ["Adam"]
    assert [g.kind for g in recognise_optimizer(_state(torch.optim.AdamW))] == ["AdamW"]
    # An old torch wrote neither decoupled_weight_decay: the name stays ambiguous, still adaptive.
    old = _state(torch.optim.AdamW)
    del old["param_groups"][0]["decoupled_weight_decay"]
    (group,) = recognise_optimizer(old)
    assert group.kind == "Adam/AdamW" and group.status() == "violated"


def test_c1_lr_feeds_c5_and_details() -> None:
    conds, _ = _c(table_bundle(_state(torch.optim.SGD, lr=0.25)))
    assert conds["C1"].details["lr"] == 0.25
    assert conds["C5"].status == "unknown" and "lr=0.25" in conds["C5"].evidence


def test_c1_param_groups_item_group_found_as_the_one_without_another_shape() -> None:
    item, user = seeded_tables()
    opt = torch.optim.SGD([{"params": [item], "lr": 1.0}, {"params": [user], "lr": 0.1, "momentum": 0.9}])
    conds, _ = _c(table_bundle(stepped(opt)))
    assert conds["C1"].status == "holds", conds["C1"].evidence
    # the momentum buffer has the user table's shape (30, 8): the item table is the other parameter
    assert "param group 0" in conds["C1"].evidence and "another parameter's shape" in conds["C1"].evidence
    assert conds["C1"].details["lr"] == 1.0


def test_c1_param_groups_item_group_found_by_state_shape() -> None:
    item, user = seeded_tables()
    # The user tower first and plain SGD; the item table with Adam: its exp_avg has the table's shape.
    opt_sgd = torch.optim.SGD([user], lr=0.1)
    opt_sgd.add_param_group({"params": [item], "lr": 0.01, "momentum": 0.0})
    state = stepped(opt_sgd)
    # Replace group 1 by a real Adam group (torch cannot mix classes; emulate Adam's keys and state).
    adam = stepped(torch.optim.Adam([item], lr=0.01))
    state["param_groups"][1] = {**adam["param_groups"][0], "params": [1]}
    state["state"] = {1: adam["state"][0]}
    bundle = table_bundle(state, state_dict={})  # no state dict: position unknown, shape decides
    conds, _ = _c(bundle)
    assert conds["C1"].status == "violated"
    assert "shape" in conds["C1"].evidence and "Adam" in conds["C1"].evidence


def test_c1_param_groups_that_differ_and_cannot_be_told_apart() -> None:
    item, user = seeded_tables()
    # no momentum buffer on either side: no state shows a shape, and the groups differ in weight decay
    opt = torch.optim.SGD([{"params": [item], "lr": 1.0}, {"params": [user], "weight_decay": 0.1}], lr=0.1)
    conds, _ = _c(table_bundle(stepped(opt), state_dict={}))
    assert conds["C1"].status == "unknown"
    assert "2 param groups" in conds["C1"].evidence and len(conds["C1"].details["groups"]) == 2


def test_c1_lightning_style_config_and_popaudit_config() -> None:
    config = {"hyper_parameters": {"optimizer": {"class_path": "torch.optim.Adam", "init_args": {"lr": 0.001}}}}
    conds, _ = _c(table_bundle(config=config))
    assert conds["C1"].status == "violated" and "Adam" in conds["C1"].evidence
    assert conds["C1"].details["lr"] == 0.001
    assert config_value(config, ("lr",)) == (0.001, "hyper_parameters.optimizer.init_args.lr")
    popaudit = {"optimizer": "momentum", "lr": 0.5, "momentum": 0.9, "weight_decay": 0.0, "loss": "infonce-cos",
                "user_optimizer": "adam", "user_lr": 0.001, "item_encoder": "embedding"}
    conds, _ = _c(table_bundle(config=popaudit, fmt="popaudit"))
    assert conds["C1"].status == "violated" and "momentum 0.9" in conds["C1"].evidence
    popaudit.update(optimizer="sgd", momentum=0.0)
    conds, _ = _c(table_bundle(config=popaudit, fmt="popaudit"))
    assert conds["C1"].status == "holds" and conds["C1"].details["lr"] == 0.5


def test_c1_declared_flags_fill_gaps_and_lose_conflicts() -> None:
    assert _c(table_bundle())[0]["C1"].status == "unknown"
    conds, _ = _c(table_bundle(), DeclaredTraining(optimizer="sgd", momentum=0.0, weight_decay=0.0, lr=0.3))
    assert conds["C1"].status == "holds" and "optimizer" in conds["C1"].evidence
    # A declared "sgd" is torch.optim.SGD: momentum 0 and weight decay 0 unless declared, said as assumed.
    conds, _ = _c(table_bundle(), DeclaredTraining(optimizer="sgd"))
    assert conds["C1"].status == "holds"
    assert "SGD (momentum=0, weight_decay=0)" in conds["C1"].evidence
    assert "torch.optim.SGD's default, assumed from optimizer sgd" in conds["C1"].evidence
    assert _c(table_bundle(), DeclaredTraining(optimizer="sgd", weight_decay=1e-4))[0]["C1"].status == "violated"
    assert _c(table_bundle(), DeclaredTraining(optimizer="nesterov"))[0]["C1"].status == "violated"
    # A config that names SGD without its settings is not a declaration: still unknown.
    conds, _ = _c(table_bundle(config={"optimizer": "sgd"}))
    assert conds["C1"].status == "unknown" and "momentum or weight decay" in conds["C1"].evidence
    conds, _ = _c(table_bundle(), DeclaredTraining(momentum=0.9))
    assert conds["C1"].status == "violated"
    conds, _ = _c(table_bundle(), DeclaredTraining(momentum=0.0, weight_decay=0.0))
    assert conds["C1"].status == "unknown"  # Adam would still violate C1
    # The file shows momentum 0.9; momentum 0 is a conflict: a warning, and the file wins.
    conds, warnings = _c(table_bundle(_state(torch.optim.SGD, lr=0.1, momentum=0.9)),
                         DeclaredTraining(optimizer="adam", momentum=0.0))
    assert conds["C1"].status == "violated"
    assert any("momentum 0 conflicts" in w and "file wins" in w for w in warnings)
    assert any("optimizer adam conflicts" in w for w in warnings)


def test_c1_unrecognised_optimizer_state() -> None:
    conds, warnings = _c(table_bundle({"exp_avg": 1}))
    assert conds["C1"].status == "unknown"
    assert any("no torch param_groups" in w for w in warnings)


# ---------------------------------------------------------------------------- C2, C3 static


def test_c2_c3_tables_hold_by_construction() -> None:
    for fmt in ("npy", "parquet"):
        conds, _ = _c(table_bundle(fmt=fmt, state_dict={}))
        assert conds["C2"].status == conds["C3"].status == "holds"
        assert "embedding table" in conds["C2"].evidence
    conds, _ = _c(table_bundle(fmt="state_dict"))
    assert conds["C2"].status == conds["C3"].status == "holds"
    assert "only item-side tensor" in conds["C2"].evidence


def test_c2_c3_unknown_when_the_item_side_has_more_layers() -> None:
    item, user = seeded_tables()
    sd = {"item_emb.weight": item.detach(), "item_mlp.0.weight": torch.zeros(DIM, DIM),
          "user_emb.weight": user.detach()}
    conds, _ = _c(table_bundle(state_dict=sd))
    assert conds["C2"].status == conds["C3"].status == "unknown"
    assert "item_mlp.0.weight" in conds["C2"].evidence
    conds, _ = _c(table_bundle(fmt="torchscript", state_dict={}))
    assert conds["C2"].status == conds["C3"].status == "unknown"


@pytest.mark.parametrize(
    ("encoder", "c2", "c3"),
    [("embedding", "holds", "holds"), ("onehot-linear", "holds", "holds"), ("dense-linear", "holds", "violated"),
     ("embedding-linear", "violated", "violated"), ("mlp", "violated", "violated")],
)
def test_c2_c3_from_recorded_item_encoder(encoder: str, c2: str, c3: str) -> None:
    conds, _ = _c(table_bundle(config={"item_encoder": encoder}, fmt="popaudit"))
    assert (conds["C2"].status, conds["C3"].status) == (c2, c3)


# ---------------------------------------------------------------------------- C4 names


def test_classify_loss_names() -> None:
    assert classify_loss("infonce-cos")[0] == "holds"
    assert classify_loss("cosine")[0] == "holds"
    assert classify_loss("infonce-dot")[0] == "violated"
    assert classify_loss("BPR")[0] == "violated"
    assert classify_loss("mse")[0] == "violated"
    assert classify_loss("softmax")[0] == "unknown"


@pytest.mark.parametrize(("name", "status"), [
    # F4: "cos" inside a word is no cosine: Keras' log_cosh/LogCosh is a regression loss on raw scores
    ("log_cosh", "violated"), ("LogCosh", "violated"), ("cost_sensitive_bpr", "violated"), ("bpr_cost", "violated"),
    ("CosineEmbeddingLoss", "holds"), ("cos-sim", "holds"), ("ArcFace", "holds"), ("normalized_softmax", "holds"),
    ("BPRLoss", "violated"), ("BCEWithLogitsLoss", "violated"), ("L2Loss", "violated"), ("dot_product", "violated"),
    ("cosine_bpr", "unknown"), ("sampled_softmax", "unknown"), ("also", "unknown"), ("cost", "unknown"),
])
def test_loss_names_are_read_as_words(name: str, status: str) -> None:
    assert classify_loss(name)[0] == status
    if status == "unknown":
        assert "popaudit does not recognise" in classify_loss(name)[1] or "does not say" in classify_loss(name)[1]


def test_c4_from_config_flag_and_conflict() -> None:
    assert _c(table_bundle(config={"loss": "infonce-cos"}))[0]["C4"].status == "holds"
    assert _c(table_bundle(config={"loss": "infonce-dot"}))[0]["C4"].status == "violated"
    assert _c(table_bundle())[0]["C4"].status == "unknown"
    conds, _ = _c(table_bundle(), DeclaredTraining(loss="cosine"))
    assert conds["C4"].status == "holds" and "loss" in conds["C4"].evidence
    conds, warnings = _c(table_bundle(config={"loss": "infonce-dot"}), DeclaredTraining(loss="cosine"))
    assert conds["C4"].status == "violated" and any("loss cosine conflicts" in w for w in warnings)


# ---------------------------------------------------------------------------- live models


def _livetable_bundle(live: TinyLive, config: dict | None = None, **kw: Any) -> ModelBundle:
    table = live.encode_items(live.module, torch.arange(N_ITEMS)).detach().numpy()
    return ModelBundle(source=Path("m.pt"), format="popaudit", item_table=table, live=live,
                       user_table=live.module.user_emb.weight.detach().numpy(), config=config, **kw)


def _zipf_stats(n: int = N_ITEMS) -> ItemStats:
    freq = np.maximum(1, (1000 / np.arange(1, n + 1) ** 1.1)).astype(np.int64)
    return ItemStats(frequencies=freq, n_interactions=int(freq.sum()))


@pytest.mark.parametrize(
    ("encoder", "loss", "expected"),
    [
        ("embedding", "infonce-cos", {"C2": "holds", "C3": "holds", "C4": "holds"}),
        ("embedding", "infonce-dot", {"C2": "holds", "C3": "holds", "C4": "violated"}),
        ("mlp", "infonce-cos", {"C2": "violated", "C3": "violated", "C4": "holds"}),
        ("dense-linear", "infonce-cos", {"C2": "holds", "C3": "violated", "C4": "holds"}),
        ("embedding-linear", "infonce-cos", {"C2": "violated", "C3": "violated", "C4": "holds"}),
    ],
)
def test_numeric_c2_c3_c4_on_live_towers(encoder: str, loss: str, expected: dict[str, str]) -> None:
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM, encoder), loss_name=loss)
    out = assess_conditions(_livetable_bundle(live), None, None, NONE, seed=1)
    got = {k: out.conditions[k].status for k in expected}
    assert got == expected, {k: out.conditions[k].evidence for k in expected}
    assert "second difference" in out.conditions["C2"].evidence
    assert "cross-Jacobian" in out.conditions["C3"].evidence
    assert "gradient alignment" in out.conditions["C4"].evidence
    assert out.probes is not None and out.update_angles is not None
    assert out.probes.update.angle_summary.n == out.update_angles.size > 0


def test_probe_angles_follow_the_conditions() -> None:
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM), loss_name="infonce-cos", lr=0.5)
    out = assess_conditions(_livetable_bundle(live), None, None, NONE, seed=2)
    assert out.probes.update.angle_summary.share_90pm1 == 1.0
    assert np.max(np.abs(out.probes.update.residuals)) < 1e-9
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM), loss_name="infonce-dot", lr=0.05)
    out = assess_conditions(_livetable_bundle(live), None, None, NONE, seed=2)
    assert out.probes.update.angle_summary.share_90pm1 < 0.5


def test_c5_from_probe_growth_and_frequencies() -> None:
    # Small initial norms (init_std 0.1, as popaudit retrain uses) make c/s² large.
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM, init_std=0.1), lr=2.0)
    stats = _zipf_stats()
    bundle = _livetable_bundle(live, config={"optimizer": "sgd", "lr": 2.0, "momentum": 0.0, "weight_decay": 0.0,
                                        "epochs": 5, "loss": "infonce-cos"})
    out = assess_conditions(bundle, stats, None, NONE, seed=0)
    c5 = out.conditions["C5"]
    d = c5.details
    # Hand check of the projection: g from the probe, T = frequency × epochs, s_T/s = √(1+2gT).
    g = float(np.median(out.probes.update.growth_per_appearance))
    assert d["growth_per_update"] == pytest.approx(g)
    freq = stats.frequencies.astype(float)
    t_head, t_med = np.quantile(freq, 0.99) * 5, np.median(freq) * 5
    ratio = ((1 + 2 * g * t_head) / (1 + 2 * g * t_med)) ** 0.25
    assert d["head_median_norm_ratio"] == pytest.approx(ratio)
    assert d["threshold"] == pytest.approx(1 + 1 / math.sqrt(2 * DIM))
    assert c5.status == "holds" and "materialises" in c5.evidence and "lr=2" in c5.evidence
    assert d["decided_by"] == "projection"  # above the init spread, the projection decides by itself
    assert out.conditions["C1"].status == "holds"
    # The same model stepped with a tiny learning rate: growth too small.
    # The projection (an understatement) is below the init spread; the table, untrained,
    # shows no growth either, and with C1-C4 holding that is a learning rate too small.
    live_small = TinyLive(Towers(N_ITEMS, N_USERS, DIM, init_std=0.1), lr=1e-4)
    plain = {"optimizer": "sgd", "momentum": 0.0, "weight_decay": 0.0, "epochs": 5, "loss": "infonce-cos"}
    out = assess_conditions(_livetable_bundle(live_small, config=plain), stats, None, NONE, seed=0)
    c5 = out.conditions["C5"]
    assert c5.status == "violated", c5.evidence
    assert c5.details["head_median_norm_ratio"] < 1.01 and c5.details["decided_by"] == "projection and table"
    assert c5.details["table_head_median_norm_ratio"] < c5.details["threshold"]
    # Without C1 known to hold, a small projection alone proves nothing: unknown.
    out = assess_conditions(_livetable_bundle(live_small, config={"epochs": 5}), stats, None, NONE, seed=0)
    assert out.conditions["C5"].status == "unknown" and out.conditions["C5"].details["decided_by"] is None


def test_c5_unknown_cases() -> None:
    assert _c(table_bundle())[0]["C5"].status == "unknown"
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM))
    out = assess_conditions(_livetable_bundle(live), None, None, NONE)
    assert out.conditions["C5"].status == "unknown" and "frequencies are unknown" in out.conditions["C5"].evidence
    # No rebuilt optimizer and no lr: growth only per unit lr².
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM), rebuild_optimizer=False)
    out = assess_conditions(_livetable_bundle(live), _zipf_stats(), None, NONE)
    assert out.conditions["C5"].status == "unknown" and "per unit lr²" in out.conditions["C5"].evidence
    assert out.probes.update.optimizer_restored is False


def test_no_probes_when_disabled() -> None:
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM))
    out = assess_conditions(_livetable_bundle(live), None, None, NONE, run_probes=False)
    assert out.probes is None and out.update_angles is None


# ---------------------------------------------------------------------------- plugins


def _pm(*plugins: object) -> pluggy.PluginManager:
    pm = pluggy.PluginManager("popaudit")
    pm.add_hookspecs(hookspecs)
    for plugin in plugins:
        pm.register(plugin)
    return pm


def test_plugin_evidence_overrides_and_live_model_hook() -> None:
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM, "dense-linear"))

    class Plugin:
        @hookimpl
        def popaudit_condition_evidence(self, bundle: ModelBundle) -> dict[str, Condition]:
            return {"C3": Condition("non-shared parameters", "holds", "features are one-hot by design")}

        @hookimpl
        def popaudit_live_model(self, bundle: ModelBundle) -> TinyLive:
            return live

    bundle = _livetable_bundle(live)
    bundle.live = None
    out = assess_conditions(bundle, None, None, NONE, pm=_pm(Plugin()))
    c3 = out.conditions["C3"]
    # plugins QA F5: the probe measured the dense features shared; a declaration saying
    # otherwise does not override the measurement, it is kept and warned about
    assert c3.status == "violated" and c3.evidence.startswith("cross-Jacobian")
    assert c3.details["declared"]["status"] == "holds" and "which the measurement contradicts" in c3.evidence
    assert any(w.startswith("C3: plugin") and "the measurement stands" in w for w in out.warnings)
    assert out.probes is not None  # the live model came from the hook
    assert bundle.live is None
    # without the probes nothing was measured, and the declaration decides
    out = assess_conditions(bundle, None, None, NONE, pm=_pm(Plugin()), run_probes=False)
    c3 = out.conditions["C3"]
    assert c3.status == "holds" and c3.evidence.startswith("declared by a plugin")
    assert not any("the measurement stands" in w for w in out.warnings)


def test_c5_is_graded_from_the_declared_c1_to_c4(monkeypatch: pytest.MonkeyPatch) -> None:
    # An id table (C2, C3 hold by structure) whose author declares both violated: C5 reads
    # the conditions as the report states them (before: C5 from the inferred ones).
    import auditor.conditions as conditions_module

    seen: dict[str, str] = {}
    real = conditions_module.assess_c5

    def spy(*args: Any, **kw: Any) -> Condition:
        seen.update({key: c.status for key, c in args[5].items()})
        return real(*args, **kw)

    monkeypatch.setattr(conditions_module, "assess_c5", spy)
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM, "embedding", init_std=0.1), lr=2.0)

    class Plugin:
        @hookimpl
        def popaudit_condition_evidence(self, bundle: ModelBundle) -> dict[str, Condition]:
            return {key: Condition(CONDITION_NAMES[key], "violated", "shared by design") for key in ("C2", "C3")}

    out = assess_conditions(_livetable_bundle(live), _zipf_stats(), None, NONE, pm=_pm(Plugin()), run_probes=False)
    assert out.conditions["C2"].status == out.conditions["C3"].status == "violated"
    assert seen["C2"] == seen["C3"] == "violated"


def test_plugin_with_bad_evidence_is_named() -> None:
    class Bad:
        @hookimpl
        def popaudit_condition_evidence(self, bundle: ModelBundle) -> dict[str, Any]:
            return {"C9": Condition("x", "holds", "y")}

    with pytest.raises(PluginError, match="C9"):
        assess_conditions(table_bundle(), None, None, NONE, pm=_pm(Bad()), run_probes=False)


def test_c1_lightning_several_optimizers_item_one_found_by_shape() -> None:
    item, user = seeded_tables()
    user_state = stepped(torch.optim.SGD([user], lr=0.1))
    item_state = stepped(torch.optim.Adam([item], lr=0.01))
    # As the loader keeps a Lightning checkpoint: the first state, with the whole list.
    state = {**user_state, "optimizer_states": [user_state, item_state]}
    conds, _ = _c(table_bundle(state, fmt="lightning"))
    assert conds["C1"].status == "violated"
    assert "optimizer 2 of 2" in conds["C1"].evidence and "Adam" in conds["C1"].evidence
    assert conds["C1"].details["lr"] == 0.01


def test_c5_projection_flagged_when_updates_are_not_orthogonal() -> None:
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM, "mlp", init_std=0.1), lr=2.0)
    out = assess_conditions(_livetable_bundle(live, config={"epochs": 5}), _zipf_stats(), None, NONE, seed=0)
    c5 = out.conditions["C5"]
    assert "C2, C3 are violated" in c5.evidence
    # above the init spread or below it, neither the projection nor the table can tell the
    # learning rate's part from the violated conditions' (never "violated", nor "holds" with the
    # probe where the table alone said unknown)
    assert c5.status == "unknown" and "cannot tell the learning rate's part" in c5.evidence, c5.evidence


def test_popaudit_retrain_checkpoint_end_to_end(tmp_path: Path) -> None:
    """A real `popaudit retrain` checkpoint: the live model comes from the built-in plugin."""
    from auditor.config import LoadOptions
    from auditor.loading import load_model
    from auditor.plugins import get_plugin_manager
    from auditor.train.data import synthetic_interactions
    from auditor.train.loop import TrainConfig, save_checkpoint, train

    data = synthetic_interactions(60, 80, 3000, 1.0, seed=1)
    path = save_checkpoint(train(data, TrainConfig(lr=2.0, epochs=1, batch_size=128)), tmp_path / "m.pt")
    pm = get_plugin_manager(entry_points=False)
    bundle = load_model(path, LoadOptions(), pm)
    stats = ItemStats(frequencies=np.asarray(bundle.item_frequencies), n_interactions=3000)
    out = assess_conditions(bundle, stats, None, NONE, pm=pm, seed=0)
    status = {k: c.status for k, c in out.conditions.items()}
    assert status["C1"] == status["C2"] == status["C3"] == status["C4"] == "holds", out.conditions
    assert out.probes is not None and out.probes.update.angle_summary.share_90pm1 == 1.0
    assert out.probes.update.optimizer_restored is True


def test_c1_unrecognised_optimizer_keys_leave_the_name_to_the_config() -> None:
    state = {"param_groups": [{"lr": 0.1, "params": [0, 1], "custom_knob": 3}], "state": {}}
    config = {"optimizer": "sgd", "momentum": 0.0, "weight_decay": 0.0}
    conds, warnings = _c(table_bundle(state, config=config))
    assert conds["C1"].status == "holds", conds["C1"].evidence
    assert conds["C1"].details["lr"] == 0.1 and conds["C1"].details["sources"]["lr"] == "optimizer state"
    assert warnings == []


def test_probe_that_cannot_form_a_batch_is_a_warning_not_a_crash() -> None:
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM))
    live.n_users = None  # type: ignore[assignment]  # and the bundle has no user table
    bundle = _livetable_bundle(live)
    bundle.user_table = None
    out = assess_conditions(bundle, None, None, DeclaredTraining(loss="infonce-cos"))
    assert out.probes is None
    assert any("numeric probes could not run" in w and "probe batch" in w for w in out.warnings)
    assert out.conditions["C4"].status == "holds"  # still from the live model's loss name


# ---------------------------------------------------------------------------- declared facts mean what the framework means


def test_c4_from_recbole_model_names() -> None:
    simplex, _ = _c(table_bundle(config={"model": "SimpleX", "reg_weight": 1e-5}, fmt="recbole"))
    assert simplex["C4"].status == "holds" and "CCL loss on cosines" in simplex["C4"].evidence
    assert "L2 penalty (reg_weight = 1e-05)" in simplex["C4"].evidence and simplex["C4"].details["norm_penalty"] == 1e-5
    for model in ("BPR", "LightGCN", "NGCF", "SGL", "NCL", "DGCF", "SpectralCF"):
        c4 = _c(table_bundle(config={"model": model}, fmt="recbole"))[0]["C4"]
        assert c4.status == "violated" and "dot" in c4.evidence, model


def _fn(rho: float, lo: float, hi: float) -> "FrequencyNorm":
    from auditor.result import FrequencyNorm

    return FrequencyNorm(spearman=rho, spearman_ci=(lo, hi), spearman_p=1e-6, pearson_log=rho, kendall=rho,
                         loglog_slope=0.2, n_items=N_ITEMS, n_cold=0, deciles=[])


def test_c5_with_a_declared_lr_reads_the_table_without_a_probe() -> None:
    declared = DeclaredTraining(optimizer="sgd", lr=1.0)
    grown = _c(table_bundle(), declared, frequency_norm=_fn(0.62, 0.55, 0.68))[0]["C5"]
    assert grown.status == "holds"
    assert grown.evidence.startswith("lr=1 (lr) is not tested: no probe step ran, so no measured growth ties the "
                                     "table to this rate; the trained table shows the growth materialised (")
    assert "Spearman ρ = 0.62, 95% CI [0.55, 0.68]" in grown.evidence
    # No growth while every update was orthogonal (C1-C4 hold): the lr was too small.
    orthogonal = {key: Condition(CONDITION_NAMES[key], "holds", "test") for key in ("C1", "C2", "C3", "C4")}
    from auditor.conditions.c5_growth import assess_c5

    flat = assess_c5(table_bundle(), None, None, _declared_lr(0.01), None, orthogonal, _fn(0.02, -0.05, 0.09))
    assert flat.status == "violated" and "too small" in flat.evidence
    # The same table while C2 is unknown: the learning rate's part cannot be told apart.
    unsure = {**orthogonal, "C2": Condition(CONDITION_NAMES["C2"], "unknown", "test")}
    assert assess_c5(table_bundle(), None, None, _declared_lr(0.01), None, unsure, _fn(0.02, -0.05, 0.09)).status == "unknown"
    assert "was not measured" in assess_c5(table_bundle(), None, None, _declared_lr(0.01), None, unsure, None).evidence


def _declared_lr(lr: float) -> Any:
    from auditor.conditions.facts import Fact, Origin

    return Fact(lr, Origin.DECLARED, "lr")

"""One ranking of evidence for C1–C5 (conditions QA11): measured (optimizer state, probes,
trained table) over the recorded config over a declaration (CLI settings, a plugin's
``popaudit_condition_evidence``); a weaker source that disagrees loses and is warned,
naming both. Optimizer states come from real torch optimizers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pluggy
import torch

from auditor import hookspecs
from auditor.conditions import assess_conditions
from auditor.config import DeclaredTraining
from auditor.hookspecs import hookimpl
from auditor.model import ItemStats, ModelBundle
from auditor.result import Condition, FrequencyNorm
from auditor.trace_section import TILTED_SHARE
from condition_bundles import DIM, N_ITEMS, N_USERS, seeded_tables, stepped, table_bundle
from live_towers import TinyLive, Towers, train_state

NONE = DeclaredTraining()


def _declaring(**verdicts: Condition) -> pluggy.PluginManager:
    class Plugin:
        @hookimpl
        def popaudit_condition_evidence(self, bundle: ModelBundle) -> dict[str, Condition]:
            return dict(verdicts)

    pm = pluggy.PluginManager("popaudit")
    pm.add_hookspecs(hookspecs)
    pm.register(Plugin(), name="file:author.py")
    return pm


SGD_HOLDS = Condition("plain SGD", "holds", "author: item table trained with plain SGD")


# ---------------------------------------------------------------------------- F1: plugin declarations


def test_plugin_c1_loses_to_the_optimizer_state_it_contradicts() -> None:
    item, user = seeded_tables()
    state = stepped(torch.optim.AdamW([item, user], lr=0.01, weight_decay=0.0))
    out = assess_conditions(table_bundle(state), None, None, NONE, pm=_declaring(C1=SGD_HOLDS), run_probes=False)
    c1 = out.conditions["C1"]
    # before: holds, "declared by a plugin", no warning
    assert c1.status == "violated" and "AdamW rescales each coordinate" in c1.evidence, c1.evidence
    assert c1.details["declared"]["status"] == "holds" and c1.details["basis"] == "optimizer state"
    assert "which the optimizer state contradicts" in c1.evidence
    assert [w for w in out.warnings if w.startswith("C1: plugin 'file:author.py' declares it holds, but the "
                                                    "checkpoint's optimizer state shows it violated; the optimizer "
                                                    "state stands")], out.warnings


def test_plugin_c1_loses_to_the_recorded_config_and_fills_an_unknown() -> None:
    pm = _declaring(C1=SGD_HOLDS)
    out = assess_conditions(table_bundle(config={"optimizer": "adam"}), None, None, NONE, pm=pm, run_probes=False)
    assert out.conditions["C1"].status == "violated"
    assert any("the recorded config shows it violated; the recorded config stands" in w for w in out.warnings)
    # nothing recorded: the declaration settles C1, as before, without a warning
    out = assess_conditions(table_bundle(), None, None, NONE, pm=pm, run_probes=False)
    assert out.conditions["C1"].status == "holds" and out.conditions["C1"].evidence.startswith("declared by a plugin")
    assert not out.warnings
    # against the CLI's declaration (the same rank) the plugin's is taken, and both are named
    out = assess_conditions(table_bundle(), None, None, DeclaredTraining(optimizer="adam"), pm=pm, run_probes=False)
    assert out.conditions["C1"].status == "holds"
    assert any("declares it holds, where the declared optimizer/momentum/weight_decay give it violated; the "
               "plugin's declaration is taken" in w for w in out.warnings), out.warnings


def _momentum_live() -> TinyLive:
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM), loss_name="infonce-cos", lr=2.0, momentum=0.9)
    gen = torch.Generator().manual_seed(1)
    users, items = torch.randint(0, N_USERS, (256,), generator=gen), torch.randint(0, N_ITEMS, (256,), generator=gen)
    live.optimizer_state = train_state(live, users, items, steps=20)
    return live


def test_live_momentum_state_keeps_c1_violated_and_the_angles_blame_nothing_measured() -> None:
    live = _momentum_live()
    table = live.encode_items(live.module, torch.arange(N_ITEMS)).detach().numpy()
    bundle = ModelBundle(source=Path("m.pt"), format="popaudit", item_table=table, live=live,
                         user_table=live.module.user_emb.weight.detach().numpy(), config={"epochs": 3},
                         optimizer_state=live.optimizer_state)
    freq = np.maximum(1, (1000 / np.arange(1, N_ITEMS + 1) ** 1.1)).astype(np.int64)
    stats = ItemStats(frequencies=freq, n_interactions=int(freq.sum()))
    out = assess_conditions(bundle, stats, None, NONE, pm=_declaring(C1=SGD_HOLDS), seed=0)
    share = out.probes.update.angle_summary.share_90pm1
    assert share is not None and share <= TILTED_SHARE  # momentum tilts the probe step (0.0 here)
    conds = out.conditions
    # before: C1–C4 unknown ("the measured angles overrule this reading") and C5 graded on them
    assert conds["C1"].status == "violated" and "momentum 0.9" in conds["C1"].evidence
    assert [conds[k].status for k in ("C2", "C3", "C4")] == ["holds", "holds", "holds"]
    assert not any("overruled_by_update_angles" in conds[k].details for k in ("C1", "C2", "C3", "C4"))
    assert conds["C5"].status != "holds"
    assert not any(w.startswith("C1–C4 each read as holding") for w in out.warnings)


def _flat() -> FrequencyNorm:
    return FrequencyNorm(spearman=0.02, spearman_ci=(-0.05, 0.09), spearman_p=0.8, pearson_log=0.02, kendall=0.02,
                         loglog_slope=0.0, n_items=N_ITEMS, n_cold=0, deciles=[])


def test_plugin_c5_loses_to_the_trained_table() -> None:
    # C1–C4 hold (id table; declared plain SGD and a cosine loss), the table's norms are flat
    # (random rows: head/median ratio near 1, ρ 0.02): the table grades C5 violated
    declared = DeclaredTraining(optimizer="sgd", lr=0.01, loss="infonce-cos")
    before = assess_conditions(table_bundle(), None, None, declared, run_probes=False, frequency_norm=_flat())
    assert before.conditions["C5"].status == "violated" and before.conditions["C5"].details["decided_by"] == "table"
    pm = _declaring(C5=Condition("lr", "holds", "author: lr large enough"))
    out = assess_conditions(table_bundle(), None, None, declared, pm=pm, run_probes=False, frequency_norm=_flat())
    c5 = out.conditions["C5"]
    assert c5.status == "violated" and c5.details["declared"]["status"] == "holds"  # before: holds, silently
    assert any(w.startswith("C5: plugin 'file:author.py' declares it holds, but the trained table's norms grade it "
                            "violated; the trained table stands") for w in out.warnings), out.warnings


# ---------------------------------------------------------------------------- F2: ambiguous groups


def _ambiguous(user_lr: float = 5.0) -> ModelBundle:
    """Item and user tables in plain-SGD groups that differ in weight decay (no per-parameter
    state shows which holds the item table)."""
    item, user = seeded_tables()
    opt = torch.optim.SGD([{"params": [user], "lr": user_lr}, {"params": [item], "weight_decay": 1e-3}], lr=5.0)
    return table_bundle(stepped(opt), state_dict={})


def _run(bundle: ModelBundle, declared: DeclaredTraining = NONE) -> tuple[dict[str, Condition], list[str]]:
    out = assess_conditions(bundle, None, None, declared, run_probes=False)
    return out.conditions, out.warnings


def test_ambiguous_groups_a_declaration_matching_one_settles_c1() -> None:
    conds, warnings = _run(_ambiguous(), DeclaredTraining(weight_decay=1e-3))
    c1 = conds["C1"]  # before: unknown, the declaration dropped
    assert c1.status == "violated" and c1.details["item_group"] == 1, c1.evidence
    assert "the only one that matches the declared weight_decay 0.001" in c1.evidence
    assert c1.details["group_chosen_by"] == "weight_decay 0.001" and not warnings
    conds, warnings = _run(_ambiguous(), DeclaredTraining(optimizer="sgd", weight_decay=0.0))
    assert conds["C1"].status == "holds" and conds["C1"].details["item_group"] == 0 and not warnings
    # matching none: a warning naming the declaration and the groups; C1 stays on the groups
    conds, warnings = _run(_ambiguous(), DeclaredTraining(optimizer="adam"))
    assert conds["C1"].status == "unknown"
    assert warnings == ["the declared optimizer adam matches none of the 2 param groups that can hold the item "
                        "table (param group 0: SGD (lr=5, momentum=0, weight_decay=0); param group 1: SGD (lr=5, "
                        "momentum=0, weight_decay=0.001)); the optimizer state wins, and C1 rests on those groups"]
    # matching both: still unknown, and the evidence says how far the declaration went
    conds, _ = _run(_ambiguous(), DeclaredTraining(optimizer="sgd"))
    assert conds["C1"].status == "unknown" and "(the declared optimizer sgd matches 2 of them)" in conds["C1"].evidence
    assert conds["C1"].details["declared_match"] == "the declared optimizer sgd matches 2 of them"
    assert "optimizer/momentum/weight_decay matching one group" in conds["C1"].evidence


def test_ambiguous_groups_pass_a_shared_or_declared_rate_to_c5() -> None:
    conds, _ = _run(_ambiguous())
    # before: "no learning rate known" although both groups record lr 5
    assert conds["C5"].details["lr"] == 5.0 and "every candidate param group" in conds["C5"].evidence
    conds, _ = _run(_ambiguous(user_lr=0.5))  # the rates differ: none is the item table's
    assert conds["C5"].details.get("lr") is None
    conds, _ = _run(_ambiguous(user_lr=0.5), DeclaredTraining(lr=5.0))
    assert conds["C5"].details["lr"] == 5.0


def _alike_but_rates(config: dict[str, object] | None = None) -> ModelBundle:
    """Item and user tables in plain-SGD groups alike but for their rates (user 1, item 5):
    C1 holds from either group, and the item table's rate is 1 or 5, unknown which."""
    item, user = seeded_tables()
    opt = torch.optim.SGD([{"params": [user], "lr": 1.0}, {"params": [item]}], lr=5.0)
    return table_bundle(stepped(opt), state_dict={}, config=config)


def test_a_rate_matching_none_of_the_groups_differing_rates_loses_warned() -> None:
    # QA11 conditions N2: --lr 7 against groups at 1 and 5 was taken silently and shown in C1's
    # "optimizer state (...): SGD (lr=7, ...)"; it contradicts the state, so it loses, warned
    conds, warnings = _run(_alike_but_rates(), DeclaredTraining(lr=7.0))
    assert conds["C1"].status == "holds" and "lr=7" not in conds["C1"].evidence
    assert conds["C1"].evidence.endswith("SGD (momentum=0, weight_decay=0)"), conds["C1"].evidence
    assert conds["C5"].details["lr"] is None and conds["C5"].evidence.startswith("no learning rate known")
    assert warnings == ["lr 7 matches none of the learning rates of the 2 param groups that can hold the item table "
                        "(param group 0: lr 1; param group 1: lr 5); the optimizer state wins, so no learning rate "
                        "is taken from it"]
    # one of the recorded rates: taken, and C1 says it is the declaration's, not the state's
    conds, warnings = _run(_alike_but_rates(), DeclaredTraining(lr=5.0))
    assert not warnings and conds["C5"].details["lr"] == 5.0 and conds["C5"].evidence.startswith("lr=5 (lr)")
    assert conds["C1"].evidence.endswith("SGD (lr=5, momentum=0, weight_decay=0) [lr from lr]"), conds["C1"].evidence
    # the same rule for differing groups (C1 unknown) and for a recorded config's rate
    conds, warnings = _run(_ambiguous(user_lr=0.5), DeclaredTraining(lr=7.0))
    assert conds["C5"].details["lr"] is None and len(warnings) == 1
    assert warnings[0].startswith("lr 7 matches none of the learning rates of the 2 param groups"), warnings
    conds, warnings = _run(_alike_but_rates(config={"lr": 7.0}), DeclaredTraining(lr=1.0))
    assert warnings == ["the recorded config's lr 7 (lr) matches none of the learning rates of the 2 param groups "
                        "that can hold the item table (param group 0: lr 1; param group 1: lr 5); the optimizer "
                        "state wins, so no learning rate is taken from it"]
    assert conds["C5"].details["lr"] == 1.0 and "[lr from lr]" in conds["C1"].evidence  # the declaration fills it


# ---------------------------------------------------------------------------- F3, F5


def test_config_momentum_or_weight_decay_against_the_state_is_warned() -> None:
    item, user = seeded_tables()
    state = stepped(torch.optim.SGD([item, user], lr=5.0))
    conds, warnings = _run(table_bundle(state, config={"optimizer": "sgd", "momentum": 0.9, "weight_decay": 0.01}))
    assert conds["C1"].status == "holds"  # the optimizer state wins
    assert warnings == [  # before: none
        "the recorded config's momentum 0.9 (momentum) differs from the optimizer state's 0; the optimizer state wins",
        "the recorded config's weight decay 0.01 (weight_decay) differs from the optimizer state's 0; the optimizer "
        "state wins"]
    conds, warnings = _run(table_bundle(state, config={"optimizer": "sgd", "momentum": 0.0, "weight_decay": 0}))
    assert conds["C1"].status == "holds" and not warnings


def test_declaration_messages_say_what_was_declared() -> None:
    conds, _ = _run(table_bundle(), DeclaredTraining(momentum=0.0, weight_decay=0.0))
    assert conds["C1"].status == "unknown"
    assert conds["C1"].evidence == ("momentum 0 (momentum) and weight decay 0 (weight_decay) known, but the optimizer "
                                    "itself is not named (optimizer)")  # before: "no momentum or weight decay known"
    # "momentum" with momentum 0 is torch.optim.SGD: its default weight decay 0 is assumed, as for "sgd"
    conds, _ = _run(table_bundle(), DeclaredTraining(optimizer="momentum", momentum=0.0))
    assert conds["C1"].status == "holds" and conds["C1"].details["sources"]["weight_decay"].startswith(
        "torch.optim.SGD's default")
    conds, _ = _run(table_bundle(config={"optimizer": "sgd", "momentum": 0.0}))
    assert conds["C1"].evidence.endswith("names SGD but not its weight decay; declare it (weight_decay 0) to settle C1")


def test_plugin_c2_to_c4_lose_to_the_recorded_config_and_win_over_structure_and_flags() -> None:
    violated = {k: Condition("x", "violated", "author: an MLP serves") for k in ("C2", "C3")}
    # the recorded config names the id table as the encoder, and a BPR loss
    config = {"item_encoder": "embedding", "loss": "bpr"}
    pm = _declaring(**violated, C4=Condition("cosine loss", "holds", "author: cosine InfoNCE"))
    out = assess_conditions(table_bundle(config=config), None, None, NONE, pm=pm, run_probes=False)
    conds = out.conditions
    assert [conds[k].status for k in ("C2", "C3", "C4")] == ["holds", "holds", "violated"]
    assert all(conds[k].details["declared"]["source"] == "file:author.py" for k in ("C2", "C3", "C4"))
    said = [w.split(":")[0] for w in out.warnings if "stands" in w]
    assert said == ["C2", "C3", "C4"], out.warnings
    # the tensors' structure alone (an id table) ranks nothing: the author's declaration is taken
    out = assess_conditions(table_bundle(), None, None, NONE, pm=_declaring(**violated), run_probes=False)
    assert [out.conditions[k].status for k in ("C2", "C3")] == ["violated", "violated"] and not out.warnings
    # a --loss declaration is the plugin's rank: the plugin's is taken, both named
    pm = _declaring(C4=Condition("cosine loss", "holds", "author: cosine InfoNCE"))
    out = assess_conditions(table_bundle(), None, None, DeclaredTraining(loss="bpr"), pm=pm, run_probes=False)
    assert out.conditions["C4"].status == "holds"
    assert any(w.startswith("C4: plugin 'file:author.py' declares it holds, where loss gives it violated; the "
                            "plugin's declaration is taken") for w in out.warnings), out.warnings

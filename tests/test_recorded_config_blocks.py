"""A recorded config read by one rule (QA13 conditions F1–F3, auditor/conditions/config_scope.py).

An optimizer or loss recorded as a mapping is read by its name (``name``, ``type``,
``class_path``, Hydra's ``_target_``, a Python path by its last component); the item
optimizer's numbers come only from its own blocks, never from another tower's optimizer, a
normalisation layer or a ``user:`` block; the evidence names each value's real path.

The end-to-end cases use the QA's model: a two-tower id-table model trained with one plain
``torch.optim.SGD(lr=5)`` for both towers (no momentum, no weight decay) on a cosine InfoNCE
loss, saved as weights-only Lightning checkpoints whose ``hyper_parameters`` differ.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

from auditor.cli import cli
from auditor.conditions import assess_conditions
from auditor.conditions.facts import read_config
from auditor.config import DeclaredTraining
from condition_bundles import table_bundle

N_USERS, N_ITEMS, DIM, N = 150, 120, 16, 4000


@pytest.fixture(scope="module")
def sgd_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """The log, the trained weights and the plain-SGD optimizer state (QA13's own/sgd.pt)."""
    folder = tmp_path_factory.mktemp("sgd")
    rng = np.random.default_rng(0)
    p = 1 / np.arange(1, N_ITEMS + 1)
    items = rng.choice(N_ITEMS, N, p=p / p.sum())
    users = rng.integers(0, N_USERS, N)
    pq.write_table(pa.table({"user_id": users, "item_id": items}), folder / "log.parquet")
    torch.manual_seed(0)
    user_table = torch.nn.Embedding(N_USERS, DIM)
    item_table = torch.nn.Embedding(N_ITEMS, DIM)
    torch.nn.init.normal_(user_table.weight, std=0.1)
    torch.nn.init.normal_(item_table.weight, std=0.1)
    opt = torch.optim.SGD([*user_table.parameters(), *item_table.parameters()], lr=5.0)
    u_all, i_all, gen = torch.tensor(users), torch.tensor(items), torch.Generator().manual_seed(0)
    for _ in range(3):
        perm = torch.randperm(N, generator=gen)
        for start in range(0, N, 200):
            batch = perm[start:start + 200]
            u = F.normalize(user_table(u_all[batch]), dim=-1)
            q = F.normalize(item_table(i_all[batch]), dim=-1)
            loss = F.cross_entropy(u @ q.T / 0.1, torch.arange(len(batch)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    weights = {"model.user_embedding.weight": user_table.weight.detach().clone(),
               "model.item_embedding.weight": item_table.weight.detach().clone()}
    return folder, weights, opt.state_dict()


def _check(model: tuple[Path, dict[str, Any], dict[str, Any]], name: str, hyper: dict[str, Any],
           with_state: bool = False) -> dict[str, Any]:
    """``popaudit check`` of a Lightning checkpoint of the model recording ``hyper``: its JSON report."""
    folder, weights, state = model
    ckpt: dict[str, Any] = {"state_dict": weights, "epoch": 3, "global_step": 60,
                            "pytorch-lightning_version": "2.1.0", "hyper_parameters": hyper}
    if with_state:
        ckpt["optimizer_states"] = [state]
    torch.save(ckpt, folder / f"{name}.ckpt")
    out = folder / f"{name}.json"
    result = CliRunner().invoke(cli, ["check", str(folder / f"{name}.ckpt"), "--interactions",
                                      str(folder / "log.parquet"), "--no-retrieval", "--bootstrap", "0", "-q",
                                      "--json", str(out)])
    assert result.exit_code == 0, result.output
    return dict(json.loads(out.read_text()))


def _head_median_ratio(weights: dict[str, Any], folder: Path) -> float:
    """The trained table's head/median norm ratio, computed here with numpy: the median norm
    of the items at or above the 99th-percentile count over that of the 40th–60th percentile band."""
    norms = np.linalg.norm(weights["model.item_embedding.weight"].numpy().astype(np.float64), axis=1)
    counts = np.bincount(pq.read_table(folder / "log.parquet")["item_id"].to_numpy(), minlength=N_ITEMS)
    seen = counts > 0
    f, n = counts[seen].astype(np.float64), norms[seen]
    band = (f >= np.quantile(f, 0.4, method="lower")) & (f <= np.quantile(f, 0.6, method="higher"))
    return float(np.median(n[f >= np.quantile(f, 0.99)]) / np.median(n[band]))


# ---------------------------------------------------------------------------- F1


@pytest.mark.parametrize(("hyper", "key", "lr_key"), [
    ({"optimizer": {"_target_": "torch.optim.Adam", "lr": 0.01}}, "optimizer._target_", "optimizer.lr"),
    ({"optim": {"_target_": "torch.optim.Adam", "lr": 0.01}}, "optim._target_", "optim.lr"),
    ({"optimizer": {"class_path": "torch.optim.Adam", "init_args": {"lr": 0.01}}}, "optimizer.class_path",
     "optimizer.init_args.lr"),
    ({"optimizer": {"name": "adam", "lr": 0.01}}, "optimizer.name", "optimizer.lr"),
    ({"optimizer": {"type": "Adam", "lr": 0.01}}, "optimizer.type", "optimizer.lr"),
    ({"optimizer": "adam", "lr": 0.01}, "optimizer", "lr"),
])
def test_an_optimizer_is_read_by_its_name_under_every_key_frameworks_use(hyper: dict[str, Any], key: str,
                                                                         lr_key: str) -> None:
    recorded = read_config(hyper)
    assert recorded.optimizer is not None and (recorded.optimizer.value, recorded.optimizer.key) == ("Adam", key)
    assert recorded.lr is not None and (recorded.lr.value, recorded.lr.key) == (0.01, lr_key)
    conditions = assess_conditions(table_bundle(config=hyper), None, None, DeclaredTraining(),
                                   run_probes=False).conditions
    assert conditions["C1"].status == "violated"
    assert conditions["C1"].evidence.startswith(f"config ({key}): Adam rescales each coordinate")


def test_hydra_adam_makes_c1_violated_and_c5_unknown_as_every_other_spelling_does(sgd_model: Any) -> None:
    """QA13 F1: was C1 unknown ('no ... recorded optimizer') and C5 holds."""
    report = _check(sgd_model, "hydra_adam", {"optimizer": {"_target_": "torch.optim.Adam", "lr": 0.01}})
    c1, c5 = report["conditions"]["C1"], report["conditions"]["C5"]
    assert c1["status"] == "violated" and c1["details"]["sources"] == {
        "kind": "config (optimizer._target_)", "lr": "config (optimizer.lr)"}
    assert c5["status"] == "unknown" and "but C1 is violated" in c5["evidence"]
    assert c5["details"]["table_head_median_norm_ratio"] == pytest.approx(_head_median_ratio(*sgd_model[1::-1]))


# ---------------------------------------------------------------------------- F2


F2_CONFIGS = {
    "userblock_wd": {"optimizer": "sgd", "lr": 5.0, "momentum": 0.0,
                     "user_optimizer": {"name": "adamw", "lr": 0.01, "weight_decay": 0.05}},
    "bn_momentum": {"optimizer": "sgd", "lr": 5.0, "model": {"user_tower": {"batchnorm": {"momentum": 0.1}}}},
    "user_then_item": {"user": {"optimizer": "adam", "lr": 0.01}, "item": {"optimizer": "sgd", "lr": 5.0}},
}


@pytest.mark.parametrize(("name", "expect"), [
    ("userblock_wd", {"optimizer": ("SGD", "optimizer"), "lr": (5.0, "lr"), "momentum": (0.0, "momentum")}),
    ("bn_momentum", {"optimizer": ("SGD", "optimizer"), "lr": (5.0, "lr")}),
    ("user_then_item", {"optimizer": ("SGD", "item.optimizer"), "lr": (5.0, "item.lr")}),
])
def test_numbers_come_only_from_the_item_optimizers_blocks(name: str, expect: dict[str, Any]) -> None:
    recorded = read_config(F2_CONFIGS[name])
    got = {attr: (fact.value, fact.key) for attr in ("optimizer", "lr", "momentum", "weight_decay")
           if (fact := getattr(recorded, attr)) is not None}
    assert got == expect


def test_item_side_blocks_and_item_names_come_before_generic_ones() -> None:
    recorded = read_config({"optimizer": {"_target_": "torch.optim.SGD", "lr": 0.1, "momentum": 0.9},
                            "item_lr": 5.0, "item": {"momentum": 0.0},
                            "item_tower": {"norm": {"weight_decay": 0.1}, "weight_decay": 0.3}})
    assert recorded.lr is not None and (recorded.lr.value, recorded.lr.key) == (5.0, "item_lr")
    assert recorded.momentum is not None and (recorded.momentum.value, recorded.momentum.key) == (0.0, "item.momentum")
    assert recorded.weight_decay is None  # an item tower's block is the model's, not the optimizer's
    inside = read_config({"optimizer": "sgd", "model": {"item": {"momentum": 0.1}}, "train": {"item": {"lr": 2.0}}})
    assert inside.momentum is None  # an item block inside the model is a part of the model
    assert inside.lr is not None and (inside.lr.value, inside.lr.key) == (2.0, "train.item.lr")


@pytest.mark.parametrize("name", sorted(F2_CONFIGS))
def test_another_blocks_settings_never_break_c1_of_a_plain_sgd_model(sgd_model: Any, name: str) -> None:
    """QA13 F2: weights only, C1 was violated from the other block (weight decay 0.05, momentum
    0.1, Adam) and C5 unknown; with the plain-SGD state it holds, without a warning."""
    alone = _check(sgd_model, f"f2_{name}", F2_CONFIGS[name])
    c1, c5 = alone["conditions"]["C1"], alone["conditions"]["C5"]
    assert c1["status"] == "unknown" and "names SGD but not its" in c1["evidence"], c1
    assert all("user" not in source and "model." not in source for source in c1["details"]["sources"].values())
    assert c5["status"] == "holds" and c5["details"]["lr"] == 5.0
    assert c5["details"]["table_head_median_norm_ratio"] == pytest.approx(_head_median_ratio(*sgd_model[1::-1]))
    assert alone["warnings"] == []
    stated = _check(sgd_model, f"f2_{name}_state", F2_CONFIGS[name], with_state=True)
    assert stated["conditions"]["C1"]["status"] == "holds", stated["conditions"]["C1"]
    assert stated["warnings"] == []  # no 'the recorded config's momentum 0.1 (model.user_tower...) differs'


def test_a_violation_read_elsewhere_than_the_optimizers_name_names_its_path() -> None:
    conditions = assess_conditions(
        table_bundle(config={"cfg": {"train": {"optimizer": {"_target_": "torch.optim.SGD", "momentum": 0.9}}}}),
        None, None, DeclaredTraining(), run_probes=False).conditions
    assert conditions["C1"].evidence == ("config (cfg.train.optimizer._target_): momentum 0.9 (from config "
                                         "(cfg.train.optimizer.momentum)) on the item parameters")


def test_configs_read_before_still_read_the_same() -> None:
    """LightningCLI class_path/init_args and a nested cfg.train block (QA13's negative cases)."""
    cli_mom = read_config({"optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": 5.0, "momentum": 0.9}}})
    assert cli_mom.optimizer is not None and cli_mom.optimizer.value == "SGD"
    assert cli_mom.momentum is not None and cli_mom.momentum.value == 0.9
    nested = read_config({"cfg": {"train": {"optimizer": "adamw", "lr": 0.001, "weight_decay": 0.05}}})
    assert nested.optimizer is not None and (nested.optimizer.value, nested.optimizer.key) == (
        "AdamW", "cfg.train.optimizer")
    assert nested.weight_decay is not None and nested.weight_decay.key == "cfg.train.weight_decay"
    assert nested.lr is not None and nested.lr.value == 0.001


# ---------------------------------------------------------------------------- F3


@pytest.mark.parametrize(("loss", "name", "key", "status", "words"), [
    ({"name": "infonce_dot", "temperature": 0.1}, "infonce_dot", "loss.name", "violated", "dot-product logits"),
    ({"_target_": "mylib.losses.BPRLoss"}, "BPRLoss", "loss._target_", "violated", "BPR ranks by dot-product"),
    ({"class_path": "mylib.losses.CosineInfoNCE"}, "CosineInfoNCE", "loss.class_path", "holds", "cosine"),
    ({"_target_": "mylib.losses.MysteryLoss"}, "MysteryLoss", "loss._target_", "unknown",
     "a loss name popaudit does not recognise"),
    ("infonce_dot", "infonce_dot", "loss", "violated", "dot-product logits"),
])
def test_a_loss_mapping_is_read_by_its_name(loss: Any, name: str, key: str, status: str, words: str) -> None:
    recorded = read_config({"optimizer": "sgd", "loss": loss})
    assert recorded.loss is not None and (recorded.loss.value, recorded.loss.key) == (name, key)
    c4 = assess_conditions(table_bundle(config={"loss": loss}), None, None, DeclaredTraining(),
                           run_probes=False).conditions["C4"]
    assert c4.status == status and c4.evidence.startswith(f"recorded loss ({key}) {name!r}: ")
    assert words in c4.evidence


def test_a_mapping_that_names_nothing_is_said_as_such() -> None:
    conditions = assess_conditions(table_bundle(config={"loss": {"temperature": 0.1}, "optimizer": {"lr": 0.1}}),
                                   None, None, DeclaredTraining(), run_probes=False).conditions
    assert conditions["C4"].status == "unknown" and conditions["C4"].evidence.startswith(
        "the recorded config's loss entry (loss) names no loss")
    assert conditions["C1"].status == "unknown" and "the recorded config's optimizer entry (optimizer) names no " \
        "optimizer" in conditions["C1"].evidence


@pytest.mark.parametrize(("loss", "c4"), [({"name": "infonce_dot", "temperature": 0.1}, "violated"),
                                          ({"_target_": "mylib.losses.MysteryLoss"}, "unknown")])
def test_a_dot_product_loss_mapping_makes_c4_violated_and_c5_unknown(sgd_model: Any, loss: Any, c4: str) -> None:
    """QA13 F3: was C4 'no recorded loss' (unknown) and C5 holds."""
    report = _check(sgd_model, f"f3_{c4}", {"optimizer": "sgd", "lr": 5.0, "loss": loss})
    conditions = report["conditions"]
    assert conditions["C4"]["status"] == c4
    if c4 == "violated":
        assert conditions["C4"]["evidence"] == "recorded loss (loss.name) 'infonce_dot': dot-product logits"
        assert conditions["C5"]["status"] == "unknown" and "but C4 is violated" in conditions["C5"]["evidence"]
    else:
        assert "recorded loss (loss._target_) 'MysteryLoss': a loss name popaudit does not recognise" in \
            conditions["C4"]["evidence"]
        assert conditions["C5"]["status"] == "holds"  # C1–C4 unknown: the table decides (docs/theory.md)

"""The sufficient conditions C1-C5 (SCIENCE.md §2-3): a verdict and its evidence for each.

Evidence comes, strongest first, from plugins (``popaudit_condition_evidence``), the
numeric probes on a live encoder (:mod:`auditor.probes`), the file (optimizer state,
recorded config, what the tensors show) and the flags the user declared (which fill in
only what the file does not say; a conflict is a warning and the file wins). Anything
that cannot be established is ``unknown``, never a guess.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pluggy

from auditor.config import DeclaredTraining
from auditor.errors import ProbeError
from auditor.model import InteractionPairs, ItemStats, LiveModel, ModelBundle
from auditor.optimizers import (  # re-exported: C1's recognition lived here first
    ADAPTIVE,
    OptimizerGroup,
    as_float,
    item_optimizer_state,
    locate_item_parameter,
    normalise_optimizer,
    optimizer_family,
    recognise_optimizer,
)
from auditor.plugins import call_hook, collect_condition_evidence
from auditor import probes as probe_module
from auditor.probes import ProbeOutcome
from auditor.progress import SILENT, Progress
from auditor.result import Condition, Status

CONDITION_NAMES: dict[str, str] = {
    "C1": "plain SGD",
    "C2": "parameter-linear encoder",
    "C3": "non-shared parameters",
    "C4": "cosine-based loss",
    "C5": "sufficiently large learning rate",
}
# Item-encoder kinds popaudit retrain records, and what SCIENCE.md §2 says of each: C2, C3.
_ENCODER_C2_C3: dict[str, tuple[tuple[Status, str], tuple[Status, str]]] = {
    "embedding": (
        ("holds", "an id embedding table is linear in its rows"),
        ("holds", "each item owns its embedding row"),
    ),
    "onehot-linear": (
        ("holds", "a linear layer over one-hot ids is linear in its weights"),
        ("holds", "one-hot inputs are orthogonal, so J_i J_jᵀ = x_iᵀx_j I = 0"),
    ),
    "dense-linear": (
        ("holds", "a linear layer over fixed features is linear in its weights"),
        ("violated", "dense features overlap: J_i J_jᵀ = (x_iᵀx_j) I ≠ 0"),
    ),
    "embedding-linear": (
        ("violated", "a linear layer over learned embeddings is bilinear in the parameters"),
        ("violated", "the shared linear layer couples every pair of items"),
    ),
    "mlp": (
        ("violated", "an MLP's nonlinearities make J depend on θ"),
        ("violated", "the MLP's weights are shared by all items"),
    ),
}
_COSINE_WORDS = ("cos", "normalized", "normalised", "angular", "spherical", "arcface")
_NOT_COSINE_WORDS = {
    "dot": "dot-product logits", "inner": "inner-product logits",
    "bpr": "BPR ranks by dot-product scores", "mse": "squared error on raw scores",
    "rmse": "squared error on raw scores", "l2": "L2 distances", "euclid": "Euclidean distances",
    "triplet": "distance-based triplet loss", "hinge": "margin loss on raw scores",
    "bce": "binary cross-entropy on raw scores", "logistic": "logistic loss on raw scores",
    "wmf": "matrix-factorisation loss on dot products", "als": "matrix-factorisation loss on dot products",
}


@dataclass
class ConditionsOutcome:
    """What :func:`assess_conditions` found: C1-C5, the probes section, angles, warnings."""

    conditions: dict[str, Condition]
    probes: dict[str, Any] | None
    update_angles: np.ndarray | None
    warnings: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------- config


def config_value(config: Mapping[str, Any] | None, names: tuple[str, ...], depth: int = 3) -> tuple[Any, str] | None:
    """The first of ``names`` found in ``config`` (top level first, then nested dicts)."""
    if not isinstance(config, Mapping):
        return None
    lowered = {str(k).lower(): k for k in config}
    for name in names:
        if name in lowered and config[lowered[name]] is not None:
            return config[lowered[name]], str(lowered[name])
    if depth > 0:
        for key, value in config.items():
            if isinstance(value, Mapping):
                found = config_value(value, names, depth - 1)
                if found is not None:
                    return found[0], f"{key}.{found[1]}"
    return None




def classify_loss(name: str) -> tuple[Status, str]:
    """C4 verdict from a loss name: cosine-based names hold, dot/distance ones do not."""
    low = str(name).lower()
    if any(word in low for word in _COSINE_WORDS):
        return "holds", "scores items by cosine (direction only)"
    for word, why in _NOT_COSINE_WORDS.items():
        if word in low:
            return "violated", why
    return "unknown", "the name does not say whether scores are cosines or dot products"


@dataclass
class _Facts:
    """Training settings recorded in the file's config (their keys are returned beside them)."""

    kind: str | None = None
    momentum_implied: bool = False
    lr: float | None = None
    momentum: float | None = None
    weight_decay: float | None = None
    loss: str | None = None
    epochs: float | None = None
    batch_size: int | None = None
    item_encoder: str | None = None


def _config_facts(config: Mapping[str, Any] | None) -> tuple[_Facts, dict[str, str]]:
    facts = _Facts()
    keys: dict[str, str] = {}
    found = config_value(config, ("item_optimizer", "optimizer", "optim", "optimizer_name", "opt"))
    nested: Mapping[str, Any] | None = None
    if found is not None:
        value, keys["optimizer"] = found
        if isinstance(value, Mapping):  # e.g. {"name": "sgd", "lr": ...} or Lightning CLI class_path
            nested = value.get("init_args") if isinstance(value.get("init_args"), Mapping) else value
            value = value.get("name") or value.get("type") or value.get("class_path")
        if isinstance(value, str):
            facts.kind, facts.momentum_implied = normalise_optimizer(value)
            if facts.kind is None:
                facts.kind = value
    for attr, names in (
        ("lr", ("item_lr", "lr", "learning_rate")),
        ("momentum", ("item_momentum", "momentum")),
        ("weight_decay", ("item_weight_decay", "weight_decay", "wd")),
        ("epochs", ("epochs", "max_epochs", "n_epochs", "num_epochs")),
        ("batch_size", ("batch_size", "batchsize")),
    ):
        hit = config_value(nested, names) if nested is not None else None
        hit = hit or config_value(config, names)
        if hit is not None and as_float(hit[0]) is not None:
            setattr(facts, attr, as_float(hit[0]))
            keys[attr] = hit[1]
    if facts.batch_size is not None:
        facts.batch_size = int(facts.batch_size)
    for attr, names in (("loss", ("loss", "loss_name", "loss_fn", "criterion", "objective")),
                        ("item_encoder", ("item_encoder", "item_tower"))):
        hit = config_value(config, names)
        if hit is not None and isinstance(hit[0], str):
            setattr(facts, attr, hit[0])
            keys[attr] = hit[1]
    return facts, keys


# ---------------------------------------------------------------------------- C1


def _assess_c1(
    bundle: ModelBundle, declared: DeclaredTraining, config: _Facts, config_keys: dict[str, str],
    warnings: list[str],
) -> tuple[Condition, float | None]:
    """C1 and the item tower's learning rate (for C5)."""
    details: dict[str, Any] = {}
    file_kind, file_m, file_wd, file_lr = None, None, None, None
    src: dict[str, str] = {}
    group: OptimizerGroup | None = None
    state_note = ""
    groups: list[OptimizerGroup] = []
    opt_state, which = item_optimizer_state(bundle)
    if opt_state is not None:
        groups = recognise_optimizer(opt_state)
        if not groups:
            warnings.append(
                "the checkpoint's optimizer state has no torch param_groups "
                f"(keys: {', '.join(map(str, list(opt_state)[:8]))}); C1 uses the config and flags"
            )
    if groups:
        details["groups"] = [g.to_dict() for g in groups]
        if bundle.format == "popaudit":
            if len({(g.kind, g.momentum, g.weight_decay) for g in groups}) == 1:
                group = groups[0]
            state_note = "the item tower's optimizer state"
        elif len(groups) == 1:
            group = groups[0]
            state_note = "optimizer state (one param group, so it covers the item table)"
        else:
            index, how = locate_item_parameter(groups, opt_state, bundle)
            hit = [g for g in groups if index is not None and index in g.params]
            if hit:
                group = hit[0]
                state_note = f"optimizer state, param group {group.index} (item table is parameter {index}, {how})"
            else:
                statuses = {g.status() for g in groups}
                if len(statuses) == 1 and len({(g.kind, g.momentum, g.weight_decay) for g in groups}) == 1:
                    group = groups[0]
                    state_note = f"optimizer state (all {len(groups)} param groups alike)"
                else:
                    listing = "; ".join(f"group {g.index}: {g.describe()}" for g in groups)
                    status: Status = "violated" if statuses == {"violated"} else "unknown"
                    why = (
                        "every group breaks plain SGD" if status == "violated"
                        else "which group holds the item table is unknown (use --item-key, or a plugin)"
                    )
                    return Condition(
                        CONDITION_NAMES["C1"], status,
                        f"optimizer state has {len(groups)} param groups that differ ({listing}); {why}",
                        details,
                    ), None
    if which:
        state_note = f"{state_note}, {which}" if state_note else which
        details["optimizer_choice"] = which
    if group is not None:
        # An unrecognised kind leaves the name to the config or --optimizer.
        file_kind = None if group.kind == "unknown" else group.kind
        file_m, file_wd, file_lr = group.momentum, group.weight_decay, group.lr
        for name, value in (("kind", file_kind), ("momentum", file_m), ("weight_decay", file_wd), ("lr", file_lr)):
            if value is not None:
                src[name] = "optimizer state"
        details["item_group"] = group.index
        if "initial_lr" in group.settings:
            details["initial_lr"] = group.settings["initial_lr"]
    # Config fills what the optimizer state does not show.
    if file_kind is None and config.kind is not None:
        file_kind, src["kind"] = config.kind, f"config ({config_keys.get('optimizer')})"
    elif config.kind is not None and optimizer_family(config.kind) != optimizer_family(file_kind):
        warnings.append(
            f"the recorded config names optimizer {config.kind!r} but the optimizer state is {file_kind}; "
            "the optimizer state wins"
        )
    known: dict[str, float | None] = {"momentum": file_m, "weight_decay": file_wd, "lr": file_lr}
    for attr in known:
        value = getattr(config, attr)
        if known[attr] is None and value is not None and not (attr == "momentum" and file_kind in ADAPTIVE):
            src[attr] = f"config ({config_keys.get(attr)})"
            known[attr] = value
    implied = config.momentum_implied and src.get("kind", "").startswith("config")
    # Declared flags fill only what the file is silent on; a conflict warns, the file wins.
    if declared.optimizer:
        declared_kind, declared_implied = normalise_optimizer(declared.optimizer)
        if file_kind is None:
            file_kind = declared_kind or declared.optimizer
            src["kind"] = "--optimizer"
            implied = implied or declared_implied
        elif optimizer_family(declared_kind or declared.optimizer) != optimizer_family(file_kind):
            warnings.append(
                f"--optimizer {declared.optimizer} conflicts with the file ({file_kind} from "
                f"{src['kind']}); the file wins"
            )
    for attr, flag in (("momentum", "--momentum"), ("weight_decay", "--weight-decay"), ("lr", "--lr")):
        value, current = getattr(declared, attr), known[attr]
        if value is None:
            continue
        if current is None:
            known[attr], src[attr] = value, flag
        elif not math.isclose(float(value), float(current), rel_tol=1e-9, abs_tol=1e-12):
            warnings.append(f"{flag} {value:g} conflicts with the file ({current:g} from {src[attr]}); the file wins")
    file_m, file_wd, file_lr = known["momentum"], known["weight_decay"], known["lr"]
    details.update(
        {"optimizer": file_kind, "lr": file_lr, "momentum": file_m, "weight_decay": file_wd, "sources": dict(src)}
    )
    where = state_note or (src.get("kind") or src.get("momentum") or src.get("weight_decay") or "")
    if group is not None and group.kind != "unknown":
        violations = group.violations()  # file_kind is group.kind here
    else:
        violations = []
        if file_kind in ADAPTIVE:
            violations.append(f"{file_kind} rescales each coordinate by its gradient history")
        if file_m:
            violations.append(f"momentum {file_m:g}")
        elif implied and file_m is None:
            violations.append("momentum (named by the optimizer, value not recorded)")
        if file_wd:
            violations.append(f"weight decay {file_wd:g}")
        if file_kind in ("ASGD", "LBFGS"):
            violations.append(f"{file_kind} is not plain SGD")
    if violations:
        evidence = f"{where}: {'; '.join(violations)} on the item parameters"
        return Condition(CONDITION_NAMES["C1"], "violated", evidence, details), file_lr
    if file_kind == "SGD" and file_m is not None and file_wd is not None:
        lr_text = f"lr={file_lr:g}, " if file_lr is not None else ""
        evidence = f"{where}: SGD ({lr_text}momentum={file_m:g}, weight_decay={file_wd:g})"
        if src.get("momentum") != src.get("kind") or src.get("weight_decay") != src.get("kind"):
            evidence += f" [momentum from {src['momentum']}, weight decay from {src['weight_decay']}]"
        return Condition(CONDITION_NAMES["C1"], "holds", evidence, details), file_lr
    if file_kind is None and file_m is None and file_wd is None:
        evidence = "no optimizer state, recorded optimizer or --optimizer/--momentum/--weight-decay"
    elif file_kind == "SGD":
        missing = [n for n, v in (("momentum", file_m), ("weight decay", file_wd)) if v is None]
        evidence = (
            f"{where} names SGD but not its {' or '.join(missing)}; declare them "
            "(--momentum 0 --weight-decay 0) to settle C1"
        )
    else:
        evidence = (
            f"no momentum or weight decay known, but the optimizer itself is "
            f"{'unknown' if file_kind is None else repr(file_kind) + ' (not recognised)'}"
        )
    return Condition(CONDITION_NAMES["C1"], "unknown", evidence, details), file_lr




# ---------------------------------------------------------------------------- C2, C3


def _static_c2_c3(bundle: ModelBundle, facts: _Facts) -> tuple[tuple[Status, str], tuple[Status, str]]:
    """C2/C3 from what the file shows, without a live encoder."""
    enc = (facts.item_encoder or "").lower()
    if enc in _ENCODER_C2_C3:
        c2, c3 = _ENCODER_C2_C3[enc]
        return (c2[0], f"recorded item encoder {enc!r}: {c2[1]}"), (c3[0], f"recorded item encoder {enc!r}: {c3[1]}")
    if bundle.format in ("npy", "parquet"):
        text = (
            f"the file is an item table ({bundle.format}), audited as an id embedding table: "
            "{}; if its rows are outputs of an encoder, declare C2/C3 with a plugin"
        )
        return (("holds", text.format("one free row per item is parameter-linear by construction")),
                ("holds", text.format("each item owns its row, so no parameter is shared")))
    if bundle.state_dict:
        others = [k for k in bundle.state_dict if k not in (bundle.item_key, bundle.user_key)]
        item_side = [k for k in others if "item" in k.lower()]
        unclear = [k for k in others if "item" not in k.lower() and "user" not in k.lower()]
        key = bundle.item_key or "the item table"
        if not others or (not item_side and not unclear):
            text = f"the only item-side tensor is the embedding table `{key}` {tuple(bundle.item_table.shape)}: {{}}"
            return (("holds", text.format("parameter-linear by construction")),
                    ("holds", text.format("each item owns its row")))
        listed = ", ".join(f"`{k}`" for k in (item_side or unclear)[:5])
        why = (
            f"the item side has tensors besides `{key}` ({listed}): the encoder is more than a table"
            if item_side else f"tensors not attributable to either tower ({listed})"
        )
        text = f"{why}; a live encoder (popaudit checkpoint, TorchScript, plugin) is needed to check"
        return ("unknown", text), ("unknown", text)
    text = f"no live encoder and no structure to inspect in the {bundle.format} file"
    return ("unknown", text), ("unknown", text)


def _assess_c2(static: tuple[Status, str], probe: ProbeOutcome | None) -> Condition:
    name = CONDITION_NAMES["C2"]
    layers = _layers_text(probe)
    if probe is not None and probe.c2 is not None:
        c2 = probe.c2
        worst = max(c2["relative"])
        numbers = ", ".join(f"ε={e:g}: {r:.2e}" for e, r in zip(c2["epsilons"], c2["relative"]))
        evidence = (
            f"second difference ‖f(θ+εv)+f(θ−εv)−2f(θ)‖/‖f‖ over {c2['n_directions']} random directions "
            f"({numbers}; tolerance {c2['tolerance']:.0e}){layers}"
        )
        status: Status = "holds" if c2["linear"] else "violated"
        return Condition(name, status, evidence, {"second_difference": c2, "max_relative": worst, "static": static[1]})
    if probe is not None and probe.layers is not None and probe.layers["kind"] == "embedding":
        return Condition(name, "holds", f"the item tower is one embedding table{layers}: linear by construction",
                         {"static": static[1], "probe_error": probe.errors.get("c2")})
    details: dict[str, Any] = {}
    if probe is not None and "c2" in probe.errors:
        details["probe_error"] = probe.errors["c2"]
        return Condition(name, static[0], f"{static[1]} (numeric check failed: {probe.errors['c2']})", details)
    return Condition(name, static[0], static[1], details)


def _assess_c3(static: tuple[Status, str], probe: ProbeOutcome | None) -> Condition:
    name = CONDITION_NAMES["C3"]
    layers = _layers_text(probe)
    if probe is not None and probe.c3 is not None and probe.c3["shared"] is not None:
        c3 = probe.c3
        evidence = (
            f"cross-Jacobian over {c3['n_pairs']} item pairs: largest ‖J_iJ_jᵀ‖/√(‖J_iJ_iᵀ‖‖J_jJ_jᵀ‖) = "
            f"{c3['max_offdiag_relative']:.3g}, largest deviation of J_iJ_iᵀ from αI = "
            f"{c3['max_isotropy_deviation']:.3g} (tolerance {c3['tolerance']:.0e}){layers}"
        )
        status: Status = "holds" if not c3["shared"] and c3["isotropic"] else "violated"
        return Condition(name, status, evidence, {"cross_jacobian": c3, "static": static[1]})
    if probe is not None and probe.layers is not None and probe.layers["kind"] == "embedding":
        return Condition(name, "holds", f"the item tower is one embedding table{layers}: each item owns its row",
                         {"static": static[1], "probe_error": probe.errors.get("c3")})
    if probe is not None and "c3" in probe.errors:
        return Condition(name, static[0], f"{static[1]} (numeric check failed: {probe.errors['c3']})",
                         {"probe_error": probe.errors["c3"]})
    return Condition(name, static[0], static[1])


def _layers_text(probe: ProbeOutcome | None) -> str:
    if probe is None or probe.layers is None:
        return ""
    lay = probe.layers
    names = ", ".join(dict.fromkeys(lay["layers"])) or "none"
    return f"; item tower layers: {names}"


# ---------------------------------------------------------------------------- C4


def _assess_c4(
    facts: _Facts, config_keys: dict[str, str], declared: DeclaredTraining, live: LiveModel | None,
    probe: ProbeOutcome | None, warnings: list[str],
) -> Condition:
    name = CONDITION_NAMES["C4"]
    named: tuple[str, str] | None = None
    if facts.loss:
        named = (facts.loss, f"recorded loss ({config_keys.get('loss')})")
    elif live is not None and live.loss_name:
        named = (live.loss_name, "the live model's loss")
    if declared.loss:
        if named is None:
            named = (declared.loss, "--loss")
        elif classify_loss(declared.loss)[0] != classify_loss(named[0])[0] or declared.loss.lower() != named[0].lower():
            warnings.append(f"--loss {declared.loss} conflicts with the file ({named[0]!r}, {named[1]}); the file wins")
    details: dict[str, Any] = {"loss": named[0] if named else None, "loss_source": named[1] if named else None}
    if probe is not None and probe.c4 is not None and probe.c4["orthogonal"] is not None:
        c4 = probe.c4
        details["gradient_alignment"] = c4
        status: Status = "holds" if c4["orthogonal"] else "violated"
        evidence = (
            f"gradient alignment |q·∇_qL|/(‖q‖‖∇_qL‖) on a real batch: max {c4['max']:.2e}, median "
            f"{c4['median']:.2e} over {c4['n']} item slots (tolerance {c4['tolerance']:.0e})"
        )
        if named:
            evidence += f"; loss {named[0]!r}"
            by_name = classify_loss(named[0])[0]
            if by_name != "unknown" and by_name != status:
                warnings.append(
                    f"the loss is named {named[0]!r} but the measured gradients say C4 {status}; the measurement wins"
                )
        return Condition(name, status, evidence, details)
    if named is None:
        why = "no recorded loss, live loss or --loss"
        if probe is not None and "c4" in probe.errors:
            why += f" (numeric check failed: {probe.errors['c4']})"
        return Condition(name, "unknown", why, details)
    status, why = classify_loss(named[0])
    return Condition(name, status, f"{named[1]} {named[0]!r}: {why}", details)


# ---------------------------------------------------------------------------- C5


def _assess_c5(
    bundle: ModelBundle, stats: ItemStats | None, facts: _Facts, lr: float | None, probe: ProbeOutcome | None,
    others: Mapping[str, Condition],
) -> Condition:
    """C5 from the measured per-update growth c/s² and the items' training appearances.

    With c fixed, s ← s + c/s gives s_T² ≈ s_0² + 2cT, so T appearances multiply s by
    √(1 + 2gT) with g = c/s² measured now (per appearance: an item's growth in the probe
    step divided by its copies in the batch). The head (99th-percentile frequency) and the
    median item get T = frequency × epochs; the norm ratio growth alone makes between
    them, ((1+2gT_head)/(1+2gT_med))^¼, is compared with the relative spread of norms a
    random initialisation leaves in d dimensions, 1/√(2d). The probe runs at the
    checkpoint, where norms are largest, so g (and the growth) is if anything underestimated.
    The projection assumes the orthogonal updates of C1-C4; when one is violated the
    evidence says the numbers are indicative only.
    """
    name = CONDITION_NAMES["C5"]
    update = probe.update if probe is not None else None
    details: dict[str, Any] = {"lr": lr}
    if update is None or update.growth.size == 0:
        if lr is None:
            return Condition(name, "unknown", "no learning rate known and no probe step measured the growth", details)
        why = "no probe step ran" if probe is None or probe.update is None else "no item moved in the probe step"
        return Condition(
            name, "unknown",
            f"lr={lr:g} is known but {why}; whether it is large enough depends on the per-update growth c/s², "
            "which needs a live encoder",
            details,
        )
    sample = update.growth_per_appearance if update.growth_per_appearance.size else update.growth
    g = float(np.median(sample))
    probe_lr = update.lr
    if not update.optimizer_restored and lr is None:
        details["growth_per_unit_lr2"] = g
        return Condition(
            name, "unknown",
            f"measured growth c/s² = {g:.3g} per unit lr² (the model's optimizer could not be rebuilt and no lr is "
            "known; pass --lr)",
            details,
        )
    lr_text = f"lr={probe_lr:g}" if probe_lr is not None else (f"lr={lr:g}" if lr is not None else "lr as restored")
    details.update({"growth_per_update": g, "probe_lr": probe_lr})
    freq = stats.frequencies if stats is not None else bundle.item_frequencies
    if freq is None or not np.any(np.asarray(freq) > 0):
        doubling = 1.5 / g if g > 0 else math.inf
        details["appearances_to_double_s"] = doubling
        return Condition(
            name, "unknown",
            f"{lr_text}: measured growth per update c/s² = {g:.3g}; s doubles after ~{doubling:.3g} appearances, "
            "but item frequencies are unknown (give --interactions)",
            details,
        )
    positive = np.asarray(freq, dtype=np.float64)
    positive = positive[positive > 0]
    epochs = facts.epochs
    e = epochs if epochs is not None else 1.0
    f_med, f_head = float(np.median(positive)), float(np.quantile(positive, 0.99))
    t_med, t_head = f_med * e, f_head * e
    s_med, s_head = math.sqrt(1 + 2 * g * t_med), math.sqrt(1 + 2 * g * t_head)
    ratio = math.sqrt(s_head / s_med)
    threshold = 1 + 1 / math.sqrt(2 * bundle.dim)
    details.update({
        "epochs": epochs, "freq_median": f_med, "freq_head_p99": f_head,
        "appearances_median": t_med, "appearances_head": t_head,
        "s_growth_median": s_med, "s_growth_head": s_head,
        "head_median_norm_ratio": ratio, "threshold": threshold,
    })
    epoch_text = f"{e:g} epochs" if epochs is not None else "1 epoch (epochs not recorded, so a lower estimate)"
    status: Status = "holds" if ratio >= threshold else "violated"
    verdict = (
        "the bias materialises" if status == "holds"
        else "growth is too small for the bias to stand out (measured at the checkpoint, so an underestimate)"
    )
    evidence = (
        f"{lr_text}: measured growth per update c/s² = {g:.3g}; over frequency × {epoch_text}, a head item "
        f"(p99 frequency {f_head:g}, {t_head:g} updates) would grow s by ×{s_head:.4g} vs ×{s_med:.4g} for a median "
        f"item ({t_med:g} updates): a norm ratio of {ratio:.4g} from growth alone, "
        f"{'above' if status == 'holds' else 'below'} the init spread 1+1/√(2d) = {threshold:.3g}, so {verdict}"
    )
    broken = [k for k in ("C1", "C2", "C3", "C4") if k in others and others[k].status == "violated"]
    if broken:
        evidence += (
            f" [indicative only: the projection assumes the orthogonal updates s ← s + c/s, and "
            f"{', '.join(broken)} {'is' if len(broken) == 1 else 'are'} violated]"
        )
    return Condition(name, status, evidence, details)


# ---------------------------------------------------------------------------- entry point


def assess_conditions(
    bundle: ModelBundle,
    stats: ItemStats | None,
    pairs: InteractionPairs | None,
    declared: DeclaredTraining,
    *,
    pm: pluggy.PluginManager | None = None,
    seed: int = 0,
    run_probes: bool = True,
    progress: Progress = SILENT,
) -> ConditionsOutcome:
    """Verdicts for C1-C5 with evidence, and the probes section when a live encoder exists.

    The probes run on a float64 deep copy of the live model (``bundle.live`` or one a
    plugin builds); the user's model and files are never touched. Plugin evidence
    (``popaudit_condition_evidence``) overrides the inferred verdicts.
    """
    warnings: list[str] = []
    facts, config_keys = _config_facts(bundle.config)
    c1, lr = _assess_c1(bundle, declared, facts, config_keys, warnings)
    live = bundle.live
    if live is None and pm is not None:
        live = call_hook(pm, "popaudit_live_model", bundle=bundle)
    probe: ProbeOutcome | None = None
    if live is not None and run_probes:
        try:
            probe = probe_module.run_probes(
                live, bundle, pairs, seed=seed, batch_size=facts.batch_size or 256,
                fallback_lr=lr, progress=progress,
            )
        except ProbeError as exc:
            warnings.append(f"numeric probes could not run: {exc}")
        else:
            for key, message in probe.errors.items():
                if not message.startswith("skipped"):
                    warnings.append(f"probe {key} could not run: {message}")
    static_c2, static_c3 = _static_c2_c3(bundle, facts)
    conditions = {
        "C1": c1,
        "C2": _assess_c2(static_c2, probe),
        "C3": _assess_c3(static_c3, probe),
        "C4": _assess_c4(facts, config_keys, declared, live, probe, warnings),
    }
    conditions["C5"] = _assess_c5(bundle, stats, facts, lr, probe, conditions)
    if pm is not None:
        _apply_plugin_evidence(pm, bundle, conditions, warnings)
    angles = probe.update.angles if probe is not None and probe.update is not None else None
    return ConditionsOutcome(
        conditions=conditions,
        probes=probe.to_dict() if probe is not None else None,
        update_angles=angles,
        warnings=warnings,
    )


def _apply_plugin_evidence(
    pm: pluggy.PluginManager, bundle: ModelBundle, conditions: dict[str, Condition], warnings: list[str]
) -> None:
    """Plugin-declared verdicts replace inferred ones (the first plugin to declare a key wins)."""
    declared = collect_condition_evidence(pm, bundle)
    warnings.extend(declared.warnings)
    for key, cond in declared.conditions.items():
        inferred = conditions[key]
        conditions[key] = Condition(
            cond.name or CONDITION_NAMES[key],
            cond.status,
            f"declared by a plugin ({cond.details['source']}): {cond.evidence}",
            {**cond.details, "inferred": {"status": inferred.status, "evidence": inferred.evidence}},
        )

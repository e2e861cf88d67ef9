"""C2 (parameter-linear encoder) and C3 (non-shared parameters) of the item tower.

The numeric probes decide when they ran; otherwise the file's structure (a recorded
encoder kind, a bare table, the tensors beside the item table) gives the verdict.
"""

from __future__ import annotations


from auditor.conditions.facts import RecordedConfig
from auditor.model import ModelBundle
from auditor.probe_results import CrossJacobian, ProbeOutcome, TowerLayers
from auditor.result import C2, C3, CONDITION_NAMES, Condition, Status

Static = tuple[Status, str]
"""A verdict from the file alone, and why."""
RECORDED_ENCODER = "recorded item encoder"
"""How a verdict from the encoder kind the file records begins (an architecture that fixes
how every item reads its parameters, so a sample's one row per item stands for all)."""
_LIVE_CHECKS = "the file alone does not show it; the live encoder's numeric probes check it where they run"

# Item-encoder kinds popaudit retrain records, and what docs/theory.md §2 says of each: C2, C3.
_ENCODER_C2_C3: dict[str, tuple[Static, Static]] = {
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


LIVE_NEEDED = "a live encoder (a popaudit retrain checkpoint, or a plugin's popaudit_live_model) is needed to check"


def _live_needed(fmt: str) -> str:
    """What would check C2/C3 where the file shows no structure to judge and nothing runs:
    popaudit runs no TorchScript or pickled module of its own accord (it cannot tell which
    methods encode items and users, nor the loss), so for those a plugin must wrap it."""
    if fmt in ("torchscript", "pickle"):
        return (f"popaudit does not run the {fmt} module itself (which of its methods encode items and users, and "
                "the loss, are not recorded); a plugin's popaudit_live_model wrapping it runs the numeric checks "
                "(plugins/README.md)")
    return LIVE_NEEDED


def static_c2_c3(bundle: ModelBundle, config: RecordedConfig, *, live: bool = False) -> tuple[Static, Static]:
    """C2/C3 from what the file shows, without a live encoder; ``live``: one is at hand (a
    plugin's, a checkpoint's), so where the file shows nothing its probes are what checks."""
    enc = (config.item_encoder.value if config.item_encoder else "").lower()
    if enc in _ENCODER_C2_C3:
        c2, c3 = _ENCODER_C2_C3[enc]
        return (c2[0], f"{RECORDED_ENCODER} {enc!r}: {c2[1]}"), (c3[0], f"{RECORDED_ENCODER} {enc!r}: {c3[1]}")
    if bundle.format in ("npy", "parquet"):
        text = (
            f"the file is an item table ({bundle.format}), audited as an id embedding table: "
            "{}; if its rows are outputs of an encoder, declare C2/C3 with a plugin"
        )
        return (("holds", text.format("one free row per item is parameter-linear by construction")),
                ("holds", text.format("each item owns its row, so no parameter is shared")))
    if bundle.state_dict:
        item_side, unclear = bundle.tensors_beside_tables()
        key = bundle.item_key or "the item table"
        if not item_side and not unclear:
            table = f"the embedding table `{key}` {tuple(bundle.item_table.shape)}"
            if bundle.item_bias_key is None:
                text = f"the only item-side tensor is {table}: {{}}"
                return (("holds", text.format("parameter-linear by construction")),
                        ("holds", text.format("each item owns its row")))
            text = f"the item-side tensors are {table} and the per-item bias `{bundle.item_bias_key}` served with it: {{}}"
            return (("holds", text.format("parameter-linear by construction")),
                    ("holds", text.format("each item owns its row and its bias")))
        listed = ", ".join(f"`{k}`" for k in (item_side or unclear)[:5])
        why = (
            f"the item side has tensors besides `{key}` ({listed}): the encoder is more than a table"
            if item_side else f"tensors not attributable to either tower ({listed})"
        )
        text = f"{why}; {_LIVE_CHECKS if live else _live_needed(bundle.format)}"
        return ("unknown", text), ("unknown", text)
    text = (f"no structure to inspect in the {bundle.format} file; {_LIVE_CHECKS}" if live
            else f"no live encoder and no structure to inspect in the {bundle.format} file")
    return ("unknown", text), ("unknown", text)


def assess_c2(static: Static, probe: ProbeOutcome | None) -> Condition:
    """C2 from the second difference when it ran, else the tower's layers or the file."""
    name = CONDITION_NAMES[C2]
    layers = _layers_text(probe)
    if probe is not None and probe.second_difference is not None:
        c2 = probe.second_difference
        numbers = ", ".join(f"ε={e:g}: {r:.2e}" for e, r in zip(c2.epsilons, c2.relative))
        evidence = (
            f"second difference ‖f(θ+εv)+f(θ−εv)−2f(θ)‖/‖f‖ over {c2.n_directions} random directions "
            f"({numbers}; tolerance {c2.tolerance:.0e}"
            f"{f', the precision of the encoder’s {c2.output_dtype} output' if c2.output_dtype else ''})"
            f"{_flat_text(c2.flat_over_epsilon, c2.rounding_level)}{layers}"
        )
        status: Status = "holds" if c2.linear else "violated"
        details = {"second_difference": c2.to_dict(), "max_relative": max(c2.relative), "static": static[1]}
        return Condition(name, status, evidence, details)
    if probe is not None and probe.layers is not None and probe.layers.kind == "embedding":
        return Condition(name, "holds", f"the item tower is one embedding table{layers}: linear by construction",
                         {"static": static[1], "probe_error": probe.error("c2")})
    error = probe.error("c2") if probe is not None else None
    if error is not None:
        return Condition(name, static[0], f"{static[1]} (numeric check failed: {error})", {"probe_error": error})
    return Condition(name, static[0], static[1])


def assess_c3(static: Static, probe: ProbeOutcome | None) -> Condition:
    """C3 of the item tower (:func:`_item_c3`), then across the towers: a user tower whose
    outputs read item parameters (J_iJ_uᵀ ≠ 0, ``probes/user_coupling.py``) violates it,
    whatever the item tower alone shows (docs/theory.md §2). User outputs that read only
    parameters no compared item reads leave it as it is where every item of the catalogue
    was compared (J_iJ_uᵀ = 0 for each, so user-side gradients move no q_i: a user table
    listed among the item parameters), and make a holding C3 unknown where they were a
    sample (an item outside it may read them)."""
    c3 = _item_c3(static, probe)
    coupling = probe.user_coupling if probe is not None else None
    if coupling is None or not coupling.reads_items:
        return c3
    figures = (f"largest ‖J_iJ_uᵀr‖/√(‖J_iJ_iᵀr‖‖J_uJ_uᵀr‖) along a random r = {coupling.max_relative:.3g} over "
               f"{coupling.n_users} "
               f"users × {coupling.n_items} items (tolerance {coupling.tolerance:.0e})")
    details = {**c3.details, "user_cross_jacobian": coupling.to_dict()}
    if coupling.coupled:
        return Condition(c3.name, "violated", (
            f"the user tower reads item-tower parameters: {figures}, at user row {coupling.user} and item row "
            f"{coupling.item}, so the user side's gradients move q_i too, not orthogonally to it; item tower alone: "
            f"{c3.evidence}"), details)
    if coupling.exhaustive:
        return Condition(c3.name, c3.status, (
            f"{c3.evidence}; the user tower's outputs depend on parameters given as the item tower's, but on none "
            f"that any item reads ({figures}; the {coupling.n_items} items are the whole catalogue): J_iJ_uᵀ = 0 for "
            "every item, so user-side gradients move no q_i (a parameter no item reads, such as a user table listed "
            "among the item parameters, is no item parameter)"), details)
    if c3.status == "holds":
        return Condition(c3.name, "unknown", (
            f"{c3.evidence}; but the user tower's outputs depend on item-tower parameters, though on none the "
            f"items compared read ({figures}), so whether user-side gradients move some q_i is not shown"), details)
    return Condition(c3.name, c3.status, f"{c3.evidence}; the user tower also reads item-tower parameters", details)


def _item_c3(static: Static, probe: ProbeOutcome | None) -> Condition:
    """C3 from the cross-Jacobian when it ran, else the rows every item reads or the file."""
    name = CONDITION_NAMES[C3]
    layers = _layers_text(probe)
    c3 = probe.cross_jacobian if probe is not None else None
    tower = probe.layers if probe is not None else None
    read = tower if tower is not None and tower.rows_read_items else None
    if c3 is not None and c3.shared is not None:
        evidence = (
            f"cross-Jacobian over {c3.n_pairs} item pairs: largest ‖J_iJ_jᵀ‖/√(‖J_iJ_iᵀ‖‖J_jJ_jᵀ‖) = "
            f"{c3.max_offdiag_relative:.3g}, largest deviation of J_iJ_iᵀ from αI = "
            f"{c3.max_isotropy_deviation:.3g} (tolerance {c3.tolerance:.0e}){_sampled_text(c3)}{layers}"
        )
        status: Status = "holds" if not c3.shared and c3.isotropic else "violated"
        if read is not None and (status == "holds" or read.rows_sharing_items):
            evidence += _rows_text(read)
        elif status == "holds" and not c3.non_sharing_proven:
            if c3.support_indexed_per_item and static[0] == "holds" and static[1].startswith(RECORDED_ENCODER):
                evidence += (f"; each of the {c3.support_items} items compared moves only its own row of every "
                             f"parameter tensor, as the {static[1]}, which says it of every item")
            else:
                status, evidence = "unknown", evidence + _unproven_text(c3)
        elif c3.support_items:
            evidence += _support_text(c3)
        return Condition(name, status, evidence, {"cross_jacobian": c3.to_dict(), "static": static[1]})
    if tower is not None and tower.kind == "embedding":
        return _embedding_c3(name, static, probe, read, layers)
    error = probe.error("c3") if probe is not None else None
    if error is not None:
        return Condition(name, static[0], f"{static[1]} (numeric check failed: {error})", {"probe_error": error})
    return Condition(name, static[0], static[1])


def _embedding_c3(
    name: str, static: Static, probe: ProbeOutcome | None, read: TowerLayers | None, layers: str,
) -> Condition:
    """C3 of a tower built of embedding tables alone whose cross-Jacobian did not run (a tower
    above the numeric probes' size): the rows every item reads decide; unrecorded, unknown."""
    error = probe.error("c3") if probe is not None else None
    details = {"static": static[1], "probe_error": error}
    if read is None:
        return Condition(name, "unknown", (
            f"the item tower is built of embedding tables{layers}, but the rows each item reads could "
            "not be recorded, so whether items share a row (as cold items mapped to one row do) is not shown"
            + (f" (numeric check failed: {error})" if error is not None else "")
        ), details)
    status: Status = "violated" if read.rows_sharing_items else "holds"
    return Condition(name, status, f"the item tower is built of embedding tables{layers}{_rows_text(read)}", details)


def _rows_text(read: TowerLayers) -> str:
    """What the rows every item of the catalogue reads showed (``probes/rows_read.py``)."""
    if not read.rows_sharing_items:
        return (
            f"; the embedding rows all {read.rows_read_items} items of the catalogue read were recorded, "
            "and no two items read a common row (each owns its rows)"
        )
    group = ", ".join(str(i) for i in read.rows_shared_group)
    return (
        f"; the embedding rows all {read.rows_read_items} items of the catalogue read were recorded: "
        f"{read.rows_sharing_items} items read a row another item reads (items {group} read one row), "
        "so their gradients move it together"
    )


def _layers_text(probe: ProbeOutcome | None) -> str:
    if probe is None or probe.layers is None:
        return ""
    names = ", ".join(dict.fromkeys(probe.layers.layers)) or "none"
    return f"; item tower layers: {names}"


def _sampled_text(c3: CrossJacobian) -> str:
    """The coordinate sample behind the C3 figures, when the blocks were not taken in full."""
    if c3.n_coordinates >= c3.dim or c3.max_offdiag_standard_error is None:
        return ""
    errors = [f"{c3.max_offdiag_standard_error:.2g} of the largest ‖J_iJ_jᵀ‖ ratio"]
    if c3.max_isotropy_standard_error is not None:
        errors.append(f"{c3.max_isotropy_standard_error:.2g} of the largest deviation from αI")
    return (
        f"; on {c3.n_coordinates} of {c3.dim} output coordinates, sampled "
        f"(jackknife standard errors: {', '.join(errors)})"
    )


def _support_text(c3: CrossJacobian) -> str:
    """What comparing the items' gradient supports showed (sharing pairs found and probed,
    or the structure that proves non-sharing)."""
    if c3.support_sharing_items:
        return (
            f"; {c3.support_sharing_items} of {c3.support_items} items compared share a parameter entry "
            "with another (their gradients touch it), and the pairs probed are among them"
        )
    return f"; the gradient supports of all {c3.support_items} items are disjoint"


def _unproven_text(c3: CrossJacobian) -> str:
    """Why no sharing in a sample is not C3 holding: the sample, and what was not shown."""
    if not c3.support_items:
        return "; the items were a sample and nothing shows the tower's other items own their parameters"
    if c3.support_indexed_per_item:
        return (
            f"; each of the {c3.support_items} items whose gradient supports were compared (a sample) moves "
            "only its own row of every parameter tensor, but the rows the catalogue's other items read could "
            "not be recorded (a parameter that is no embedding table, or lookups not indexed by the items), "
            "so a few items sharing one row would be missed: not shown either way"
        )
    return (
        f"; no parameter entry is shared among the {c3.support_items} items whose gradient supports were "
        "compared, but the tower does not index one row per item (an item moves several rows or rows "
        "not its own, as a hashed table does), so other items may share: not shown either way"
    )


def _flat_text(flat: bool, level: float | None = None) -> str:
    """Why second differences above the tolerance still read as linear."""
    if not flat:
        return ""
    within = "" if level is None else f" stay within {level:.1e}, the rounding of the tower's coarsest dtype, and"
    return (f"; the figures{within} neither shrink as ε² nor grow with ε past that rounding, so they are "
            "rounding, not curvature")

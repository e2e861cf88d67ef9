"""C5 (a learning rate large enough for the bias to materialise), from measured growth."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from auditor.conditions.angles_check import overruled_by_angles, tilt_cause
from auditor.conditions.c5_table import TableGrowth, table_growth
from auditor.conditions.facts import EPOCHS_BEGUN, Fact, Origin, TraceFacts
from auditor.errors import setting
from auditor.loading.trace_input import LR_TOLERANCE
from auditor.model import ItemStats, ModelBundle
from auditor.probe_results import ProbeOutcome, UpdateProbe
from auditor.result import C5, CONDITION_NAMES, ORTHOGONALITY_IDS, Condition, FrequencyNorm, Status
from auditor.wording import compared_figures
from auditor.trace_section import NO_END


def assess_c5(
    bundle: ModelBundle, stats: ItemStats | None, epochs: Fact[float] | None, lr: Fact[float] | None,
    probe: ProbeOutcome | None, others: Mapping[str, Condition], frequency_norm: FrequencyNorm | None = None,
    trace: TraceFacts | None = None,
) -> Condition:
    """C5 from the measured per-update growth c/s² and the items' training appearances.

    With c fixed, s ← s + c/s gives s_T² ≈ s_0² + 2cT, so T appearances multiply s by
    √(1 + 2gT) with g = c/s² measured now (per appearance: an item's growth in the probe
    step divided by its copies in the batch). The head (99th-percentile frequency) and the
    median item get T = frequency × epochs; the norm ratio growth alone makes between
    them, ((1+2gT_head)/(1+2gT_med))^¼, is compared with the relative spread of norms a
    random initialisation leaves in d dimensions, 1/√(2d). The probe runs at the
    checkpoint, where norms are largest, so g (and the growth) is if anything underestimated.
    The projection assumes the orthogonal updates of C1-C4; when one is violated C5 is
    unknown, as from the table: the growth is not the learning rate's alone. Because it
    can only understate, a projection below the init spread is no proof of a small
    learning rate: the trained
    table decides then (:func:`grade_table`), and ``details["decided_by"]`` says which
    evidence decided.

    A training trace (``trace``) that measured the growth during training replaces the
    probe's: it is the growth at the learning rates the run really used, over many
    steps, rather than one step at the checkpoint.
    """
    name = CONDITION_NAMES[C5]
    freq = stats.frequencies if stats is not None else bundle.item_frequencies
    table = table_growth(bundle.item_table, freq, frequency_norm)
    if trace is not None and trace.angles is not None and trace.angles.growth_per_update is not None:
        return _from_the_trace(name, bundle, stats, epochs or trace.epochs, lr or trace.lr, trace, probe, others,
                               table)
    update = probe.update if probe is not None else None
    known_lr = None if lr is None else lr.value
    details: dict[str, Any] = {"lr": known_lr}
    if update is None or update.growth.size == 0:
        why = "no probe step ran" if update is None else "no item moved in the probe step" if not update.n_nonfinite \
            else f"every item row the probe step changed went NaN or infinite ({update.n_nonfinite:,} rows: it diverged)"
        return _from_the_table(name, lr, why, table, bundle.dim, others, details)
    g = float(np.median(growth_sample(update)))
    if shrank(update):
        return _shrank(name, g, update, bundle, others, details, table)
    if not update.optimizer_restored and known_lr is None:
        details["growth_per_unit_lr2"] = g
        return Condition(
            name, "unknown",
            f"measured growth c/s² = {g:.3g} per unit lr² (the model's optimizer could not be rebuilt and no lr is "
            f"known; pass {setting('lr')})",
            details,
        )
    # The probe's own step says which lr the growth was measured at; else the known one.
    stepped = Fact(update.lr, Origin.PROBE) if update.lr is not None else lr
    lr_text = f"lr={stepped.value:g}" if stepped is not None else "lr as restored"
    details.update({"growth_per_update": g, "probe_lr": update.lr})
    g, measured = _at_training_rate(g, f"{lr_text}: measured growth per update c/s² = {g:.3g}", lr, update.lr,
                                    details)
    return _projected(name, g, measured, bundle, stats, epochs, others, details, table)


def growth_sample(update: UpdateProbe) -> np.ndarray:
    """The per-item growth C5 projects: the measured change of the squared norm per
    appearance, with its sign (c/s² itself under orthogonal updates, where it equals
    ‖Δq‖²/‖q‖²; with weight decay a step can shrink the norms, and ‖Δq‖²/‖q‖², always
    positive, would count the shrinking as growth). Probe results without it: ‖Δq‖²/‖q‖²."""
    for sample in (update.change_per_appearance, update.growth_per_appearance):
        if sample.size:
            return sample
    return update.growth


def shrank(update: UpdateProbe) -> bool:
    """The probe step shrank (or kept) the median norm of the items it moved or of those in
    its batch: eq. 3's growth does not describe the training (weight decay), C5 projects
    nothing (one rule for ``check`` and the lr-sweep)."""
    if update.relative_change.size and float(np.median(update.relative_change)) <= 0:
        return True
    sample = growth_sample(update)
    return bool(sample.size) and float(np.median(sample)) <= 0


def _shrank(
    name: str, g: float, update: UpdateProbe, bundle: ModelBundle, others: Mapping[str, Condition],
    details: dict[str, Any], table: TableGrowth,
) -> Condition:
    """C5 where the probe step shrank (or kept) the median norm, of the items it moved or of
    those in its batch (``g``): eq. 3's growth s ← s + c/s does not describe the training,
    so there is nothing to project and the trained table decides (:func:`grade_table`)."""
    residual = float(np.median(update.residuals)) if update.residuals.size else math.nan
    change = float(np.median(update.relative_change)) if update.relative_change.size else g
    threshold = 1 + 1 / math.sqrt(2 * bundle.dim)
    status, clause, by_table = grade_table(table, threshold, others)
    # g is the change of s per appearance, ≤ 0 here: not a growth c/s² (which is ≥ 0), so it is
    # kept under its own name, and ``shrank`` tells the advice there is no growth to quote.
    details.update({"change_per_appearance": g, "shrank": True, "probe_lr": update.lr, "threshold": threshold,
                    "table_head_median_norm_ratio": table.ratio, "table_spearman": table.rho,
                    "decided_by": "table" if status != "unknown" else None})
    evidence = (f"the probe step shrank the norms (median measured change of s = ‖q‖², (s′ − s)/s, {change:.3g} over the "
                f"{update.relative_change.size} items it moved, {g:.3g} per appearance over its batch's; Pythagorean "
                f"residual median {residual:.3g}: updates not orthogonal to q, {tilt_cause(others)}), so "
                f"‖Δq‖²/‖q‖² is no growth and there is none to project; {clause}")
    return Condition(name, status, evidence, details)


def _at_training_rate(
    g: float, measured: str, lr: Fact[float] | None, probe_lr: float | None, details: dict[str, Any],
) -> tuple[float, str]:
    """The probe's growth ``g`` at the rate training ran at (``lr``), where the probe
    stepped at another (the optimizer state's last scheduled rate): an update is
    proportional to the rate, so c/s² scales with its square. Unchanged otherwise."""
    if lr is None or probe_lr is None or probe_lr <= 0 or math.isclose(lr.value, probe_lr, rel_tol=LR_TOLERANCE):
        return g, measured
    scaled = g * (lr.value / probe_lr) ** 2
    details.update({"growth_per_update": scaled, "probe_growth_per_update": g})
    return scaled, (f"lr={lr.value:g} ({lr.source}), the rate training ran at: growth per update c/s² = "
                    f"{scaled:.3g}, the probe step's {g:.3g} at the optimizer state's lr {probe_lr:g} scaled by "
                    f"({lr.value:g}/{probe_lr:g})² (an update is proportional to the rate)")


def _from_the_trace(
    name: str, bundle: ModelBundle, stats: ItemStats | None, epochs: Fact[float] | None, lr: Fact[float] | None,
    trace: TraceFacts, probe: ProbeOutcome | None, others: Mapping[str, Condition], table: TableGrowth,
) -> Condition:
    """C5 from the growth per update the training trace measured (source ``trace``)."""
    angles = trace.angles
    assert angles is not None and angles.growth_per_update is not None
    g = angles.growth_per_update
    details: dict[str, Any] = {"lr": None if lr is None else lr.value, "growth_per_update": g,
                               "growth_source": "trace", "trace_steps": [angles.first_step, angles.last_step]}
    update = probe.update if probe is not None else None
    if update is not None and update.growth.size:
        details["probe_growth_per_update"] = float(np.median(growth_sample(update)))
    lr_text = f"lr={lr.value:g} ({lr.source})" if lr is not None else "lr unknown"
    measured = (f"{lr_text}: growth per update c/s² = {g:.3g}, the median the training trace measured over steps "
                f"{angles.first_step}–{angles.last_step} (source: trace)")
    if angles.growth_per_step:  # Keras, RecBole: the whole table compared, the batch's rows unknown
        measured += (" per optimizer step, not per appearance (the trace did not know the batch's rows), so it "
                     "overstates the growth per appearance of items that appear more than once in a step")
        details["growth_basis"] = "step"
    return _projected(name, g, measured, bundle, stats, epochs, others, details, table)


class Projection(NamedTuple):
    """The growth a measured c/s² makes over the head's and the median item's appearances
    (the rule of :func:`assess_c5`), and the init spread the norm ratio must reach."""

    freq_median: float
    freq_head: float
    """The 99th-percentile frequency of the items trained on."""
    appearances_median: float
    appearances_head: float
    s_growth_median: float
    s_growth_head: float
    ratio: float
    """((1+2gT_head)/(1+2gT_med))^¼: the head/median norm ratio growth alone makes."""
    threshold: float
    """1 + 1/√(2d), the relative spread of norms a random initialisation leaves."""

    @property
    def status(self) -> Status:
        return "holds" if self.ratio >= self.threshold else "violated"


def project_growth(g: float, frequencies: np.ndarray, epochs: float, dim: int) -> Projection:
    """C5's projection of a growth per update ``g`` over ``epochs`` of the items trained on
    (``frequencies`` > 0; at least one), in ``dim`` dimensions: what ``check`` grades C5 by,
    and what the learning-rate sweep labels its runs by."""
    positive = np.asarray(frequencies, dtype=np.float64)
    positive = positive[positive > 0]
    f_med, f_head = float(np.median(positive)), float(np.quantile(positive, 0.99))
    t_med, t_head = f_med * epochs, f_head * epochs
    s_med, s_head = math.sqrt(1 + 2 * g * t_med), math.sqrt(1 + 2 * g * t_head)
    return Projection(f_med, f_head, t_med, t_head, s_med, s_head, math.sqrt(s_head / s_med),
                      1 + 1 / math.sqrt(2 * dim))


def _projected(
    name: str, g: float, measured: str, bundle: ModelBundle, stats: ItemStats | None, epochs: Fact[float] | None,
    others: Mapping[str, Condition], details: dict[str, Any], table: TableGrowth,
) -> Condition:
    """C5 from a measured growth per update ``g``, projected over the items' appearances
    (the rule of :func:`assess_c5`); ``measured`` says where ``g`` came from. Below the
    init spread the projection only understates, and the trained ``table`` decides."""
    freq = stats.frequencies if stats is not None else bundle.item_frequencies
    if freq is None or not np.any(np.asarray(freq) > 0):
        doubling = 1.5 / g if g > 0 else math.inf
        details["appearances_to_double_s"] = doubling
        return Condition(
            name, "unknown",
            f"{measured}; s doubles after ~{doubling:.3g} appearances, "
            f"but item frequencies are unknown (give {setting('interactions')})",
            details,
        )
    n_epochs = None if epochs is None else epochs.value
    e = n_epochs if n_epochs is not None else 1.0
    p = project_growth(g, np.asarray(freq), e, bundle.dim)
    f_head, t_med, t_head, s_med, s_head, ratio, threshold = (
        p.freq_head, p.appearances_median, p.appearances_head, p.s_growth_median, p.s_growth_head, p.ratio,
        p.threshold)  # fmt: skip
    details.update({
        "epochs": n_epochs, "freq_median": p.freq_median, "freq_head_p99": f_head,
        "appearances_median": t_med, "appearances_head": t_head,
        "s_growth_median": s_med, "s_growth_head": s_head,
        "head_median_norm_ratio": ratio, "threshold": threshold,
    })
    epoch_text = (f"{e:g} epoch{'' if e == 1 else 's'}" if n_epochs is not None
                  else "1 epoch (epochs not recorded, so a lower estimate)")
    if epochs is not None and epochs.key.endswith(NO_END):  # a trace of a run that died: what it recorded
        epoch_text += f" (at least: {epochs.source})"
    elif epochs is not None and not float(e).is_integer():  # a run stopped within an epoch
        epoch_text += f" (the updates actually taken: {epochs.source})"
    elif epochs is not None and epochs.key == EPOCHS_BEGUN:  # stopped within an epoch of unknown length
        epoch_text += f" ({epochs.source})"
    shown_ratio, shown_threshold = compared_figures(ratio, threshold)
    evidence = (
        f"{measured}; over frequency × {epoch_text}, a head item "
        f"(p99 frequency {_count(f_head)}, {_count(t_head)} updates) would grow s by ×{s_head:.3f} vs ×{s_med:.3f} "
        f"for a median item ({_count(t_med)} updates): a norm ratio of {shown_ratio} from growth alone, "
        f"{'above' if p.status == 'holds' else 'below'} the init spread 1+1/√(2d) = {shown_threshold}"
    )
    details.update({"table_head_median_norm_ratio": table.ratio, "table_spearman": table.rho})
    status, clause, decided_by = grade_projection(p, table, others)
    details["decided_by"] = decided_by
    return Condition(name, status, evidence + clause, details)


def grade_projection(
    p: Projection, table: TableGrowth, others: Mapping[str, Condition],
) -> tuple[Status, str, str | None]:
    """C5 from a projection ``p`` and the trained ``table``, beside C1–C4 (``others``): the
    status, the clause that says why (appended to the projection's evidence) and which
    evidence decided (``details["decided_by"]``). The one rule ``check`` grades C5 by and the
    experiment grids label their runs by (:func:`auditor.train.measures.c5_status`).

    A projection above the init spread holds, unless one of C1–C4 is violated: it assumes
    the orthogonal updates s ← s + c/s, so the growth is then not the rate's alone
    (unknown, as from the table). Where the probe step's angles overruled C1–C4 (measured
    the step not orthogonal), that premise is measured false and the projection decides
    nothing either way: the table decides, as where no growth was measured. Where some of
    C1–C4 are merely unknown, a holding projection names them, as the table does. Below
    the init spread the projection only understates, and the trained table decides
    (:func:`grade_table`)."""
    broken = [k for k in ORTHOGONALITY_IDS if k in others and others[k].status == "violated"]
    if p.status == "holds" and broken:
        return ("unknown", f", but the projection assumes the orthogonal updates s ← s + c/s, and {', '.join(broken)} "
                f"{'is' if len(broken) == 1 else 'are'} violated, so it cannot tell the learning rate's part from "
                "the other conditions'", None)
    tilted = overruled_by_angles(others)
    if tilted is not None:
        status, clause, _ = grade_table(table, p.threshold, others, at_rate=False)
        return status, (f", but the projection assumes the orthogonal updates s ← s + c/s, and {tilted}, so it "
                         f"decides nothing; {clause}"), None if status == "unknown" else "table"
    if p.status == "holds":
        return "holds", ", so the bias materialises" + _unknown_caveat(others), "projection"
    status, clause, by_table = grade_table(table, p.threshold, others)
    decided_by = None if status == "unknown" else ("table" if by_table else "projection and table")
    return status, (", but c/s² falls as norms grow, so growth measured at the finished checkpoint (or late in "
                    f"training) can only understate the growth training made; {clause}"), decided_by


def grade_table(
    table: TableGrowth, threshold: float, others: Mapping[str, Condition], at_rate: bool = True,
) -> tuple[Status, str, bool]:
    """C5 from what the trained table shows, where no projection shows the growth: its
    status, the clause that says why, and whether the table alone decided.

    Growth the table shows (:meth:`TableGrowth.grown`) materialised at the learning rate:
    holds, unless one of C1–C4 is violated, which then may have made it (unknown); those of
    C1–C4 that are unknown are named beside it (the table still shows the bias arose). No
    material growth (:meth:`TableGrowth.flat`) while C1–C4 hold, so that every update grew
    a norm: the rate was too small, violated. Anything else: unknown. ``at_rate``: a
    measured growth ties the table to the learning rate (the evidence says "at it").
    """
    broken = [k for k in ORTHOGONALITY_IDS if k in others and others[k].status == "violated"]
    orthogonal = all(k in others and others[k].status == "holds" for k in ORTHOGONALITY_IDS)
    shown = table.describe()
    if table.flat(threshold):  # say the allowance the rule gives a few head items (TableGrowth.flat)
        shown += f"; a ratio within twice the init spread, below {1 + 2 * (threshold - 1):.3f}, is no material growth"
    if table.grown(threshold) and not broken:
        at = " at it" if at_rate else ""
        return ("holds", f"the trained table shows the growth materialised{at} ({shown}): decided by the table"
                f"{_unknown_caveat(others)}", True)
    if broken:
        what = "growth" if table.grown(threshold) else "no clear growth"
        verb = "is" if len(broken) == 1 else "are"
        return ("unknown", f"the trained table shows {what} ({shown}), but {', '.join(broken)} {verb} violated, so it "
                "cannot tell the learning rate's part from the other conditions'", False)
    if table.flat(threshold) and orthogonal:
        return ("violated", f"under C1–C4 (every update grows a norm) the trained table shows no material growth "
                f"either ({shown}), so the learning rate was too small for the bias to stand out", False)
    if table.flat(threshold):
        return ("unknown", f"the trained table shows no material growth ({shown}), but C1–C4 are not all known to "
                "hold, so that is no proof that the learning rate was too small", False)
    return "unknown", f"the trained table ({shown}) neither shows the growth nor rules it out", False


def _unknown_caveat(others: Mapping[str, Condition]) -> str:
    """The clause a holding C5 adds where some of C1–C4 are unknown (none violated): they
    name what else may have made the growth ("" where all are known)."""
    unknown = [k for k in ORTHOGONALITY_IDS if k in others and others[k].status == "unknown"]
    if not unknown:
        return ""
    return (f"; {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} unknown, so part of this growth may come "
            "from a step that is not orthogonal (momentum, an adaptive optimizer, weight decay, a dot-product loss) "
            "rather than the rate alone")


def _count(value: float) -> str:
    """A count in the evidence (appearances, updates): whole from 10 on (an interpolated
    percentile or a stopped epoch makes it fractional, which no reader counts in), else to
    three significant digits, so a small fractional frequency does not read as 0."""
    return f"{value:,.0f}" if abs(value) >= 10 else f"{value:.3g}"


def _from_the_table(
    name: str, lr: Fact[float] | None, why: str, table: TableGrowth, dim: int, others: Mapping[str, Condition],
    details: dict[str, Any],
) -> Condition:
    """C5 with no measured growth: what the finished table shows, by :func:`grade_table`,
    the rule a projection below the init spread defers to (so a verdict the table supports
    is the same with the probes on or off, and with or without a learning rate: the rule
    uses none; growth beside a violated C1–C4 cannot tell the learning rate's part, unknown).
    A known rate is quoted, never credited: nothing measured ties the table's growth to it."""
    if lr is None:
        lr_text = f"no learning rate known and {why}"
    else:
        lr_text = (f"lr={lr.value:g} ({lr.source}) is not tested: {why}, so no measured growth ties the table "
                   "to this rate")
    if table.rho is None:
        return Condition(
            name, "unknown",
            f"{lr_text}, and the frequency–norm correlation was not measured; whether the rate is large enough "
            "depends on the per-update growth c/s², which needs a live encoder or the training log",
            details,
        )
    threshold = 1 + 1 / math.sqrt(2 * dim)
    status, clause, _ = grade_table(table, threshold, others, at_rate=False)
    details.update({"evidence": "the audited table", "spearman": table.rho, "table_spearman": table.rho,
                    "threshold": threshold,
                    "table_head_median_norm_ratio": table.ratio, "decided_by": None if status == "unknown" else "table"})
    return Condition(name, status, f"{lr_text}; {clause}", details)

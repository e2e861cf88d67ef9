"""The sufficient conditions C1-C5 (docs/theory.md §2-3): a verdict and its evidence for each.

Evidence is ranked once (:data:`~auditor.conditions.facts.TIERS`): what is measured (the
numeric probes on a live encoder, :mod:`auditor.probes`; the trained table; the optimizer
state; a trace of this model) over the recorded config over what is declared (the CLI's
settings, a plugin's ``popaudit_condition_evidence``). A declaration fills what the
stronger sources leave open; one that disagrees with them is a warning naming both, and
loses (:mod:`~auditor.conditions.ranking`). Anything that cannot be established is
``unknown``, never a guess.

:mod:`~auditor.conditions.facts` reads the training facts with their sources; one module
per group of checks judges them: ``c1_sgd``, ``c2_c3_encoder``, ``c4_loss``, ``c5_growth``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pluggy

from auditor.conditions.angles_check import angles_overrule
from auditor.conditions.c1_sgd import assess_c1, with_every_run, with_trace_angles
from auditor.conditions.c2_c3_encoder import assess_c2, assess_c3, static_c2_c3
from auditor.conditions.c4_loss import assess_c4, classify_loss, with_trace_angles_c4
from auditor.conditions.c5_growth import assess_c5
from auditor.conditions.ranking import apply_plugin_evidence
from auditor.conditions.rates import training_rate
from auditor.conditions.state_reading import read_optimizer_state, settle_by_declaration
from auditor.conditions.config_scope import config_value
from auditor.conditions.facts import (
    Fact,
    RecordedConfig,
    merge_optimizer_facts,
    read_config,
    read_trace_facts,
    with_trace,
    with_trace_loss,
)
from auditor.config import DeclaredTraining
from auditor.errors import ProbeError
from auditor.values import RowIdPolicy
from auditor.model import InteractionPairs, ItemStats, LiveModel, ModelBundle
from auditor.plugins import DeclaredConditions, collect_condition_evidence
from auditor.plugins.lending import live_author, live_model_hook
from auditor.plugins.manager import PLUGIN_FAILURES, reraise_interrupt
from auditor.probe_results import ProbeOutcome, ProbesNotRun
from auditor.probes.live_contract import while_probing
from auditor.probes.run import run_probes as run_all_probes
from auditor.progress import SILENT, Progress
from auditor.result import C1, C2, C3, C4, C5, ORTHOGONALITY_IDS, Condition, FrequencyNorm
from auditor.trace_section import TrainingSection

__all__ = ["ConditionsOutcome", "assess_conditions", "classify_loss", "config_value"]


@dataclass
class ConditionsOutcome:
    """What :func:`assess_conditions` found: C1-C5, the probes (or why none ran), warnings."""

    conditions: dict[str, Condition]
    probes: ProbeOutcome | None
    probes_not_run: ProbesNotRun | None
    """Why ``probes`` is None (None when the probes ran)."""
    warnings: list[str] = field(default_factory=list)

    @property
    def update_angles(self) -> np.ndarray | None:
        """The probe step's update angles in degrees (None without a step)."""
        update = self.probes.update if self.probes is not None else None
        return None if update is None else update.angles


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
    row_ids: RowIdPolicy = RowIdPolicy(),
    frequency_norm: FrequencyNorm | None = None,
    training: TrainingSection | None = None,
    device: str = "cpu",
) -> ConditionsOutcome:
    """Verdicts for C1-C5 with evidence, and the probes when a live encoder exists.

    The probes run on a float64 deep copy of the live model (``bundle.live`` or one a
    plugin builds); the user's model and files are never touched. Plugin evidence
    (``popaudit_condition_evidence``) overrides the inferred verdicts that rest on nothing
    stronger than a declaration (:func:`~auditor.conditions.ranking.apply_plugin_evidence`). A training trace
    (``training``, of this model) adds its optimizer name, learning rate and measured
    update angles to C1, C4 and C5 (:func:`~auditor.conditions.facts.read_trace_facts`).
    ``device``: where the probes' copy runs (``"cpu"`` or ``"cuda"``, resolved).
    """
    warnings: list[str] = []
    config = read_config(bundle.config)
    state = settle_by_declaration(read_optimizer_state(bundle, warnings), declared, warnings)
    trace = read_trace_facts(training)
    rate = training_rate(state, config, warnings)
    optimizer = with_trace(merge_optimizer_facts(state, config, declared, warnings, rate), trace)
    c1 = with_trace_angles(with_every_run(assess_c1(state, optimizer), training), trace)
    live = bundle.live
    if live is None and pm is not None:
        live = live_model_hook(pm, bundle)
    probe, not_run = _probes(live, bundle, pairs, config, optimizer.lr, run_probes, warnings,
                             seed=seed, progress=progress, row_ids=row_ids, device=device,
                             plugin=live_author(pm, bundle, live) if live is not None else None)
    static_c2, static_c3 = static_c2_c3(bundle, config, live=live is not None)
    conditions = {
        C1: c1,
        C2: assess_c2(static_c2, probe),
        C3: assess_c3(static_c3, probe),
        C4: assess_c4(with_trace_loss(config, trace), declared, live, probe, warnings),
    }
    conditions[C4] = with_trace_angles_c4(conditions[C4], trace, conditions, warnings)
    verdicts = collect_condition_evidence(pm, bundle) if pm is not None else DeclaredConditions()
    warnings.extend(verdicts.warnings)
    # C5 reads C1-C4 as the report states them: declarations applied first.
    apply_plugin_evidence(verdicts, conditions, (C1, C2, C3, C4), warnings)
    angles_overrule(conditions, probe, warnings)
    conditions[C5] = assess_c5(bundle, stats, config.epochs or trace.epochs, optimizer.lr, probe, conditions,
                               frequency_norm, trace)
    apply_plugin_evidence(verdicts, conditions, (C5,), warnings)
    _c5_never_holds_beside_violated(conditions, warnings)
    return ConditionsOutcome(conditions=conditions, probes=probe, probes_not_run=not_run, warnings=warnings)


def _probes(
    live: LiveModel | None, bundle: ModelBundle, pairs: InteractionPairs | None, config: RecordedConfig,
    lr: Fact[float] | None, run_probes: bool, warnings: list[str], *, seed: int, progress: Progress,
    row_ids: RowIdPolicy, device: str = "cpu", plugin: str | None = None,
) -> tuple[ProbeOutcome | None, ProbesNotRun | None]:
    """The numeric probes on the live model, or why none ran (a failure is also a warning);
    code of a plugin's live model (``plugin``: who built it) that fails raises PluginError."""
    probe: ProbeOutcome | None = None
    not_run: ProbesNotRun | None = None
    if not run_probes:
        not_run = ProbesNotRun("disabled")
    elif live is None:
        not_run = ProbesNotRun("no live model")
    else:
        batch_size = config.batch_size.value if config.batch_size else None
        try:
            probe = run_all_probes(
                live, bundle, pairs, seed=seed, batch_size=batch_size or 256,
                fallback_lr=lr.value if lr else None, progress=progress, row_ids=row_ids, device=device,
                plugin=plugin,
            )
        except ProbeError as exc:
            not_run = ProbesNotRun("failed", str(exc))
            warnings.append(not_run.describe())
        except PLUGIN_FAILURES as exc:  # the probes record Exceptions: sys.exit, GeneratorExit... are the plugin's
            if isinstance(exc, Exception) or plugin is None:
                raise
            reraise_interrupt(exc)
            raise while_probing(plugin, exc) from exc
        else:
            warnings.extend(probe.warnings)
            warnings.extend(
                f"probe {key} could not run: {failure.message}"
                for key, failure in probe.errors.items() if not failure.skipped
            )
    return probe, not_run


def _c5_never_holds_beside_violated(conditions: dict[str, Condition], warnings: list[str]) -> None:
    """C5 is never ``holds`` beside a violated C1–C4 (docs/theory.md §7: the growth is then
    not the learning rate's alone): a plugin's declared ``holds`` there becomes unknown, the
    declaration kept in the evidence and ``details["declared"]``, and a warning says so (as a
    probe's measurement outranks a declaration). Graded C5 never holds there already."""
    c5 = conditions[C5]
    broken = [key for key in ORTHOGONALITY_IDS if conditions[key].status == "violated"]
    if c5.status != "holds" or not broken:
        return
    source = c5.details.get("source", "a plugin")
    verb = "is" if len(broken) == 1 else "are"
    warnings.append(
        f"C5: plugin {source!r} declares it holds, but {', '.join(broken)} {verb} violated, beside which C5 is "
        "never graded holds (the norms' growth is not the learning rate's alone); C5 is unknown"
    )
    declared = {"status": c5.status, "evidence": c5.evidence, "source": source}
    conditions[C5] = Condition(
        c5.name, "unknown",
        f"{', '.join(broken)} {verb} violated, so the growth is not the learning rate's alone; plugin {source!r} "
        f"declared it holds ({c5.evidence})",
        {**{k: v for k, v in c5.details.items() if k != "source"}, "declared": declared},
    )

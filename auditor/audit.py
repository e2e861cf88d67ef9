"""``run_audit(config) -> AuditResult``: the one entry the CLI and ``batch`` call.

load → measure → judge: the load stage (:func:`auditor.loading.inputs.load_inputs`) reads every file
once into plain values; measuring takes those values; the verdict is decided from the finished sections.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields as dataclass_fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pluggy

from auditor.audit_record import inputs_section, mitigate_facts, read_files, settings_section
from auditor.config import AuditConfig
from auditor.devices import resolve_device
from auditor.environment import environment_kept
from auditor.evaluation import Evaluation, evaluate
from auditor.loading.frequencies import needs_the_log
from auditor.loading.inputs import AuditInputs, load_inputs
from auditor.loading.item_bias import is_biased
from auditor.loading.statistics import InputCache
from auditor.memory import block_rows
from auditor.metrics.builtin_measures import bias_spearman
from auditor.metrics.exposure import canonical_rows, novelty_unmeasured
from auditor.metrics.frequency_norm import frequency_norm_stats, item_norms
from auditor.metrics.norm_rounding import NormPrecision, norm_precision
from auditor.model import HeldOutQueries, ItemStats, ModelBundle, QueryPopulation
from auditor.metrics.harm_inputs import relevant_rows, with_exposure_shift
from auditor.metrics.user_measures import WHO_PAYS, who_pays_unmeasured
from auditor.plugins import (
    RegisteredMeasures,
    collect_measures,
    compute_measures,
    get_plugin_manager,
    measure_descriptions,
)
from auditor.optimizers import optimizer_states
from auditor.progress import SILENT, Progress
from auditor.result import (
    Accuracy, AuditResult, FrequencyNorm, MeasuredSections, PlotData, ServedSection, ServedVectorsSection,
)
from auditor.tradeoff import UserValues, head_slots, judge_tradeoff

if TYPE_CHECKING:  # loaded on demand: conditions bring the probes, retrieval FAISS
    from auditor.conditions import ConditionsOutcome
    from auditor.loading.served_catalogue import ServedCatalogue
    from auditor.retrieval.measure import RetrievalOutcome

__all__ = ["InputCache", "run_audit"]


def run_audit(
    config: AuditConfig,
    *,
    pm: pluggy.PluginManager | None = None,
    progress: Progress = SILENT,
    cache: InputCache | None = None,
    inputs_read: Callable[[Mapping[str, str], Mapping[str, Any]], None] = lambda _not_measured, _catalogue: None,
) -> AuditResult:
    """Audit one model: frequency–norm statistics, retrieval skew, conditions, verdict.
    ``inputs_read`` sees what the read inputs leave unmeasured, and the catalogue
    (:func:`catalogue_read`), before anything is measured (``check`` refuses a gate there
    that cannot be evaluated). The caller's ``os.environ``
    is as it was on return (:mod:`auditor.environment`)."""
    with environment_kept():  # what lazily imported libraries write there is undone
        return _run_audit(config, pm, progress, cache, inputs_read)


def _run_audit(config: AuditConfig, pm: pluggy.PluginManager | None, progress: Progress,
               cache: InputCache | None,
               inputs_read: Callable[[Mapping[str, str], Mapping[str, Any]], None]) -> AuditResult:
    pm = pm or get_plugin_manager(config.plugins)
    registered = collect_measures(pm)  # before any work: a malformed plugin measure stops here
    if config.model is None:  # served lists alone (docs/served-lists.md)
        # Loaded here: the lists-only audit (served lists, their measures and verdict)
        # is a subsystem a model's audit never runs.
        from auditor.lists_audit import run_lists_audit

        return replace(run_lists_audit(config, registered, progress, cache), read_files=read_files(config))
    inputs = load_inputs(config, pm, progress, cache)
    inputs_read(inputs.not_measured, catalogue_read(inputs, config.ks))
    bundle, stats, warnings, not_measured = inputs.bundle, inputs.stats, inputs.warnings, inputs.not_measured
    # Row blocks sized to the table width: a float64 block stays small whatever n and dim.
    norms = item_norms(bundle.item_table, block=block_rows(bundle.dim, 8, config.max_memory))
    frequency_norm = _frequency_norm(norms, stats, config, progress, warnings, norm_precision(bundle.item_table, bundle.item_dtype),
                                     bundle.item_ids)
    _check_trace_settings(inputs, config, warnings)
    _check_trace_end(inputs, frequency_norm, warnings)
    serving = _serve(inputs, norms, config, progress, registered)
    evaluation = _evaluation(inputs, serving, config)
    assessed = _assess_conditions(inputs, config, pm, progress, frequency_norm)
    _say_not_measured(inputs, config, serving, assessed)
    warnings += (serving.warnings if serving else []) + list(evaluation.notes if evaluation else ()) + assessed.warnings

    sections = MeasuredSections(
        inputs=replace(inputs_section(bundle, config, stats, inputs.population), **mitigate_facts(inputs),
                       split=None if inputs.recbole is None else inputs.recbole.description),
        frequency_norm=frequency_norm,
        retrieval=serving.retrieval if serving else None,
        conditions=assessed.conditions,
        probes=assessed.probes,
        settings=settings_section(config),
        warnings=warnings,
        not_measured=not_measured,
        replaced_globals=inputs.replaced_globals,
        served_vectors=_served_vectors(inputs, config, progress, warnings),
        training=inputs.training,
        served=_served(inputs, serving, config, warnings),
        plot_data=PlotData(
            norms=norms,
            frequencies=None if stats is None else stats.frequencies,
            exposure=serving.exposure if serving else {},
            update_angles=assessed.update_angles,
        ),
    )
    if evaluation is not None:
        queried = inputs.population.raw_ids if inputs.population is not None else None
        sections = replace(sections, accuracy=_judged(evaluation, serving, sections, config, queried))
    # The vectors dot serving sees, as list measures get (the stored norms: sections.plot_data.norms).
    measures = compute_measures(registered, inputs.serving_bundle, stats, sections)

    from auditor.verdict import decide_verdict

    return AuditResult(**_fields(sections), verdict=decide_verdict(sections), measures=measures,
                       measure_descriptions=measure_descriptions(registered), read_files=read_files(config))


def catalogue_read(inputs: AuditInputs, ks: Iterable[int]) -> dict[str, Any]:
    """What the read model tells a gate's advice before anything is measured: ``n_items``
    (a K past it is clamped to it) and, with a query population, ``saturated`` (K -> whether
    the harm is not measured there) for the cut-offs ``ks`` and ``graded_up_to``, as the
    retrieval will record them (:func:`auditor.retrieval.serving.saturation`)."""
    n_items, population = inputs.bundle.n_items, inputs.population
    if population is None:
        return {"n_items": n_items}
    from auditor.retrieval.serving import saturated_at, saturation

    found = saturation(sorted({min(k, n_items) for k in ks}), n_items, population.n_queries, population.exclude)
    having = population.n_queries - found["n_no_candidates"]
    return {"n_items": n_items, "graded_up_to": found["graded_up_to"],
            "saturated": {k: saturated_at(n, having) for k, n in found["n_saturated"].items()}}


def _check_trace_settings(inputs: AuditInputs, config: AuditConfig, warnings: list[str]) -> None:
    """A trace whose config contradicts the declared training settings is another run's."""
    if inputs.training is not None:
        from auditor.conditions.trace_settings import check_declared

        state = bool(optimizer_states(inputs.bundle))  # the file records an optimizer state
        inputs.training = check_declared(inputs.training, config.declared, inputs.bundle.config, state, warnings)


def _check_trace_end(inputs: AuditInputs, frequency_norm: FrequencyNorm | None, warnings: list[str]) -> None:
    """A trace whose finished ρ is not this table's is another run's (never evidence)."""
    if inputs.training is not None and frequency_norm is not None:
        from auditor.loading.trace_input import check_end_rho

        counted = None if inputs.stats is None else int(inputs.stats.frequencies.sum())
        inputs.training = check_end_rho(inputs.training, frequency_norm.spearman, warnings, counted)


def _serve(
    inputs: AuditInputs, norms: Any, config: AuditConfig, progress: Progress, registered: RegisteredMeasures
) -> RetrievalOutcome | None:
    """Every scoring's lists over the population, measured, with the items dot serving
    raises and lowers most (by the norms dot serving sees: the served vectors' where the
    model serves other vectors than its table)."""
    served, stats = inputs.serving_bundle, inputs.stats
    serving = _measure_retrieval(served, stats, config, inputs.population, progress, registered, inputs.heldout,
                                 inputs.served_rows, zero_rows_said=served is inputs.bundle,
                                 catalogue=inputs.served_catalogue)
    if serving is not None:  # the one saturation policy: a K mostly saturated grades nothing
        from auditor.harm import saturation_flags

        serving.retrieval.saturated = saturation_flags(serving.retrieval)
    if serving is not None and stats is not None:
        if served is not inputs.bundle:
            norms = item_norms(served.item_table, block=block_rows(served.dim, 8, config.max_memory))
        serving.retrieval = with_exposure_shift(serving.retrieval, serving.exposure, stats, norms,
                                                config.item_rows(inputs.bundle), config.top_items)
    return serving


def _say_not_measured(
    inputs: AuditInputs, config: AuditConfig, serving: RetrievalOutcome | None, assessed: ConditionsOutcome
) -> None:
    """Why the probes or novelty were not measured, in ``inputs.not_measured``."""
    not_measured, stats = inputs.not_measured, inputs.stats
    if assessed.probes_not_run is not None:
        not_measured["probes"] = assessed.probes_not_run.describe()
        if config.frequencies and inputs.probe_pairs is None and assessed.probes_not_run.reason == "failed":
            not_measured["probes"] = needs_the_log("numeric probes (training batches)")
    if serving is not None:
        not_measured.update(serving.not_measured)
    if serving is not None and stats is not None:
        origin = "frequencies" if config.frequencies else "checkpoint" if stats.from_checkpoint else "log"
        if (why := novelty_unmeasured(stats.user_counts, stats.n_users, origin)) is not None:
            not_measured["novelty"] = why
        if serving.context is not None and serving.context.profiles is None and inputs.population is not None:
            source = "frequencies" if config.frequencies else inputs.population.source
            not_measured[WHO_PAYS] = who_pays_unmeasured(source)


def _frequency_norm(
    norms: Any, stats: ItemStats | None, config: AuditConfig, progress: Progress, warnings: list[str],
    precision: NormPrecision, item_ids: Any = None,
) -> FrequencyNorm | None:
    """The frequency–norm statistics of ``norms``, which count as constant when equal to
    within the table's rounding (``precision``); the items in the order of their raw ids
    (``item_ids``), so that the seeded bootstrap resamples the same items whatever order
    the file stores the rows in (every statistic but its resamples ignores the order)."""
    if stats is None:
        return None
    frequencies, order = stats.frequencies, canonical_rows(item_ids)
    if order is not None:
        norms, frequencies = np.asarray(norms)[order], np.asarray(frequencies)[order]
    with progress.track("Frequency–norm statistics"):
        frequency_norm, notes = frequency_norm_stats(norms, frequencies, n_bootstrap=config.bootstrap,
                                                     seed=config.seed, precision=precision)
    warnings.extend(notes)
    return frequency_norm


def _served_vectors(
    inputs: AuditInputs, config: AuditConfig, progress: Progress, warnings: list[str]
) -> ServedVectorsSection | None:
    """What the model serves with, and the frequency–norm statistics of its served item
    vectors when they are not the stored table (None: not a model popaudit knows serves otherwise)."""
    served = inputs.served_vectors
    if served is None:
        return None
    frequency_norm = None
    if served.items is not inputs.bundle.item_table:  # SimpleX serves its stored item table
        table = served.items
        norms = item_norms(table, block=block_rows(int(table.shape[1]), 8, config.max_memory))
        frequency_norm = _frequency_norm(norms, inputs.stats, config, progress, warnings, norm_precision(table),
                                         inputs.bundle.item_ids)  # the stored table's rows, and ids
    not_served = None if served.as_served else "; ".join(served.warnings) or None
    biases, stats = inputs.bundle.item_biases, inputs.stats
    biased = is_biased(served) and biases is not None and stats is not None
    bias_rho = bias_spearman(biases, stats.frequencies) if biased and biases is not None and stats is not None else None
    return ServedVectorsSection(model=served.serving.model, source=served.source, description=served.description,
                                scoring=served.scoring, as_served=served.as_served, frequency_norm=frequency_norm,
                                not_served=not_served, item_bias_spearman=bias_rho, score=served.score)


def _evaluation(inputs: AuditInputs, serving: RetrievalOutcome | None, config: AuditConfig) -> Evaluation | None:
    """Held-out accuracy of the served lists (None: no holdout, or nothing served)."""
    if inputs.heldout is None or serving is None or inputs.population is None:
        return None
    lists, untrained = serving.lists, inputs.heldout.untrained
    if untrained is not None and inputs.stats is not None:  # RecBole's test users who never trained
        from auditor.retrieval.measure import with_untrained_lists

        lists = with_untrained_lists(lists, inputs.serving_bundle, inputs.stats, config, untrained,
                                     served=inputs.served_untrained)
    return evaluate(inputs.heldout, lists, sorted(serving.retrieval.at), tolerance=config.accuracy_tolerance,
                    keep_seen=config.keep_seen, seen_excluded=inputs.population.exclude is not None,
                    untrained_served=inputs.served_untrained, training=inputs.population.row_profiles)


def _judged(evaluation: Evaluation, serving: RetrievalOutcome | None, sections: MeasuredSections,
            config: AuditConfig, queried: np.ndarray | None) -> Accuracy:
    """The accuracy section with its trade-off decided at the verdict's quoted K, with
    paired bootstrap intervals over users (``queried``: their raw ids, the resamples' order)."""
    from auditor.harm import graded_head, quoted_cutoff, saturated_text

    k = quoted_cutoff(sections)
    if k is None and (full := saturated_text(sections)):  # no K can tell the scorings' head shares apart
        return replace(evaluation.accuracy, recommendation=f"The trade-off is not judged: {full}, so no measured K "
                       "can tell the scorings' head shares apart.")
    if k is None or sections.retrieval is None or serving is None:
        return evaluation.accuracy
    values, head = None, graded_head(sections)  # the trade-off judges the head that graded the severity
    if serving.popularity is not None and k in evaluation.ndcg:
        values = UserValues(evaluation.ndcg[k], head_slots(serving.lists, serving.popularity, k, head, queried))
    served = sections.served_vectors  # a model that scores by cosine: its own lists are the incumbent
    own = "cosine" if served is not None and served.as_served and served.scoring == "cosine" else "dot"
    return judge_tradeoff(evaluation.accuracy, sections.retrieval.at[k], k, values, config.bootstrap, config.seed, own,
                          head, sections.inputs.rescaled_alpha)


def _fields(sections: MeasuredSections) -> dict[str, Any]:
    """The sections' fields by name (shallow: the measured values are not copied)."""
    return {f.name: getattr(sections, f.name) for f in dataclass_fields(sections)}


def _measure_retrieval(
    bundle: ModelBundle,
    stats: ItemStats | None,
    config: AuditConfig,
    population: QueryPopulation | None,
    progress: Progress,
    registered: RegisteredMeasures,
    heldout: HeldOutQueries | None = None,
    served: np.ndarray | None = None,
    zero_rows_said: bool = False,
    catalogue: ServedCatalogue | None = None,
) -> RetrievalOutcome | None:
    """The retrieval section over the population (None when there is none); ``served``:
    the served lists of the queried users, measured as the ``served`` scoring, over ``catalogue``
    where given (as lists alone: QA13 harms F1, F2); ``zero_rows_said``: the load stage warned of
    this table's zero rows."""
    if population is None or stats is None:
        return None
    from auditor.retrieval import measure_retrieval

    relevant = relevant_rows(heldout, population.n_rows)
    if catalogue is not None and catalogue.relevant is None and relevant is not None:  # a holdout the model carries
        from auditor.loading.served_catalogue import mapped_relevant

        catalogue = replace(catalogue, relevant=mapped_relevant(relevant, config.item_rows(bundle), catalogue))
    return measure_retrieval(bundle, stats, config, population, progress, list_measures=registered.lists,
                             relevant=relevant, groups=config.groups, served=served, zero_rows_said=zero_rows_said,
                             served_catalogue=catalogue)


def _served(inputs: AuditInputs, serving: RetrievalOutcome | None, config: AuditConfig,
            warnings: list[str]) -> ServedSection | None:
    """The ``served`` section of the file given with a model (None: none), the log's top-1% share it is graded against,
    the grade itself (every list, as lists alone: ``graded_shares``), and a warning per K short lists fill less than."""
    if inputs.served is None:
        return None
    from auditor.retrieval.served import describe_served, graded_apart_said, graded_shares, popular_reference
    from auditor.retrieval.served import short_lists_beside, short_lists_said

    retrieval, rows = (None if serving is None else serving.retrieval), inputs.served_rows
    if rows is not None and inputs.served_catalogue is not None:  # as measured: by raw id, as lists alone
        rows = inputs.served_catalogue.lists
    missing = int((rows < 0).all(axis=1).sum()) if rows is not None and serving else None
    section = describe_served(inputs.served, missing)
    if rows is not None and inputs.served_catalogue is not None:  # the served scoring's items, as lists alone's
        section.n_catalogue = inputs.served_catalogue.n_items
    in_figures = 0
    if retrieval is not None and rows is not None:
        section.short_lists = short_lists_beside(rows, [k for k, cut in retrieval.at.items() if "served" in cut.norm_aware])
        in_figures = int((rows >= 0).any(axis=1).sum())
        warnings += short_lists_said(section.short_lists, in_figures, "queried users' served lists")
    section.n_graded_apart = int((inputs.served.lists >= 0).any(axis=1).sum()) - in_figures  # diff's population rule
    if (stats := inputs.stats) is not None:  # users missing under --popularity users: refused, as on every route
        section.head_share_log, section.head_share_every_list = graded_shares(inputs.served, stats, config.popularity,
                                                                              config.ks)
        if serving is not None and rows is not None and "popular" in serving.lists:  # the reference, same head
            section.head_share_popular = popular_reference(inputs.served, stats, config.popularity,
                                                           serving.lists["popular"], rows, config.ks)
        apart = (f"their other figures (list measures, overlaps, accuracy, the *_served@K gates) are not measured "
                 f"(retrieval not measured: {inputs.not_measured.get('retrieval') or 'no queries'})"
                 if retrieval is None else "the served scoring is not measured (the queries carry no user identity)"
                 if rows is None else _apart_why(inputs, section.n_graded_apart, in_figures))
        warnings += graded_apart_said(inputs.served, section.n_graded_apart, apart)
    return section


def _apart_why(inputs: AuditInputs, n_apart: int, in_figures: int) -> str:
    """Whose lists (``n_apart``) the served scoring's per-K figures, over the ``in_figures`` queried users' lists,
    leave out: users the log lacks, lists sampled out (``--max-queries``), users the model cannot query."""
    assert inputs.served is not None
    unknown = min(inputs.served.n_unknown_users or 0, n_apart)
    parts = [f"{unknown:,} users the training log lacks"] if unknown else []
    population = inputs.population
    if n_apart > unknown and population is not None and population.sampled:
        parts.append(f"{n_apart - unknown:,} users sampled out (the model's queries were sampled: {population.n_rows:,} "
                     f"of {population.n_eligible:,} users)")
    elif n_apart > unknown:
        parts.append(f"{n_apart - unknown:,} users the model does not query")
    return (f"the lists of {' and '.join(parts)} are in none of the served scoring's per-K figures (its list measures, "
            f"overlaps and accuracy beside the model's), which are over the {in_figures:,} queried users' lists")


def _assess_conditions(
    inputs: AuditInputs, config: AuditConfig, pm: pluggy.PluginManager, progress: Progress,
    frequency_norm: FrequencyNorm | None,
) -> ConditionsOutcome:
    from auditor.conditions import assess_conditions

    return assess_conditions(
        inputs.bundle, inputs.stats, inputs.probe_pairs, config.declared, pm=pm, seed=config.seed,
        run_probes=config.probes, progress=progress, row_ids=config.row_ids, frequency_norm=frequency_norm,
        training=inputs.training, device=resolve_device(config.device) if config.probes else "cpu",
    )

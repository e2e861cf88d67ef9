"""``run_audit(config) -> AuditResult``: the one entry the CLI and ``batch`` call.

load → measure → judge: the model and the log are read once, each measuring stage gets
plain values, and the verdict is decided from the finished sections.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

from auditor.config import AuditConfig
from auditor.errors import setting
from auditor.loading import IdCounts, count_item_ids, load_model, read_pairs
from auditor.loading.population import QueryPopulation, population_of
from auditor.loading.frequencies import needs_the_log, read_frequencies
from auditor.loading.idmap import describe_mapping
from auditor.loading.pickle_globals import globals_warning, replaced_globals
from auditor.loading.statistics import item_stats
from auditor.memory import block_rows
from auditor.metrics.exposure import novelty_unmeasured
from auditor.metrics.frequency_norm import frequency_norm_stats, item_norms
from auditor.model import InteractionPairs, ItemStats, ModelBundle
from auditor.plugins import RegisteredMeasures, call_hook, collect_measures, compute_measures, get_plugin_manager
from auditor.progress import SILENT, Progress
from auditor.evaluation import Evaluation, evaluate, holdout_reason
from auditor.result import Accuracy, AuditResult, FrequencyNorm, Inputs, MeasuredSections, PlotData
from auditor.tradeoff import UserValues, head_slots, judge_tradeoff

if TYPE_CHECKING:  # loaded on demand: conditions bring the probes, retrieval FAISS
    from auditor.conditions import ConditionsOutcome
    from auditor.retrieval.measure import RetrievalOutcome

# Probes need a few real batches, not the whole log.
PROBE_PAIRS = 200_000


@dataclass
class InputCache:
    """Per-file inputs shared by several audits (batch runs read a shared log once)."""

    counts: dict[tuple[Any, ...], IdCounts] = field(default_factory=dict)

    def item_counts(self, config: AuditConfig, need_users: bool, progress: Progress) -> IdCounts:
        """Counts of ``config.interactions``, read on first use (again only when distinct
        users are needed now and the cached counts lack them); or ``config.frequencies``."""
        if config.frequencies is not None:  # counts computed elsewhere: read whole, no log
            key = (Path(config.frequencies).resolve(), config.item_col, config.count_col, config.user_count_col)
            if key not in self.counts:
                self.counts[key] = read_frequencies(config.frequencies, item_col=config.item_col,
                                                    count_col=config.count_col, user_count_col=config.user_count_col)
            return self.counts[key]
        assert config.interactions is not None
        key = (
            Path(config.interactions).resolve(),
            config.interactions_format,
            config.user_col,
            config.item_col,
        )
        cached = self.counts.get(key)
        if cached is None or (need_users and cached.user_counts is None):
            spec = config.training_log
            assert spec is not None
            cached = count_item_ids(spec, need_users=need_users, progress=progress)
            self.counts[key] = cached
        return cached


def run_audit(
    config: AuditConfig,
    *,
    pm: pluggy.PluginManager | None = None,
    progress: Progress = SILENT,
    cache: InputCache | None = None,
) -> AuditResult:
    """Audit one model: frequency–norm statistics, retrieval skew, conditions, verdict."""
    pm = pm or get_plugin_manager(config.plugins)
    registered = collect_measures(pm)  # before any work: a malformed plugin measure stops here
    cache = cache or InputCache()
    progress.note(f"Loading {config.model}")
    bundle = load_model(config.model, config.load_options, pm)
    if bundle.log_id_rule is not None and config.interactions is not None:  # e.g. RecBole numbers ids by the log
        bundle.log_id_rule.apply(
            bundle, Path(config.interactions), config.interactions_format, config.user_col, config.item_col
        )
    warnings = list(bundle.warnings)
    found_globals = replaced_globals(bundle.replaced_globals)  # what a pickle tried (#23)
    warnings.extend(globals_warning(found_globals, config.model))
    not_measured: dict[str, str] = {}

    stats = _item_stats(bundle, config, cache, progress, warnings)
    # Row blocks sized to the table width: a float64 block stays small whatever n and dim.
    norms = item_norms(bundle.item_table, block=block_rows(bundle.dim, 8, config.max_memory))
    frequency_norm = None
    if stats is None:
        not_measured["frequency_norm"] = (
            f"no item frequencies: pass {setting('interactions')} with the training log"
        )
    else:
        with progress.track("Frequency–norm statistics"):
            frequency_norm, notes = frequency_norm_stats(
                norms, stats.frequencies, n_bootstrap=config.bootstrap, seed=config.seed
            )
        warnings.extend(notes)

    population = _population(bundle, stats, config, progress, not_measured)
    serving = _measure_retrieval(bundle, stats, config, population, progress, registered)
    evaluation = None
    accuracy_reason = holdout_reason(bundle, config)
    if accuracy_reason is None:
        accuracy_reason = _accuracy_blocker(config, serving, population, not_measured)
    if accuracy_reason is None:
        assert serving is not None and population is not None
        evaluation = evaluate(bundle, config, population, serving.lists, sorted(serving.retrieval.at), progress)
        warnings += evaluation.warnings
    else:
        not_measured["accuracy"] = accuracy_reason
    if bundle.live is None:  # a plugin may know how to run this model
        bundle.live = call_hook(pm, "popaudit_live_model", bundle=bundle)
    # The log is read for probe batches only when there is a model to probe.
    pairs = _probe_pairs(bundle, config) if config.probes and bundle.live is not None else None
    assessed = _assess_conditions(bundle, stats, config, pairs, pm, progress, frequency_norm)
    if assessed.probes_not_run is not None:
        not_measured["probes"] = assessed.probes_not_run.describe()
        if config.frequencies and pairs is None and assessed.probes_not_run.reason == "failed":
            not_measured["probes"] = needs_the_log("numeric probes (training batches)")
    if serving is not None and stats is not None:
        origin = "frequencies" if config.frequencies else "checkpoint" if stats.from_checkpoint else "log"
        if (why := novelty_unmeasured(stats.user_counts, stats.n_users, origin)) is not None:
            not_measured["novelty"] = why
    warnings += (serving.warnings if serving else []) + assessed.warnings

    sections = MeasuredSections(
        inputs=_inputs(bundle, config, stats, population),
        frequency_norm=frequency_norm,
        retrieval=serving.retrieval if serving else None,
        conditions=assessed.conditions,
        probes=assessed.probes,
        settings=_settings(config),
        warnings=warnings,
        not_measured=not_measured,
        replaced_globals=found_globals,
        plot_data=PlotData(
            norms=norms,
            frequencies=None if stats is None else stats.frequencies,
            exposure=serving.exposure if serving else {},
            update_angles=assessed.update_angles,
        ),
    )
    if evaluation is not None:
        sections = replace(sections, accuracy=_judged(evaluation, serving, sections, config))
    measures = compute_measures(registered, bundle, stats, sections)

    from auditor.verdict import decide_verdict

    return AuditResult(**_fields(sections), verdict=decide_verdict(sections), measures=measures)


def _judged(evaluation: Evaluation, serving: RetrievalOutcome | None, sections: MeasuredSections,
            config: AuditConfig) -> Accuracy:
    """The accuracy section with its trade-off decided at the verdict's quoted K, with
    paired bootstrap intervals over users."""
    from auditor.verdict import quoted_cutoff

    k = quoted_cutoff(sections)
    if k is None or sections.retrieval is None or serving is None:
        return evaluation.accuracy
    values = None
    if serving.popularity is not None and k in evaluation.ndcg:
        values = UserValues(evaluation.ndcg[k], head_slots(serving.lists, serving.popularity, k))
    return judge_tradeoff(evaluation.accuracy, sections.retrieval.at[k], k, values, config.bootstrap, config.seed)


def _fields(sections: MeasuredSections) -> dict[str, Any]:
    """The sections' fields by name (shallow: the measured values are not copied)."""
    return {f.name: getattr(sections, f.name) for f in dataclass_fields(sections)}


def _item_stats(
    bundle: ModelBundle,
    config: AuditConfig,
    cache: InputCache,
    progress: Progress,
    warnings: list[str],
) -> ItemStats | None:
    """Frequencies per table row, from the log (preferred) or the checkpoint's record."""
    counted = config.interactions or config.frequencies  # the log, or counts made from it elsewhere
    counts = None if counted is None else cache.item_counts(config, need_users=config.retrieval, progress=progress)
    return item_stats(bundle, counts, counted, config.row_ids, warnings)


def _population(
    bundle: ModelBundle, stats: ItemStats | None, config: AuditConfig, progress: Progress,
    not_measured: dict[str, str],
) -> QueryPopulation | None:
    """Who retrieval serves (:mod:`auditor.loading.population`), or None with the reason
    recorded in ``not_measured``."""
    if not config.retrieval:
        not_measured["retrieval"] = f"skipped with {setting('retrieval')}"
        return None
    if stats is None:
        not_measured["retrieval"] = f"needs item frequencies: pass {setting('interactions')}"
        return None
    no_history = config.training_log is None and (bundle.train_pairs is None or not len(bundle.train_pairs))
    if bundle.user_table is None and no_history and config.queries in ("auto", "users", "history"):
        not_measured["retrieval"] = (
            needs_the_log("retrieval without a user table (history queries)") + f" or {setting('queries')} PATH"
            if config.frequencies else
            f"no queries: the model has no user table; pass {setting('interactions')} (history queries) or "
            f"{setting('queries')} PATH"
        )
        return None
    return population_of(bundle, config, progress)


def _accuracy_blocker(
    config: AuditConfig, serving: RetrievalOutcome | None, population: QueryPopulation | None,
    not_measured: dict[str, str],
) -> str | None:
    """Why held-out accuracy cannot be read off the served lists (None: it can)."""
    if serving is None or population is None:
        return f"needs the retrieval section ({not_measured.get('retrieval', 'not measured')})"
    if population.raw_ids is None:
        return (f"the queries of {setting('queries')} {config.queries} carry no user identity, so they cannot be "
                "matched to held-out users")
    return None


def _probe_pairs(bundle: ModelBundle, config: AuditConfig) -> InteractionPairs | None:
    """A seeded sample of (user, item-row) pairs for the probes' training batches."""
    spec = config.training_log
    if spec is None:
        return bundle.train_pairs
    return read_pairs(spec, config.item_rows(bundle), max_rows=PROBE_PAIRS, seed=config.seed)


def _measure_retrieval(
    bundle: ModelBundle,
    stats: ItemStats | None,
    config: AuditConfig,
    population: QueryPopulation | None,
    progress: Progress,
    registered: RegisteredMeasures,
) -> RetrievalOutcome | None:
    """The retrieval section over the population (None when there is none)."""
    if population is None or stats is None:
        return None
    from auditor.retrieval import measure_retrieval

    return measure_retrieval(bundle, stats, config, population, progress, list_measures=registered.lists)


def _assess_conditions(
    bundle: ModelBundle,
    stats: ItemStats | None,
    config: AuditConfig,
    pairs: InteractionPairs | None,
    pm: pluggy.PluginManager,
    progress: Progress,
    frequency_norm: FrequencyNorm | None,
) -> ConditionsOutcome:
    from auditor.conditions import assess_conditions

    return assess_conditions(
        bundle,
        stats,
        pairs,
        config.declared,
        pm=pm,
        seed=config.seed,
        run_probes=config.probes,
        progress=progress,
        row_ids=config.row_ids,
        frequency_norm=frequency_norm,
    )


def _inputs(bundle: ModelBundle, config: AuditConfig, stats: ItemStats | None,
            population: QueryPopulation | None) -> Inputs:
    policy = config.row_ids
    assumed = bundle.item_ids is None and policy.offset is None and stats is not None and not stats.from_checkpoint
    return Inputs(
        model=str(config.model),
        interactions=str(config.interactions) if config.interactions else None,
        item_table=bundle.item_key,
        user_table=bundle.user_key,
        n_items=bundle.n_items,
        dim=bundle.dim,
        n_interactions=None if stats is None else stats.n_interactions,
        format=bundle.format,
        item_ids=str(config.item_ids) if config.item_ids else None,
        n_users=None if stats is None else stats.n_users,
        n_unmapped_interactions=0 if stats is None else stats.n_unmapped,
        item_id_mapping=describe_mapping("item", bundle.item_ids_source, policy),
        user_id_mapping=(
            describe_mapping("user", bundle.user_ids_source, policy) if bundle.user_table is not None else None
        ),
        row_ids_assumed=assumed,
        n_untrained_user_rows=None if population is None else population.n_untrained_rows,
    )


def _settings(config: AuditConfig) -> dict[str, Any]:
    return {
        "ks": list(config.ks),
        "queries": config.queries,
        "max_queries": config.max_queries,
        "index": config.index,
        "popularity": config.popularity,
        "seed": config.seed,
        "bootstrap": config.bootstrap,
        "probes": config.probes,
        **({"frequencies": str(config.frequencies)} if config.frequencies else {}),
        "frequency": "interactions per item row in the training log"
        + ("" if config.interactions else f" (counted elsewhere: {config.frequencies})" if config.frequencies
           else " (as recorded in the checkpoint)"),
        "spearman_over": "all items, cold (frequency 0) included",
        "loglog_slope_over": "items with frequency > 0",
        "declared": {k: v for k, v in vars(config.declared).items() if v is not None},
    }

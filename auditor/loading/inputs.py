"""The load stage of an audit: every file it reads, read once, into plain values.

:func:`load_inputs` reads the model (and a framework's own id rule), the item statistics,
the query population, the holdout at the population's positions and the probes'
training pairs; what cannot be read for a section becomes that section's reason in
``not_measured``. Measuring and judging then never open a file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pluggy

from auditor.config import AuditConfig
from auditor.errors import setting, setting_off
from auditor.loading import load_model
from auditor.loading.formats import written_back
from auditor.loading.frequencies import needs_the_log
from auditor.loading.holdout_queries import heldout_queries
from auditor.loading.mitigated import Rescaled, read_rescaled, rescaled_warning
from auditor.loading.item_bias import biased_vectors, is_biased
from auditor.loading.pairs import read_pairs
from auditor.loading.plugin_formats import model_formats
from auditor.loading.pickle_globals import globals_warning, replaced_globals
from auditor.loading.population import population_of
from auditor.loading.recorded_split import empty_holdout_reason
from auditor.loading.recbole_eval import (
    RecBoleEvaluation,
    other_dataset_note,
    recbole_evaluation,
    recbole_heldout,
    recbole_population,
    reproduces_split,
    served_of,
    serving_bundle,
    training_stats,
    untrained_said,
)
from auditor.loading.served import ServedVectors
from auditor.loading.stand_in import raw_user_rows, tables_stand_in
from auditor.memory import check_index_ceiling
from auditor.loading.statistics import InputCache, item_statistics
from auditor.model import HeldOutQueries, InteractionPairs, ItemStats, ModelBundle, QueryPopulation
from auditor.result import ReplacedGlobal
from auditor.plugins.lending import live_model_hook
from auditor.progress import SILENT, Progress
from auditor.trace_section import TrainingSection

if TYPE_CHECKING:  # served lists are read only when given (load_inputs)
    from auditor.loading.served_catalogue import ServedCatalogue
    from auditor.loading.served_lists import ServedLists

PROBE_PAIRS = 200_000
"""Probes need a few real batches, not the whole log."""


@dataclass
class AuditInputs:
    """What one audit measures: the model, its statistics, who is queried, the holdout at
    the queried users, the probes' training pairs, and what could not be read."""

    bundle: ModelBundle
    stats: ItemStats | None
    population: QueryPopulation | None
    heldout: HeldOutQueries | None
    probe_pairs: InteractionPairs | None
    replaced_globals: tuple[ReplacedGlobal, ...] | None
    warnings: list[str] = field(default_factory=list)
    not_measured: dict[str, str] = field(default_factory=dict)
    recbole: RecBoleEvaluation | None = None
    """RecBole's own evaluation split, reproduced (zero-option RecBole audits)."""
    served_vectors: ServedVectors | None = None
    """The vectors a RecBole model or a model with an item bias serves with (None: the stored tables)."""
    training: TrainingSection | None = None
    """What the training trace showed (``trace``; None without one)."""
    served: ServedLists | None = None
    """The served lists given as ``recommendations`` (None: none given)."""
    served_rows: np.ndarray | None = None
    """int64 (n_queries, max K): the served list of each queried user (-1: empty slot)."""
    served_catalogue: ServedCatalogue | None = None
    """The served lists of the queried users over the lists-alone catalogue, which the served scoring is measured
    over (QA13 harms F1, F2; None: not measured, or RecBole's route, whose log is the run's split)."""
    served_log_users: np.ndarray | None = None
    """Nobody queried (retrieval not measured): the training log's users, whose served lists grade
    the severity (None: queried, or the log names no users: every list grades)."""
    served_untrained: np.ndarray | None = None
    """The same for :attr:`HeldOutQueries.untrained` (RecBole's test users who never trained):
    accuracy alone scores them (None: no served lists, or no such user)."""
    written_back: bool | None = None
    """Whether ``popaudit mitigate`` writes the model back in its format (``formats.written_back``)."""
    rescaled: Rescaled | None = None
    """What the sidecar beside a ``popaudit mitigate`` output says of it (None: not one)."""

    @property
    def serving_bundle(self) -> ModelBundle:
        """The bundle retrieval and accuracy serve from: the served vectors in place of the tables."""
        return serving_bundle(self.bundle, self.served_vectors)


def _say_served(inputs: AuditInputs) -> None:
    """The served vectors' warnings; a stand-in's first of all, since every figure after
    it is of vectors the model does not serve."""
    served = inputs.served_vectors
    if served is None:
        return
    if served.as_served:
        inputs.warnings.extend(served.warnings)
    else:
        inputs.warnings[:0] = served.warnings


def load_inputs(
    config: AuditConfig, pm: pluggy.PluginManager, progress: Progress = SILENT, cache: InputCache | None = None
) -> AuditInputs:
    """Read every input of the audit ``config`` describes (module docstring)."""
    assert config.model is not None, "a lists-only audit loads through load_lists_inputs"
    progress.note(f"Loading {config.model}")
    bundle = load_model(config.model, config.load_options, pm)
    if config.retrieval:  # an index over the ceiling is known from the table's shape: refused before the log is read
        check_index_ceiling(config.index, config.max_memory, bundle.n_items, bundle.dim)
    if bundle.log_id_rule is not None and config.interactions is not None:  # e.g. RecBole numbers ids by the log
        bundle.log_id_rule.apply(
            bundle, Path(config.interactions), config.interactions_format, config.user_col, config.item_col
        )
    evaluation = recbole_evaluation(bundle, config) if reproduces_split(bundle, config) else None
    found_globals = replaced_globals(bundle.replaced_globals)  # what a pickle tried
    inputs = AuditInputs(bundle, None, None, None, None, found_globals, list(bundle.warnings), recbole=evaluation)
    if found_globals is None:  # the unsafe_globals gate and the report say why
        inputs.not_measured["replaced_globals"] = bundle.globals_unrecorded or "the loader did not record them"
    if (other := other_dataset_note(bundle, config)) is not None:
        inputs.warnings.insert(0, other)
    inputs.written_back = written_back(model_formats(pm), bundle.format)
    inputs.rescaled = read_rescaled(Path(config.model))
    if inputs.rescaled is not None:
        inputs.warnings.append(rescaled_warning(config.model, inputs.rescaled))
    inputs.warnings.extend(globals_warning(found_globals, config.model))
    if config.trace is not None:  # before the heavy reads: a bad trace fails fast
        from auditor.loading.trace_input import load_training  # the trace reader: only with a trace

        inputs.training = load_training(config.trace, bundle, inputs.warnings)
    cache = cache or InputCache()
    inputs.stats = training_stats(evaluation) if evaluation is not None else item_statistics(
        bundle, config, cache, progress, inputs.warnings
    )
    inputs.served_vectors = served_of(bundle, evaluation, config) or biased_vectors(bundle)
    _say_served(inputs)
    if inputs.stats is None:
        inputs.not_measured["frequency_norm"] = f"no item frequencies: pass {setting('interactions')} with the training log"
    inputs.population = _population(inputs, config, progress, cache)
    if config.recommendations is not None:
        _read_served(inputs, config, cache, progress)
    inputs.heldout = _heldout(inputs, config, progress)
    if bundle.live is None:  # a plugin may know how to run this model
        bundle.live = live_model_hook(pm, bundle)
    queried = inputs.population is not None and inputs.population.source == "users"
    if inputs.served_vectors is None:  # an item encoder no loader or plugin runs: its table stands in
        inputs.served_vectors = tables_stand_in(bundle, queried)
        _say_served(inputs)
    elif is_biased(inputs.served_vectors) and queried:  # the items as served; the user tower may compute more
        if (raw := raw_user_rows(bundle, inputs.served_vectors)) is not None:
            inputs.served_vectors = raw
            _say_served(inputs)
    if config.probes and bundle.live is not None:  # the log is read for batches only when there is a model to step
        spec = config.training_log
        inputs.probe_pairs = bundle.train_pairs if spec is None else read_pairs(
            spec, config.item_rows(bundle), max_rows=PROBE_PAIRS, seed=config.seed
        )
    return inputs


def _read_served(inputs: AuditInputs, config: AuditConfig, cache: InputCache, progress: Progress) -> None:
    """The served lists given with the model, lined up with its queried users; where nobody is
    queried, with the training log's users, whose lists grade all the same (QA "Served N1")."""
    from auditor.loading.served_inputs import catalogue_note, served_for_model, unqueried_log_users  # only when given

    if inputs.population is None and inputs.stats is not None:
        inputs.served_log_users = unqueried_log_users(config, cache, progress)
    inputs.served, inputs.served_rows, notes = served_for_model(
        config, inputs.bundle, inputs.population, cache, progress, evaluates_untrained=inputs.recbole is not None,
        log_users=inputs.served_log_users)
    inputs.warnings.extend(notes)
    if inputs.served_rows is not None and inputs.population is not None and inputs.recbole is None:
        from auditor.loading.served_catalogue import served_catalogue

        assert inputs.population.row_ids is not None  # lined up: the queries carry user ids
        inputs.served_catalogue = served_catalogue(config, cache, inputs.population.row_ids, progress)
    if inputs.served_rows is not None and inputs.stats is not None and config.interactions is not None:  # groups drawn
        if note := catalogue_note(inputs.served, inputs.stats.frequencies, inputs.bundle.source,
                                 inputs.served_catalogue is not None):
            inputs.warnings.append(note)


def _population(
    inputs: AuditInputs, config: AuditConfig, progress: Progress, cache: InputCache | None = None
) -> QueryPopulation | None:
    """Who retrieval serves, or None with the reason recorded."""
    bundle = inputs.bundle
    if not config.retrieval:
        inputs.not_measured["retrieval"] = f"skipped with {setting_off('retrieval')}"
        return None
    if inputs.stats is None:
        inputs.not_measured["retrieval"] = f"needs item frequencies: pass {setting('interactions')}"
        return None
    no_history = config.training_log is None and (bundle.train_pairs is None or not len(bundle.train_pairs))
    if bundle.user_table is None and no_history and config.queries in ("auto", "users", "history"):
        inputs.not_measured["retrieval"] = (
            needs_the_log("retrieval without a user table (history queries)") + f" or {setting('queries')} PATH"
            if config.frequencies else
            f"no queries: the model has no user table; pass {setting('interactions')} (history queries) or "
            f"{setting('queries')} PATH"
        )
        return None
    if inputs.recbole is not None:  # RecBole's training part and test masking
        return recbole_population(inputs.serving_bundle, config, inputs.recbole, progress)
    memo = None if cache is None else cache.logs
    if is_biased(inputs.served_vectors):  # the factors' queries q, served as [q, 1] (zero as served: left out)
        return population_of(bundle, config, progress, memo, served=inputs.served_vectors)
    return population_of(inputs.serving_bundle, config, progress, memo)


def _anonymous(population: QueryPopulation, config: AuditConfig) -> str:
    """Why queries without user ids cannot be evaluated: a query file's vectors, or user-table
    rows whose users are unknown (no log to name them: counts alone, or rows without ids)."""
    if population.source == "file":
        return (f"the queries of {setting('queries')} {config.queries} carry no user identity, so they cannot be "
                "matched to held-out users")
    if config.frequencies is not None:
        return needs_the_log("held-out accuracy (which user-table rows trained, and on which items, to match "
                             "held-out users and exclude their training items)")
    return (f"the rows of the user table are not tied to user ids (pass {setting('user_ids')}), so they cannot be "
            "matched to held-out users")


def _heldout(inputs: AuditInputs, config: AuditConfig, progress: Progress) -> HeldOutQueries | None:
    """The holdout at the queried users, or None with the reason accuracy is not measured."""
    if config.holdout is None and inputs.bundle.holdout_pairs is None:
        reason = (
            f"no held-out interactions: pass {setting('holdout')} PATH (a log of interactions kept out of "
            "training) to measure recall/NDCG of dot, cosine and norm-aware serving beside their exposure"
        )
    elif config.holdout is None and inputs.bundle.holdout_pairs is not None and not len(inputs.bundle.holdout_pairs):
        # the model trained fine: audit it, and say why accuracy has nothing to rank against
        reason = f"{inputs.bundle.source}: " + empty_holdout_reason(inputs.bundle.config)
        inputs.warnings.append(f"accuracy not measured: {reason}")
    elif not config.retrieval:
        reason = f"skipped with {setting_off('retrieval')} (accuracy ranks the same lists as retrieval)"
    elif inputs.population is None:
        reason = f"needs the retrieval section ({inputs.not_measured.get('retrieval', 'not measured')})"
    elif inputs.population.raw_ids is None:
        reason = _anonymous(inputs.population, config)
    else:
        heldout = (  # RecBole's route evaluates its untrained test users as RecBole does, served lists or not
            recbole_heldout(inputs.bundle, inputs.serving_bundle, config, inputs.population, inputs.recbole, progress)
            if inputs.recbole is not None else heldout_queries(inputs.bundle, config, inputs.population, progress)
        )
        inputs.warnings.extend(heldout.warnings)
        if inputs.recbole is not None and heldout.untrained is not None:
            inputs.population = untrained_said(inputs.population, heldout, inputs.recbole)
            if inputs.served is not None:  # their own served lists where the file holds them
                from auditor.loading.served_inputs import served_for_untrained

                inputs.served_untrained, note = served_for_untrained(inputs.served, heldout.untrained)
                inputs.warnings.append(note)
        if (none := heldout.none_evaluated()) is None:
            return heldout
        reason = none
    inputs.not_measured["accuracy"] = reason
    return None

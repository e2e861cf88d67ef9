"""``--alpha auto`` for a model audited with history queries (no user table): the trade-off
of what dot serving of each candidate output gives, its queries rebuilt from it.

``check``'s ``alpha_<a>`` scorings keep the queries and weight each item's inner product
by ‖k‖^(α−1), which is what dot serving of the rescaled table gives for queries that do
not come from the table (a user table, a query file). History queries are each user's
mean training-item vector, built from the item rows, so ``check OUT`` builds them from the
rescaled rows: a query mean_i k_i·‖k_i‖^(α−1), not mean_i k_i. The figures ``mitigate``
promises for such a model are therefore measured here the way ``check OUT`` measures
them: for each candidate α, the table rescaled by the one rule (in the blocks the writers
use, stored as the float32 ``check`` reads), the population rebuilt by the one function
every audit builds it with (:func:`~auditor.loading.population.population_of`; the log's
users and their training items read once and kept in the log memo), and served by dot
product; then the same evaluation, intervals and choice as the audit's trade-off
(:func:`~auditor.tradeoff.judge_tradeoff`), each candidate named by its α (``cosine``,
``alpha_<a>``) against the original's dot serving.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pluggy

from auditor.alpha import alpha_scoring
from auditor.config import AuditConfig
from auditor.errors import InputError, setting
from auditor.evaluation import evaluate
from auditor.loading.inputs import AuditInputs, load_inputs
from auditor.loading.item_bias import is_biased
from auditor.loading.population import population_of
from auditor.loading.statistics import InputCache
from auditor.metrics.harm_inputs import relevant_rows
from auditor.mitigation.rescale import numpy_io, rescale_blocks
from auditor.model import ModelBundle, QueryPopulation
from auditor.progress import SILENT, Progress
from auditor.result import Accuracy, CutoffMeasures
from auditor.tradeoff import UserValues, head_slots, judge_tradeoff

QUERIES_REBUILT = (
    "history: each user's mean training-item vector, rebuilt from the rescaled table (what check OUT queries with)"
)
"""How the trade-off's queries were formed, as the sidecar records it for history-query models."""


@dataclass(frozen=True)
class _Served:
    """Dot serving of one candidate output: its lists and their measures at the trade-off's K."""

    lists: np.ndarray
    cut: CutoffMeasures
    popularity: np.ndarray
    """The popularity per item row the head is cut by (the ``popularity`` setting's)."""


def output_tradeoff(config: AuditConfig, k: int, *, pm: pluggy.PluginManager, progress: Progress = SILENT,
                    cache: InputCache | None = None, head: int = 1) -> tuple[Accuracy, CutoffMeasures]:
    """The accuracy section of dot serving of each candidate output (α = 1, 0 and every
    ``config.alphas``), history queries rebuilt from it, judged at ``k`` by the trade-off's
    policy; and the exposure measures at ``k`` by scoring name (the dot/cosine overlap is
    not measured: the two serve different queries). ``cache``: the audit's, so that the log
    it read and counted is not read again; ``head``: the head check's trade-off judged."""
    cache = cache if cache is not None else InputCache()
    inputs = load_inputs(replace(config, probes=False), pm, progress, cache)
    if inputs.heldout is None or inputs.population is None or inputs.stats is None:
        raise InputError(f"accuracy was not measured ({inputs.not_measured.get('accuracy', 'no held-out log')})")
    named = {"dot": 1.0, "cosine": 0.0, **{alpha_scoring(a): a for a in config.alphas if 0.0 < a < 1.0}}
    served = {name: _serve(inputs, alpha, config, k, progress, cache) for name, alpha in named.items()}
    return _judged(inputs, served, config, k, head)


def written_tradeoff(config: AuditConfig, k: int, scoring: str, alpha: float, written: Path, *,
                     pm: pluggy.PluginManager, progress: Progress = SILENT,
                     cache: InputCache | None = None, head: int = 1) -> tuple[Accuracy, CutoffMeasures]:
    """The trade-off of dot serving of the output ``written`` (read as ``check OUT`` reads
    it: its table as stored, its history queries, if any, rebuilt from it), named
    ``scoring`` (rescaled by ``alpha``), against the original's dot serving at ``k``, judged
    by the trade-off's policy, and the exposure measures at ``k``: the figures of a table
    whose dtype rounds the rescaled rows (float16, bfloat16), which can move lists."""
    cache = cache if cache is not None else InputCache()
    inputs = load_inputs(replace(config, probes=False), pm, progress, cache)
    output = load_inputs(replace(config, model=written, probes=False), pm, progress, cache)
    if inputs.heldout is None or inputs.population is None or output.population is None:
        raise InputError(f"accuracy was not measured ({inputs.not_measured.get('accuracy', 'no held-out log')})")
    _same_users(inputs.population, output.population, alpha)
    served = {"dot": _serve(inputs, 1.0, config, k, progress, cache),
              scoring: _serve(output, 1.0, config, k, progress, cache, relevant_of=inputs)}
    return _judged(inputs, served, config, k, head)


def _judged(inputs: AuditInputs, served: dict[str, _Served], config: AuditConfig,
            k: int, head: int = 1) -> tuple[Accuracy, CutoffMeasures]:
    """The trade-off of ``served`` (``dot``: the original's dot serving; the others named
    ``cosine`` or ``alpha_<a>``) over ``inputs``' holdout at ``k``, and its exposure measures."""
    assert inputs.heldout is not None and inputs.population is not None
    base = served["dot"].cut
    cosine = served["cosine"].cut.dot if "cosine" in served else base.cosine  # the original's: no candidate is judged by it
    cut = CutoffMeasures(dot=base.dot, cosine=cosine, popular=base.popular,
                         overlap_dot_cosine=math.nan,
                         norm_aware={name: s.cut.dot for name, s in served.items() if name not in ("dot", "cosine")})
    lists = {name: s.lists for name, s in served.items()}
    evaluation = evaluate(inputs.heldout.queried_only(), lists, [k], tolerance=config.accuracy_tolerance, keep_seen=config.keep_seen,
                          seen_excluded=inputs.population.exclude is not None)
    values = UserValues(evaluation.ndcg[k], head_slots(lists, served["dot"].popularity, k, head,
                                                       inputs.population.raw_ids))
    return judge_tradeoff(evaluation.accuracy, cut, k, values, config.bootstrap, config.seed, head=head), cut


def _serve(inputs: AuditInputs, alpha: float, config: AuditConfig, k: int, progress: Progress,
           cache: InputCache, relevant_of: AuditInputs | None = None) -> _Served:
    """Dot serving of the table rescaled by ``alpha`` with its own history queries
    (``relevant_of``: the inputs whose holdout the lists are scored against; default ``inputs``)."""
    from auditor.retrieval import measure_retrieval

    assert inputs.population is not None and inputs.stats is not None
    served = inputs.serving_bundle  # a bias model: its factors with the bias as one more column
    bundle = served if alpha == 1.0 else _rescaled(served, alpha, config)
    population = inputs.population if alpha == 1.0 else _queries(inputs, bundle, config, progress, cache)
    _same_users(inputs.population, population, alpha)
    heldout = (relevant_of or inputs).heldout
    outcome = measure_retrieval(bundle, inputs.stats, replace(config, alphas=()), population, progress,
                                relevant=relevant_rows(heldout, population.n_rows))
    assert outcome.popularity is not None
    return _Served(outcome.lists["dot"], outcome.retrieval.at[k], outcome.popularity)


def _queries(inputs: AuditInputs, bundle: ModelBundle, config: AuditConfig, progress: Progress,
             cache: InputCache) -> QueryPopulation:
    """The history queries ``check OUT`` builds from the rescaled rows of ``bundle``: for a
    model with an item bias, the means of its rescaled factors q, served as [q, 1]."""
    served = inputs.served_vectors
    if served is None or not is_biased(served):
        return population_of(bundle, config, progress, cache.logs)
    factors = replace(inputs.bundle, item_table=np.ascontiguousarray(bundle.item_table[:, :-1]))
    return population_of(factors, config, progress, cache.logs, served=served)


def _rescaled(bundle: ModelBundle, alpha: float, config: AuditConfig) -> ModelBundle:
    """``bundle`` with its item table rescaled by the one rule, in row blocks, stored as
    float32 (the table ``check`` reads from OUT; OUT's own dtype may round it further)."""
    table = np.empty(bundle.item_table.shape, dtype=np.float32)
    rescale_blocks(bundle.n_items, bundle.dim, alpha, *numpy_io(bundle.item_table, table),
                   max_memory=config.max_memory)
    return replace(bundle, item_table=table)


def _same_users(original: QueryPopulation, rebuilt: QueryPopulation, alpha: float) -> None:
    """The paired comparison needs the same queried users in the same order: rebuilt
    queries differ from the original only where a mean of rescaled rows is zero (such a
    user is left out of the output's audit, as every zero query is)."""
    if original.raw_ids is None or rebuilt.raw_ids is None or np.array_equal(original.raw_ids, rebuilt.raw_ids):
        return
    gone = original.raw_ids[~np.isin(original.raw_ids, rebuilt.raw_ids)]
    who = f"user {gone[0].item()!r} of {original.seen_source or 'the training log'}" if gone.size else "a user"
    raise InputError(
        f"{setting('alpha')} auto: rescaled by alpha {alpha:g}, the training items of {who} average to a zero vector, "
        "so the audit of that output would not query them and its trade-off cannot be paired with dot's over the "
        f"same users; give {setting('alpha')} a number in [0, 1]"
    )

__all__ = ["QUERIES_REBUILT", "output_tradeoff", "written_tradeoff"]

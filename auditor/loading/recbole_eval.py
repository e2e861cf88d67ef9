"""RecBole's own evaluation wired into the load stage: ``check MODEL.pth --interactions
DATASET.inter`` with nothing else audits what RecBole evaluated and what the model serves.

When the model is a RecBole checkpoint, the log is the ``.inter`` file it read, and no
holdout or id file is given, the split the checkpoint's settings record (``eval_args``)
is reproduced (:mod:`auditor.loading.recbole_split`, refused naming the setting when it
cannot be): the training part becomes the training log (item counts, each user's
training items, the queried users), the test part the holdout, and each queried user's
exclusions what RecBole's full-sort test masks (training and validation items, minus the
user's own test items). An explicit ``holdout`` (or id file) is the user's choice and
keeps the ordinary route: the whole ``.inter`` is then the training log.

Whichever route, a RecBole model is audited with the vectors it serves
(:mod:`auditor.loading.served`): propagated or cached for the LightGCN family, SimpleX's
aggregated users, the stored tables otherwise (with a warning when the model scores
with something else).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from auditor.config import AuditConfig, ReadSettings
from auditor.errors import IdMappingError, setting
from auditor.loading.csr import build_csr, take_csr
from auditor.loading.history import untrained_rows_note
from auditor.loading.holdout_queries import heldout_queries
from auditor.loading.logs import open_log
from auditor.loading.population import load_population
from auditor.loading.recbole_inter import ORDER_CAVEAT
from auditor.loading.served import ServedVectors, read_cache, served_vectors
from auditor.loading.stand_in import cosine_note
from auditor.loading.validation import refuse_nonfinite_users
from auditor.model import HeldOutQueries, InteractionPairs, ItemStats, ModelBundle, QueryPopulation
from auditor.progress import SILENT, Progress
from auditor.values import RowLookup

if TYPE_CHECKING:  # the split's reader is loaded when a split is reproduced (recbole_evaluation)
    from auditor.loading.recbole_split import RecBoleSplit


@dataclass(frozen=True)
class RecBoleEvaluation:
    """RecBole's split of the ``.inter`` file, reproduced for one audit."""

    split: RecBoleSplit

    @property
    def description(self) -> str:
        """The report's ``inputs.split``: where the split came from, in words."""
        return (
            f"{self.split.description}; reproduced from the checkpoint's eval_args: the training part is the "
            "training log, the test part the holdout, and training and validation items are masked as RecBole's "
            "full-sort test masks them"
        )


THE_USERS_CHOICE = ("holdout", "item_ids", "user_ids", "frequencies")
"""The settings that keep the ordinary route when given: the user's choice wins over RecBole's split."""


def reproduces_split(bundle: ModelBundle, config: ReadSettings) -> bool:
    """True when the audit takes RecBole's own split: a RecBole checkpoint with its config,
    its ``.inter`` file as the log, and none of :data:`THE_USERS_CHOICE` given."""
    return bundle.format == "recbole" and config.interactions is not None and no_split_reason(bundle, config) is None


def no_split_reason(bundle: ModelBundle, config: ReadSettings) -> str | None:
    """Why the audit does not take RecBole's split, so nothing trains the served vectors;
    None when it does, when ``bundle`` is no RecBole checkpoint, or when no training log was
    given (the plain reason, :data:`auditor.loading.served.NO_LOG`). The one list of what
    stops the split, which :func:`reproduces_split` reads (``check``'s settings, or
    ``mitigate``'s, which name no holdout: its sidecar's slopes count what ``check`` counts)."""
    if bundle.format != "recbole" or config.interactions is None:
        return None
    tail = "popaudit reproduces no RecBole split to compute them over"
    if bundle.config is None:
        return f"RecBole checkpoint {bundle.source} records no settings (no config, so no eval_args): {tail}"
    chosen = [setting(name) for name in THE_USERS_CHOICE if getattr(config, name, None)]
    if chosen:
        given = " and ".join(chosen)
        return (f"with {given} {tail}: the whole {setting('interactions')} file is then the training log; drop "
                f"{given} to have them computed over the training part of the split the checkpoint records")
    spec = config.training_log
    if spec is None or open_log(spec).format != "recbole":
        return f"{setting('interactions')} {Path(config.interactions).name} is not a RecBole .inter file, so {tail}"
    return None


def other_dataset_note(bundle: ModelBundle, config: ReadSettings) -> str | None:
    """A warning when the RecBole ``.inter`` file given as the training log is not named as
    the one the checkpoint's run read (``{data_path}/{dataset}.inter``): ids, split and
    figures are then of a file RecBole may never have read. None: it is, or nothing says."""
    if bundle.format != "recbole" or bundle.config is None or config.interactions is None:
        return None
    dataset, inter = bundle.config.get("dataset"), Path(config.interactions)
    spec = config.training_log
    if not isinstance(dataset, str) or not dataset or inter.stem == dataset or spec is None or (
            open_log(spec).format != "recbole"):
        return None
    read = Path(str(bundle.config.get("data_path") or dataset)) / f"{dataset}.inter"
    return (f"{setting('interactions')} {inter} is not the file the run of {bundle.source} read: its config records "
            f"dataset {dataset!r}, and RecBole reads {{data_path}}/{{dataset}}.inter ({read}). Ids, split and accuracy "
            f"are those of {inter.name}, which equal RecBole's only if it holds the same rows; pass {dataset}.inter "
            "if it does not")


def recbole_evaluation(bundle: ModelBundle, config: ReadSettings) -> RecBoleEvaluation:
    """Reproduce the split and set ``bundle``'s ids, training pairs and held-out pairs from it.

    EvaluationSplitError when the recorded settings make the split unreproducible;
    IdMappingError when the file holds other ids than the checkpoint's tables."""
    # Loaded here: RecBole's split and its .inter reader serve RecBole audits only.
    from auditor.loading.recbole_split import recbole_split

    assert bundle.config is not None and config.interactions is not None
    inter = Path(config.interactions)
    split = recbole_split(bundle.config, inter)
    _check_rows(bundle, split, "item", split.n_items, bundle.n_items)
    if bundle.user_table is not None:
        _check_rows(bundle, split, "user", split.n_users, int(bundle.user_table.shape[0]))
    rule = f"RecBole's own rule (Dataset._remap) over {inter}, as its evaluation split read it; row 0 ([PAD]) dropped"
    bundle.item_ids = split.item_ids
    bundle.item_ids_source = rule.replace("rule", "rule for item ids", 1) + f", {ORDER_CAVEAT}"
    bundle.user_ids = split.user_ids
    bundle.user_ids_source = rule.replace("rule", "rule for user ids", 1) + f", {ORDER_CAVEAT}"
    bundle.log_id_rule = None
    bundle.train_pairs = InteractionPairs(split.train.users, split.train.items, split.user_ids, source=inter)
    bundle.holdout_pairs = InteractionPairs(split.test.users, split.test.items, split.user_ids, source=inter)
    return RecBoleEvaluation(split)


def _check_rows(bundle: ModelBundle, split: RecBoleSplit, what: str, found: int, rows: int) -> None:
    if found == rows:
        return
    raise IdMappingError(
        f"{split.source} holds {found:,} distinct {what} ids (rows with both ids), but the {what} table of RecBole "
        f"checkpoint {bundle.source} has {rows:,} rows after its padding row: RecBole read another file. Pass the "
        f".inter file RecBole read, or the held-out interactions as {setting('holdout')} FILE with "
        f"{setting('item_ids')} and {setting('user_ids')} FILE"
    )


def training_stats(evaluation: RecBoleEvaluation) -> ItemStats:
    """Item statistics of the training part (the training log RecBole trained on)."""
    train = evaluation.split.train
    n_items = evaluation.split.n_items
    pairs = np.unique(train.users * n_items + train.items) if len(train) else np.empty(0, np.int64)
    user_counts = np.bincount(pairs % n_items, minlength=n_items).astype(np.int64) if pairs.size else (
        np.zeros(n_items, dtype=np.int64))
    return ItemStats(
        frequencies=evaluation.split.train_counts(), n_interactions=len(train), user_counts=user_counts,
        n_users=int(np.unique(train.users).size), source=evaluation.split.source,
    )


def recbole_population(
    bundle: ModelBundle, config: AuditConfig, evaluation: RecBoleEvaluation, progress: Progress = SILENT
) -> QueryPopulation:
    """The users of the training part (``bundle.train_pairs``), each with RecBole's test masking."""
    population = load_population(
        bundle, queries=config.queries, log=None, mapping=config.item_rows(bundle), row_ids=config.row_ids,
        max_queries=config.max_queries, seed=config.seed, keep_seen=config.keep_seen, progress=progress,
    )
    where = f"the training part of RecBole's split of {evaluation.split.source}"
    recorded = f"the training pairs recorded in {bundle.source}"
    described = population.description.replace(recorded, where)
    if not config.keep_seen:
        described += "; each without their training and validation items, as RecBole's full-sort test masks them"
    warnings = tuple(note.replace(recorded, where) for note in population.warnings)
    population = replace(population, description=described, warnings=warnings)
    return masked_population(population, evaluation)


def masked_population(population: QueryPopulation, evaluation: RecBoleEvaluation) -> QueryPopulation:
    """``population`` with each query's exclusions set to what RecBole's full-sort test
    masks: the user's training and validation items, less the user's own test items (an
    item trained on and held out again stays rankable)."""
    ids = population.row_ids  # the unserved users' too: their profiles are what their groups read
    if ids is None:
        return population
    split = evaluation.split
    rows = RowLookup(split.user_ids)(pa.array(ids))
    position = np.full(split.n_users, -1, dtype=np.int64)
    position[rows[rows >= 0]] = np.flatnonzero(rows >= 0)
    seen_users = np.concatenate([split.train.users, split.valid.users])
    seen_items = np.concatenate([split.train.items, split.valid.items])
    at = position[seen_users]
    keep = at >= 0
    at, seen_items = at[keep], seen_items[keep]
    test_at = position[split.test.users]
    tested = test_at >= 0
    test_keys = np.unique(test_at[tested] * split.n_items + split.test.items[tested])
    rankable = np.isin(at * split.n_items + seen_items, test_keys)
    indptr, items = build_csr(at[~rankable], seen_items[~rankable], population.n_rows)
    n, unserved = population.n_queries, None
    if population.n_unserved:
        unserved = take_csr(indptr, items, np.arange(n, population.n_rows))
        indptr, items = take_csr(indptr, items, np.arange(n))
    return replace(
        population, seen_indptr=indptr, seen_rows=items, unserved_seen=unserved,
        seen_source=f"{split.source} (RecBole's training and validation parts, as its full-sort test masks them)",
    )


def recbole_heldout(
    bundle: ModelBundle, serving: ModelBundle, config: AuditConfig, population: QueryPopulation,
    evaluation: RecBoleEvaluation, progress: Progress = SILENT,
) -> HeldOutQueries:
    """The test part at the queried users, and the test users absent from the training part
    evaluated as RecBole's own test evaluates them. RecBole numbers users over the whole
    file, so each has a user-table row, which its full-sort test scores (untrained; served
    vectors: what the model computes for them) with their validation items masked. They
    are what a global split (TS, RS with group_by none) holds out; retrieval and exposure
    keep to the queried (trained) users, and these follow them in accuracy's positions
    (:attr:`HeldOutQueries.untrained`). ``serving``: the bundle with the served vectors."""
    untrained = _untrained_test_users(bundle, serving, population, evaluation)
    if untrained is None:
        return heldout_queries(bundle, config, population, progress)
    heldout = heldout_queries(bundle, config, _joined(population, untrained), progress)
    n_held = heldout.n + heldout.n_not_in_training + heldout.n_not_sampled + heldout.n_dropped_users
    note = (
        f"{untrained.n_queries:,} of the {n_held:,} held-out users of {heldout.source} have no training interaction "
        f"in RecBole's split ({evaluation.split.description}): evaluated as RecBole's own test evaluates them, ranked "
        f"by {untrained.what} with only their validation items masked, so that accuracy is RecBole's; exposure and "
        f"retrieval keep to the {population.n_queries:,} queried (trained) users"
    )
    return replace(heldout, warnings=(*heldout.warnings, note), untrained=untrained, n_queried=population.n_rows)


def untrained_said(population: QueryPopulation, heldout: HeldOutQueries, evaluation: RecBoleEvaluation) -> QueryPopulation:
    """``population`` whose warning on the user-table rows of users absent from the training
    part says how many of them :func:`recbole_heldout` evaluated for accuracy all the same."""
    if not heldout.n_untrained or not population.n_untrained_rows:
        return population
    where = f"the training part of RecBole's split of {evaluation.split.source}"
    said, says = (untrained_rows_note(population.n_untrained_rows, where, evaluated) for evaluated in (
        0, heldout.n_untrained))
    return replace(population, warnings=tuple(says if note == said else note for note in population.warnings))


def _untrained_test_users(
    bundle: ModelBundle, serving: ModelBundle, population: QueryPopulation, evaluation: RecBoleEvaluation
) -> QueryPopulation | None:
    """The test users without a training interaction, each queried by the user vector
    RecBole scores them with (``serving``'s row: the stored, never trained row, or what a
    graph model or SimpleX computes for a user without training edges; a zero vector stays
    left out: no direction to rank by) with RecBole's test masking; None when there is
    none, or the population is no user-table one."""
    users = serving.user_table
    if population.source != "users" or population.raw_ids is None or users is None:
        return None
    split = evaluation.split
    rows = np.setdiff1d(split.test.users, split.train.users)
    refuse_nonfinite_users(bundle, rows, "RecBole's test evaluation scores (test users without a training interaction)")
    vectors = np.asarray(users[rows], dtype=np.float32)
    rows, vectors = rows[np.any(vectors != 0, axis=1)], vectors[np.any(vectors != 0, axis=1)]
    if not rows.size:
        return None
    by = ("their stored user-table rows (never trained; RecBole scores them so)"
          if serving.user_table is bundle.user_table else
          "the user vectors the model computes for them without training edges (RecBole scores them so; not the "
          "stored rows)")
    untrained = QueryPopulation(
        vectors=vectors, source="users", raw_ids=split.user_ids[rows], source_rows=rows, keep_seen=population.keep_seen,
        description=f"the {rows.size:,} test users of RecBole's split of {split.source} with no training interaction, "
                    f"by {by}", what=by,
    )
    return masked_population(untrained, evaluation)


def _joined(population: QueryPopulation, untrained: QueryPopulation) -> QueryPopulation:
    """``population``'s rows (its queries, then its unserved users) with the ``untrained``
    queries after them (ids, rows and masks)."""
    ids, profiles = population.row_ids, population.row_profiles
    assert ids is not None and untrained.raw_ids is not None
    n_unserved, dim = population.n_unserved, population.vectors.shape[1]
    rows = None if population.source_rows is None or untrained.source_rows is None else np.concatenate(
        [population.source_rows, np.full(n_unserved, -1, dtype=np.int64), untrained.source_rows])
    indptr, seen = profiles if profiles is not None else (None, None)
    if indptr is not None and seen is not None and untrained.seen_indptr is not None and untrained.seen_rows is not None:
        indptr = np.concatenate([indptr, untrained.seen_indptr[1:] + indptr[-1]])
        seen = np.concatenate([seen, untrained.seen_rows])
    vectors = [population.vectors, np.zeros((n_unserved, dim), dtype=population.vectors.dtype), untrained.vectors]
    return replace(population, vectors=np.concatenate(vectors), raw_ids=np.concatenate([ids, untrained.raw_ids]),
                   source_rows=rows, seen_indptr=indptr, seen_rows=seen, unserved_ids=None, unserved_seen=None)


def served_of(
    bundle: ModelBundle, evaluation: RecBoleEvaluation | None, config: AuditConfig | None = None
) -> ServedVectors | None:
    """The vectors a RecBole ``bundle`` serves (None for other formats): propagated and
    aggregated over the training part when the split was reproduced, else from the cache
    (``config``: the audit's settings, which say why no split was reproduced)."""
    if bundle.format != "recbole":
        return None
    train = None if evaluation is None else (evaluation.split.train.users, evaluation.split.train.items)
    why = None if evaluation is not None or config is None else no_split_reason(bundle, config)
    served = served_vectors(bundle, train, read_cache(bundle.source), no_split=why)
    if served.scoring == "cosine":
        served.warnings.append(cosine_note(served.serving.model))
    return served


def serving_bundle(bundle: ModelBundle, served: ServedVectors | None) -> ModelBundle:
    """The bundle retrieval and accuracy serve from: the served vectors in place of the tables."""
    if served is None or served.source == "tables":
        return bundle
    return replace(bundle, item_table=served.items, user_table=served.users)


__all__ = ["THE_USERS_CHOICE", "RecBoleEvaluation", "masked_population", "no_split_reason", "recbole_evaluation",
           "other_dataset_note", "recbole_heldout", "recbole_population", "reproduces_split", "served_of", "serving_bundle", "training_stats",
           "untrained_said"]

"""A lists-only audit: served lists and the training log, no model (docs/served-lists.md).

:func:`auditor.audit.run_audit` comes here when the settings name ``recommendations`` but
no model. load (:func:`auditor.loading.served_inputs.load_lists_inputs`) → measure
(:func:`auditor.retrieval.served.measure_served`) → judge
(:func:`auditor.lists_verdict.decide_lists_verdict`). The sections that need a model
(frequency–norm statistics, serving by dot and cosine, conditions, probes, audit
measures) are absent, each with its reason in ``not_measured``; with ``holdout`` the
served and most-popular lists' held-out accuracy is measured by the same code as a
model's scorings (:func:`auditor.evaluation.evaluate`).
"""

from __future__ import annotations

from dataclasses import fields as dataclass_fields
from dataclasses import replace
from typing import Any

from auditor.config import AuditConfig
from auditor.errors import setting
from auditor.evaluation import evaluate
from auditor.lists_verdict import decide_lists_verdict
from auditor.loading.served_inputs import load_lists_inputs
from auditor.loading.statistics import InputCache
from auditor.metrics.exposure import novelty_unmeasured
from auditor.metrics.harm_inputs import relevant_rows
from auditor.metrics.user_measures import WHO_PAYS, who_pays_unmeasured
from auditor.plugins import RegisteredMeasures
from auditor.progress import SILENT, Progress
from auditor.result import AuditResult, Inputs, MeasuredSections, PlotData
from auditor.retrieval.served import measure_served, training_slots
from auditor.served_section import LISTS_ONLY_FORMAT, with_the_model

NO_MODEL = "no model: served lists alone have no item vectors"
LISTS_PROTOCOL = (
    "queries: the users of the served lists, and the held-out users of the training log without one (served "
    "nothing: their held-out items are misses, as beside a model); evaluated: those with a held-out item, on the "
    "served lists as they are (what was served; a held-out repeat of a training pair is a miss there too, as for every "
    "row) and on the most-popular list without the user's training items (as with a model); held-out items neither trained nor served count as misses; measures @K (RecBole's definitions) "
    "averaged over evaluated users"
)
LISTS_PROTOCOL_KEPT = LISTS_PROTOCOL.replace(
    "without the user's training items (as with a model)",
    "with the user's training items kept (as asked, or where the log names no users or none of the served users)").replace(
    "a held-out repeat of a training pair is a miss there too, as for every row",
    "a held-out repeat of a training pair is hittable, as for every row")
"""The protocol when the popular list keeps training items (``seen_excluded`` false, which
``diff`` and batch summaries compare)."""
DOT_COSINE = "dot_cosine"
"""The ``not_measured`` key of what a lists-only retrieval section lacks (its dot and cosine scorings)."""
USER_GROUPS, EXPOSURE_SHIFT = "user_groups", "exposure_shift"
"""The ``not_measured`` keys of the report's "Who pays" and "Which items gain" sections, which
set a model's dot lists beside its cosine lists."""


def _not_measured(registered: RegisteredMeasures) -> dict[str, str]:
    """Why each section that needs a model is absent."""
    with_model = with_the_model()
    reasons = {
        "frequency_norm": f"{NO_MODEL} whose norms could follow popularity; {with_model}",
        DOT_COSINE: f"{NO_MODEL} to serve by dot product or cosine: the retrieval section holds the served lists "
                    f"and the most-popular list only; {with_model}",
        "conditions": f"{NO_MODEL} or training record to assess C1–C5",
        "probes": f"{NO_MODEL} to probe",
    }
    if registered.audit_names:
        reasons["measures"] = f"{NO_MODEL}: the audit measures ({', '.join(registered.audit_names)}) take a model"
    return reasons


def run_lists_audit(
    config: AuditConfig,
    registered: RegisteredMeasures,
    progress: Progress = SILENT,
    cache: InputCache | None = None,
) -> AuditResult:
    """Audit ``config.recommendations`` against ``config.interactions`` (module docstring)."""
    inputs = load_lists_inputs(config, cache or InputCache(), progress)
    served, stats = inputs.served, inputs.stats
    # The popular baseline skips each user's training items unless keep_seen, as a model's does.
    exclude = None if config.keep_seen else inputs.profiles
    outcome = measure_served(served, stats, inputs.ks, config.popularity, registered.lists, progress,
                             profiles=inputs.profiles, population=inputs.population, groups=config.groups,
                             relevant=relevant_rows(inputs.heldout, served.n_users + inputs.n_unlisted,
                                                    served.items.n_items),
                             exclude_popular=exclude, n_unlisted=inputs.n_unlisted, seen_kept=config.keep_seen,
                             log_read_whole=inputs.log_read_whole)
    if inputs.profiles is not None:  # served as served: how many slots hold the user's own training items
        outcome.section.n_training_slots, outcome.section.n_slots = training_slots(
            outcome.lists["served"], inputs.profiles, served.items.n_items)
    counted = config.interactions or config.frequencies
    not_measured = _not_measured(registered)
    if inputs.profiles is None:
        not_measured[WHO_PAYS] = inputs.unmatched_users or who_pays_unmeasured(
            "frequencies" if config.frequencies else "unknown")
    not_measured.update(_dot_cosine_sections(inputs.profiles is not None))
    accuracy, notes = None, []
    if inputs.heldout is None:
        not_measured["accuracy"] = (f"no held-out interactions: pass {setting('holdout')} PATH to measure the served "
                                    "lists' recall and NDCG beside the most-popular list's")
    elif (none := inputs.heldout.none_evaluated()) is not None:
        not_measured["accuracy"] = none
    else:
        evaluation = evaluate(inputs.heldout, outcome.lists, list(inputs.ks), tolerance=config.accuracy_tolerance,
                              keep_seen=exclude is None, seen_excluded=exclude is not None, training=exclude)
        notes = list(evaluation.notes)
        # No dot to judge against or keep a share of, and the served lists evaluated as served
        accuracy = replace(evaluation.accuracy, protocol=LISTS_PROTOCOL if exclude is not None else LISTS_PROTOCOL_KEPT,
                           incumbent=None, tolerance=None, seen_excluded=False,
                           popular_seen_excluded=exclude is not None)
    why = novelty_unmeasured(stats.user_counts, stats.n_users, "frequencies" if config.frequencies else "log")
    if why is not None:
        not_measured["novelty"] = why
    sections = MeasuredSections(
        inputs=Inputs(
            model="", interactions=None if counted is None else str(counted), item_table=None, user_table=None,
            n_items=served.items.n_items, dim=0, n_interactions=stats.n_interactions, format=LISTS_ONLY_FORMAT,
            n_users=stats.n_users, n_unmapped_interactions=stats.n_unmapped,
            item_id_mapping="catalogue: the distinct item ids of the training log and the served lists, sorted",
        ),
        frequency_norm=None,
        settings=_settings(config, inputs.ks),
        warnings=inputs.warnings + outcome.warnings + notes + _ignored(config),  # what was measured first, then what was not read
        not_measured=not_measured,
        plot_data=PlotData(frequencies=stats.frequencies, exposure=outcome.exposure),
        served=outcome.section,
        accuracy=accuracy,
    )
    verdict = decide_lists_verdict(sections)
    fields = {f.name: getattr(sections, f.name) for f in dataclass_fields(sections)}
    return AuditResult(**fields, verdict=verdict)


def _dot_cosine_sections(profiles: bool) -> dict[str, str]:
    """Why "Who pays" and "Which items gain" are absent, and where the served lists' own
    figures of that kind are (``profiles``: each served user's training items are known)."""
    groups = ("the served lists' ΔGAP and popularity miscalibration per user group are rows of each K's table of "
              "the served lists" if profiles else f"the served lists' figures per user group are not measured either "
              f"({WHO_PAYS})")
    return {
        USER_GROUPS: f"{NO_MODEL} to serve by dot product and cosine, whose lists this section sets side by side per "
                     f"user group; {groups}",
        EXPOSURE_SHIFT: f"{NO_MODEL} to serve by dot product and cosine: this section lists the items dot serving "
                        "raises or lowers over cosine; the served lists' exposure is measured beside the most-popular "
                        "list's in each K's table of the served lists",
    }


LISTS_SETTINGS = frozenset({
    "recommendations", "rank_col", "score_col", "model", "interactions", "interactions_format", "user_col", "item_col",
    "frequencies", "count_col", "user_count_col", "ks", "popularity", "holdout", "keep_seen", "plugins", "max_memory",
    "head_mass", "tail_mass", "popular_percent", "niche_fraction", "blockbuster_fraction", "short_head_mass",
    "top_items",
})
"""The settings served lists alone read (the lists, the training log and its counts, the cut-offs, the popularity
definition and groups, the holdout, the popular list's training items, list measures' plugins, the memory
ceiling). Every other setting is a model's (reading, serving or probing its tables, its query sample, norm-aware
scorings and trade-off, its training record, the bootstrap of its correlation): one list, so a setting added to
the audit is said to be ignored here until the lists read it."""


def model_only_given(config: AuditConfig) -> list[str]:
    """The model-only settings ``config`` gives (differing from their defaults), in field
    order, a declared training setting by its own name (``optimizer``, ``lr``, ...)."""
    defaults = AuditConfig(model=None, recommendations=config.recommendations, interactions=config.interactions,
                           frequencies=config.frequencies)
    given = []
    for field in dataclass_fields(AuditConfig):
        if field.name in LISTS_SETTINGS:
            continue
        ours, default = getattr(config, field.name), getattr(defaults, field.name)
        if field.name == "declared":  # its parts are separate options and columns
            given += [part.name for part in dataclass_fields(ours) if getattr(ours, part.name) != getattr(default, part.name)]
        elif ours != default:
            given.append(field.name)
    return given


def _ignored(config: AuditConfig) -> list[str]:
    """A warning naming the model settings given to a lists-only audit (a batch's defaults may hold them)."""
    given = model_only_given(config)
    if not given:
        return []
    return [f"{', '.join(setting(name) for name in given)} ignored: {'it applies' if len(given) == 1 else 'they apply'} "
            "to a model (reading, serving or probing its tables, its query sample and scorings, its training), and "
            "served lists alone are measured as they are: every user of the file, as served, numbered by their own "
            "item ids"]


def _settings(config: AuditConfig, ks: tuple[int, ...]) -> dict[str, Any]:
    return {
        "ks": list(ks),
        "ks_asked": sorted(set(config.ks)),  # a K past the longest list is measured (and filed) at its length
        "recommendations": str(config.recommendations),
        **({"rank_col": config.rank_col} if config.rank_col else {}),
        **({"score_col": config.score_col} if config.score_col else {}),
        **config.list_settings(),
        "frequency": "interactions per item in the training log"
        + (f" (counted elsewhere: {config.frequencies})" if config.frequencies else ""),
    }

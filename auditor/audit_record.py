"""What a report records of the run beside its figures: the ``inputs`` section (the files,
the tables and how ids were mapped), the ``settings`` that decided the figures, what it
says of the model for ``popaudit mitigate``, and every file the audit read (which no
report written from it may replace)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from auditor.config import AuditConfig
from auditor.idmap import describe_mapping
from auditor.model import ItemStats, ModelBundle, QueryPopulation
from auditor.result import Inputs

if TYPE_CHECKING:
    from auditor.loading.inputs import AuditInputs


def read_files(config: AuditConfig) -> dict[str, Path]:
    """Every file the audit read (the external data of an ONNX graph too), which no report
    written from its result may replace (:func:`auditor.plugins.renderers.render_files`)."""
    from auditor.loading.side_files import side_inputs

    files = {**config.input_files(), **side_inputs(config.model, "the model")}
    # Absolute now: a notebook that changes directory before writing its reports must
    # still find the log it audited among the inputs.
    return {name: Path(path).resolve() for name, path in files.items() if path is not None}


def mitigate_facts(inputs: AuditInputs) -> dict[str, Any]:
    """What the report's ``inputs`` say of the model for ``popaudit mitigate``: whether it
    writes the model back, and the α a mitigate output already carries (and its original)."""
    rescaled = inputs.rescaled
    return {"written_back": inputs.written_back, "rescaled_alpha": None if rescaled is None else rescaled.alpha,
            "rescaled_from": None if rescaled is None else rescaled.original}


def inputs_section(bundle: ModelBundle, config: AuditConfig, stats: ItemStats | None,
            population: QueryPopulation | None) -> Inputs:
    from auditor.loading.fingerprint import in_order_ids, mapping_fingerprint

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
        item_id_mapping=describe_mapping("item", bundle.item_ids_source, policy, in_order_ids(bundle.item_ids)),
        user_id_mapping=(
            describe_mapping("user", bundle.user_ids_source, policy, in_order_ids(bundle.user_ids))
            if bundle.user_table is not None else None
        ),
        item_id_fingerprint=mapping_fingerprint(bundle.item_ids, bundle.n_items, policy.shift),
        user_id_fingerprint=(
            mapping_fingerprint(bundle.user_ids, bundle.user_table.shape[0], policy.shift)
            if bundle.user_table is not None else None
        ),
        row_ids_assumed=assumed,
        n_untrained_user_rows=None if population is None else population.n_untrained_rows,
    )


def settings_section(config: AuditConfig) -> dict[str, Any]:
    return {
        "ks": list(config.ks),
        "queries": str(config.queries),
        "max_queries": config.max_queries,
        "index": config.index,
        **config.list_settings(),
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
        "top_items": config.top_items,
        "alphas": list(config.alphas),
    }

"""``popaudit mitigate``: the cure as an artifact (docs/mitigate.md).

Writes the model with its item table rescaled row by row, k·‖k‖^(α−1), in the input's own
format and under the same item key, so that any inner-product index built from the output
serves the norm-aware scoring ``alpha_<α>`` of ``check`` with no change on the query side
(history queries, built from the item rows, are the exception: :mod:`auditor.mitigation.history`).
The table is found exactly as ``check`` finds it (:func:`~auditor.loading.load_model`,
``item_key`` honoured); the writer is the one the table of model formats gives the
model's format (:mod:`auditor.loading.formats`, built-in writers in
:mod:`auditor.mitigation.writers`, plugins' formats first). A JSON sidecar beside the
output (:func:`sidecar_path`) records α, the source file and its sha256, the rule and the
before/after figures the rescaling changes (norms, the log–log slope, and with
``--alpha auto`` (:mod:`auditor.mitigation.auto`) the trade-off's accuracy and head share).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pluggy

from auditor import __version__
from auditor.alpha import RULE
from auditor.config import ReadSettings, LoadOptions
from auditor.errors import EvaluationSplitError, IdMappingError, InputError, ModelLoadError, UntrustedPickleError, setting
from auditor.io import atomic_path, file_sha256, is_special_file, require_regular_file
from auditor.output_guard import check_not_inputs
from auditor.loading import count_item_ids, load_model
from auditor.loading.formats import BUILTIN_FORMATS, detect_format, suffix_kinds, writer_format
from auditor.plugin_api import ModelFormat, WriteJob
from auditor.loading.recorded_split import refuse_whole_log_counts
from auditor.loading.stand_in import tables_stand_in
from auditor.loading.recbole_eval import recbole_evaluation, reproduces_split, training_stats
from auditor.loading.statistics import item_stats
from auditor.metrics.frequency_norm import frequency_norm_stats
from auditor.mitigation.rescale import NormSummary, RowNorms
from auditor.mitigation.sidecar import FULL_PRECISION, earlier_rescaling, sidecar_path
from auditor.mitigation.writers import with_writers
from auditor.model import ModelBundle
from auditor.plugins import get_plugin_manager
from auditor.loading.plugin_formats import model_formats, plugin_owner, write_model_format
from auditor.mitigation.verify import verify_written
from auditor.mitigation.written_notes import as_read_back, said_once, table_notes
from auditor.progress import SILENT, Progress
from auditor.wording import export_served_vectors

SIDECAR_VERSION = 1
SUFFIX_KINDS = suffix_kinds()
"""The built-in file kinds :func:`auditor.loading.formats.detect_kind` tells by suffix alone."""


def writable_formats(pm: pluggy.PluginManager | None = None) -> list[ModelFormat]:
    """The table of model formats with every writer: plugins' formats (when ``pm`` is
    given) first, then the built-in ones with the writers of :mod:`auditor.mitigation.writers`."""
    return with_writers(model_formats(pm) if pm is not None else BUILTIN_FORMATS)


@dataclass(frozen=True)
class MitigateConfig(ReadSettings):
    """Settings of one ``popaudit mitigate`` run: how the model and its training log are
    read (:class:`~auditor.config.ReadSettings`, as ``check`` reads them; the log gives the
    frequencies for the before/after figures, optional) and what to write."""

    model: Path
    output: Path
    alpha: float
    tensors_only: bool = False
    """A torch file popaudit cannot write back faithfully: write its tensors as a state dict."""
    alpha_source: str = "given"
    """How α was chosen: ``given``, or the trade-off's recommendation (``auto``)."""
    tradeoff: dict[str, Any] | None = None
    """With ``auto``: the trade-off figures of the chosen scoring (:func:`tradeoff_figures`)."""
    audit_warnings: tuple[str, ...] = ()
    """With ``auto``: the warnings of the audit the α was chosen by (its holdout's among them)."""

    PATHS = (*ReadSettings.PATHS, "model", "output")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.alpha, (int, float)) and math.isfinite(self.alpha) and 0.0 <= self.alpha <= 1.0):
            raise InputError(f"{setting('alpha')} must be a number in [0, 1], got {self.alpha!r}")

    @property
    def load_options(self) -> LoadOptions:
        return self.read_options()

    def input_files(self) -> dict[str, Path | None]:
        """Every file this run reads, by the setting that names it."""
        return {setting(n): getattr(self, n) for n in ("model", "interactions", "item_ids")}


@dataclass
class Mitigation:
    """What one run wrote: the sidecar's content (:meth:`to_dict`)."""

    alpha: float
    alpha_source: str
    rule: str
    source: dict[str, Any]
    output: dict[str, Any]
    item_key: str | None
    n_items: int
    dim: int
    dtype: str
    layout: str
    norms: dict[str, dict[str, float | int]]
    frequency_norm: dict[str, Any] | None
    warnings: list[str] = field(default_factory=list)
    tradeoff: dict[str, Any] | None = None
    """With ``--alpha auto``: what dot serving of the output gives against the input's dot
    serving at the trade-off's K (held-out NDCG, top-1% head share, their paired intervals)."""
    input_rescaled: dict[str, Any] | None = None
    """When MODEL is itself a mitigate output (its sidecar beside it, naming its sha256): the
    α it was rescaled by, that sidecar, and the exponent the output carries in all."""

    def to_dict(self) -> dict[str, Any]:
        """The sidecar (strict JSON: NaN becomes null)."""
        body = {"popaudit_mitigation": SIDECAR_VERSION, "tool": {"name": "popaudit", "version": __version__}}
        return _finite({**body, **asdict(self)})


def planned_outputs(output: Path) -> dict[str, Path | None]:
    """Every file a run writes, by what names it (for :func:`~auditor.output_guard.check_not_inputs`)."""
    out = setting("output")
    return {f"{out}": output, f"the sidecar of {out} {output}": sidecar_path(output)}


def check_outputs(config: MitigateConfig, inputs: dict[str, Path | None] | None = None,
                  formats: Sequence[ModelFormat] | None = None) -> str:
    """The file kind of the model; raise when the outputs cannot be written as asked.

    Refused: a model of a kind no format writes, an output that is an input (a symlink or
    hard link to one included), a special file (a model and its sidecar are regular
    files), a name whose suffix says another format than the model's (or than the kinds
    its formats may also write, :attr:`ModelFormat.output_kinds`). ``inputs``: every file
    the run reads (default: the config's own); ``formats``: the table
    (:func:`writable_formats`; default the built-in one).
    """
    table = list(formats) if formats is not None else writable_formats()
    model = require_regular_file(config.model, "model file")
    found = detect_format(model, table)
    if found is None or not any(f.file_kind == found.name and f.write is not None for f in table):
        plugins = [f.name for f in table if f.write is not None and f.name not in _NAMES]
        also = f", and the plugin formats {', '.join(plugins)}" if plugins else ""
        raise ModelLoadError(f"{model} is not a model file popaudit mitigate writes: it writes .pt/.pth/.ckpt "
                             f"state dicts and checkpoints, .safetensors, .npy and Parquet tables{also}")
    outputs = refuse_special_outputs(config.output)
    kind = found.name
    allowed = {kind}.union(*(f.output_kinds for f in table if f.file_kind == kind))
    output_kind(config, model, kind, table, allowed)
    check_not_inputs(outputs, inputs if inputs is not None else config.input_files())
    return kind


_NAMES = frozenset(f.name for f in BUILTIN_FORMATS)


def refuse_special_outputs(output: Path) -> dict[str, Path | None]:
    """The planned outputs (:func:`planned_outputs`); InputError when one is a special
    file (a model and its sidecar are regular files)."""
    outputs = planned_outputs(output)
    for name, path in outputs.items():
        if path is not None and is_special_file(path):
            raise InputError(f"{name} {path} is not a regular file; popaudit mitigate writes a model file "
                             "and a JSON sidecar beside it")
    return outputs


def output_kind(config: MitigateConfig, model: Path, kind: str, table: Sequence[ModelFormat],
                allowed: set[str] | frozenset[str] | tuple[str, ...]) -> str | None:
    """The kind the output's suffix names (None: it names none); InputError when that is
    not one of ``allowed``: mitigate writes the input's own format."""
    kinds = suffix_kinds(table)
    wanted = kinds.get(config.output.suffix.lower())
    if wanted is not None and wanted not in allowed:
        suffixes = "/".join(s for s, k in kinds.items() if k == kind)
        raise InputError(
            f"{setting('output')} {config.output} names {_kind_name(wanted)} but {model} is {_kind_name(kind)}; "
            f"mitigate writes the input's own format: give the output a {suffixes} name"
        )
    return wanted


def _kind_name(kind: str) -> str:
    names = {"npy": "a .npy table", "parquet": "a Parquet table", "safetensors": "a safetensors file",
             "torch": "a PyTorch file"}
    return names.get(kind, f"a .{kind} file")


AsWritten = Callable[[Path, str], tuple[dict[str, Any], list[str]]]  # auto.figures_as_written: (staged OUT, dtype)


def mitigate(config: MitigateConfig, *, pm: pluggy.PluginManager | None = None, progress: Progress = SILENT,
             inputs: dict[str, Path | None] | None = None, staged: tuple[Path, Path] | None = None,
             as_written: AsWritten | None = None) -> Mitigation:
    """Write ``config.output`` (the model, rescaled) and its sidecar; return the sidecar's content.

    Both files are written to temporary files renamed into place only when both are
    complete; no input is ever written. ``staged``: temporary files (model, sidecar) the
    caller made and renames into place itself (``mitigate`` with third-party plugins runs
    in a child process, whose death must leave nothing behind). A plugin format's output
    is read back and checked against the input as ``check`` reads it
    (:func:`~auditor.mitigation.verify.verify_written`) before anything is renamed.
    ``as_written``: with ``config.tradeoff``, what measures it again on the output as
    written when its dtype is narrower than float32 (whose rounding moves lists).
    """
    pm = pm if pm is not None else get_plugin_manager()
    bundle, writer, job = _prepare(config, pm, inputs, progress)
    n_items, fmt, warnings = bundle.n_items, bundle.format, list(bundle.warnings)
    freqs = _frequencies(bundle, config, progress, warnings)
    warnings += _not_served(bundle, config)
    if bundle.user_table is None and config.tradeoff is None and config.alpha != 1.0:
        warnings.append(HISTORY_NOTE.format(model=config.model, alpha=config.alpha, auto=f"{setting('alpha')} auto"))
    source_rows = bundle if plugin_owner(pm, writer) is not None else None  # a plugin's output is read back
    del bundle  # the float32 copy check measures is not needed to write popaudit's own formats

    digest = file_sha256(config.model)
    source = {"path": str(config.model), "resolved": str(Path(config.model).resolve()), "format": fmt,
              "bytes": Path(config.model).stat().st_size, "sha256": digest}
    earlier = earlier_rescaling(config.model, digest, float(config.alpha))
    said = None if earlier is None else earlier.pop("warning")
    warnings += [said] if said is not None and config.alpha != 1.0 else []  # alpha 1 copies the table: nothing lost
    sidecar = sidecar_path(config.output)
    with ExitStack() as stack:
        if staged is None:
            side_tmp = stack.enter_context(atomic_path(sidecar))  # renamed last: after the model
            out_tmp = stack.enter_context(atomic_path(config.output))
        else:
            out_tmp, side_tmp = staged
        written = write_model_format(pm, writer, replace(job, target=out_tmp))
        norms = written.norms
        if len(norms.before) != n_items:
            raise ModelLoadError(f"{config.model}: wrote {len(norms.before)} rows but check reads {n_items}")
        if source_rows is not None:  # a plugin's writer: the sidecar records what reads back, not its claims
            read_dtype = verify_written(pm, writer, out_tmp, source_rows, float(config.alpha), norms,
                                        config.load_options, config.output)
            written, source_rows = as_read_back(written, read_dtype), None
        tradeoff, notes, said = config.tradeoff, list(written.notes), config.alpha_source
        if as_written is not None and tradeoff is not None and written.dtype not in FULL_PRECISION:
            chosen_by, (tradeoff, more) = str(tradeoff["recommendation"]), as_written(out_tmp, written.dtype)
            notes, said = notes + more, said.replace(chosen_by, str(tradeoff["recommendation"]))  # one sentence
        result = Mitigation(
            alpha=float(config.alpha),
            alpha_source=said,
            rule=RULE,
            source=source,
            output={"path": str(config.output), "sidecar": str(sidecar), "format": written.format or fmt,
                    "bytes": out_tmp.stat().st_size, "sha256": file_sha256(out_tmp)},
            item_key=job.item_key,
            n_items=n_items,
            dim=job.dim,
            dtype=written.dtype,
            layout=written.layout,
            norms={"before": asdict(NormSummary.of(norms.before)), "after": asdict(NormSummary.of(norms.after))},
            frequency_norm=None if freqs is None else _slopes(norms, freqs, config),
            warnings=said_once(warnings, config.audit_warnings, notes, table_notes(config.alpha, written, config.output, tradeoff)),
            tradeoff=tradeoff,
            input_rescaled=earlier,
        )
        with open(side_tmp, "w", encoding="utf-8") as fh:
            json.dump(result.to_dict(), fh, indent=2, allow_nan=False, ensure_ascii=False)
            fh.write("\n")
    return result


def _prepare(config: MitigateConfig, pm: pluggy.PluginManager, inputs: dict[str, Path | None] | None,
             progress: Progress) -> tuple[ModelBundle, ModelFormat, WriteJob]:
    """The model loaded as ``check`` loads it, the format that writes it back, and the job
    (its ``target`` filled in by the caller)."""
    table = writable_formats(pm)
    kind = check_outputs(config, inputs, table)
    progress.note(f"Loading {config.model}")
    try:
        bundle = load_model(config.model, config.load_options, pm)
    except UntrustedPickleError as exc:
        raise UntrustedPickleError(
            f"{config.model} holds pickled objects popaudit cannot read without running code from the file, and "
            "mitigate never runs code from a file: re-save the model as a state dict "
            f"(torch.save(model.state_dict(), ...)) ({exc})"
        ) from exc
    writer = writer_format(table, kind, bundle.format)
    if writer is None or writer.write is None:
        if bundle.live is not None:  # a plugin's loader built a tower: its vectors are encoder outputs
            raise ModelLoadError(f"{config.model}: {export_served_vectors(bundle.format)}")
        raise ModelLoadError(
            f"{config.model} is read as a {bundle.format!r} model, which popaudit mitigate does not write back (it "
            "writes state dicts, checkpoints, popaudit and RecBole checkpoints, safetensors, .npy and Parquet tables"
            + "".join(f", {f.name}" for f in table if f.write is not None and f.name not in _NAMES)
            + "); export the item table as .npy or Parquet and mitigate that"
        )
    if bundle.log_id_rule is not None and config.interactions is not None:  # RecBole numbers ids by the log
        bundle.log_id_rule.apply(bundle, Path(config.interactions), config.interactions_format, config.user_col,
                                 config.item_col)
    job = WriteJob(
        source=Path(config.model), target=Path(config.output), alpha=float(config.alpha), model_format=bundle.format,
        item_key=bundle.item_key, n_items=bundle.n_items, dim=bundle.dim, options=config.load_options,
        output_kind=output_kind(config, config.model, kind, table, {kind, *writer.output_kinds}),
        item_ids=bundle.item_ids, interactions=config.interactions, tensors_only=config.tensors_only,
        max_memory=config.max_memory, progress=progress, item_bias_key=bundle.item_bias_key,
    )  # fmt: skip
    return bundle, writer, job


def _not_served(bundle: ModelBundle, config: MitigateConfig) -> list[str]:
    """``check``'s first warning where the stored item table stands in for what the model
    serves (:func:`~auditor.loading.stand_in.tables_stand_in`), and what that means for OUT."""
    stood = tables_stand_in(bundle, users_queried=False)
    return [] if stood is None or stood.as_served else [*stood.warnings, (
        f"so dot serving of the rescaled table is not what {config.output.name} serves: the model scores with more "
        "than its item table, which mitigate rescales alone")]


HISTORY_NOTE = (
    "{model} has no user table, so check queries it with each user's mean training-item vector, built from the item "
    "rows this rescaling changes: check of the output rebuilds those queries from the rescaled rows, so its dot "
    "figures are not check's alpha_{alpha:g} figures of {model} (which keep the original queries); {auto} "
    "measures what dot serving of the output gives with them"
)
"""The warning of a rescaled table without a user table (docs/mitigate.md, "History queries")."""

def _frequencies(bundle: ModelBundle, config: MitigateConfig, progress: Progress,
                 warnings: list[str]) -> tuple[np.ndarray, str] | None:
    """Interactions per item row and where they were counted, as ``check`` counts them: the
    training part of RecBole's split where ``check`` reproduces it (a RecBole checkpoint and
    its .inter file: what a graph model propagated over), else through the one function
    ``check`` counts with (:func:`~auditor.loading.statistics.item_stats`: the log, else the
    checkpoint's record)."""
    if reproduces_split(bundle, config):
        try:
            trained = training_stats(recbole_evaluation(bundle, config)).frequencies
            return np.asarray(trained, dtype=np.int64), f"the training part of RecBole's split of {config.interactions}"
        except (EvaluationSplitError, IdMappingError) as exc:  # the table is written all the same
            warnings.append(f"the log-log slopes count the whole {config.interactions}, not RecBole's training part: {exc}")
    spec = config.training_log
    counts = None if spec is None else count_item_ids(spec, need_users=False, progress=progress)
    stats = item_stats(bundle, counts, config.interactions, config.row_ids, warnings)
    if stats is None:
        return None
    freqs = np.asarray(stats.frequencies, dtype=np.int64)
    if counts is not None:  # as check refuses it: the slopes would count the held-out pairs as training
        refuse_whole_log_counts(freqs, bundle, config.interactions)
    return freqs, str(config.interactions) if config.interactions else "the checkpoint's record"


def _slopes(norms: RowNorms, frequencies: tuple[np.ndarray, str], config: MitigateConfig) -> dict[str, Any]:
    """The log–log slope of norm on frequency, before and after: the frequency–norm figure
    the rescaling changes (Spearman's ρ it cannot move: ‖k‖^α keeps the norms' order)."""
    freqs, counted = frequencies
    out: dict[str, Any] = {"frequencies": counted}
    for when, values in (("before", norms.before), ("after", norms.after)):
        section, _notes = frequency_norm_stats(values, freqs, n_bootstrap=0)
        out[when] = {"loglog_slope": section.loglog_slope}
    if config.alpha == 0.0:  # unit rows: what a slope would fit is the dtype's rounding of 1
        out["after"]["loglog_slope"] = None
    out["note"] = (
        "the log-log slope of norm on frequency scales by alpha (alpha = 0 makes every norm 1: no slope); "
        "Spearman's rho is not reported: ||k||^alpha keeps the norms' order, so rescaling cannot move it"
    )
    return out


def _finite(value: Any) -> Any:
    """``value`` with NaN/inf floats as None, at any depth (strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


__all__ = [
    "MitigateConfig", "Mitigation", "RULE", "SUFFIX_KINDS", "check_outputs", "mitigate",
    "output_kind", "planned_outputs", "refuse_special_outputs", "writable_formats",
]  # fmt: skip

"""``popaudit mitigate``: the cure as an artifact (docs/mitigate.md).

Writes the model with its item table rescaled row by row, k·‖k‖^(α−1), in the input's own
format and under the same item key, so that any inner-product index built from the output
serves the norm-aware scoring ``alpha_<α>`` of ``check`` with no change on the query side.
The table is found exactly as ``check`` finds it (:func:`~auditor.loading.load_model`,
``item_key`` honoured); the format writers live in :mod:`auditor.mitigation`. A JSON
sidecar beside the output (:func:`sidecar_path`) records α, the source file and its
sha256, the rule and the before/after figures the rescaling changes (norms, the log–log
slope, and with ``--alpha auto`` the trade-off's accuracy and head share).
"""

from __future__ import annotations

import hashlib
import json
import math
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from auditor import __version__
from auditor.config import LoadOptions
from auditor.errors import IdMappingError, InputError, ModelLoadError, NoClearGainError, UntrustedPickleError, setting
from auditor.io import atomic_path, check_not_inputs, is_special_file, require_regular_file
from auditor.alpha import RULE
from auditor.mitigation.rescale import NormSummary, RowNorms, Written
from auditor.progress import SILENT, Progress

if TYPE_CHECKING:
    from auditor.result import AuditResult
    import pluggy

    from auditor.config import AuditConfig

SIDECAR_SUFFIX = ".popaudit.json"
"""The sidecar is the output's path plus this suffix (``items.npy`` -> ``items.npy.popaudit.json``)."""
SIDECAR_VERSION = 1
SUFFIX_KINDS = {
    ".npy": "npy", ".parquet": "parquet", ".pq": "parquet", ".safetensors": "safetensors",
    **dict.fromkeys((".pt", ".pth", ".ckpt", ".bin", ".pkl", ".pickle", ".torch", ".tar"), "torch"),
    ".npz": "npz", ".keras": "keras", ".onnx": "onnx", ".h5": "h5", ".hdf5": "h5",
}  # fmt: skip
"""The file kinds :func:`auditor.loading.builtin.detect_kind` tells by suffix alone."""
BUILTIN_FORMATS = {
    "npy": {"npy"},
    "parquet": {"parquet"},
    "safetensors": {"safetensors"},
    "torch": {"state_dict", "checkpoint", "lightning", "popaudit", "pickle", "torchscript"},
}
"""Per file kind, the ``ModelBundle.format`` values the built-in loader gives."""


@dataclass(frozen=True)
class MitigateConfig:
    """Settings of one ``popaudit mitigate`` run."""

    model: Path
    output: Path
    alpha: float
    item_key: str | None = None
    user_key: str | None = None
    interactions: Path | None = None
    """Training log: frequencies for the before/after Spearman ρ (optional)."""
    interactions_format: str = "auto"
    user_col: str | None = None
    item_col: str | None = None
    item_ids: Path | None = None
    id_offset: int | None = None
    assume_row_ids: bool = False
    max_memory: int | None = None
    tensors_only: bool = False
    """A torch file popaudit cannot write back faithfully: write its tensors as a state dict."""
    alpha_source: str = "given"
    """How α was chosen: ``given``, or the trade-off's recommendation (``auto``)."""
    tradeoff: dict[str, Any] | None = None
    """With ``auto``: the trade-off figures of the chosen scoring (:func:`tradeoff_figures`)."""

    def __post_init__(self) -> None:
        if not (isinstance(self.alpha, (int, float)) and math.isfinite(self.alpha) and 0.0 <= self.alpha <= 1.0):
            raise InputError(f"{setting('alpha')} must be a number in [0, 1], got {self.alpha!r}")

    @property
    def load_options(self) -> LoadOptions:
        return LoadOptions(self.item_key, self.user_key, False, self.item_ids, self.max_memory)

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

    def to_dict(self) -> dict[str, Any]:
        """The sidecar (strict JSON: NaN becomes null)."""
        body = {"popaudit_mitigation": SIDECAR_VERSION, "tool": {"name": "popaudit", "version": __version__}}
        return _finite({**body, **asdict(self)})


def sidecar_path(output: Path) -> Path:
    """Where the sidecar of ``output`` goes: beside it, its name plus :data:`SIDECAR_SUFFIX`."""
    return Path(str(output) + SIDECAR_SUFFIX)


def planned_outputs(output: Path) -> dict[str, Path | None]:
    """Every file a run writes, by what names it (for :func:`~auditor.io.check_not_inputs`)."""
    out = setting("output")
    return {f"{out}": output, f"the sidecar of {out} {output}": sidecar_path(output)}


def check_outputs(config: MitigateConfig, inputs: dict[str, Path | None] | None = None) -> str:
    """The file kind of the model; raise when the outputs cannot be written as asked.

    Refused: an output that is an input (a symlink or hard link to one included), a
    special file (a model and its sidecar are regular files), a name whose suffix says
    another format than the model's. ``inputs``: every file the run reads (default: the
    config's own).
    """
    from auditor.loading.builtin import detect_kind

    model = require_regular_file(config.model, "model file")
    kind = detect_kind(model)
    if kind not in BUILTIN_FORMATS:
        raise ModelLoadError(f"{model} is not a model file popaudit mitigate writes: it writes .pt/.pth/.ckpt "
                             "state dicts and checkpoints, .safetensors, .npy and Parquet tables")
    outputs = planned_outputs(config.output)
    for name, path in outputs.items():
        if path is not None and is_special_file(path):
            raise InputError(f"{name} {path} is not a regular file; popaudit mitigate writes a model file "
                             "and a JSON sidecar beside it")
    wanted = SUFFIX_KINDS.get(config.output.suffix.lower())
    if wanted is not None and wanted != kind:
        raise InputError(
            f"{setting('output')} {config.output} names {_kind_name(wanted)} but {model} is {_kind_name(kind)}; "
            f"mitigate writes the input's own format: give the output a {_suffixes(kind)} name"
        )
    check_not_inputs(outputs, inputs if inputs is not None else config.input_files())
    return kind


def _kind_name(kind: str) -> str:
    names = {"npy": "a .npy table", "parquet": "a Parquet table", "safetensors": "a safetensors file",
             "torch": "a PyTorch file"}
    return names.get(kind, f"a .{kind} file")


def _suffixes(kind: str) -> str:
    return "/".join(s for s, k in SUFFIX_KINDS.items() if k == kind)


def mitigate(config: MitigateConfig, *, pm: pluggy.PluginManager | None = None, progress: Progress = SILENT,
             inputs: dict[str, Path | None] | None = None) -> Mitigation:
    """Write ``config.output`` (the model, rescaled) and its sidecar; return the sidecar's content.

    Both files are written to temporary files renamed into place only when both are
    complete; no input is ever written.
    """
    from auditor.loading import load_model

    kind = check_outputs(config, inputs)
    progress.note(f"Loading {config.model}")
    try:
        bundle = load_model(config.model, config.load_options, pm)
    except UntrustedPickleError as exc:
        raise UntrustedPickleError(
            f"{config.model} holds pickled objects popaudit cannot read without running code from the file, and "
            "mitigate never runs code from a file: re-save the model as a state dict "
            f"(torch.save(model.state_dict(), ...)) ({exc})"
        ) from exc
    if bundle.format not in BUILTIN_FORMATS[kind]:
        raise ModelLoadError(
            f"{config.model} is read as a {bundle.format!r} model, which popaudit mitigate does not write back (it "
            "writes state dicts, checkpoints, popaudit checkpoints, safetensors, .npy and Parquet tables); export "
            "the item table as .npy or Parquet and mitigate that"
        )
    n_items, dim, key, fmt, warnings = bundle.n_items, bundle.dim, bundle.item_key, bundle.format, list(bundle.warnings)
    freqs = _frequencies(bundle, config, progress, warnings)
    del bundle  # the float32 copy check measures is not needed to write

    source = {"path": str(config.model), "resolved": str(Path(config.model).resolve()), "format": fmt,
              "bytes": Path(config.model).stat().st_size, "sha256": _sha256(config.model)}
    sidecar = sidecar_path(config.output)
    with ExitStack() as stack:
        side_tmp = stack.enter_context(atomic_path(sidecar))  # renamed last: after the model
        out_tmp = stack.enter_context(atomic_path(config.output))
        written = _write(kind, key, dim, config, out_tmp, progress)
        norms = written.norms
        if len(norms.before) != n_items:
            raise ModelLoadError(f"{config.model}: wrote {len(norms.before)} rows but check reads {n_items}")
        result = Mitigation(
            alpha=float(config.alpha),
            alpha_source=config.alpha_source,
            rule=RULE,
            source=source,
            output={"path": str(config.output), "sidecar": str(sidecar), "format": written.format or fmt,
                    "bytes": out_tmp.stat().st_size, "sha256": _sha256(out_tmp)},
            item_key=key,
            n_items=n_items,
            dim=dim,
            dtype=written.dtype,
            layout=written.layout,
            norms={"before": asdict(NormSummary.of(norms.before)), "after": asdict(NormSummary.of(norms.after))},
            frequency_norm=None if freqs is None else _slopes(norms, freqs, config),
            warnings=warnings + written.notes,
            tradeoff=config.tradeoff,
        )
        with open(side_tmp, "w", encoding="utf-8") as fh:
            json.dump(result.to_dict(), fh, indent=2, allow_nan=False, ensure_ascii=False)
            fh.write("\n")
    return result


def _write(kind: str, key: str | None, dim: int, config: MitigateConfig, target: Path, progress: Progress) -> Written:
    """Run the writer of the model's format."""
    from auditor.mitigation.tables import write_npy, write_parquet, write_safetensors
    from auditor.mitigation.torch_file import write_torch

    model, alpha, memory = Path(config.model), float(config.alpha), config.max_memory
    if kind == "npy":
        return write_npy(model, target, alpha, max_memory=memory, progress=progress)
    assert key is not None, "tables of torch, safetensors and Parquet files have keys"
    if kind == "parquet":
        return write_parquet(model, target, key, alpha, dim, max_memory=memory, progress=progress)
    if kind == "safetensors":
        return write_safetensors(model, target, key, alpha, max_memory=memory, progress=progress)
    return write_torch(model, target, key, alpha, tensors_only=config.tensors_only, max_memory=memory,
                       progress=progress)


def _frequencies(bundle: Any, config: MitigateConfig, progress: Progress, warnings: list[str]) -> np.ndarray | None:
    """Interactions per item row, as ``check`` counts them (the log, else the checkpoint's record)."""
    if config.interactions is None:
        freqs = bundle.item_frequencies
        return None if freqs is None else np.asarray(freqs, dtype=np.int64)
    from auditor.loading import align_counts, count_item_ids
    from auditor.values import ItemRows
    from auditor.idmap import check_assumed_rows
    from auditor.values import RowIdPolicy
    from auditor.values import LogSpec

    spec = LogSpec(config.interactions, config.interactions_format, config.user_col, config.item_col)
    counts = count_item_ids(spec, need_users=False, progress=progress)
    policy = RowIdPolicy(config.id_offset, config.assume_row_ids)
    if bundle.item_ids is not None and policy.offset is not None:
        raise IdMappingError(f"{setting('id_offset')} applies where ids are taken as rows, but the item rows of "
                             f"{bundle.source} are mapped through {bundle.item_ids_source}")
    stats = align_counts(counts, ItemRows(bundle.item_ids, bundle.n_items, policy.shift))
    if bundle.item_ids is None:
        check_assumed_rows(counts.ids, bundle.n_items, policy, "item", config.interactions, stats.n_unmapped,
                           bundle.format)
    if stats.n_unmapped:
        warnings.append(f"{stats.n_unmapped:,} interactions in {config.interactions} reference items with no row "
                        "in the item table; they are left out of the frequencies")
    if int(stats.frequencies.sum()) == 0:
        raise IdMappingError(f"no interaction in {config.interactions} matches a row of the item table: "
                             f"pass {setting('item_ids')} with the raw id of each row")
    return np.asarray(stats.frequencies, dtype=np.int64)


def _slopes(norms: RowNorms, freqs: np.ndarray, config: MitigateConfig) -> dict[str, Any]:
    """The log–log slope of norm on frequency, before and after: the frequency–norm figure
    the rescaling changes (Spearman's ρ it cannot move: ‖k‖^α keeps the norms' order)."""
    from auditor.metrics.frequency_norm import frequency_norm_stats

    out: dict[str, Any] = {"frequencies": str(config.interactions) if config.interactions else "the checkpoint's record"}
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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _finite(value: Any) -> Any:
    """``value`` with NaN/inf floats as None, at any depth (strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


# ---------------------------------------------------------------- --alpha auto


def recommended_alpha(result: AuditResult) -> float:
    """The α of the scoring the accuracy trade-off of ``check`` recommends: cosine 0,
    ``alpha_<a>`` a. InputError when accuracy was not measured; NoClearGainError when the
    trade-off keeps dot (no scoring clearly better), naming the best α available."""
    from auditor.alpha import scoring_alpha  # the one mapping: dot 1, cosine 0, alpha_<a> a

    accuracy = result.accuracy
    if accuracy is None:
        reason = result.not_measured.get("accuracy", "no held-out log")
        raise InputError(
            f"{setting('alpha')} auto takes the α the accuracy trade-off recommends, but accuracy was not "
            f"measured ({reason}); pass {setting('interactions')} and {setting('holdout')}, or give "
            f"{setting('alpha')} a number in [0, 1]"
        )
    alpha = scoring_alpha(accuracy.recommended) if accuracy.recommended is not None else None
    if alpha is None:
        said = accuracy.recommendation or "no scoring was recommended"
        raise InputError(f"{setting('alpha')} auto: the accuracy trade-off gives no α to serve with ({said})")
    if alpha == 1.0:
        best = accuracy.best_alternative
        best_alpha = scoring_alpha(best) if best is not None else None
        offer = (
            f"; the best available is {setting('alpha')} {best_alpha:g} ({best}): pass it to write that table anyway, "
            f"or loosen {setting('accuracy_tolerance')}" if best_alpha is not None else ""
        )
        raise NoClearGainError(
            f"{setting('alpha')} auto wrote nothing: the trade-off keeps dot-product serving. "
            f"{accuracy.recommendation.rstrip('.')}{offer}"
        )
    return alpha


def tradeoff_figures(result: AuditResult, scoring: str) -> dict[str, Any]:
    """What dot serving of the rescaled table gives against the original's dot serving,
    at the trade-off's K: the figures the rescaling changes."""
    accuracy, retrieval = result.accuracy, result.retrieval
    assert accuracy is not None and accuracy.quoted_k is not None and retrieval is not None
    k = accuracy.quoted_k
    exposure = retrieval.at[k].scorings()
    change = accuracy.changes.get(scoring)
    return {
        "k": k,
        "scoring": scoring,
        "ndcg": {"before": accuracy.at[k]["dot"].ndcg, "after": accuracy.at[k][scoring].ndcg},
        "head_share_1pct": {"before": exposure["dot"].number("head_share_1pct"),
                            "after": exposure[scoring].number("head_share_1pct")},
        "ndcg_delta_ci": None if change is None else change.ndcg_delta_ci,
        "head_share_delta_ci": None if change is None else change.head_share_delta_ci,
        "n_bootstrap": accuracy.n_bootstrap,
        "recommendation": accuracy.recommendation,
    }


def auto_alpha(config: AuditConfig, *, pm: pluggy.PluginManager | None = None,
               progress: Progress = SILENT) -> tuple[float, str, dict[str, Any]]:
    """Run the audit of ``config`` (it needs ``interactions`` and ``holdout``) and take the
    α its accuracy trade-off recommends: (α, the recommendation's sentence, the trade-off
    figures of that scoring)."""
    if config.interactions is None or config.holdout is None:
        raise InputError(f"{setting('alpha')} auto needs {setting('interactions')} and {setting('holdout')}: the "
                         "α is the one the held-out accuracy trade-off recommends")
    from auditor.audit import run_audit

    result = run_audit(config, pm=pm, progress=progress)
    alpha = recommended_alpha(result)
    assert result.accuracy is not None and result.accuracy.recommended is not None
    return alpha, f"auto: {result.accuracy.recommendation}".strip(), tradeoff_figures(result, result.accuracy.recommended)


__all__ = [
    "MitigateConfig", "Mitigation", "RULE", "SIDECAR_SUFFIX", "auto_alpha", "check_outputs", "mitigate",
    "planned_outputs", "recommended_alpha", "sidecar_path", "tradeoff_figures",
]  # fmt: skip

"""The writers of the built-in model formats, by format name: what completes the format
table (:mod:`auditor.loading.formats`) for ``popaudit mitigate``.

Writing sits above loading (a writer rescales through :mod:`~auditor.mitigation.rescale`),
so the built-in records name no writer and :func:`with_writers` adds these; a plugin's
format carries its own. Each writer takes a :class:`~auditor.loading.formats.WriteJob`.

RecBole checkpoints (format ``recbole``, files of kind ``torch``): a model that serves
the dot products of its stored tables is written as a checkpoint RecBole loads, only
the item table's zip member rewritten (:func:`~auditor.mitigation.recbole_file.write_recbole`).
A graph model serves propagated vectors, so a rescaled stored table is not norm-aware
serving: with an output named ``.npy`` or ``.parquet`` its served item vectors (the
checkpoint's ``restore_item_e`` cache, else popaudit's propagation over the training part
of the split RecBole made of ``--interactions``) are written rescaled as a plain table for
an inner-product index; the checkpoint itself is never rewritten with a stale cache.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from auditor.alpha import alpha_scoring
from auditor.errors import ModelLoadError, setting
from auditor.loading.builtin import load_builtin
from auditor.plugin_api import ModelFormat, WriteJob, Writer, Written
from auditor.loading.recbole_models import CACHED, PROPAGATED, TABLES, serving_of
from auditor.mitigation.tables import write_npy, write_parquet, write_safetensors

# The writers of torch files import their modules on use: torch takes seconds to import,
# and rescaling a .npy or Parquet table needs none of it.


def _key(job: WriteJob) -> str:
    assert job.item_key is not None, "tables of torch, safetensors and Parquet files have keys"
    return job.item_key


def _npy(job: WriteJob) -> Written:
    return write_npy(job.source, job.target, job.alpha, max_memory=job.max_memory, progress=job.progress)


def _parquet(job: WriteJob) -> Written:
    return write_parquet(job.source, job.target, _key(job), job.alpha, job.dim, max_memory=job.max_memory,
                         progress=job.progress)


def _safetensors(job: WriteJob) -> Written:
    if job.item_bias_key is not None:
        raise ModelLoadError(
            f"{job.source} adds the item bias `{job.item_bias_key}` to every score, which check serves with the item "
            "rows: mitigate rescales the two together in PyTorch files only; save the state dict with torch.save"
        )
    return write_safetensors(job.source, job.target, _key(job), job.alpha, max_memory=job.max_memory,
                             progress=job.progress)


def _torch(job: WriteJob) -> Written:
    from auditor.mitigation.torch_file import write_torch

    return write_torch(job.source, job.target, _key(job), job.alpha, tensors_only=job.tensors_only,
                       max_memory=job.max_memory, progress=job.progress, bias_key=job.item_bias_key)


def _recbole(job: WriteJob) -> Written:
    """The checkpoint with its item table rescaled, or (output ``.npy``/``.parquet``) a
    graph model's served item vectors rescaled (module docstring)."""
    from auditor.mitigation.recbole_file import write_recbole

    if job.output_kind in ("npy", "parquet"):
        return _served_table(job, job.output_kind)
    return write_recbole(job.source, job.target, _key(job), job.alpha, max_memory=job.max_memory,
                         progress=job.progress)


def _served_table(job: WriteJob, fmt: str) -> Written:
    from auditor.loading.recbole_split import recbole_split
    from auditor.loading.served import read_cache, served_vectors
    from auditor.mitigation.recbole_file import write_served_table

    bundle = load_builtin(job.source, job.options)
    assert bundle is not None and bundle.format == "recbole"
    serving = serving_of(bundle.config or {})
    model = f"{job.source} is a RecBole {serving.model or 'model'} checkpoint: the model scores with {serving.how}"
    if serving.scoring == "cosine":
        raise ModelLoadError(f"{model}: its serving ignores item norms already, so rescaling them changes nothing")
    if serving.kind == TABLES:
        raise ModelLoadError(
            f"{model}, so its served item vectors are its stored table: mitigate writes it back as a RecBole "
            f"checkpoint; give {setting('output')} a .pth name"
        )
    if serving.kind not in (PROPAGATED, CACHED):
        raise ModelLoadError(f"{model}, not with dot products of item vectors: a rescaled table would not change "
                             "what it serves")
    cache = read_cache(job.source)
    train = None
    if cache is None and serving.kind == PROPAGATED:
        if job.interactions is None:
            raise ModelLoadError(
                f"{model}, and the checkpoint caches no restore_item_e: pass {setting('interactions')} with the .inter "
                "file RecBole read, so popaudit propagates over the training part of its split"
            )
        split = recbole_split(bundle.config or {}, job.interactions)
        train = (split.train.users, split.train.items)
    served = served_vectors(bundle, train, cache)
    if served.source == "tables":
        raise ModelLoadError(f"{model}; popaudit cannot compute its served item vectors: {'; '.join(served.warnings)}")
    written = write_served_table(served.items, job.target, job.alpha, fmt, item_ids=job.item_ids,
                                 max_memory=job.max_memory, progress=job.progress)
    said = f"served item vectors: {served.description}"
    name = serving.model or "the model"
    alone = (
        f"this table serves with {name}'s own served users, which check of the table alone does not rebuild (it "
        f"would take the whole {setting('interactions')} file as the training log and query each user's mean "
        f"training-item vector): check of {job.source.name} measures what the table serves, as its norm-aware "
        f"scoring at alpha {job.alpha:g}"
    )
    return replace(written, format=fmt, notes=[*written.notes, said, *served.warnings, alone])


def served_table_check(source: Mapping[str, Any], output: Mapping[str, Any], alpha: float) -> tuple[Path, str] | None:
    """Where ``check`` measures what a mitigate output serves, when ``check`` of the output
    does not (``source``/``output``: the sidecar's entries): a RecBole graph model's served
    item vectors written as a plain table are served with the model's own served users,
    which only ``check`` of the model rebuilds (over the training part of its split); its
    scoring of this α (``dot`` at 1, ``cosine`` at 0, else ``alpha_<α>``) ranks as dot
    serving of the output does. (model, scoring name), or None: ``check`` of the output."""
    if source.get("format") != "recbole" or output.get("format") not in ("npy", "parquet"):
        return None
    return Path(source["path"]), "dot" if alpha == 1.0 else "cosine" if alpha == 0.0 else alpha_scoring(alpha)


WRITERS: Mapping[str, Writer] = {
    "npy": _npy,
    "parquet": _parquet,
    "safetensors": _safetensors,
    "torch": _torch,
    "recbole": _recbole,
}
"""The built-in formats' writers, by :attr:`ModelFormat.name`."""


def with_writers(formats: Iterable[ModelFormat]) -> list[ModelFormat]:
    """``formats`` with the built-in writers in the records of the formats they write."""
    return [replace(f, write=WRITERS[f.name]) if f.write is None and f.name in WRITERS else f for f in formats]


__all__ = ["WRITERS", "served_table_check", "with_writers"]

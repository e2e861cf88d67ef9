"""Batch jobs: each manifest row's full AuditConfig, and every file a batch reads.

A row starts from the batch defaults (the command-line options) and its non-empty cells
override them. A row the settings reject becomes a job carrying its error rather than
stopping the batch; defaults that are invalid stop it before anything runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from auditor.batch.cells import resolve_path
from auditor.batch.manifest import DECLARED_SETTINGS, REFUSED, Manifest, ManifestRow, column_spellings, refusal
from auditor.batch.provenance import named_files
from auditor.config import QUERY_SOURCES, AuditConfig
from auditor.errors import AuditError, InputError, ManifestError, setting, spelled_as
from auditor.loading.side_files import side_inputs

# Default files resolved against the caller's cwd, so workers (another cwd) read them too.
_PATH_FIELDS = ("interactions", "frequencies", "item_ids", "user_ids", "holdout", "trace", "recommendations")


@dataclass(frozen=True)
class BatchJob:
    """One audit to run: a manifest row and its full config (None when the row is bad)."""

    row: int
    model: str
    label: str | None
    config: AuditConfig | None
    error: str | None = None


def row_title(row: int, model: str | None) -> str:
    """How messages name a manifest row: its number and model cell ("no model" for a row
    without one, which audits served lists alone)."""
    return f"row {row} ({model or 'no model'})"


def build_jobs(manifest: Manifest, defaults: Mapping[str, Any] | None = None) -> list[BatchJob]:
    """A job per manifest row: the batch ``defaults`` overridden by the row's cells.

    ``defaults`` maps AuditConfig field names (not ``model``) to values; invalid defaults
    raise InputError, an invalid row becomes a job carrying its error.
    """
    template = config_template(defaults or {})
    base = manifest.path.resolve().parent
    spelled = column_spellings(manifest)
    for row in manifest.rows:
        refused = sorted(set(row.settings) & REFUSED)
        if refused:  # a Manifest built by hand, not read by read_manifest
            raise ManifestError(
                f"manifest {manifest.path} row {row.index}: "
                + "; ".join(f"{name!r} is not allowed: {refusal(name)}" for name in refused)
            )
    # A row's messages name settings as manifest columns (their field names, the spelling
    # of library callers and workers' audits), never as the command's flags.
    with spelled_as(None):
        return [_job(row, template, base, spelled) for row in manifest.rows]


def _job(row: ManifestRow, template: AuditConfig, base: Path, spelled: Mapping[str, str]) -> BatchJob:
    """One row's job: its config, or the error that keeps it from running."""
    model = row.model or ""
    if row.problems:
        return BatchJob(row.index, model, row.label, None, "InputError: " + "; ".join(row.problems))
    try:
        config = _row_config(template, _model_path(model, base), row.settings)
    except AuditError as exc:
        return BatchJob(row.index, model, row.label, None, _row_error(template, model, base, row.settings, exc, spelled))
    return BatchJob(row.index, model, row.label, config)


def _row_error(template: AuditConfig, model: str, base: Path, settings: Mapping[str, Any], exc: AuditError,
               spelled: Mapping[str, str]) -> str:
    """The error of a row the audit settings reject, naming the column(s) at fault as the
    manifest spells them (``spelled``: setting -> column)."""
    culprits = []
    for name, value in settings.items():
        try:
            _row_config(template, _model_path(model, base), {name: value})
        except AuditError:
            culprits.append(spelled.get(name, name))
    where = f"column {culprits[0]!r}: " if len(culprits) == 1 else (
        f"columns {', '.join(map(repr, culprits))}: " if culprits else ""
    )
    return f"{type(exc).__name__}: {where}{exc}"


def _model_path(model: str, base: Path) -> Path | None:
    """A row's model file (None: an empty cell, a lists-only row)."""
    return resolve_path(model, base) if model else None


def batch_inputs(manifest: Manifest, defaults: Mapping[str, Any] | None = None) -> dict[str, Path]:
    """Every existing file a run reads, by what names it: ``the manifest``, the default
    files (by their setting: ``interactions``, ``holdout``, ``trace``, ``queries``,
    ``plugins``, ...) and each row's files (``the model of manifest row 3``, ``the holdout
    of manifest row 3``, ``the external data of the model of manifest row 3``): the files
    a row's provenance covers (:func:`auditor.batch.provenance.named_files`, one list). A
    file named twice is listed once, under its first name. For
    :func:`auditor.output_guard.check_not_inputs`, so that no output overwrites an input."""
    template = config_template(defaults or {})
    base = manifest.path.resolve().parent
    inputs: dict[str, Path] = {}
    seen: set[str] = set()

    def add(label: str, path: Path | None) -> None:
        if path is None:
            return
        try:  # only existing files can be overwritten; odd paths (NUL, too long) are none
            os.stat(path)
            key = os.path.realpath(path)
        except (OSError, ValueError):
            return
        if key not in seen:
            seen.add(key)
            inputs[label] = path

    add("the manifest", manifest.path)
    for name, path in named_files(lambda name: getattr(template, name)).items():
        plugin = int(name[len("plugins["):-1]) if name.startswith("plugins[") else 0
        if name != "model":
            add(setting(name.split("[")[0]) + ("" if plugin == 0 else f" #{plugin + 1}"), path)
    for row in manifest.rows:
        model = None if row.model is None else resolve_path(row.model, base)
        add(f"the model of manifest row {row.index}", model)
        for label, data in side_inputs(model, f"the model of manifest row {row.index}").items():
            add(label, data)
        for name, path in named_files(row.settings.get).items():
            add(f"the {name} of manifest row {row.index}", path)
    return inputs


def config_template(defaults: Mapping[str, Any]) -> AuditConfig:
    """The config every row starts from; InputError when the defaults are invalid."""
    values = dict(defaults)
    if "model" in values:
        raise InputError("batch defaults cannot set 'model': it comes from the manifest")
    cwd = Path.cwd()
    for name in _PATH_FIELDS:
        if values.get(name) is not None:
            values[name] = resolve_path(values[name], cwd).resolve()
    if values.get("queries") not in (None, *QUERY_SOURCES):
        values["queries"] = str(resolve_path(values["queries"], cwd).resolve())
    if values.get("plugins"):
        values["plugins"] = tuple(resolve_path(p, cwd).resolve() for p in values["plugins"])
    for name in ("seed",):  # numpy integers are integers here; the config checks the range
        value = values.get(name)
        if isinstance(value, np.integer):
            values[name] = int(value)
    try:
        return AuditConfig(model=Path("."), **values)
    except TypeError as exc:
        raise InputError(f"invalid batch defaults: {exc}") from exc


def _row_config(template: AuditConfig, model: Path | None, settings: Mapping[str, Any]) -> AuditConfig:
    """``template`` with a row's settings; declared-training cells update ``declared``."""
    declared = {k: v for k, v in settings.items() if k in DECLARED_SETTINGS}
    overrides = {k: v for k, v in settings.items() if k not in DECLARED_SETTINGS}
    overrides["model"] = model
    for given, other in (("interactions", "frequencies"), ("frequencies", "interactions")):
        if overrides.get(given) is not None and other not in overrides:
            overrides[other] = None  # a row's log (or counts) replaces the default counts (or log)
    if declared:
        overrides["declared"] = replace(template.declared, **declared)
    return template.with_overrides(overrides)

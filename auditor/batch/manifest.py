"""Batch manifests: which columns a manifest may have and how its cells become settings.

A manifest is a Parquet or CSV file (``.csv``/``.tsv``; anything else is read as
Parquet) with a ``model`` column and, optionally, one column per ``check`` setting (a row with a
``recommendations`` cell and no model audits those served lists alone).
Column names are :class:`~auditor.config.AuditConfig` field names (``item_key``,
``max_queries``, ``ks``) or the command-line spellings (``item-key``, ``--max-queries``,
``k``); the training declarations of C1/C4/C5 are ``optimizer``, ``momentum``,
``weight_decay``, ``lr`` and ``loss`` (``declared_`` prefix optional). ``k`` holds one
cut-off or several (``"10,100"``). An optional ``label`` column (free text, e.g. a
checkpoint date) is carried into the results. A value in a row overrides the batch
default for that row (a ``frequencies`` cell, item counts computed elsewhere, replaces
the default ``interactions``, and the other way round); an empty cell keeps the default. Relative paths in the manifest
are resolved against the manifest's folder. A missing ``model`` column or an unknown
column is a :class:`~auditor.errors.ManifestError` (it lists the valid names); a bad
value in one row only fails that row, with a message naming the column.

A manifest is data, often written by someone else: it cannot grant trust or choose
where code runs. ``trust_pickle`` (full unpickling runs code from the model file),
``scheduler`` (where the audits are sent) and ``plugins`` (code to load) are refused as
columns; only the person running the batch sets them, for every row.
"""

from __future__ import annotations

import functools
import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from types import UnionType
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv

from auditor.alpha import name_clash
from auditor.batch.cells import convert_setting, missing, text
from auditor.config import INTERACTION_FORMATS, AuditConfig, DeclaredTraining
from auditor.errors import ManifestError, setting
from auditor.io import file_sha256, require_regular_file
from auditor.ranges import RANGES

# Settings that are batch-wide, never per row: plugins change the worker's hook registry.
_NOT_PER_ROW = {"model", "plugins", "declared", "trust_pickle", "scheduler"}
# Columns a manifest may never have: they grant trust or pick where code runs, which only
# the person running the batch decides (column spelling -> the setting refused).
_REFUSED_SPELLINGS = {"trust_pickle": "trust_pickle", "scheduler": "scheduler", "plugins": "plugins", "plugin": "plugins"}
REFUSED = frozenset(_REFUSED_SPELLINGS.values())
# Settings with a fixed set of values that only the audit would reject, mid-run.
_CHOICES = {"interactions_format": INTERACTION_FORMATS}
_ALIASES = {"k": "ks", "alpha": "alphas"}
# The command's --no-X flags, accepted as columns too (true turns X off).
_NEGATED = {"no_retrieval": "retrieval", "no_probes": "probes"}
DECLARED_SETTINGS = tuple(f.name for f in fields(DeclaredTraining))


def refusal(name: str) -> str:
    """Why a manifest may not set ``name`` (a refused setting) and who sets it instead.

    Built when raised, so that it names the setting as the front end spells it.
    """
    how = setting(name)
    if name == "trust_pickle":
        return (
            "a manifest cannot allow full unpickling, which runs code from the model files; "
            f"only the person running popaudit can, with {how} for the whole run (it applies to every row)"
        )
    if name == "scheduler":
        return ("a manifest cannot choose the Dask cluster the audits are sent to; the person running popaudit "
                f"chooses it, with {how} for the whole run")
    return ("a manifest cannot load plugins, which run code; the person running popaudit loads them, with "
            f"{how} for the whole run (it applies to every row)")


@dataclass(frozen=True)
class ManifestRow:
    """One manifest row: its model, label, converted settings and any problem found."""

    index: int
    model: str | None
    label: str | None
    settings: dict[str, Any]
    """AuditConfig field -> value (paths resolved; ``declared`` fields under their names)."""
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Manifest:
    """A parsed manifest: its file, the setting each column maps to, and its rows."""

    path: Path
    columns: dict[str, str]
    """Column as written -> AuditConfig field (or ``model``/``label``/a declared field)."""
    rows: list[ManifestRow]
    sha256: str | None = None
    """SHA-256 of the manifest file's bytes as read (None for a manifest built in code);
    recorded in the results file, see :mod:`auditor.batch.results`."""

    @property
    def has_models(self) -> bool:
        """Whether a row names a model (else every row audits served lists alone, and the
        workers need no torch)."""
        return any(row.model is not None for row in self.rows)


def column_spellings(manifest: Manifest) -> dict[str, str]:
    """Setting -> the manifest's column for it, as the file spells it (``ks`` -> ``k``,
    ``max_queries`` -> ``--max-queries``, ``retrieval`` -> ``no-retrieval``), so that a
    row's errors name the column the reader wrote."""
    spelled = {canonical: name for name, canonical in manifest.columns.items()}
    spelled.update({_NEGATED[c]: name for name, c in manifest.columns.items() if c in _NEGATED})
    return spelled


def setting_columns() -> dict[str, str]:
    """Setting -> the manifest column that sets it, where the two differ (``ks`` -> ``k``,
    ``retrieval`` -> ``no_retrieval``): how a row's audit names them (a worker's messages
    and warnings), as the manifest's reader writes them."""
    return {**{name: column for column, name in _ALIASES.items()},
            **{name: column for column, name in _NEGATED.items()}}


def manifest_columns() -> list[str]:
    """Every column name a manifest may have (canonical spellings)."""
    names = ["model", "label"]
    names += [f.name for f in fields(AuditConfig) if f.name not in _NOT_PER_ROW]
    names += ["k", "alpha", *_NEGATED, *DECLARED_SETTINGS]
    return names


def _spelling(column: str) -> str:
    """A column name as a setting name (``--Item-Key`` -> ``item_key``)."""
    return column.strip().lstrip("-").lower().replace("-", "_")


def _canonical(column: str) -> str | None:
    """The setting a column name maps to, or None when it is unknown."""
    name = _spelling(column)
    name = _ALIASES.get(name, name)
    if name.startswith("declared_") and name[len("declared_") :] in DECLARED_SETTINGS:
        name = name[len("declared_") :]
    valid = set(manifest_columns()) - {"k", "alpha"}
    return name if name in valid else None


def read_manifest(path: Path) -> Manifest:
    """Read and validate a manifest (Parquet or CSV); raises ManifestError when unusable."""
    path = require_regular_file(path, "manifest", error=ManifestError)
    digest = _file_sha256(path)
    table = _read_manifest_table(path)
    repeated = sorted({n for n in table.column_names if table.column_names.count(n) > 1})
    if repeated:
        raise ManifestError(f"manifest {path}: column(s) {_show_names(repeated)} appear more than once")
    for field in table.schema:
        if pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type):  # CSV bytes not UTF-8
            raise ManifestError(f"manifest {path}: column {_show_names([field.name])} is not valid UTF-8 text; re-save it as UTF-8")
    refused = [name for name in table.column_names if _spelling(name) in _REFUSED_SPELLINGS]
    if refused:
        raise ManifestError(
            f"manifest {path}: "
            + "; ".join(f"column {name!r} is not allowed: {refusal(_REFUSED_SPELLINGS[_spelling(name)])}" for name in refused)
        )
    columns: dict[str, str] = {}
    unknown: list[str] = []
    for name in table.column_names:
        canonical = _canonical(name)
        if canonical is None:
            unknown.append(name)
        else:
            columns[name] = canonical
    found = _show_names(table.column_names, quote=False) or "(none)"
    if "model" not in columns.values() and "recommendations" not in columns.values():  # lists alone need no model
        raise ManifestError(f"manifest {path} has no 'model' column; columns found: {found}")
    if unknown:
        raise ManifestError(
            f"manifest {path}: unknown column(s) {_show_names(unknown)}; valid "
            f"columns: {', '.join(manifest_columns())} (command-line spellings such as "
            "item-key also work)"
        )
    seen: dict[str, str] = {}
    for name, canonical in columns.items():
        target = _NEGATED.get(canonical, canonical)
        if target in seen:
            raise ManifestError(
                f"manifest {path}: columns {seen[target]!r} and {name!r} both set {target!r}"
            )
        seen[target] = name
    if table.num_rows == 0:
        raise ManifestError(f"manifest {path} has no rows")
    base = path.resolve().parent
    data = {name: table.column(name).to_pylist() for name in columns}
    _check_path_cells(path, columns, data)
    spelled = {canonical: name for name, canonical in columns.items()}
    rows = [
        _manifest_row(i, {columns[n]: data[n][i] for n in columns}, base, spelled)
        for i in range(table.num_rows)
    ]
    return Manifest(path=path, columns=columns, rows=rows, sha256=digest)


def _file_sha256(path: Path) -> str:
    """SHA-256 of a manifest file's bytes; ManifestError when it cannot be read."""
    try:
        return file_sha256(path)
    except OSError as exc:
        raise ManifestError(f"cannot read manifest {path}: {exc.strerror or exc}") from exc


def _check_path_cells(path: Path, columns: Mapping[str, str], data: Mapping[str, list[Any]]) -> None:
    """ManifestError for a NUL byte in a cell that names a file (``model``,
    ``interactions``, ``item_ids``, ...): no path can hold one, and the OS call would
    fail the row with a bare "embedded null byte" naming neither the manifest nor the
    column. Like a cell that is not UTF-8, it is a broken manifest, not a failed row."""
    kinds = _setting_kinds()
    for name, canonical in columns.items():
        if canonical != "model" and kinds.get(canonical) not in ("path", "query"):
            continue
        for row, value in enumerate(data[name]):
            if isinstance(value, str) and "\x00" in value:
                raise ManifestError(
                    f"manifest {path}: column {_show_names([name])}, row {row}: the cell holds a NUL byte "
                    "(\\x00), which no file path can contain"
                )


def _read_manifest_table(path: Path) -> pa.Table:
    suffix = path.suffix.lower()
    try:
        if suffix in (".csv", ".tsv", ".txt"):
            return _read_csv_text(path, "\t" if suffix == ".tsv" else ",")
        # Imported here: auditor.loading loads torch, which reading a CSV manifest never needs.
        from auditor.loading.parquet_bounds import read_table as bounded_read_table

        return bounded_read_table(path, None, ManifestError)
    except (pa.ArrowInvalid, OSError) as exc:
        kind = "CSV" if suffix in (".csv", ".tsv", ".txt") else "Parquet"
        # Arrow's CSV errors quote the offending line: leave it out (the manifest may be
        # a link to a file that is no manifest at all, e.g. secrets).
        reason = re.sub(r"(got \d+):.*", r"\1", str(exc), flags=re.DOTALL)
        raise ManifestError(f"cannot read manifest {path} as {kind}: {reason}") from exc


def _read_csv_text(path: Path, delimiter: str) -> pa.Table:
    """A CSV manifest with every cell as its text, converted per setting later
    (:mod:`auditor.batch.cells`): an inferred float64 column rounds integers above 2^53
    and turns a label 1.10 into 1.1. Only an empty cell is a null (keeps the default):
    ``nan``, ``NA``, ``null`` are text, as a model file or a label may be called."""
    parse = pacsv.ParseOptions(delimiter=delimiter)
    names = pacsv.open_csv(path, parse_options=parse).schema.names
    options = pacsv.ConvertOptions(column_types={name: pa.string() for name in names}, null_values=[""],
                                   strings_can_be_null=True, quoted_strings_can_be_null=True)
    try:
        return pacsv.read_csv(path, parse_options=parse, convert_options=options)
    except pa.ArrowInvalid as exc:
        bad = re.search(r"column #(\d+): CSV conversion error to string: invalid UTF8", str(exc))
        if bad is None or int(bad.group(1)) >= len(names):
            raise
        column = _show_names([names[int(bad.group(1))]])
        raise ManifestError(f"manifest {path}: column {column} is not valid UTF-8 text; re-save it as UTF-8") from exc


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_\-. ]{1,64}")


def _show_names(names: Sequence[str], *, quote: bool = True) -> str:
    """Column names for a message, when they look like a manifest's; otherwise only how
    many there are, so a file that is no manifest (a key file, an environment dump)
    never has its first line echoed to the console."""
    if all(_PLAIN_NAME.fullmatch(name) for name in names):
        return ", ".join(map(repr, names) if quote else names)
    return f"{len(names)} column(s) whose names do not look like a manifest's (not shown)"


@functools.cache
def _setting_kinds() -> dict[str, str]:
    """AuditConfig field -> value kind (path, bool, int, size, float, ints, str, query)."""
    hints = typing.get_type_hints(AuditConfig)
    hints.update(typing.get_type_hints(DeclaredTraining))
    hints.update({name: bool for name in _NEGATED})
    kinds: dict[str, str] = {}
    for name, hint in hints.items():
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        base = args[0] if isinstance(hint, UnionType) or typing.get_origin(hint) is typing.Union else hint
        if name == "queries":
            kinds[name] = "query"
        elif name == "max_memory":
            kinds[name] = "size"
        elif base is Path:
            kinds[name] = "path"
        elif base is bool:
            kinds[name] = "bool"
        elif base is int:
            kinds[name] = "int"
        elif base is float:
            kinds[name] = "float"
        elif typing.get_origin(base) is tuple:
            kinds[name] = "floats" if typing.get_args(base)[0] is float else "ints"
        else:
            kinds[name] = "str"
    return kinds


def _manifest_row(index: int, cells: Mapping[str, Any], base: Path, spelled: Mapping[str, str]) -> ManifestRow:
    """One row's cells (by setting) converted; a bad cell is a problem naming its column
    as the manifest spells it (``spelled``: setting -> column, e.g. ``ks`` -> ``k``)."""
    kinds = _setting_kinds()
    settings: dict[str, Any] = {}
    problems: list[str] = []
    model = text(cells.get("model"))
    label = text(cells.get("label"))
    if model is None and missing(cells.get("recommendations")):
        problems.append("the model cell is empty (a row without a model needs a recommendations cell: served lists "
                        "audited alone)")
    for name, value in cells.items():
        if name in ("model", "label") or missing(value):
            continue
        try:
            converted = convert_setting(kinds[name], value, base)
            _check_value(name, converted)
            if name in _NEGATED:
                name, converted = _NEGATED[name], not converted
            settings[name] = converted
        except (ValueError, TypeError, OverflowError) as exc:
            problems.append(f"column {spelled.get(name, name)!r}: {exc}")
    return ManifestRow(index, model, label, settings, tuple(problems))


def _check_value(name: str, value: Any) -> None:
    """ValueError when a converted cell is out of the setting's range (auditor/ranges.py,
    the table the command-line options use too) or choices."""
    found = RANGES.get(name)
    if found is not None:
        for one in value if isinstance(value, tuple) else (value,):
            if not found.contains(one):
                raise ValueError(f"must be {found.describe()}, got {one!r}")
    if name in _CHOICES and value not in _CHOICES[name]:
        raise ValueError(f"must be one of {', '.join(_CHOICES[name])}, got {value!r}")
    if name == "alphas" and (clash := name_clash(value)) is not None:
        raise ValueError(clash)

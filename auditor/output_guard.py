"""Outputs against inputs, checked before a run: an output never overwrites an input or
another output, and popaudit never writes through a link it was not given."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from auditor.errors import InputError, OutputError
from auditor.io import descriptor_named, is_special_file, output_plan


TEXT_SUFFIXES = {".csv": "CSV text", ".tsv": "TSV text", ".txt": "plain text", ".json": "JSON text",
                 ".jsonl": "JSON Lines text", ".ndjson": "NDJSON text"}
"""Names that promise text (and the text they promise): a Parquet output named so would be
read as garbage."""
_COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".zip")
_PARQUET_SUFFIXES = (".parquet", ".pq")


def parquet_name_problem(path: Path, flag: str, what: str) -> str | None:
    """Why ``path`` is no name for a Parquet output (``what``: "the batch results"), or None:
    one whose suffix promises text (:data:`TEXT_SUFFIXES`, ``results.csv``, ``results.csv.gz``)
    would hold Parquet bytes a CSV or JSON reader takes for garbage. The name suggested
    instead drops the text suffix (and a compressor's) and ends in ``.parquet`` once
    (``r.parquet.csv``: ``r.parquet``). Special files (``/dev/stdout``) and other names are
    the caller's to choose."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes and suffixes[-1] in _COMPRESSED:
        suffixes.pop()
    if not suffixes or suffixes[-1] not in TEXT_SUFFIXES:
        return None
    name = Path(path).name
    stem = name[: -len("".join(Path(path).suffixes[len(suffixes) - 1:]))]
    suggested = Path(path).with_name(stem if stem.lower().endswith(_PARQUET_SUFFIXES) else stem + ".parquet")
    return (f"{flag} {path}: {what} are a Parquet file, not {TEXT_SUFFIXES[suffixes[-1]]}, so a "
            f"{suffixes[-1]} name would hold bytes a text reader takes for garbage; name it {suggested} (read it with "
            "pandas.read_parquet or pyarrow, which can also write it as CSV)")


def refuse_linked_folder(folder: Path, owner: str) -> None:
    """OutputError when ``folder`` (one popaudit creates beside an output: a Markdown
    report's figures) is a symlink: files are written into a folder the user named, or
    into a real one popaudit made, never through a link to somewhere else."""
    if Path(folder).is_symlink():
        raise OutputError(
            f"cannot write the files of {owner} into {folder}: it is a symbolic link (to "
            f"{os.readlink(folder)}), and popaudit never writes through a link it was not given; "
            "remove the link or choose another output path"
        )


def check_not_inputs(outputs: Mapping[str, Path | None], inputs: Mapping[str, Path | None]) -> None:
    """Raise InputError when an output would overwrite an input (never destroy an input).

    Both mappings go from what named the path (``-o``, ``--interactions``, ``row 3
    model``) to the path; ``None`` entries are skipped. Paths are compared as the files
    they resolve to (symlinks followed, hard links by inode), so ``./log.csv``,
    ``log.csv`` and a link to it are the same file. Special files (``/dev/null``) are
    never inputs worth protecting from an output. Two outputs naming the same regular
    file are refused too (one would silently replace the other), and so are two naming
    one special file (:func:`_stream_key`: ``/dev/stdout`` and ``/dev/fd/1``, a FIFO
    twice): two reports run together on one stream are neither one report nor the other,
    and keyed by one path one of them would be dropped. ``/dev/null`` may take any number
    (it keeps nothing either way). List every file a run
    writes, a Markdown report's figures included (see
    :func:`auditor.plugins.renderers.planned_outputs`), under a name that says whose it is.
    An output popaudit does not write (:func:`~auditor.io.output_plan`: a symlink, a descriptor not
    open) is an OutputError here, before anything runs.
    """
    existing = {
        flag: Path(p) for flag, p in inputs.items()
        if p is not None and Path(p).exists() and not is_special_file(Path(p))
    }
    named: dict[str, _Named] = {}
    for out_flag, out in outputs.items():
        if out is None:
            continue
        if not is_special_file(Path(out)):
            _refuse_overwrite(out_flag, Path(out), existing, named)
        else:
            _refuse_shared_stream(out_flag, Path(out), named)
        output_plan(Path(out))  # a target popaudit does not write (a symlink): refused now, not after the run


_Named = tuple[str, Path, int | None, bool]
"""An output already seen: its option, its path as given, the descriptor it names (or None),
and whether it is a regular file (written by a rename: two hard links to one are two files)."""


def _refuse_overwrite(out_flag: str, out: Path, existing: Mapping[str, Path], named: dict[str, _Named]) -> None:
    """InputError when ``out`` is an input, or a file another output (``named``: real
    path, and the open file of an existing one -> that output, updated) already names."""
    real = os.path.realpath(out)
    if real in named:
        raise InputError(f"{named[real][0]} and {out_flag} both name {out}; give each output its own file")
    named[real] = (out_flag, out, None, True)
    if not out.exists():
        return
    _refuse_one_file(out_flag, out, None, file_key(os.stat(out)), named, regular=True)  # a descriptor's file
    for in_flag, src in existing.items():
        if os.path.samefile(out, src):
            raise InputError(
                f"{out_flag} {out} is the input file given as {in_flag}; popaudit never "
                "overwrites an input: choose another output path"
            )


def file_key(status: os.stat_result) -> str | None:
    """An open file's identity (device and inode), by which two descriptors or paths are one
    file whatever they are called (``2>&1`` makes descriptors 1 and 2 one); None for the
    null device, which keeps nothing, so it may take any number of outputs."""
    try:
        if os.path.samestat(status, os.stat(os.devnull)):
            return None
    except OSError:
        pass
    return f"file {status.st_dev}:{status.st_ino}"


def _stream_key(out: Path) -> tuple[str | None, int | None]:
    """What a special output is, for telling two apart, and the descriptor it names: the open
    file it reaches (:func:`file_key`: a descriptor of this process by what it holds, as
    :mod:`auditor.io` knows it by name, ``/dev/stdout`` is ``/dev/fd/1``; a FIFO or a
    device by its path); None for ``/dev/null``. A descriptor not open, or a path that
    cannot be read, falls back to its number or its real path (refused later or written as
    named)."""
    fd = descriptor_named(out)
    try:
        return file_key(os.fstat(fd) if fd is not None else os.stat(out)), fd
    except OSError:
        pass
    if fd is not None:
        return f"descriptor {fd}", fd
    real = os.path.realpath(out)
    return (None if real == os.path.realpath(os.devnull) else real), None


def _refuse_shared_stream(out_flag: str, out: Path, named: dict[str, _Named]) -> None:
    """InputError when the special file ``out`` is one another output (``named``, updated)
    already names: the same descriptor, FIFO or open file, whatever the spelling."""
    key, fd = _stream_key(out)
    _refuse_one_file(out_flag, out, fd, key, named)


def _refuse_one_file(out_flag: str, out: Path, fd: int | None, key: str | None, named: dict[str, _Named],
                     regular: bool = False) -> None:
    """InputError when the open file ``key`` is one that another output (``named``,
    updated) reaches, a special one on either side, naming each output by its own option
    and spelling."""
    if key is None:
        return
    if key in named and not (regular and named[key][3]):
        flag, path, other, _regular = named[key]
        if fd is not None and fd == other:
            how = f"both name descriptor {fd}"
        elif fd is not None and other is not None:
            how = f"are one open file (descriptors {other} and {fd})"
        else:
            how = "are one file"
        raise InputError(f"{flag} {path} and {out_flag} {out} {how}; two reports on one stream cannot be told apart: "
                         "give each output its own file")
    named.setdefault(key, (out_flag, out, fd, regular))

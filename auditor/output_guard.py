"""Outputs against inputs, checked before a run: an output never overwrites an input or
another output, and popaudit never writes through a link it was not given."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from auditor.errors import InputError, OutputError
from auditor.io import descriptor_named, is_special_file, output_plan


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
    named: dict[str, str] = {}
    for out_flag, out in outputs.items():
        if out is None:
            continue
        if not is_special_file(Path(out)):
            _refuse_overwrite(out_flag, Path(out), existing, named)
        else:
            _refuse_shared_stream(out_flag, Path(out), named)
        output_plan(Path(out))  # a target popaudit does not write (a symlink): refused now, not after the run


def _refuse_overwrite(out_flag: str, out: Path, existing: Mapping[str, Path], named: dict[str, str]) -> None:
    """InputError when ``out`` is an input, or a file another output (``named``: real
    path -> flag, updated) already names."""
    real = os.path.realpath(out)
    if real in named:
        raise InputError(f"{named[real]} and {out_flag} both name {out}; give each output its own file")
    named[real] = out_flag
    if not out.exists():
        return
    for in_flag, src in existing.items():
        if os.path.samefile(out, src):
            raise InputError(
                f"{out_flag} {out} is the input file given as {in_flag}; popaudit never "
                "overwrites an input: choose another output path"
            )


def _stream_key(out: Path) -> str | None:
    """What a special output is, for telling two apart: a descriptor of this process by
    its number (as :mod:`auditor.io` knows it, by name: ``/dev/stdout`` is ``/dev/fd/1``),
    else the path links resolved (a FIFO, a device); None for ``/dev/null``."""
    fd = descriptor_named(out)
    if fd is not None:
        return f"descriptor {fd}"
    real = os.path.realpath(out)
    return None if real == os.path.realpath(os.devnull) else real


def _refuse_shared_stream(out_flag: str, out: Path, named: dict[str, str]) -> None:
    """InputError when the special file ``out`` is one another output (``named``, updated)
    already names: the same descriptor or FIFO, whatever the spelling."""
    key = _stream_key(out)
    if key is None:
        return
    if key in named:
        raise InputError(
            f"{named[key]} and {out_flag} both name {out}"
            f"{f' ({key})' if key.startswith('descriptor') else ''}; two reports on one stream cannot be "
            "told apart: give each output its own file"
        )
    named[key] = out_flag

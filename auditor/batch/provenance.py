"""What produced a batch row: its settings and the state of every file it read.

``--resume`` keeps a finished row only when what would produce it now is what produced it
then. A row's provenance is its full settings after the batch defaults (every
:class:`~auditor.config.AuditConfig` field, so an edited ``interactions`` or ``k`` cell
counts) and, for each file it reads (model, an ONNX model's external data, logs, id
files, queries, plugins), the file's size, modification time (ns) and, for files up to :data:`HASH_LIMIT` bytes, the
SHA-256 of its content (a file rewritten in place with the same size and time still
counts as changed). A larger file (a big table or log) is not hashed whole: its inode,
change time (ns) and the SHA-256 of three 1 MiB blocks (first, middle, last) stand in, so
a same-size rewrite with its old modification time put back still counts as changed (its
change time moves), and so does a file only touched or moved (which cannot be told from a
rewrite without reading it all). It is stored as JSON in the results' ``provenance`` column; a row
whose provenance differs, or is missing, is audited again and the reason said (a big
file recorded by an older popaudit, without a sampled hash, is audited again once and said
as such, not as a change).
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from auditor.config import QUERY_SOURCES, AuditConfig
from auditor.io import file_sha256, sampled_sha256
from auditor.loading.side_files import side_files

HASH_LIMIT = 64 << 20
"""Files up to this size are identified by content too (hashing 64 MiB takes ~0.1 s)."""
PROVENANCE_VERSION = 1


class FileStates:
    """Each file's (size, mtime_ns, sha256; over :data:`HASH_LIMIT` inode, ctime_ns and
    sampled_sha256 instead of sha256) once per batch, however many rows read it."""

    def __init__(self, hash_limit: int | None = None) -> None:
        self.hash_limit = HASH_LIMIT if hash_limit is None else hash_limit
        self._seen: dict[tuple[str, int, int, int, int], dict[str, Any]] = {}

    def state(self, path: Path) -> dict[str, Any]:
        """The identity of ``path`` now (``missing`` when it cannot be read)."""
        try:
            st = os.stat(path)
        except (OSError, ValueError) as exc:
            return {"missing": type(exc).__name__}
        if not stat.S_ISREG(st.st_mode):
            return {"kind": "folder" if stat.S_ISDIR(st.st_mode) else "special", "mtime_ns": st.st_mtime_ns}
        key = (os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
        if key not in self._seen:
            if st.st_size <= self.hash_limit:
                self._seen[key] = {"sha256": _digest(file_sha256, path)}
            else:  # too large to hash whole: its identity and a sample of its content
                self._seen[key] = {"sha256": None, "inode": st.st_ino, "ctime_ns": st.st_ctime_ns,
                                   "sampled_sha256": _digest(lambda p: sampled_sha256(p, st.st_size), path)}
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, **self._seen[key]}


def _digest(digest: Callable[[Path], str], path: Path) -> str | None:
    try:
        return digest(path)
    except OSError:
        return None


FILE_SETTINGS = ("model", "interactions", "frequencies", "item_ids", "user_ids", "holdout", "trace", "recommendations",
                 "queries", "plugins")
"""The settings that name files a row reads: the one list the provenance and the
input check (:func:`auditor.batch.jobs.batch_inputs`) both use."""


def named_files(value: Callable[[str], Any]) -> dict[str, Path]:
    """Each file the settings (``value``: setting name -> its value, None when unset) name,
    by setting (``interactions``, ``plugins[0]``, ...): a ``queries`` source that is no
    file and unset settings left out."""
    read: dict[str, Path] = {}
    for name in FILE_SETTINGS:
        given = value(name)
        if name == "plugins":
            read.update({f"plugins[{i}]": Path(p) for i, p in enumerate(given or ())})
        elif given is not None and not (name == "queries" and given in QUERY_SOURCES):
            read[name] = Path(given)
    return read


def files_read(config: AuditConfig) -> dict[str, Path]:
    """Each file a row reads, named by setting (e.g. ``interactions``, ``plugins[0]``),
    and the files its model's reader reads beside the model (``model_data``: an ONNX
    graph's external data, :mod:`auditor.loading.side_files`)."""
    read = named_files(lambda name: getattr(config, name))
    extra = side_files(config.model)
    read.update({"model_data" + ("" if i == 0 else f"[{i}]"): path for i, path in enumerate(extra)})
    return dict(sorted(read.items()))


def row_provenance(config: AuditConfig, files: FileStates) -> dict[str, Any]:
    """The provenance of one row: its settings and the state of each file it reads."""
    settings = json.loads(json.dumps(dataclasses.asdict(config), default=str, sort_keys=True))
    states = {name: {"path": str(path), **files.state(path)} for name, path in files_read(config).items()}
    return {"version": PROVENANCE_VERSION, "settings": settings, "files": states}


Stamp = tuple[int, int, int, int]


def stamps(config: AuditConfig) -> dict[str, Stamp | None]:
    """(inode, size, mtime_ns, ctime_ns) of each regular file a row reads (None: not a
    regular file now). Taken beside the provenance and again when the row's audit is
    done: a file written between the two (even put back with its old time) changes its
    ctime, so the row's figures may come from content its provenance does not describe."""
    return {name: _stamp(path) for name, path in files_read(config).items()}


def moved_since(before: dict[str, Stamp | None], config: AuditConfig) -> str | None:
    """The first file of ``config``'s row whose stamp is not ``before``'s, said as a reason."""
    for name, now in stamps(config).items():
        if before.get(name) != now:
            return f"its {name} file {files_read(config)[name]} changed while it was audited"
    return None


def _stamp(path: Path) -> Stamp | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):  # a folder's times move with what is written beside the inputs
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def encode(provenance: dict[str, Any]) -> str:
    return json.dumps(provenance, sort_keys=True, separators=(",", ":"))


def change(recorded: str | None, now: dict[str, Any]) -> str | None:
    """Why a finished row must be audited again (None: nothing it depends on changed)."""
    if not recorded:
        return "the results file records no provenance for it"
    try:
        old = json.loads(recorded)
    except ValueError:
        return "its recorded provenance is unreadable"
    if not isinstance(old, dict) or old.get("version") != now["version"]:
        return "its provenance was recorded by another popaudit version"
    old_settings, new_settings = old.get("settings") or {}, now["settings"]
    changed = sorted(k for k in set(old_settings) | set(new_settings) if old_settings.get(k) != new_settings.get(k))
    if changed:
        return "setting(s) " + ", ".join(changed) + " changed"
    old_files, new_files = old.get("files") or {}, now["files"]
    for name in sorted(set(old_files) | set(new_files)):
        before, after = old_files.get(name), new_files.get(name)
        if not _same_file(before, after):
            path = (after or before or {}).get("path", name)
            if "missing" in (after or {}):
                return f"its {name} file {path} is missing"
            if not before or not after or before.get("size") != after.get("size"):
                return f"its {name} file {path} changed (size)"
            if _recorded_without_sample(before, after):
                return f"recorded by an older popaudit without a sampled hash of its {name} file {path}"
            return f"its {name} file {path} changed ({_what_changed(before, after)})"
    return None


LARGE_FILE_KEYS = ("sampled_sha256", "mtime_ns", "ctime_ns", "inode")
"""What identifies a file too large to hash whole, in the order a change is said."""


def _recorded_without_sample(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """A file too large to hash whole now, recorded with neither a hash nor a sampled one
    (a row written before sampled hashes) and with the same modification time: nothing
    says it changed, only that it cannot be checked (a new modification time is said as a
    change)."""
    return ("sampled_sha256" in after and "sampled_sha256" not in before and not before.get("sha256")
            and before.get("mtime_ns") == after.get("mtime_ns"))


def _what_changed(before: dict[str, Any], after: dict[str, Any]) -> str:
    if before.get("sha256") and after.get("sha256"):
        return "content"
    if "sampled_sha256" in after:
        # a key the earlier popaudit did not record says nothing of what changed
        key = next((key for key in LARGE_FILE_KEYS if key in before and before[key] != after.get(key)), "inode")
        return {"sampled_sha256": "content, sampled", "mtime_ns": "modification time", "ctime_ns": "change time",
                "inode": "inode: replaced or moved"}[key] + "; too large to hash whole"
    return "modification time"


def _same_file(before: Any, after: Any) -> bool:
    """Same path and size, and the same content where both were hashed (a file only
    touched is unchanged); a file too large to hash whole keeps its sampled hash, times and
    inode (a rewrite putting its old modification time back moves its change time); else
    the same modification time."""
    if not isinstance(before, dict) or not isinstance(after, dict) or "missing" in after:
        return False
    if before.get("path") != after.get("path") or before.get("size") != after.get("size"):
        return False
    if before.get("sha256") and after.get("sha256"):
        return bool(before["sha256"] == after["sha256"])
    if "sampled_sha256" in after or "sampled_sha256" in before:
        return all(before.get(key) == after.get(key) for key in LARGE_FILE_KEYS)
    return bool(before.get("mtime_ns") == after.get("mtime_ns")) and before.get("kind") == after.get("kind")


__all__ = ["FILE_SETTINGS", "HASH_LIMIT", "FileStates", "named_files", "files_read", "change", "encode", "moved_since", "row_provenance", "stamps"]

"""A walk over a pickle's opcodes that builds nothing, and the words messages use about files.

:func:`scan_pickle` runs before the C unpickler sees a byte. It refuses what would make the
unpickler allocate more than the file backs: a counted argument (``BINBYTES8``,
``BINUNICODE4`` ...) or a ``FRAME`` longer than the bytes left, and a memo index far beyond
what the opcodes so far could have stored (the C unpickler sizes its memo by the largest
index it sees). Counted arguments are skipped, not read, so scanning a pickle that holds a
large array touches only its opcodes.

A batch manifest can point at any file and its messages land in tables other people read,
so nothing here quotes a file's bytes: :func:`shown` lets through short plain names only
and :func:`reason` keeps an exception's words but drops what it quotes.
"""

from __future__ import annotations

import io
import mmap
import pickletools
import re
from typing import Any

from auditor.errors import ModelLoadError

MEMO_SLACK = 1 << 16
"""Memo slots allowed beyond one per opcode: hand-made pickles may number their memo
sparsely; this many slots cost the C unpickler at most 1 MiB."""

_FIXED, _COUNTED, _LINES, _SPECIAL = range(4)
# Width and signedness of the length prefix of counted arguments (pickletools' markers).
_PREFIX = {
    pickletools.TAKEN_FROM_ARGUMENT1: (1, False),
    pickletools.TAKEN_FROM_ARGUMENT4: (4, True),
    pickletools.TAKEN_FROM_ARGUMENT4U: (4, False),
    pickletools.TAKEN_FROM_ARGUMENT8U: (8, False),
}
_MEMO_PUTS = {"PUT", "BINPUT", "LONG_BINPUT"}
_SIGNED = {op.name for op in pickletools.opcodes if op.arg is not None and _PREFIX.get(op.arg.n, (0, False))[1]}


def _opcode_table() -> list[tuple[int, int, str] | None]:
    """byte -> (kind, size, name): size is the fixed width, the prefix width or the line count."""
    table: list[tuple[int, int, str] | None] = [None] * 256
    for op in pickletools.opcodes:
        arg, code = op.arg, ord(op.code)
        if op.name in _MEMO_PUTS or op.name in ("PROTO", "FRAME", "STOP"):
            table[code] = (_SPECIAL, arg.n if arg is not None else 0, op.name)
        elif arg is None:
            table[code] = (_FIXED, 0, op.name)
        elif arg.n >= 0:
            table[code] = (_FIXED, arg.n, op.name)
        elif arg.n == pickletools.UP_TO_NEWLINE:  # GLOBAL and INST take two lines
            table[code] = (_LINES, 2 if arg.name == "stringnl_noescape_pair" else 1, op.name)
        else:
            table[code] = (_COUNTED, _PREFIX[arg.n][0], op.name)
    return table


_OPCODES = _opcode_table()


def scan_pickle(data: bytes | mmap.mmap, start: int, end: int, what: str) -> tuple[int, int]:
    """(protocol, offset just past STOP) of the pickle at ``data[start:end]``; builds nothing.

    Raises ModelLoadError ("... declares N bytes but the file holds M") before anything
    a header declares could be allocated.
    """
    try:
        return _scan(data, start, end)
    except _Refused as exc:
        raise PickleScanError(f"{what}: the pickle is truncated or corrupt: {exc}", str(exc)) from None


class CorruptFileError(ModelLoadError):
    """The file's bytes are damaged or in no torch format: unpickling it for real (with
    --trust-pickle) cannot help, and torch's own reader would fail less clearly."""


class PickleScanError(CorruptFileError):
    """What :func:`scan_pickle` refused; ``detail`` is the reason alone, without the file's name."""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message)
        self.detail = detail


class _Refused(Exception):
    pass


def _scan(data: bytes | mmap.mmap, start: int, end: int) -> tuple[int, int]:
    protocol, ops, pos = 0, 0, start
    table = _OPCODES
    while pos < end:
        entry = table[data[pos]]
        if entry is None:
            raise _Refused(f"byte {pos} is not a pickle opcode")
        kind, size, name = entry
        ops += 1
        here, pos = pos, pos + 1
        if kind == _FIXED:
            pos += size
        elif kind == _COUNTED:
            n = _uint(data, pos, size, end, here)
            if name in _SIGNED and n >= 1 << 31:
                raise _Refused(f"the opcode at byte {here} declares a negative length")
            pos += size
            if n > end - pos:
                raise _Refused(f"the opcode at byte {here} declares {n} bytes but the file holds {end - pos} after it")
            pos += n
        elif kind == _LINES:
            for _ in range(size):
                newline = data.find(b"\n", pos, end)
                if newline < 0:
                    raise _Refused(f"it ends inside the opcode at byte {here} (truncated?)")
                pos = newline + 1
        elif name == "STOP":
            return protocol, pos
        elif name == "PROTO":
            protocol, pos = _uint(data, pos, 1, end, here), pos + 1
        elif name == "FRAME":
            n = _uint(data, pos, 8, end, here)
            pos += 8
            if n > end - pos:
                raise _Refused(f"a frame at byte {here} declares {n} bytes but the file holds {end - pos} after it")
        else:  # memo puts
            if name == "PUT":
                newline = data.find(b"\n", pos, min(end, pos + 24))
                text = bytes(data[pos:newline]) if newline >= 0 else b""
                if not (text.isdigit() or text[:1] == b"-" and text[1:].isdigit()):
                    raise _Refused(f"the memo index at byte {here} is not a number")
                index, pos = int(text), newline + 1
            else:
                index, pos = _uint(data, pos, size, end, here), pos + size
            if not 0 <= index < ops + MEMO_SLACK:
                raise _Refused(f"memo index {index} at opcode {ops} is beyond what a pickler writes")
    raise _Refused(f"it ends at byte {end} before its STOP opcode (truncated?)")


def _uint(data: bytes | mmap.mmap, pos: int, size: int, end: int, here: int) -> int:
    if pos + size > end:
        raise _Refused(f"it ends inside the opcode at byte {here} (truncated?)")
    return int.from_bytes(data[pos : pos + size], "little")


class BoundedReader:
    """A file view whose reads never ask for more than the bytes left before ``end``."""

    def __init__(self, fh: io.BufferedIOBase, end: int, data: bytes | None = None) -> None:
        self._fh, self._end, self._data = fh, end, data
        self._map: mmap.mmap | None = None

    def view(self) -> bytes | mmap.mmap:
        """All the bytes, for :func:`scan_pickle`: the file mapped read-only, or the buffer."""
        if self._data is not None:
            return self._data
        if self._map is None:
            try:
                self._map = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError, io.UnsupportedOperation):  # in memory, empty, or not mappable
                if isinstance(self._fh, io.BytesIO):
                    self._data = self._fh.getvalue()
                else:
                    pos = self._fh.tell()
                    self._fh.seek(0)
                    self._data = self._fh.read(self._end)
                    self._fh.seek(pos)
                return self._data
        return self._map

    def close(self) -> None:
        """Unmap the view (the file itself stays open: its owner closes it)."""
        if self._map is not None:
            self._map.close()
            self._map = None

    def tell(self) -> int:
        return self._fh.tell()

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._fh.seek(pos, whence)

    def _left(self, n: int | None) -> int:
        left = max(self._end - self._fh.tell(), 0)
        return left if n is None or n < 0 else min(n, left)

    def read(self, n: int | None = -1) -> bytes:
        return self._fh.read(self._left(n))

    def peek(self, n: int = 1) -> bytes:
        """Up to ``n`` of the bytes left, without consuming them. With it the C unpickler
        reads ahead in 128 KiB chunks instead of calling ``read`` once per opcode
        (1M ids in a list: 2.5 s -> 0.3 s)."""
        pos = self._fh.tell()
        want = self._left(n)
        if self._data is not None:
            return bytes(self._data[pos : pos + want])
        ahead = self._fh.read(want)
        self._fh.seek(pos)
        return ahead

    def readline(self, size: int | None = -1) -> bytes:
        return self._fh.readline(self._left(size))

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        return self._fh.readinto(view[: self._left(len(view))])


_SHOWN = re.compile(r"[A-Za-z0-9_.:/<>()\-]{1,160}")
_PLAIN = re.compile(r"[A-Za-z0-9_ ,.:;()#=/<>+\-]+")
_QUOTED = re.compile(r"b?'[^'\n]*'|b?\"[^\"\n]*\"")


def shown(name: Any) -> str:
    """A name from a file (class, storage key, archive member) as a message may show it:
    short plain identifiers only, never arbitrary text."""
    return name if isinstance(name, str) and _SHOWN.fullmatch(name) else "(a name with unusual characters)"


_SHOWN_VALUE = re.compile(r"[ !#-&(-\[\]-_a-~]{1,64}")  # printable ASCII but quotes, backslash and backtick


def shown_value(value: Any) -> str:
    """A recorded text value (a config's ``similarity: "cosine similarity"``) as a message may
    show it: up to 64 printable characters, plain spaces and punctuation included, never a
    quote, backslash or control character (a name keeps :func:`shown`'s stricter rule)."""
    return value if isinstance(value, str) and _SHOWN_VALUE.fullmatch(value) else "(a value with unusual characters)"


def reason(exc: BaseException) -> str:
    """``Type: words`` of an exception's first sentence, never empty, with whatever it quotes
    (file content) replaced by ``...``; words that are not plain text are withheld."""
    text = str(exc.args[0]) if len(exc.args) == 1 else str(exc)  # KeyError's str() adds quotes
    lines = text.strip().splitlines()
    first = lines[0].split(". ")[0] if lines else ""  # torch appends paragraphs of advice
    words = _QUOTED.sub("...", first)
    words = re.split(r"['\"]", words)[0] + ("..." if re.search(r"['\"]", words) else "")  # a quote cut by a newline
    words = words.strip().rstrip(":").strip()
    name = type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror:
        return f"{name}: {exc.strerror}"
    if not words:
        return f"{name} (without a message)"
    if isinstance(exc, UnicodeError):
        return f"{name}: some text in it is not valid UTF-8"
    if not _PLAIN.fullmatch(words):
        return f"{name} (its message quotes the file, so it is not shown)"
    return f"{name}: {words[:200]}"

"""Members of a zip archive read defensively: offsets checked against the file, sizes and
compression ratios bounded before inflating, and stored (memory-mapped) data verified
against its CRC-32, so a damaged or crafted archive fails with a clear reason."""

from __future__ import annotations

import errno
import io
import struct
import zipfile
import zlib

import torch

from auditor.loading.pickle_scan import CorruptFileError, reason, shown

MAX_DEFLATED = 256 << 20  # largest compressed member popaudit inflates (torch never compresses)
MAX_RATIO = 1100  # deflate cannot do better than about 1032:1; more is a lie or a bomb
BAD_ZIP = "it starts like a zip archive but is not a valid one"


class ZipError(CorruptFileError):
    """A fault of the archive itself, worded without the file's name (callers add it once)."""


def zip_reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno in (errno.EINVAL, None):  # zipfile seeks where the directory says
        return "an offset in it points outside the file"
    if isinstance(exc, zlib.error):
        return "its compressed data is corrupt"
    if isinstance(exc, UnicodeError):
        return "a member name is not valid text"
    if isinstance(exc, NotImplementedError):
        return "it uses a zip feature popaudit does not read"
    return reason(exc).removeprefix("BadZipFile: ")


ZIP_ERRORS = (
    zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, OSError, ValueError, EOFError, struct.error, NotImplementedError
)


CRC_CHUNK = 16 << 20
"""Bytes of a mapped member checksummed at a time (bounded page-ins and latency per call)."""


def check_crc(name: str, data: torch.Tensor, expected: int) -> None:
    """Raise CorruptFileError unless the CRC-32 of a stored member's bytes is ``expected``.

    zipfile checks the members it reads itself; tensor data is memory-mapped instead,
    so this is the only check that it is the data that was saved (about 0.4 s/GB).
    """
    array = data.numpy()
    crc = 0
    for start in range(0, array.size, CRC_CHUNK):
        crc = zlib.crc32(array[start : start + CRC_CHUNK].data, crc)  # a view of the mapped bytes
    if crc != expected:
        raise CorruptFileError(
            f"zip member {shown(name)} fails its CRC-32 check "
            "(its tensor data is corrupt: the file was damaged after it was saved)"
        )


def data_offset(fh: io.BufferedIOBase, size: int, info: zipfile.ZipInfo) -> int:
    """Where a member's bytes start (after its local header), checked to lie inside the file."""
    name = shown(info.filename)
    if not 0 <= info.header_offset <= size - 30:  # checked before seeking: a negative seek is EINVAL
        raise ZipError(f"{BAD_ZIP} (its directory places member {name} outside the file)")
    fh.seek(info.header_offset)
    head = fh.read(30)
    if len(head) != 30 or head[:4] != b"PK\x03\x04":
        raise ZipError(f"{BAD_ZIP} (member {name} has no local header)")
    name_len, extra_len = struct.unpack("<HH", head[26:30])
    start: int = info.header_offset + 30 + name_len + extra_len
    if start + info.compress_size > size:
        raise ZipError(f"zip member {name} runs past the end of the file (truncated?)")
    return start


def read_member(fh: io.BufferedIOBase, size: int, zf: zipfile.ZipFile, info: zipfile.ZipInfo, cap: int) -> bytes:
    """A member's bytes; compressed ones only when their declared size is plausible and small."""
    name = shown(info.filename)
    if info.flag_bits & 0x41:  # bit 0: encrypted, bit 6: strong encryption
        raise ZipError(f"zip member {name} is encrypted")
    if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
        raise ZipError(f"{BAD_ZIP} (stored member {name} has inconsistent sizes)")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise ZipError(f"zip member {name} uses an unsupported compression")
    if info.compress_type == zipfile.ZIP_DEFLATED and (
        info.file_size > cap or info.file_size > MAX_RATIO * info.compress_size + 4096
    ):
        raise ZipError(
            f"zip member {name} declares {info.file_size} bytes from {info.compress_size} "
            f"compressed bytes (a zip bomb?); popaudit inflates at most {min(cap, MAX_DEFLATED)} bytes"
        )
    data_offset(fh, size, info)
    try:
        with zf.open(info) as member:
            data = member.read(info.file_size)
    except ZIP_ERRORS as exc:
        raise ZipError(f"zip member {name} is corrupt ({zip_reason(exc)})") from exc
    if len(data) != info.file_size:
        raise ZipError(f"zip member {name} holds {len(data)} of {info.file_size} bytes")
    return data

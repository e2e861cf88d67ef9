"""The table of model formats: how each is told apart, read and (by ``mitigate``) written.

One :class:`ModelFormat` record per format: its name (the file kind), suffixes, magic
bytes or content sniff, reader, whether its files can hold a pickle, and which loaded
models (``ModelBundle.format``) ``popaudit mitigate`` writes back in it. The built-in
loader (:mod:`auditor.loading.builtin`) reads through :data:`BUILTIN_FORMATS`; plugins
add formats through the ``popaudit_model_formats`` hook (:mod:`auditor.loading.plugin_formats`),
which ``load_model`` and ``mitigate`` consult first. A built-in format's writer lives in
:mod:`auditor.mitigation.writers` (writing sits above loading), keyed by its name; a
plugin's format carries its own.

Some formats are told apart only by what a reader finds inside a file of another kind
(a RecBole checkpoint is a torch file whose pickle holds RecBole's ``Config``): such a
record names that ``kind`` and has no suffixes, magic or reader of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from auditor.config import LoadOptions
from auditor.errors import ModelLoadError
from auditor.model import ModelBundle
from auditor.plugin_api import HEAD_BYTES, ModelFormat, Reader, Sniff, Writer, WriteJob, Written, RowNorms

# Each reader imports its module when a file of its kind is read: they bring numpy,
# pyarrow, torch (2 s), h5py or onnx, none of which `diff`, `plugins` or a served-lists
# audit needs, and this table is loaded wherever the plugin manager is.


def _npy(path: Path, options: LoadOptions) -> ModelBundle:
    import numpy as np

    from auditor.loading.npy import read_npy_table

    table, warnings = read_npy_table(path, max_memory=options.max_memory)
    stored = np.load(path, mmap_mode="r", allow_pickle=False).dtype.name  # the header only: read as float32
    return ModelBundle(source=path, format="npy", item_table=table, item_dtype=stored, warnings=warnings)


def _parquet(path: Path, options: LoadOptions) -> ModelBundle:
    from auditor.loading.parquet_table import read_parquet_table, stored_list_dtype

    notes: list[str] = []
    table, ids, column = read_parquet_table(path, options.item_key, max_memory=options.max_memory, warnings=notes)
    return ModelBundle(source=path, format="parquet", item_table=table, item_key=column, item_ids=ids, warnings=notes,
                       item_dtype=stored_list_dtype(path, column))


def _torch(path: Path, options: LoadOptions) -> ModelBundle:
    from auditor.loading.checkpoints import read_torch
    from auditor.loading.mf_models import names_library, read_mf_pickle
    from auditor.loading.recbole import as_recbole
    from auditor.loading.torch_bundle import bundle_from_raw

    if names_library(path):  # implicit, LightFM, cornac: None if no model is found
        found = read_mf_pickle(path, options)
        if found is not None:
            return found
    return bundle_from_raw(as_recbole(read_torch(path, options.trust_pickle, options.max_memory)), path, options)


def _safetensors(path: Path, options: LoadOptions) -> ModelBundle:
    from auditor.loading.checkpoints import read_safetensors
    from auditor.loading.torch_bundle import bundle_from_raw

    return bundle_from_raw(read_safetensors(path), path, options)


def _npz(path: Path, options: LoadOptions) -> ModelBundle:
    from auditor.loading.mf_models import read_npz

    return read_npz(path, options)


def _keras(path: Path, options: LoadOptions) -> ModelBundle:
    from auditor.loading.keras_h5 import read_keras

    return read_keras(path, options)


def _onnx(path: Path, options: LoadOptions) -> ModelBundle:
    from auditor.loading.onnx_model import read_onnx

    return read_onnx(path, options)


def _safetensors_header(head: bytes, size: int) -> bool:
    """An 8-byte little-endian header length shorter than the file, then JSON."""
    return len(head) > 8 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") < size


_TORCH_WRITES = frozenset({"state_dict", "checkpoint", "lightning", "popaudit", "pickle", "torchscript"})
BUILTIN_FORMATS: tuple[ModelFormat, ...] = (
    ModelFormat("npy", ".npy item table", (".npy",), (b"\x93NUMPY",), read=_npy, pickle_free=True,
                writes=frozenset({"npy"})),
    ModelFormat("parquet", "Parquet item table (.parquet: id column + list-of-float column)", (".parquet", ".pq"),
                (b"PAR1",), read=_parquet, pickle_free=True, writes=frozenset({"parquet"})),
    ModelFormat("npz", ".npz (implicit model.save, or any archive of arrays)", (".npz",), read=_npz,
                pickle_free=True),
    ModelFormat("keras", ".keras archive (needs popaudit[keras])", (".keras",), read=_keras, pickle_free=True),
    ModelFormat("h5", "Keras .weights.h5/.h5 (needs popaudit[keras])", (".h5", ".hdf5"), (b"\x89HDF\r\n\x1a\n",),
                read=_keras, pickle_free=True),
    ModelFormat("onnx", ".onnx (embedding initializers; needs popaudit[onnx])", (".onnx",), read=_onnx,
                pickle_free=True),
    ModelFormat("safetensors", ".safetensors", (".safetensors",), sniff=_safetensors_header, read=_safetensors,
                pickle_free=True, writes=frozenset({"safetensors"})),
    ModelFormat("torch", ".pt/.pth/.ckpt/.pkl (state dict, checkpoint, Lightning, popaudit, pickled module or plain "
                "pickle, read without running code from the file), TorchScript archive, pickled implicit, LightFM or "
                "cornac models (.pkl)",
                (".pt", ".pth", ".ckpt", ".bin", ".pkl", ".pickle", ".torch", ".tar"), (b"PK\x03\x04", b"\x80"),
                read=_torch, writes=_TORCH_WRITES),
    ModelFormat("recbole", "RecBole checkpoint (a torch file holding RecBole's pickled Config)", kind="torch",
                writes=frozenset({"recbole"}), output_kinds=("npy", "parquet")),
)  # fmt: skip
"""The built-in formats, in the order content is tested (suffixes decide first)."""


def detect_format(path: Path, formats: Sequence[ModelFormat] = BUILTIN_FORMATS) -> ModelFormat | None:
    """The first of ``formats`` whose suffix ``path`` has; else the first whose magic bytes
    or sniff its content matches; None when none does. ModelLoadError when the file
    cannot be read."""
    readable = [f for f in formats if f.kind is None]
    for fmt in readable:
        if fmt.matches_suffix(path):
            return fmt
    try:
        with open(path, "rb") as fh:
            head = fh.read(HEAD_BYTES)
        size = path.stat().st_size
    except OSError as exc:
        raise ModelLoadError(f"cannot read {path}: {exc.strerror}") from exc
    return next((f for f in readable if f.matches_content(head, size)), None)


def detect_kind(path: Path) -> str | None:
    """The built-in file kind of ``path`` (``torch``, ``npy``, ...): by suffix, else by content."""
    found = detect_format(path)
    return None if found is None else found.name


def suffix_kinds(formats: Iterable[ModelFormat] = BUILTIN_FORMATS) -> dict[str, str]:
    """Suffix -> the kind it names (the first format that claims it)."""
    out: dict[str, str] = {}
    for fmt in formats:
        for suffix in fmt.suffixes:
            out.setdefault(suffix, fmt.name)
    return out


def supported(formats: Iterable[ModelFormat] = BUILTIN_FORMATS) -> tuple[str, ...]:
    """What "not a model file popaudit knows" lists: every readable format's description."""
    return tuple(f.description for f in formats if f.read is not None)


def writer_format(formats: Iterable[ModelFormat], kind: str, model_format: str) -> ModelFormat | None:
    """The format of file kind ``kind`` that writes back models read as ``model_format``."""
    return next((f for f in formats if f.file_kind == kind and f.writes_back(model_format)), None)


def written_back(formats: Iterable[ModelFormat], model_format: str) -> bool:
    """Whether ``popaudit mitigate`` writes a model read as ``model_format`` back in some
    format of ``formats``: a built-in format lists the models its writer writes (``writes``,
    the writer in :mod:`auditor.mitigation.writers`), a plugin's format carries its own
    writer. A model a plugin's ``popaudit_load_model`` built (a custom tower) is written
    back by none: its served item vectors are encoder outputs, not a stored table."""
    return any(
        (f.write is None and model_format in f.writes)
        or (f.write is not None and f.writes_back(model_format))
        for f in formats
    )


SUFFIX_KINDS = suffix_kinds()
"""The built-in file kinds :func:`detect_kind` tells by suffix alone."""
SUPPORTED_FORMATS = supported()

__all__ = [
    "BUILTIN_FORMATS", "HEAD_BYTES", "ModelFormat", "Reader", "RowNorms", "SUFFIX_KINDS", "SUPPORTED_FORMATS", "Sniff",
    "WriteJob", "Writer", "Written", "detect_format", "detect_kind", "suffix_kinds", "supported", "writer_format",
    "written_back",
]  # fmt: skip

"""Keras and TensorFlow Recommenders models: ``.keras`` archives and ``.weights.h5`` / ``.h5``
files, read with h5py (the optional extra ``popaudit[keras]``); no TensorFlow, no Keras.

Two HDF5 layouts are read:

- Keras 3 (``model.save`` / ``model.save_weights``, also inside a ``.keras`` zip as
  ``model.weights.h5``): each layer's variables are ``<object path>/vars/<i>``, where a
  layer list is ``layers/<auto name>`` and a subclassed model's attribute is its own
  segment; the ``vars`` group's ``name`` attribute is the layer's own name
  (``item_embedding``). A ``.keras`` archive's ``config.json`` gives each layer's class.
- Keras 2 / tf.keras (``save_weights("x.h5")``, full-model ``.h5``): ``layer_names`` and
  per-layer ``weight_names`` attributes (``candidate_tower/embedding_1/embeddings:0``).

Embedding tables (an ``Embedding`` layer's variable, by class or by name) become candidates
named by their layers' names; the item and user towers are then told apart by those names
as in a state dict (``candidate``/``item``/``movie`` vs ``query``/``user``).
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from auditor.config import LoadOptions
from auditor.errors import ModelLoadError
from auditor.loading.discovery import choose_tables, tensor_infos
from auditor.loading.hdf5_safe import H5Walk, read_float32
from auditor.loading.keras_config import config_nodes, lambda_doubt, layer_classes, normalised_dot, resolve_unit_side
from auditor.loading.keras_mask import drop_mask_rows, masked_layers
from auditor.loading.pickle_scan import reason, shown
from auditor.loading.zip_members import ZIP_ERRORS, ZipError, data_offset, read_member, zip_reason
from auditor.memory import check_expansion
from auditor.model import ModelBundle

EXTRA = 'pip install "popaudit[keras]"'
WEIGHTS_MEMBER = "model.weights.h5"
MAX_CONFIG = 64 << 20
_AUTO_EMBEDDING = re.compile(r"^embedding(_\d+)?$")
_EMBEDDING_CLASSES = ("Embedding", "ReversibleEmbedding", "TokenAndPositionEmbedding")


def _h5py() -> Any:
    try:
        import h5py  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError as exc:
        raise ModelLoadError(f"reading Keras .keras/.h5 files needs h5py: {EXTRA}") from exc
    return h5py


def read_keras(path: Path, options: LoadOptions) -> ModelBundle:
    """The item (and user) embedding tables of a ``.keras`` archive or a Keras HDF5 file."""
    h5py = _h5py()
    classes: dict[str, str] = {}
    training: dict[str, Any] = {}
    masked: set[str] = set()
    with open(path, "rb") as fh:
        size = path.stat().st_size
        archive = zipfile.is_zipfile(fh) or path.suffix.lower() == ".keras"
        if archive:
            source, classes, training, masked = _archive_weights(fh, size, path, options.max_memory)
        else:
            fh.seek(0)
            source = fh
        failure = None
        try:
            with h5py.File(source, "r") as h5:
                if not archive:  # a full-model .h5 keeps the same config in its root attributes
                    classes, training, masked = _h5_config(h5, h5py, path)
                tensors, others = _tables(h5, classes, H5Walk(h5py, path), options.max_memory)
        except ModelLoadError:
            raise
        except (OSError, ValueError, KeyError, RuntimeError, TypeError) as exc:
            failure = reason(exc)
        if failure is not None:
            # Raised here, unchained: h5py's traceback holds the failed open's file-object
            # property list, which must be freed now, while the file is open. Kept alive to
            # interpreter shutdown (gc.freeze at exit), its teardown segfaults (exit 139).
            raise ModelLoadError(f"cannot read {path} as HDF5 (Keras weights): {failure} (truncated or corrupt?)")
    if not tensors:
        raise ModelLoadError(f"no item embedding table in {path}: it holds no 2-D floating-point weights")
    choice = choose_tables(tensor_infos(tensors), path, options.item_key, options.user_key)
    item = tensors[choice.item.key].numpy()
    user = tensors[choice.user.key].numpy() if choice.user else None
    tower = choice.item.key.rsplit(".", 2)[0] + "."
    after = [k for k in others if k.startswith(tower)]
    notes = list(choice.warnings)
    if after:
        notes.append(
            f"the item tower `{tower[:-1]}` has weights besides its embedding table ({', '.join(after[:4])}): "
            "the norms audited are the table's rows, not the tower's outputs"
        )
    bundle = ModelBundle(
        source=path,
        format="keras",
        item_table=item,
        item_key=choice.item.key,
        user_table=user,
        user_key=choice.user.key if choice.user else None,
        state_dict={**tensors, **others},  # every weight: an item bias (2-D, (n, 1)) is served, others said
        config=resolve_unit_side(training, choice.item.key, choice.user.key if choice.user else None) or None,
        warnings=notes,
    )
    drop_mask_rows(bundle, masked, options)  # Embedding(mask_zero=True): row 0 is the mask, not an item
    return bundle


# ---------------------------------------------------------------------------- the .keras zip


def _archive_weights(
    fh: io.BufferedReader, size: int, path: Path, max_memory: int | None
) -> tuple[Any, dict[str, str], dict[str, Any], set[str]]:
    """``model.weights.h5`` of a ``.keras`` archive (a window onto the file when stored; a
    compressed one only when its declared size fits the memory ceiling), each layer's
    class, the training settings and the mask_zero Embedding layers from ``config.json``."""
    try:
        zf = zipfile.ZipFile(fh)
        infos = {i.filename: i for i in zf.infolist()}
        if WEIGHTS_MEMBER not in infos:
            raise ModelLoadError(
                f"cannot read {path} as a .keras archive: it has no {WEIGHTS_MEMBER} "
                f"(members: {', '.join(shown(n) for n in list(infos)[:8]) or 'none'})"
            )
        config: Any = None
        if "config.json" in infos:
            config = json.loads(read_member(fh, size, zf, infos["config.json"], MAX_CONFIG).decode("utf-8"))
        classes, training, masked = layer_classes(config), training_config(config), masked_layers(config)
        info = infos[WEIGHTS_MEMBER]
        if info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 0x41:
            return _Window(fh, data_offset(fh, size, info), info.file_size), classes, training, masked
        check_expansion(f"{path}: zip member {WEIGHTS_MEMBER}", info.file_size, info.compress_size, max_memory, ModelLoadError)
        return io.BytesIO(read_member(fh, size, zf, info, 1 << 40)), classes, training, masked
    except ModelLoadError:
        raise
    except ZipError as exc:
        raise ModelLoadError(f"cannot read {path} as a .keras archive: {exc}") from exc
    except RecursionError as exc:  # config.json nested deeper than the parser goes: no model's config is
        raise ModelLoadError(
            f"cannot read {path} as a .keras archive: its config.json nests deeper than any model config"
        ) from exc
    except (*ZIP_ERRORS, UnicodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"cannot read {path} as a .keras archive: {zip_reason(exc)}") from exc


def _h5_config(h5: Any, h5py: Any, path: Path) -> tuple[dict[str, str], dict[str, Any], set[str]]:
    """What a ``.keras`` archive's ``config.json`` gives (:func:`_archive_weights`), from the
    JSON root attributes ``model.save("m.h5")`` writes: ``model_config`` (the layers) and
    ``training_config`` (its ``optimizer_config`` and ``loss``, as ``compile_config``
    holds them). Nothing for a weights file, which has neither."""
    model, compiled = _json_attr(h5, h5py, "model_config", path), _json_attr(h5, h5py, "training_config", path)
    if not isinstance(model, dict):
        return {}, {}, set()
    config: dict[str, Any] = dict(model)
    if isinstance(compiled, dict):
        config["compile_config"] = {"optimizer": compiled.get("optimizer_config"), "loss": compiled.get("loss")}
    return layer_classes(model), training_config(config, "the .h5's model_config"), masked_layers(model)


def _json_attr(h5: Any, h5py: Any, name: str, path: Path) -> Any:
    """A JSON object root attribute (at most :data:`MAX_CONFIG` bytes), parsed; None when absent."""
    if name not in h5.attrs:
        return None
    try:
        stored = h5py.h5a.open(h5.id, name.encode()).get_storage_size()
        _refuse_larger(stored, name, path)
        value = h5.attrs[name]  # a variable-length string stores a 16-byte reference: measure the text too
        _refuse_larger(len(value) if isinstance(value, (bytes, str)) else 0, name, path)
        text = value.decode("utf-8") if isinstance(value, bytes) else value
        parsed = json.loads(text) if isinstance(text, str) else None
    except RecursionError as exc:  # nested deeper than the parser goes: no model's config is
        raise ModelLoadError(f"cannot read {path}: its `{name}` attribute nests deeper than any model config") from exc
    except (UnicodeError, json.JSONDecodeError, OSError, TypeError, ValueError) as exc:
        raise ModelLoadError(f"cannot read {path}: its `{name}` attribute is no JSON model config ({reason(exc)})") from exc
    if parsed is not None and not isinstance(parsed, dict):  # Keras writes an object: anything else is no config
        raise ModelLoadError(f"cannot read {path}: its `{name}` attribute is no JSON model config (a JSON "
                             f"{type(parsed).__name__.replace('dict', 'object')}, where Keras writes an object)")
    return parsed


def _refuse_larger(size: int, name: str, path: Path) -> None:
    if size > MAX_CONFIG:
        raise ModelLoadError(f"cannot read {path}: its `{name}` attribute holds {size:,} bytes, more than "
                             f"the {MAX_CONFIG:,} a model config may")


class _Window(io.RawIOBase):
    """A read-only view of ``length`` bytes of ``fh`` from ``start`` (a stored zip member)."""

    def __init__(self, fh: io.BufferedReader, start: int, length: int) -> None:
        super().__init__()
        self._fh, self._start, self._length, self._pos = fh, start, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._pos, self._length)[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = max(0, min(len(view), self._length - self._pos))
        self._fh.seek(self._start + self._pos)
        got = self._fh.readinto(view[:n]) or 0
        self._pos += got
        return got


def training_config(config: Any, where: str = "config.json") -> dict[str, Any]:
    """Optimizer, its numbers and the loss from a ``.keras`` config's ``compile_config``;
    whether its score layer compares by cosine (:func:`cosine_score`; ``where``: the config's
    place, for its evidence)."""
    compiled = config.get("compile_config") if isinstance(config, dict) else None
    if not isinstance(compiled, dict):
        return cosine_score(config, where)
    out: dict[str, Any] = {}
    optimizer = compiled.get("optimizer")
    if isinstance(optimizer, dict) and isinstance(optimizer.get("class_name"), str):
        out["optimizer"] = optimizer["class_name"].lower()
        found = optimizer.get("config")
        settings: dict[str, Any] = found if isinstance(found, dict) else {}
        if "weight_decay" in settings and settings["weight_decay"] is None:  # Keras: None means no decay
            out["weight_decay"] = 0.0
        for key in ("learning_rate", "momentum", "weight_decay", "nesterov"):
            value = settings.get(key)
            if isinstance(value, (int, float)):  # a schedule (a dict) is no single number
                out[key] = value
    elif isinstance(optimizer, str):
        out["optimizer"] = optimizer.lower()
    loss = compiled.get("loss")
    name = loss.get("class_name") if isinstance(loss, dict) else loss
    if isinstance(name, str):
        out["loss"] = name
    return out | cosine_score(config, where)


def cosine_score(config: Any, where: str = "config.json") -> dict[str, Any]:
    """``scoring: cosine`` when the model's one ``Dot`` layer normalises both inputs
    (``Dot(normalize=True)``: its scores, what the loss is taken on and what it serves, are
    cosines), with the layer as evidence; {} otherwise (no Dot, or several)."""
    if doubt := lambda_doubt(config, where):  # a Lambda's bytecode may transform the vectors first
        return doubt
    dots = [node.get("config") for node in config_nodes(config) if node.get("class_name") == "Dot"]
    if len(dots) != 1 or not isinstance(dots[0], dict) or dots[0].get("normalize") is not True:
        return normalised_dot(config, where)  # UnitNormalization on both inputs of a plain Dot
    name = dots[0].get("name")
    layer = f" `{shown(name)}`" if isinstance(name, str) else ""
    return {"scoring": "cosine", "scoring_evidence": f"its score layer{layer} is Dot(normalize=True) in {where}"}


# ---------------------------------------------------------------------------- the HDF5 layouts


def _tables(
    h5: Any, classes: dict[str, str], walk: H5Walk, max_memory: int | None
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Embedding-like 2-D float variables under readable names (every 2-D one when none is),
    and the model's other float variables (the rest of each tower)."""
    weights = walk.get(h5, "model_weights")
    root = weights if weights is not None and "layer_names" in weights.attrs else h5
    found = [f for f in (_legacy(root, walk) if "layer_names" in root.attrs else _keras3(h5, classes, walk))
             if f[1].dtype.kind == "f"]  # fmt: skip
    tables = [(key, ds, emb) for key, ds, emb in found if ds.ndim == 2]
    chosen = {key for key, _, emb in tables if emb} or {key for key, _, _ in tables}
    out: dict[str, torch.Tensor] = {}
    others: dict[str, torch.Tensor] = {}
    for key, ds, _ in found:
        value = torch.from_numpy(read_float32(ds, key, walk.path, max_memory))
        (out if key in chosen else others)[key] = value
    return out, others


def _keras3(h5: Any, classes: dict[str, str], walk: H5Walk) -> Iterator[tuple[str, Any, bool]]:
    """(readable name, dataset, is an embedding) of every ``.../vars/<i>`` dataset; links
    are followed inside the file only and each group is entered once."""
    walk.enter(h5)
    stack: list[tuple[Any, list[str], bool]] = [(h5, [], False)]
    while stack:
        group, parts, in_list = stack.pop()
        for segment in sorted(group.keys(), reverse=True):
            child = walk.get(group, segment)
            if child is None or not hasattr(child, "keys") or not walk.enter(child):
                continue
            if segment == "vars":
                name = _text(child.attrs.get("name"))
                layer = parts[-1] if parts else ""
                embedding = classes.get(layer) in _EMBEDDING_CLASSES or (
                    not classes and bool(_AUTO_EMBEDDING.match(_segment_of(group)))
                )
                for index in sorted(child.keys(), key=lambda k: (len(k), k)):
                    var = walk.get(child, index)
                    if var is not None and hasattr(var, "shape"):
                        leaf = "embeddings" if embedding and index == "0" else f"var{index}"
                        yield ".".join([*parts, leaf]) if parts else (name or "model") + "." + leaf, var, embedding
                continue
            if segment == "layers":
                stack.append((child, parts, True))
                continue
            if segment == "optimizer" and not parts:  # the optimizer's slots, not the model's weights
                continue
            own_vars = walk.get(child, "vars")
            own = _text(own_vars.attrs.get("name")) if own_vars is not None else None
            named = [own or segment] if in_list else [segment] + ([own] if own and own != segment else [])
            stack.append((child, parts + named, False))


def _segment_of(group: Any) -> str:
    return str(group.name).rstrip("/").rsplit("/", 1)[-1]


def _legacy(root: Any, walk: H5Walk) -> Iterator[tuple[str, Any, bool]]:
    """Keras 2's layout: ``layer_names`` and each layer's ``weight_names``."""
    for layer in _texts(root.attrs.get("layer_names")):
        group = walk.get(root, layer)
        if group is None or not hasattr(group, "attrs"):
            continue
        for weight in _texts(group.attrs.get("weight_names")):
            ds = walk.get(group, weight)
            if ds is not None and hasattr(ds, "shape"):
                key = weight.split(":", 1)[0].replace("/", ".")
                yield key, ds, key.rsplit(".", 1)[-1] == "embeddings"


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value if isinstance(value, str) else None


def _texts(value: Any) -> list[str]:
    if value is None:
        return []
    items = value.tolist() if isinstance(value, np.ndarray) else value
    return [t for t in (_text(v) for v in (items if isinstance(items, (list, tuple)) else [items])) if t]


__all__ = ["EXTRA", "read_keras"]

"""Model files: every format and checkpoint layout load_model reads, and its refusals."""

from __future__ import annotations

import io
import re
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from auditor.config import LoadOptions
from auditor.errors import InputError, ModelLoadError, PluginError, UntrustedPickleError
from auditor.hookspecs import hookimpl
from auditor.loading import load_model
from auditor.model import ModelBundle
from auditor.plugins import get_plugin_manager

N_ITEMS, N_USERS, DIM = 12, 7, 4


class TwoTower(torch.nn.Module):
    """A custom class: its tensors are read without importing it; only --trust-pickle makes one."""

    def __init__(self) -> None:
        super().__init__()
        self.item_embedding = torch.nn.Embedding(N_ITEMS, DIM)
        self.user_embedding = torch.nn.Embedding(N_USERS, DIM)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        return (self.user_embedding(users) * self.item_embedding(items)).sum(-1)


@pytest.fixture(scope="module")
def pm():
    return get_plugin_manager(entry_points=False)


@pytest.fixture
def tables() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "item_tower.item_embedding.weight": torch.randn(N_ITEMS, DIM, generator=g),
        "item_tower.fc.weight": torch.randn(DIM, DIM, generator=g),
        "item_tower.fc.bias": torch.randn(DIM, generator=g),
        "user_tower.user_embedding.weight": torch.randn(N_USERS, DIM, generator=g),
    }


def _load(path: Path, pm, **opts) -> ModelBundle:
    return load_model(path, LoadOptions(**opts), pm)


def _assert_tables(bundle: ModelBundle, tables: dict[str, torch.Tensor], prefix: str = "") -> None:
    assert bundle.item_key == prefix + "item_tower.item_embedding.weight"
    assert bundle.user_key == prefix + "user_tower.user_embedding.weight"
    assert bundle.item_table.dtype == np.float32 and bundle.item_table.flags.c_contiguous
    np.testing.assert_array_equal(bundle.item_table, tables["item_tower.item_embedding.weight"].numpy())
    np.testing.assert_array_equal(bundle.user_table, tables["user_tower.user_embedding.weight"].numpy())


def test_plain_state_dict(tmp_path, pm, tables):
    path = tmp_path / "model.pt"
    torch.save(tables, path)
    bundle = _load(path, pm)
    assert bundle.format == "state_dict"
    _assert_tables(bundle, tables)
    assert bundle.optimizer_state is None and bundle.config is None
    assert set(bundle.state_dict) == set(tables)


@pytest.mark.parametrize("model_key", ["state_dict", "model_state_dict", "model"])
def test_checkpoint_layouts(tmp_path, pm, tables, model_key):
    optimizer = {"state": {}, "param_groups": [{"lr": 0.5, "momentum": 0.0, "weight_decay": 0.0, "params": [0]}]}
    path = tmp_path / "ckpt.pth"
    torch.save({model_key: tables, "optimizer_state_dict": optimizer, "config": {"lr": 0.5, "loss": "cosine"}}, path)
    bundle = _load(path, pm)
    assert bundle.format == "checkpoint"
    _assert_tables(bundle, tables)
    assert bundle.optimizer_state["param_groups"][0]["lr"] == 0.5
    assert bundle.config == {"lr": 0.5, "loss": "cosine"}


@pytest.mark.parametrize("opt_key,cfg_key", [("optimizer", "hparams"), ("optimizer_state_dict", "hyper_parameters")])
def test_optimizer_and_config_key_variants(tmp_path, pm, tables, opt_key, cfg_key):
    path = tmp_path / "ckpt.pt"
    opt = {"state": {0: {"momentum_buffer": torch.zeros(3)}}, "param_groups": [{"lr": 0.1, "momentum": 0.9}]}
    torch.save({"state_dict": tables, opt_key: opt, cfg_key: {"dim": DIM}}, path)
    bundle = _load(path, pm)
    assert bundle.optimizer_state["param_groups"][0]["momentum"] == 0.9
    assert "momentum_buffer" in bundle.optimizer_state["state"][0]
    assert bundle.config == {"dim": DIM}


def test_ddp_prefix_is_stripped_and_full_key_still_accepted(tmp_path, pm, tables):
    path = tmp_path / "ddp.pt"
    torch.save({"module." + k: v for k, v in tables.items()}, path)
    bundle = _load(path, pm)
    _assert_tables(bundle, tables)
    again = _load(path, pm, item_key="module.item_tower.item_embedding.weight")
    assert again.item_key == "item_tower.item_embedding.weight"


def test_nested_model_dicts_are_flattened(tmp_path, pm, tables):
    nested = {"item_tower": {"item_embedding": {"weight": tables["item_tower.item_embedding.weight"]}}}
    path = tmp_path / "nested.pt"
    torch.save({"model": nested}, path)
    bundle = _load(path, pm)
    assert bundle.item_key == "item_tower.item_embedding.weight"
    assert bundle.user_table is None


def test_lightning_checkpoint(tmp_path, pm, tables):
    states = [
        {"state": {}, "param_groups": [{"lr": 0.01, "momentum": 0.9, "params": [0, 1]}]},
        {"state": {}, "param_groups": [{"lr": 0.001, "params": [2]}]},
    ]
    ckpt = {
        "state_dict": {"model." + k: v for k, v in tables.items()},
        "pytorch-lightning_version": "2.2.0",
        "epoch": 3,
        "global_step": 120,
        "optimizer_states": states,
        "lr_schedulers": [],
        "hyper_parameters": {"lr": 0.01, "temperature": 0.05},
    }
    path = tmp_path / "epoch=3.ckpt"
    torch.save(ckpt, path)
    bundle = _load(path, pm)
    assert bundle.format == "lightning"
    _assert_tables(bundle, tables, prefix="model.")
    assert bundle.optimizer_state["param_groups"][0]["momentum"] == 0.9  # the first optimizer
    assert [s["param_groups"][0]["lr"] for s in bundle.optimizer_state["optimizer_states"]] == [0.01, 0.001]
    assert bundle.config == {"lr": 0.01, "temperature": 0.05}


def _assert_state_dict(bundle: ModelBundle, model: torch.nn.Module, prefix: str = "") -> None:
    """The bundle's tensors are exactly the module's state_dict (names, order and bits)."""
    want = model.state_dict()
    got = {k[len(prefix) :]: v for k, v in bundle.state_dict.items() if k.startswith(prefix)}
    assert list(got) == list(want)
    for key, tensor in want.items():
        assert got[key].dtype == tensor.dtype and torch.equal(got[key], tensor), key


def test_pickled_module_is_read_without_trust(tmp_path, pm):
    model = TwoTower()
    path = tmp_path / "full.pt"
    torch.save(model, path)
    bundle = _load(path, pm)
    assert bundle.format == "pickle" and bundle.module is None
    _assert_state_dict(bundle, model)
    assert bundle.item_key == "item_embedding.weight" and bundle.user_key == "user_embedding.weight"
    np.testing.assert_array_equal(bundle.item_table, model.item_embedding.weight.detach().numpy())
    np.testing.assert_array_equal(bundle.user_table, model.user_embedding.weight.detach().numpy())
    (note,) = [w for w in bundle.warnings if "pickled" in w]
    assert str(path) in note and f"{TwoTower.__module__}.TwoTower" in note
    assert "tensors were read without running code from the file" in note


class Opaque:
    """A foreign object holding no tensor popaudit can reach (its scores are plain lists)."""

    def __init__(self) -> None:
        self.scores = [[0.5, 1.5], [2.5, 3.5]]


def test_pickle_of_an_object_without_tensors_is_refused_without_trust(tmp_path, pm):
    path = tmp_path / "opaque.pt"
    torch.save(Opaque(), path)
    with pytest.raises(UntrustedPickleError) as err:
        _load(path, pm)
    msg = str(err.value)
    assert f"{path} holds a pickled {Opaque.__module__}.Opaque that popaudit cannot read" in msg
    assert "trust_pickle" in msg and "runs code from the file" in msg
    # With trust the real object is unpickled; it still holds no table, which is now the error.
    with pytest.raises(ModelLoadError, match="holds an object of type Opaque, not a state dict") as err:
        _load(path, pm, trust_pickle=True)
    assert not isinstance(err.value, UntrustedPickleError)


def test_pickled_module_is_loaded_with_trust(tmp_path, pm):
    model = TwoTower()
    path = tmp_path / "full.pt"
    torch.save(model, path)
    bundle = _load(path, pm, trust_pickle=True)
    assert bundle.format == "pickle"
    assert type(bundle.module) is TwoTower  # the real object, for plugins that run the model
    assert torch.equal(bundle.module.item_embedding.weight, model.item_embedding.weight)
    _assert_state_dict(bundle, model)
    assert bundle.item_key == "item_embedding.weight"
    np.testing.assert_array_equal(bundle.item_table, model.item_embedding.weight.detach().numpy())
    assert bundle.user_table.shape == (N_USERS, DIM)
    assert any(w == f"{path} was fully unpickled (trust_pickle)" for w in bundle.warnings)


def test_pickled_module_checkpoint_is_read_with_and_without_trust(tmp_path, pm):
    model = TwoTower()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.8)
    model(torch.tensor([0, 1]), torch.tensor([2, 3])).sum().backward()
    optimizer.step()  # momentum buffers: the optimizer state has tensors keyed by parameter
    path = tmp_path / "full_ckpt.pt"
    torch.save({"model": model, "optimizer": optimizer, "config": {"lr": 0.3}}, path)
    want = optimizer.state_dict()
    for trust in (False, True):
        bundle = _load(path, pm, trust_pickle=trust)
        assert bundle.format == "checkpoint"
        _assert_state_dict(bundle, model)
        assert bundle.optimizer_state["param_groups"] == want["param_groups"]
        assert set(bundle.optimizer_state["state"]) == set(want["state"]) == {0, 1}
        for index, state in want["state"].items():
            assert torch.equal(bundle.optimizer_state["state"][index]["momentum_buffer"], state["momentum_buffer"])
        assert bundle.config == {"lr": 0.3}
        assert (bundle.module is not None) == trust
    assert type(bundle.module["model"]) is TwoTower and isinstance(bundle.module["optimizer"], torch.optim.SGD)


def test_placeholder_class_names_in_messages_are_plain(tmp_path, pm):
    path = tmp_path / "odd.pt"
    path.write_bytes(b"\x80\x02cevil\nName\x1b[31m\n)\x81.")  # an object of a class named with escapes
    with pytest.raises(UntrustedPickleError, match=r"holds a pickled \(a name with unusual characters\) that") as err:
        _load(path, pm)
    assert "\x1b" not in str(err.value)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_bad_torchscript_archive_always_gives_a_reason(tmp_path, pm):
    path = tmp_path / "scripted.pt"
    torch.jit.save(torch.jit.script(TwoTower()), str(path))
    whole = path.read_bytes()
    path.write_bytes(whole[:-300])  # the zip directory is cut off
    cut = f"cannot read {path}: it starts like a zip archive but is not a valid one (File is not a zip file)"
    for trust in (False, True):  # a damaged archive is not retried with torch (its OSError says nothing)
        with pytest.raises(ModelLoadError) as err:
            _load(path, pm, trust_pickle=trust)
        assert str(err.value) == cut
    # Code torch cannot compile: the tables are read from the archive; torch.jit.load's reason
    # is named (its first sentence, quotes elided), never empty.
    broken = tmp_path / "broken.pt"
    with zipfile.ZipFile(io.BytesIO(whole)) as src, zipfile.ZipFile(broken, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, data.replace(b"def forward", b"def forward(((") if info.filename.endswith(".py") else data)
    bundle = _load(broken, pm, trust_pickle=True)
    assert bundle.module is None and bundle.item_key == "item_embedding.weight"
    (note,) = [w for w in bundle.warnings if "trust_pickle" in w]
    assert re.fullmatch(
        re.escape(f"cannot unpickle {broken} even with trust_pickle: ")
        + r"RuntimeError: [A-Za-z][^;]*[a-z]; the tables were read without running the file",
        note,
    ), note


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("kind", ["module", "legacy module", "torchscript"])
def test_trusted_loads_print_no_torch_warnings(tmp_path, pm, capfd, kind):
    model, path = TwoTower(), tmp_path / "m.pt"
    if kind == "torchscript":
        torch.jit.save(torch.jit.script(model), str(path))
    else:
        torch.save(model, path, _use_new_zipfile_serialization=kind == "module")
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bundle = _load(path, pm, trust_pickle=True)
    assert bundle.module is not None
    np.testing.assert_array_equal(bundle.item_table, model.item_embedding.weight.detach().numpy())
    assert [str(w.message) for w in caught] == []
    assert capfd.readouterr().err == ""


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_torchscript_archive(tmp_path, pm):
    model = TwoTower()
    path = tmp_path / "scripted.pt"
    torch.jit.save(torch.jit.script(model), str(path))
    bundle = _load(path, pm)
    assert bundle.format == "torchscript"
    assert bundle.item_key == "item_embedding.weight"
    np.testing.assert_array_equal(bundle.item_table, model.item_embedding.weight.detach().numpy())
    assert bundle.user_key == "user_embedding.weight"


def test_safetensors(tmp_path, pm, tables):
    path = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in tables.items()}, str(path), metadata={"loss": "infonce-cos"})
    bundle = _load(path, pm)
    assert bundle.format == "safetensors"
    _assert_tables(bundle, tables)
    assert bundle.config == {"loss": "infonce-cos"}


def test_half_precision_tables_become_float32(tmp_path, pm):
    path = tmp_path / "bf16.pt"
    weight = torch.randn(6, 3).to(torch.bfloat16)
    torch.save({"item_emb.weight": weight}, path)
    bundle = _load(path, pm)
    assert bundle.item_table.dtype == np.float32
    np.testing.assert_array_equal(bundle.item_table, weight.float().numpy())


def _popaudit_checkpoint(tmp_path: Path) -> tuple[Path, dict]:
    g = torch.Generator().manual_seed(1)
    ckpt = {
        "popaudit_checkpoint": 1,
        "state_dict": {"item_encoder.weight": torch.randn(5, 3, generator=g)},
        "optimizer_state_dict": {"state": {}, "param_groups": [{"lr": 0.5, "momentum": 0.0}]},
        "user_optimizer_state_dict": {"state": {}, "param_groups": [{"lr": 0.01}]},
        "config": {"optimizer": "sgd", "loss": "infonce-cos", "lr": 0.5},
        "item_ids": [100, 101, 102, 103, 104],
        "user_ids": ["u1", "u2"],
        "item_frequencies": torch.tensor([9, 0, 3, 1, 2], dtype=torch.int64),
        "item_embeddings": torch.randn(5, 3, generator=g),
        "user_embeddings": torch.randn(2, 3, generator=g),
        "trace": [{"epoch": 0, "loss": 1.5}],
        "train_pairs": torch.tensor([[0, 0], [1, 2]], dtype=torch.int64),
    }
    path = tmp_path / "retrained.pt"
    torch.save(ckpt, path)
    return path, ckpt


def test_popaudit_checkpoint(tmp_path, pm):
    path, ckpt = _popaudit_checkpoint(tmp_path)
    bundle = _load(path, pm)
    assert bundle.format == "popaudit"
    np.testing.assert_array_equal(bundle.item_table, ckpt["item_embeddings"].numpy())
    np.testing.assert_array_equal(bundle.user_table, ckpt["user_embeddings"].numpy())
    assert bundle.item_ids.dtype == np.int64 and bundle.item_ids.tolist() == [100, 101, 102, 103, 104]
    assert bundle.user_ids.tolist() == ["u1", "u2"]
    assert bundle.item_frequencies.dtype == np.int64
    assert bundle.item_frequencies.tolist() == [9, 0, 3, 1, 2]
    assert bundle.optimizer_state["param_groups"][0]["lr"] == 0.5
    assert bundle.config["optimizer"] == "sgd"
    assert bundle.live is None
    assert "item_encoder.weight" in bundle.state_dict
    assert bundle.train_pairs.user_index.tolist() == [0, 1]
    assert bundle.train_pairs.item_rows.tolist() == [0, 2]
    assert bundle.train_pairs.user_ids.tolist() == ["u1", "u2"]


def test_popaudit_checkpoint_train_pairs_outside_tables(tmp_path, pm):
    path, ckpt = _popaudit_checkpoint(tmp_path)
    ckpt["train_pairs"] = torch.tensor([[0, 0], [1, 5]], dtype=torch.int64)
    torch.save(ckpt, path)
    with pytest.raises(ModelLoadError, match=r"train_pairs row 1 \(1, 5\) is outside the tables \(2 users, 5 items\)"):
        _load(path, pm)


def test_popaudit_checkpoint_ids_replaced_by_item_ids_file(tmp_path, pm):
    path, _ = _popaudit_checkpoint(tmp_path)
    ids = tmp_path / "ids.txt"
    ids.write_text("a\nb\nc\nd\ne\n")
    bundle = _load(path, pm, item_ids=ids)
    assert bundle.item_ids.tolist() == ["a", "b", "c", "d", "e"]
    assert any("replaces the item ids stored" in w for w in bundle.warnings)


def test_missing_file(tmp_path, pm):
    with pytest.raises(InputError, match=r"^file not found: .*nope\.pt$"):
        _load(tmp_path / "nope.pt", pm)


def test_unknown_format_names_file_and_supported_formats(tmp_path, pm):
    path = tmp_path / "model.xyz"
    path.write_text("not a model")
    with pytest.raises(ModelLoadError) as err:
        _load(path, pm)
    msg = str(err.value)
    assert str(path) in msg and ".safetensors" in msg and ".npy" in msg and "TorchScript" in msg


def test_corrupt_pt_file(tmp_path, pm):
    path = tmp_path / "broken.pt"
    path.write_bytes(b"this is not a torch file")
    with pytest.raises(ModelLoadError, match="cannot read .*broken.pt as a PyTorch file"):
        _load(path, pm)


def test_pt_without_2d_tensor(tmp_path, pm):
    path = tmp_path / "bias_only.pt"
    torch.save({"bias": torch.zeros(4)}, path)
    with pytest.raises(ModelLoadError, match="no item embedding table in .*no 2-D floating tensor"):
        _load(path, pm)


class _TablePlugin:
    """A plugin loader for a made-up format; returns a float64 table to be normalised."""

    @hookimpl
    def popaudit_load_model(self, path, options):
        if path.suffix != ".mytable":
            return None
        table = np.loadtxt(path, delimiter=",")
        return ModelBundle(source=path, format="mytable", item_table=table)


class _BrokenPlugin:
    @hookimpl
    def popaudit_load_model(self, path, options):
        raise RuntimeError("boom")


def test_plugin_loader_goes_first_and_is_validated(tmp_path):
    pm = get_plugin_manager(entry_points=False)
    pm.register(_TablePlugin(), name="mytable")
    path = tmp_path / "t.mytable"
    path.write_text("1,0\n0,2\n3,4\n")
    bundle = load_model(path, LoadOptions(), pm)
    assert bundle.format == "mytable"
    assert bundle.item_table.dtype == np.float32
    np.testing.assert_array_equal(bundle.item_table, [[1, 0], [0, 2], [3, 4]])
    path.write_text("0,0\n0,0\n")
    with pytest.raises(Exception, match="is all zeros"):
        load_model(path, LoadOptions(), pm)


def test_plugin_error_names_the_plugin(tmp_path):
    pm = get_plugin_manager(entry_points=False)
    pm.register(_BrokenPlugin(), name="broken")
    path = tmp_path / "m.pt"
    torch.save({"item_emb.weight": torch.randn(4, 2)}, path)
    with pytest.raises(PluginError, match="popaudit_load_model: RuntimeError: boom"):
        load_model(path, LoadOptions(), pm)


def test_tensor_data_failing_its_crc_is_refused(tmp_path):
    import struct

    buf = io.BytesIO()
    torch.save({"item_emb.weight": torch.randn(8, 4)}, buf)
    data = bytearray(buf.getvalue())
    info = next(i for i in zipfile.ZipFile(io.BytesIO(bytes(data))).infolist() if i.filename.endswith("/data/0"))
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
    data[info.header_offset + 30 + name_len + extra_len + 3] ^= 0x01
    path = tmp_path / "m.pt"
    path.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError, match=r"m\.pt.*data/0 fails its CRC-32 check"):
        load_model(path, LoadOptions())

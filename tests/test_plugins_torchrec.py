"""The installable popaudit_torchrec plugin: entry-point discovery and its loader."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from auditor.config import LoadOptions
from auditor.errors import AmbiguousTableError, ModelLoadError
from auditor.model import ModelBundle
from auditor.plugins import call_hook, describe_plugins, get_plugin_manager

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "plugins" / "popaudit_torchrec"


def _installed() -> bool:
    return any(ep.name == "torchrec" for ep in importlib.metadata.entry_points(group="popaudit"))


@pytest.fixture(scope="session")
def torchrec_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin package (no deps) installed into a temporary folder, once per session,
    built from a copy, so the build leaves nothing in the source tree."""
    work = tmp_path_factory.mktemp("torchrec")
    source, target = work / "src", work / "site"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return target


@pytest.fixture
def torchrec_installed(torchrec_site: Path) -> Iterator[Path]:
    """:func:`torchrec_site` first on ``sys.path`` for one test (``importlib.metadata``
    finds entry points through ``sys.path``), restored afterwards: an installed entry
    point makes ``check`` and ``mitigate`` run plugin code in a child, which must not leak
    into the tests that run after these in the same worker. Nothing is installed into the
    running environment; subprocesses get the folder on ``PYTHONPATH``."""
    target = torchrec_site
    saved = list(sys.path)
    sys.path.insert(0, str(target))
    importlib.invalidate_caches()
    try:
        assert _installed(), "pip install --target did not register the popaudit entry point"
        yield target
    finally:
        sys.path[:] = saved
        importlib.invalidate_caches()


def torchrec_checkpoint(path: Path, **extra: object) -> dict[str, torch.Tensor]:
    """What torch.save writes for a model with an EmbeddingBagCollection, plus its table configs."""
    gen = torch.Generator().manual_seed(0)
    weights = {
        "sparse_arch.ebc.embedding_bags.t_movie.weight": torch.randn(7, 4, generator=gen),
        "sparse_arch.ebc.embedding_bags.t_user.weight": torch.randn(5, 4, generator=gen),
        "sparse_arch.ebc.embedding_bags.t_genre.weight": torch.randn(3, 4, generator=gen),
        "over_arch.linear.weight": torch.randn(4, 12, generator=gen),
    }
    checkpoint = {
        "state_dict": weights,
        "tables": [
            {"name": "t_movie", "num_embeddings": 7, "embedding_dim": 4, "feature_names": ["movie_id"]},
            {"name": "t_user", "num_embeddings": 5, "embedding_dim": 4, "feature_names": ["user_id"]},
            {"name": "t_genre", "num_embeddings": 3, "embedding_dim": 4, "feature_names": ["genre"]},
        ],
        **extra,
    }
    torch.save(checkpoint, path)
    return weights


def load(path: Path, options: LoadOptions = LoadOptions()) -> ModelBundle:
    bundle = call_hook(get_plugin_manager(), "popaudit_load_model", path=path, options=options)
    assert isinstance(bundle, ModelBundle)
    return bundle


@pytest.mark.usefixtures("torchrec_installed")
def test_entry_point_is_discovered() -> None:
    infos = {info.name: info for info in describe_plugins(get_plugin_manager())}
    info = infos["torchrec"]
    assert info.kind == "entrypoint" and not info.builtin
    assert info.distribution == "popaudit-torchrec" and info.version == "0.1.0"
    assert info.hooks == ("popaudit_load_model",)
    assert "torchrec" not in {i.name for i in describe_plugins(get_plugin_manager(entry_points=False))}


def test_entry_point_in_a_fresh_process(torchrec_installed: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "auditor", "plugins", "--json"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={**os.environ, "PYTHONPATH": str(torchrec_installed), "OMP_NUM_THREADS": "1"},
    )
    assert out.returncode == 0, out.stderr
    plugins = {p["name"]: p for p in json.loads(out.stdout)["plugins"]}
    assert plugins["torchrec"]["distribution"] == "popaudit-torchrec"
    assert plugins["torchrec"]["module"] == "popaudit_torchrec"


@pytest.mark.usefixtures("torchrec_installed")
def test_reads_item_and_user_tables(tmp_path: Path) -> None:
    path = tmp_path / "dlrm.pt"
    weights = torchrec_checkpoint(path, item_ids=torch.arange(100, 107))
    bundle = load(path)
    assert bundle.format == "torchrec"
    assert bundle.item_key == "sparse_arch.ebc.embedding_bags.t_movie.weight"
    np.testing.assert_array_equal(bundle.item_table, weights[bundle.item_key].numpy())
    assert bundle.user_key == "sparse_arch.ebc.embedding_bags.t_user.weight"
    np.testing.assert_array_equal(bundle.user_table, weights[bundle.user_key].numpy())
    np.testing.assert_array_equal(bundle.item_ids, np.arange(100, 107))
    # --item-key by table name picks another table, whose rows the stored ids do not fit.
    with pytest.raises(ModelLoadError, match="item_ids has 7 entries but table t_genre has 3 rows"):
        load(path, LoadOptions(item_key="t_genre"))
    torchrec_checkpoint(path)
    genre = load(path, LoadOptions(item_key="t_genre"))
    assert genre.item_table.shape == (3, 4) and genre.user_key == bundle.user_key


@pytest.mark.usefixtures("torchrec_installed")
def test_ambiguous_and_bad_layouts(tmp_path: Path) -> None:
    path = tmp_path / "two_items.pt"
    torchrec_checkpoint(path)
    ckpt = torch.load(path, weights_only=True)
    ckpt["tables"][2]["feature_names"] = ["item_genre"]
    torch.save(ckpt, path)
    with pytest.raises(AmbiguousTableError) as info:
        load(path)
    message = str(info.value)
    assert "pass --item-key" in message
    assert "t_movie [movie_id] 7x4" in message and "t_genre [item_genre] 3x4" in message
    assert load(path, LoadOptions(item_key="t_movie")).item_table.shape == (7, 4)
    with pytest.raises(ModelLoadError, match="--item-key names 't_nothing'"):
        load(path, LoadOptions(item_key="t_nothing"))

    ckpt["tables"][0]["num_embeddings"] = 8
    torch.save(ckpt, path)
    with pytest.raises(ModelLoadError, match=r"table 't_movie' is 7x4 but its config says num_embeddings=8"):
        load(path, LoadOptions(item_key="t_movie"))
    ckpt["tables"].append({"name": "t_ghost", "embedding_dim": 4})
    ckpt["tables"][0]["num_embeddings"] = 7
    torch.save(ckpt, path)
    with pytest.raises(ModelLoadError, match=r"table 't_ghost' has no weight"):
        load(path)


@pytest.mark.usefixtures("torchrec_installed")
def test_other_files_pass_to_the_builtin_loader(tmp_path: Path) -> None:
    path = tmp_path / "plain.pt"
    torch.save({"item_embedding.weight": torch.ones(4, 2)}, path)
    assert load(path).format != "torchrec"
    # Embedding-bag keys without a `tables` entry are the built-in loader's too.
    torch.save({"embedding_bags.t_item.weight": torch.ones(4, 2)}, path)
    assert load(path).format != "torchrec"


class _RunsCode:
    """A pickled object whose unpickling would run ``os.system`` (never run: the reader replaces it)."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("true",))


@pytest.mark.usefixtures("torchrec_installed")
def test_the_pickle_globals_it_replaced_reach_the_report_and_the_gate(tmp_path: Path) -> None:
    """QA plugins F2: the torchrec loader passes its reader's placeholders on, as the
    built-in loader does: the hostile global is listed, warned and gated (exit 3 where it
    was an error claiming --trust-pickle), and a clean file gates 0."""
    from auditor.audit import run_audit
    from auditor.config import AuditConfig
    from auditor.gate import evaluate_gates, gates_for

    hostile, clean = tmp_path / "hostile.pt", tmp_path / "clean.pt"
    torchrec_checkpoint(hostile, note=_RunsCode())
    torchrec_checkpoint(clean)
    gates = gates_for(["unsafe_globals>0"], (5,))
    for path, unsafe in ((hostile, 1.0), (clean, 0.0)):
        config = AuditConfig(model=path, retrieval=False, probes=False, bootstrap=0, ks=(5,))
        result = run_audit(config, pm=get_plugin_manager())
        report = result.to_dict()
        assert report["inputs"]["format"] == "torchrec"
        [outcome] = evaluate_gates(gates, result.flat_metrics())
        assert outcome.value == unsafe and outcome.tripped is bool(unsafe)  # before: None, an error
        assert "replaced_globals" not in report["not_measured"]
    assert report["replaced_globals"] == []
    hostile_report = run_audit(AuditConfig(model=hostile, retrieval=False, probes=False, bootstrap=0, ks=(5,)),
                               pm=get_plugin_manager()).to_dict()
    assert hostile_report["replaced_globals"] == [{"name": "posix.system", "severity": "runs-code", "count": 1}]
    assert any("posix.system" in w for w in hostile_report["warnings"])

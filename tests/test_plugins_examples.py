"""The example plugins in plugins/: feature tower, asymmetric towers, norm measures."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner
from scipy import stats as scipy_stats

from auditor.audit import run_audit
from auditor.cli import cli
from auditor.config import AuditConfig, LoadOptions
from auditor.errors import ModelLoadError
from auditor.model import LiveModel, ModelBundle
from auditor.plugin_api import RenderContext
from auditor.probes import ProbeBatch, update_step, working_copy
from auditor.plugins import (
    call_hook,
    collect_condition_evidence,
    collect_measures,
    compute_measures,
    get_plugin_manager,
    load_plugin_file,
)
from auditor.plugins.renderers import render_document
from auditor.report.audit_doc import audit_document

ROOT = Path(__file__).resolve().parents[1]
FEATURE_TOWER = ROOT / "plugins" / "feature_tower.py"
ASYMMETRIC = ROOT / "plugins" / "asymmetric.py"
NORM_MEASURES = ROOT / "plugins" / "norm_measures.py"


@pytest.fixture(scope="module")
def ft() -> ModuleType:
    return load_plugin_file(FEATURE_TOWER)


@pytest.fixture(scope="module")
def am() -> ModuleType:
    return load_plugin_file(ASYMMETRIC)


@pytest.fixture(scope="module")
def ft_example(tmp_path_factory: pytest.TempPathFactory, ft: ModuleType) -> tuple[Path, Path]:
    return ft.write_example(tmp_path_factory.mktemp("feature_tower"))


@pytest.fixture(scope="module")
def am_example(tmp_path_factory: pytest.TempPathFactory, am: ModuleType) -> tuple[Path, Path]:
    return am.write_example(tmp_path_factory.mktemp("asymmetric"))


def load(path: Path, *plugins: Path) -> ModelBundle:
    pm = get_plugin_manager(plugins, entry_points=False)
    bundle = call_hook(pm, "popaudit_load_model", path=path, options=LoadOptions())
    assert isinstance(bundle, ModelBundle)
    return bundle


def update_angles(bundle: ModelBundle, n_pairs: int = 256) -> np.ndarray:
    """Angles (degrees, float64) between q_i and Δq_i for the items of one real optimizer
    step of the bundle's live model on its first ``n_pairs`` training pairs."""
    live, pairs = bundle.live, bundle.train_pairs
    assert live is not None and pairs is not None
    module, _ = working_copy(live)
    batch = ProbeBatch(pairs.user_index[:n_pairs], pairs.item_rows[:n_pairs], "train_pairs")
    step = update_step(live, module, [batch], extra_rows=np.zeros(0, np.int64), fallback_lr=None)
    assert step.optimizer_restored  # the plugin's own optimizer, not the fallback
    return step.angles


# --- feature tower ----------------------------------------------------------------------


def test_feature_tower_bundle_is_the_encoder_output(ft_example: tuple[Path, Path]) -> None:
    model_path, _ = ft_example
    bundle = load(model_path, FEATURE_TOWER)
    checkpoint = torch.load(model_path, weights_only=True)
    state, features = checkpoint["state_dict"], checkpoint["item_features"].numpy()
    expected = state["item_tower.id_embedding.weight"].numpy() + features @ state["item_tower.feature_proj.weight"].numpy().T
    assert bundle.format == "feature_tower" and bundle.item_table.shape == (200, 16)
    np.testing.assert_allclose(bundle.item_table, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(bundle.user_table, state["user_embedding.weight"].numpy())
    np.testing.assert_array_equal(bundle.item_frequencies, checkpoint["item_frequencies"].numpy())
    assert bundle.item_frequencies.sum() == 20_000
    assert isinstance(bundle.live, LiveModel) and bundle.live.loss_name == "infonce-cos"
    assert bundle.train_pairs is not None and len(bundle.train_pairs) == 20_000
    assert bundle.optimizer_state is not None and bundle.optimizer_state["param_groups"][0]["momentum"] == 0


def test_feature_tower_declares_c3_violated(ft: ModuleType, ft_example: tuple[Path, Path]) -> None:
    pm = get_plugin_manager([FEATURE_TOWER], entry_points=False)
    bundle = load(ft_example[0], FEATURE_TOWER)
    declared = collect_condition_evidence(pm, bundle)
    c3 = declared.conditions["C3"]
    assert c3.status == "violated" and declared.conditions["C2"].status == "holds"
    assert c3.details["source"] == f"file:{FEATURE_TOWER}"
    assert c3.details["share_overlapping"] == 1.0  # dense Gaussian features: no pair is orthogonal
    assert "Linear(8->16)" in c3.evidence
    # Not ours: nothing declared.
    other = ModelBundle(source=Path("t.npy"), format="npy", item_table=np.ones((3, 2), np.float32))
    assert collect_condition_evidence(pm, other).conditions == {}


def test_feature_overlap_known_answers(ft: ModuleType) -> None:
    one_hot = torch.eye(5)
    assert ft.feature_overlap(one_hot) == {"share_overlapping": 0.0, "mean_abs_cos": 0.0, "pairs": 10.0}
    # Rows (1,0), (1,1), (0,1): |cos| = 1/√2, 0, 1/√2 over the 3 pairs.
    three = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    overlap = ft.feature_overlap(three)
    assert overlap["share_overlapping"] == pytest.approx(2 / 3)
    assert overlap["mean_abs_cos"] == pytest.approx(2 / (3 * math.sqrt(2)))


def test_feature_tower_probe_angles_leave_90_degrees(ft_example: tuple[Path, Path]) -> None:
    angles = update_angles(load(ft_example[0], FEATURE_TOWER))
    # The shared Linear layer mixes other items' gradients in: far from orthogonal updates.
    assert np.mean(np.abs(angles - 90.0) > 1.0) > 0.5


def test_feature_tower_passes_on_other_files(tmp_path: Path) -> None:
    plain = tmp_path / "plain.pt"
    torch.save({"item_embedding.weight": torch.randn(6, 3)}, plain)
    bundle = load(plain, FEATURE_TOWER)
    assert bundle.format != "feature_tower"  # the built-in loader read it
    assert bundle.item_table.shape == (6, 3)


def test_feature_tower_bad_checkpoints(tmp_path: Path, ft_example: tuple[Path, Path]) -> None:
    checkpoint = torch.load(ft_example[0], weights_only=True)
    broken = dict(checkpoint)
    del broken["item_features"]
    torch.save(broken, tmp_path / "missing.pt")
    with pytest.raises(ModelLoadError, match=r"missing\.pt lacks item_features"):
        load(tmp_path / "missing.pt", FEATURE_TOWER)
    wrong = dict(checkpoint, feature_tower=2)
    torch.save(wrong, tmp_path / "v2.pt")
    with pytest.raises(ModelLoadError, match="layout version 2"):
        load(tmp_path / "v2.pt", FEATURE_TOWER)
    shape = dict(checkpoint, config=dict(checkpoint["config"], dim=8))
    torch.save(shape, tmp_path / "dim.pt")
    with pytest.raises(ModelLoadError, match=r"dim\.pt does not match its config"):
        load(tmp_path / "dim.pt", FEATURE_TOWER)


def test_feature_tower_through_load_model(ft_example: tuple[Path, Path]) -> None:
    from auditor import loading

    pm = get_plugin_manager([FEATURE_TOWER], entry_points=False)
    bundle = loading.load_model(ft_example[0], LoadOptions(), pm)
    assert bundle.format == "feature_tower" and bundle.item_table.dtype == np.float32


# --- asymmetric towers ------------------------------------------------------------------


def test_asymmetric_bundle_and_bias(am_example: tuple[Path, Path]) -> None:
    bundle = load(am_example[0], ASYMMETRIC)
    checkpoint = torch.load(am_example[0], weights_only=True)
    assert bundle.format == "asymmetric_two_tower"
    np.testing.assert_array_equal(bundle.item_table, checkpoint["state_dict"]["item_embedding.weight"].numpy())
    assert bundle.user_table is not None and bundle.user_table.shape == (300, 16)
    # Users are the transformer's outputs over their histories, recomputed here.
    live = bundle.live
    assert isinstance(live, LiveModel)
    live.module.eval()
    with torch.no_grad():
        again = live.encode_users(live.module, torch.arange(300)).numpy()
    np.testing.assert_allclose(bundle.user_table, again, rtol=1e-5, atol=1e-6)
    assert np.isfinite(bundle.user_table).all()
    histories = checkpoint["user_histories"]
    assert bool((histories == 200).all(dim=1).any()), "the example has users without history"
    # Plain SGD + cosine InfoNCE + high lr on an id-embedding item tower: norms follow popularity.
    rho = scipy_stats.spearmanr(bundle.item_frequencies, np.linalg.norm(bundle.item_table, axis=1))[0]
    assert rho > 0.7


def test_asymmetric_item_updates_are_orthogonal(am_example: tuple[Path, Path]) -> None:
    angles = update_angles(load(am_example[0], ASYMMETRIC))
    # C1-C4 hold on the item side whatever the user tower: every update is at 90° (float64).
    assert len(angles) > 50
    np.testing.assert_allclose(angles, 90.0, atol=1e-6)


def test_asymmetric_declares_item_side_conditions(am_example: tuple[Path, Path]) -> None:
    pm = get_plugin_manager([ASYMMETRIC], entry_points=False)
    declared = collect_condition_evidence(pm, load(am_example[0], ASYMMETRIC))
    assert {k: c.status for k, c in declared.conditions.items()} == {"C2": "holds", "C3": "holds"}


def test_run_audit_with_plugins(am_example: tuple[Path, Path], ft_example: tuple[Path, Path]) -> None:
    from auditor import audit

    plugins = (FEATURE_TOWER, ASYMMETRIC, NORM_MEASURES)
    pm = get_plugin_manager(plugins, entry_points=False)
    verdicts = {}
    for model, log in (am_example, ft_example):
        config = AuditConfig(model=model, interactions=log, plugins=plugins, bootstrap=100, ks=(10,))
        result = audit.run_audit(config, pm=pm)
        assert result.conditions is not None
        verdicts[result.inputs.format] = {k: result.conditions[k].status for k in ("C2", "C3")}
        assert set(result.measures) == {"norm_gini", "head_norm_ratio_1pct", "item_bias_spearman"}
        assert result.probes is not None
    assert verdicts == {
        "asymmetric_two_tower": {"C2": "holds", "C3": "holds"},
        "feature_tower": {"C2": "holds", "C3": "violated"},
    }


# --- norm measures ----------------------------------------------------------------------


def test_norm_measures_known_answers() -> None:
    nm = load_plugin_file(NORM_MEASURES)
    assert nm.gini(np.array([0.0, 0.0, 0.0, 1.0])) == pytest.approx(0.75)
    assert nm.gini(np.full(7, 3.0)) == pytest.approx(0.0)
    assert nm.gini(np.array([1.0, 2.0, 3.0])) == pytest.approx(2 / 9)  # mean |xi-xj| / (2 mean)
    # Ten items, c = max(1, floor(0.1)) = 1; two items tie at the top frequency: both are head.
    freq = np.array([5, 1, 5, 0, 2, 1, 0, 0, 3, 1])
    np.testing.assert_array_equal(nm.head_mask(freq, 1.0), freq == 5)
    assert nm.head_mask(np.arange(200), 1.0).sum() == 2  # c = 2, no ties

    table = np.zeros((10, 2), np.float32)
    table[:, 0] = [4, 1, 2, 1, 1, 1, 1, 1, 1, 1]  # norms; mean 1.4, head (rows 0 and 2) mean 3
    bundle = ModelBundle(source=Path("t.npy"), format="npy", item_table=table)
    from auditor.model import ItemStats

    pm = get_plugin_manager([NORM_MEASURES], entry_points=False)
    values = compute_measures(collect_measures(pm), bundle, ItemStats(frequencies=freq, n_interactions=18), None)
    assert values["head_norm_ratio_1pct"] == pytest.approx(3.0 / 1.4)
    assert values["norm_gini"] == pytest.approx(nm.gini(table[:, 0]))
    assert compute_measures(collect_measures(pm), bundle, None, None)["head_norm_ratio_1pct"] is None


def test_norm_percentile_list_measure_known_answer() -> None:
    from auditor.metrics.exposure import ListContext, Slots

    nm = load_plugin_file(NORM_MEASURES)
    table = np.zeros((5, 2))
    table[:, 1] = [3.0, 1.0, 4.0, 2.0, 2.0]  # ranks 4, 1, 5, 2.5, 2.5 -> percentiles 0.75, 0, 1, 0.375, 0.375
    measure = nm.NormPercentile().bind(ListContext(np.ones(5), item_table=table))
    lists = np.array([[2, 0], [3, -1]])  # filled slots: 1, 0.75, 0.375
    assert measure(Slots(lists, 5)) == pytest.approx((1 + 0.75 + 0.375) / 3)
    assert np.isnan(measure(Slots(np.full((2, 2), -1), 5)))
    assert nm.NormPercentile().bind(ListContext(np.ones(5))) is None  # no table: not measurable


def test_norm_percentile_shows_dot_serving_long_vectors(tmp_path: Path) -> None:
    ran = CliRunner().invoke(cli, ["check", "sample_data/biased.pt", "--interactions", "sample_data/interactions.parquet",
                                   "--plugin", str(NORM_MEASURES), "--no-probes", "--bootstrap", "0", "-k", "10",
                                   "-q", "--json", str(tmp_path / "r.json"), "--fail-on", "norm_percentile_ratio@10>1.1"])
    assert ran.exit_code == 3, ran.output
    report = json.loads((tmp_path / "r.json").read_text())
    at10 = report["retrieval"]["at"]["10"]
    # The popular items have the longest vectors: the most-popular list is near 1, dot behind, cosine far behind.
    assert at10["popular"]["norm_percentile"] > at10["dot"]["norm_percentile"] > 0.75
    assert at10["cosine"]["norm_percentile"] < 0.6
    # The figures plugins/README.md quotes (0.77, 0.44, 0.99; it quoted 0.89 and 0.56, the
    # figures of lists that kept each user's training items, before one query population).
    assert [round(at10[s]["norm_percentile"], 2) for s in ("dot", "cosine", "popular")] == [0.77, 0.44, 0.99]
    assert report["retrieval"]["definitions"]["norm_percentile"].startswith("norm_percentile: ")


def test_feature_tower_script_writes_the_readme_example(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(FEATURE_TOWER), str(tmp_path / "example")],
        capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert out.returncode == 0, out.stderr
    model, log = tmp_path / "example" / "feature_tower.pt", tmp_path / "example" / "interactions.parquet"
    assert out.stdout.strip() == f"wrote {model} and {log}"
    assert pq.read_table(log).num_rows == 20_000
    assert load(model, FEATURE_TOWER).format == "feature_tower"


def test_feature_tower_without_its_plugin_says_the_id_table_stands_in(ft_example: tuple[Path, Path]) -> None:
    """Without the plugin the checkpoint's id table is audited: the first warning and the
    served-vectors section name the ignored feature projection and say what to give."""
    model_path, interactions = ft_example
    config = dict(model=model_path, interactions=interactions, ks=(10,), bootstrap=0, probes=False)
    bare = run_audit(AuditConfig(**config))  # type: ignore[arg-type]
    served = bare.served_vectors
    assert served is not None and not served.as_served and served.source == "tables"
    assert served.description == "the stored id table `item_tower.id_embedding.weight`"
    assert bare.warnings[0] == served.not_served
    assert re.fullmatch(
        r"audited the stored id table `item_tower\.id_embedding\.weight` only: the checkpoint's item-side tensors "
        r"`item_tower\.feature_proj\.weight` are ignored, so these are not the item vectors the model in "
        r"feature_tower\.pt serves; to audit those, give a plugin that loads its item encoder \(plugins\)",
        bare.warnings[0],
    )
    text = str(render_document(audit_document(bare, figures=()), "markdown", get_plugin_manager(entry_points=False),
                               RenderContext(destination=None, width=400)))  # fmt: skip
    section = text[text.index("## Served vectors"):]
    assert section.split("\n\n")[1].startswith("These are not the vectors the model in feature_tower.pt serves with")
    # With the plugin the served vectors (E + W x) are audited: no stand-in, no warning about it.
    served_run = run_audit(AuditConfig(**config, plugins=(FEATURE_TOWER,)))  # type: ignore[arg-type]
    assert served_run.served_vectors is None
    assert not any("item-side tensors" in w for w in served_run.warnings)
    # Each audit's ρ is scipy's over its own vectors: the id table alone, and E + W x.
    checkpoint = torch.load(model_path, weights_only=True)
    state, freq = checkpoint["state_dict"], checkpoint["item_frequencies"].numpy()
    table = state["item_tower.id_embedding.weight"].numpy()
    encoded = table + checkpoint["item_features"].numpy() @ state["item_tower.feature_proj.weight"].numpy().T
    assert served_run.frequency_norm is not None and bare.frequency_norm is not None
    for result, vectors in ((bare, table), (served_run, encoded)):
        expected = scipy_stats.spearmanr(freq, np.linalg.norm(vectors.astype(np.float64), axis=1)).statistic
        assert result.frequency_norm is not None and result.frequency_norm.spearman == pytest.approx(expected, abs=1e-6)

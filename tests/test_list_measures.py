"""List measures go through ``popaudit_measures``: the built-in ones (head share ... novelty)
and a plugin's are registered, measured, gated, tabled and written the same way."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.config import AuditConfig
from auditor.flat import metric_names
from auditor.metrics.builtin_measures import LIST_MEASURES
from auditor.metrics.list_measures import ExposureMeasures
from auditor.loading.population import population_of
from auditor.model import ItemStats, ModelBundle
from auditor.plugins import collect_measures, get_plugin_manager
from auditor.retrieval import measure_retrieval

EXPOSURE_NAMES = ["head_share_1pct", "head_share_10pct", "head_share_20pct", "arp", "aplt", "gini", "coverage", "novelty"]
GROUP_NAMES = [*(f"{m}_{g}" for g in ("niche", "diverse", "blockbuster") for m in ("gap_delta", "miscalibration", "ndcg")),
               "miscalibration", "pop_rsp", "pop_reo", "aclt"]  # fmt: skip
BUILTIN_NAMES = [*EXPOSURE_NAMES, *GROUP_NAMES]

COLD_SHARE = '''
import numpy as np
from auditor.hookspecs import hookimpl


class ColdShare:
    name = "cold_share"
    label = "share of slots given to items never trained on"
    display = "pct"
    definition = "cold_share: filled slots whose item has popularity 0 / filled slots"

    def bind(self, context):
        cold = np.asarray(context.popularity) == 0

        def measure(slots):
            filled = slots.valid.sum()
            return float((cold[slots.safe] & slots.valid).sum() / filled) if filled else None

        return measure


@hookimpl
def popaudit_measures():
    return [ColdShare()]
'''


def _model(tmp_path: Path) -> tuple[Path, Path, np.ndarray, np.ndarray, np.ndarray]:
    """A table whose cold items (popularity 0) have the longest vectors, and its log."""
    rng = np.random.default_rng(3)
    n_items, n_users, dim = 200, 60, 8
    freq = np.where(np.arange(n_items) % 4 == 0, 0, rng.integers(1, 20, n_items))
    directions = rng.standard_normal((n_items, dim))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    items = (directions * np.where(freq == 0, 5.0, 1.0)[:, None]).astype(np.float32)
    users = rng.standard_normal((n_users, dim)).astype(np.float32)
    import torch

    model = tmp_path / "model.pt"
    torch.save({"item_embedding.weight": torch.from_numpy(items), "user_embedding.weight": torch.from_numpy(users)}, model)
    user_ids = np.concatenate([rng.integers(0, n_users, int(f)) for f in freq])
    item_ids = np.repeat(np.arange(n_items), freq)
    import pyarrow as pa

    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": user_ids, "item_id": item_ids}), log)
    return model, log, items, users, freq


def _plugin(tmp_path: Path) -> Path:
    path = tmp_path / "cold_share.py"
    path.write_text(COLD_SHARE)
    return path


def test_the_builtin_list_measures_are_registered_through_the_hook() -> None:
    registered = collect_measures(get_plugin_manager(entry_points=False))
    assert registered.list_names == BUILTIN_NAMES
    assert [m.name for m in LIST_MEASURES] == BUILTIN_NAMES
    assert registered.audit_names == ["item_bias_spearman"]
    assert all(m.definition.startswith(m.name + ": ") for m in LIST_MEASURES)


def test_registered_builtins_measure_what_the_default_measures_do() -> None:
    rng = np.random.default_rng(0)
    popularity = rng.integers(0, 50, 300)
    users = np.minimum(popularity, 30)
    lists = rng.choice(300, size=(40, 10))
    registered = collect_measures(get_plugin_manager(entry_points=False)).lists
    default = ExposureMeasures(popularity, users, 30).measure(lists)
    through_hook = ExposureMeasures(popularity, users, 30, measures=registered).measure(lists)
    assert through_hook == default and list(default) == BUILTIN_NAMES


def test_a_plugin_list_measure_is_measured_for_every_scoring_and_k(tmp_path: Path) -> None:
    model, log, items, users, freq = _model(tmp_path)
    registered = collect_measures(get_plugin_manager([_plugin(tmp_path)], entry_points=False))
    assert registered.list_names == [*BUILTIN_NAMES, "cold_share"]  # built-ins first
    bundle = ModelBundle(source=model, format="npy", item_table=items, user_table=users)
    stats = ItemStats(frequencies=freq, n_interactions=int(freq.sum()))
    config = AuditConfig(model=model, ks=(5, 20))
    outcome = measure_retrieval(bundle, stats, config, population_of(bundle, config),
                                list_measures=registered.lists)
    # By hand: the exact top-K of every user under each scoring, then the cold slots.
    scores = users.astype(np.float64) @ items.T.astype(np.float64)
    cosine = scores / np.linalg.norm(items, axis=1)
    for k in (5, 20):
        for name, matrix in (("dot", scores), ("cosine", cosine)):
            top = np.argsort(-matrix, axis=1, kind="stable")[:, :k]
            expected = float((freq[top] == 0).mean())
            assert outcome.retrieval.at[k].scorings()[name]["cold_share"] == pytest.approx(expected)
        assert outcome.retrieval.at[k].popular["cold_share"] == 0.0
    # A quarter of the items are cold; their 5x longer vectors take most dot-product slots.
    assert outcome.retrieval.at[20].dot["cold_share"] > 0.8 > 0.4 > outcome.retrieval.at[20].cosine["cold_share"]
    assert outcome.retrieval.definitions["cold_share"].startswith("cold_share: ")
    assert outcome.retrieval.list_measures["cold_share"].label == "share of slots given to items never trained on"


def test_check_and_batch_gate_report_and_tabulate_a_plugin_list_measure(tmp_path: Path) -> None:
    model, log, *_ = _model(tmp_path)
    plugin = _plugin(tmp_path)
    inputs = {p: p.read_bytes() for p in (model, log, plugin)}
    common = ["--interactions", str(log), "--plugin", str(plugin), "--no-probes", "--bootstrap", "0", "-k", "10", "-q"]
    report, markdown = tmp_path / "r.json", tmp_path / "r.md"
    ran = CliRunner().invoke(cli, ["check", str(model), *common, "--json", str(report), "--markdown", str(markdown),
                                   "--fail-on", "cold_share_dot@10>0.5"])
    assert ran.exit_code == 3, ran.output
    data = json.loads(report.read_text())
    at10 = data["retrieval"]["at"]["10"]
    assert at10["dot"]["cold_share"] > 0.5 and at10["popular"]["cold_share"] == 0.0
    assert list(at10["dot"]) == [*BUILTIN_NAMES, "cold_share"]
    assert "| share of slots given to items never trained on |" in markdown.read_text()

    manifest = tmp_path / "m.csv"
    manifest.write_text(f"model\n{model}\n")
    results = tmp_path / "results.parquet"
    ran = CliRunner().invoke(cli, ["batch", str(manifest), "-o", str(results), *common, "--fail-on", "cold_share_dot@10>0.5"])
    assert ran.exit_code == 3, ran.output
    row = pq.read_table(results).to_pylist()[0]
    assert row["cold_share_dot@10"] == pytest.approx(at10["dot"]["cold_share"])
    assert row["cold_share_ratio@10"] == pytest.approx(at10["dot"]["cold_share"] / at10["cosine"]["cold_share"])
    assert all(p.read_bytes() == b for p, b in inputs.items())


def test_gate_names_follow_the_registered_list_measures() -> None:
    names = metric_names([10], list_measures=["cold_share"])
    assert "cold_share_dot@10" in names and "cold_share_ratio@10" in names and "cold_share_alpha_0.5@10" in names
    assert "gini_dot@10" not in names
    assert "gini_dot@10" in metric_names([10])  # default: the built-in ones
    ran = CliRunner().invoke(cli, ["check", "sample_data/biased.pt", "--fail-on", "cold_share_dot@10>0.5"])
    assert ran.exit_code == 2 and "unknown metric 'cold_share_dot@10'" in ran.output

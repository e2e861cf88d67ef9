"""A graph model's severity, where the harm is not graded (``--no-retrieval``), rests on the
correlation of the item vectors it serves, not on its stored table's (QA "Served F1",
auditor/mechanism.py): a LightGCN checkpoint whose layer-0 item table is noise (ρ not
significant) but whose propagated vectors grow with degree is graded by the served ρ, in
the summary, the headline and the severity gate, each saying which vectors the ρ is of."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats

from auditor.cli import cli
from auditor.config import LoadOptions
from auditor.loading import load_model
from auditor.loading.recbole_split import recbole_split

from recbole_helpers import write_checkpoint, write_inter

N_USERS, N_ITEMS, LAYERS = 30, 40, 2


@pytest.fixture()
def graph_model(tmp_path: Path) -> tuple[Path, Path]:
    """Every user the same unit vector, items tiny random vectors: propagation adds each item
    about sqrt(degree) times the user vector, so served norms follow training frequency."""
    inter = tmp_path / "x.inter"
    write_inter(inter, N_USERS, N_ITEMS, per_user=8, seed=3)
    users = np.tile([1.0, 0.0, 0.0, 0.0], (N_USERS + 1, 1))
    items = np.random.default_rng(5).normal(size=(N_ITEMS + 1, 4)) * 0.01
    model = tmp_path / "LightGCN.pth"
    write_checkpoint(model, "LightGCN", {"n_layers": LAYERS}, N_USERS, N_ITEMS, tables=(users, items))
    return model, inter


def numpy_rhos(model: Path, inter: Path) -> tuple[float, float, float]:
    """(served ρ, stored ρ, stored p) against training-part frequencies: LightGCN's items by
    dense numpy (Â = D^-1/2 A D^-1/2 over the training pairs, mean of layers 0..n_layers)."""
    bundle = load_model(model, LoadOptions())
    assert bundle.user_table is not None and bundle.config is not None
    users, items = bundle.user_table.astype(np.float64), bundle.item_table.astype(np.float64)
    split = recbole_split(bundle.config, inter)
    a = np.zeros((N_USERS, N_ITEMS))
    a[split.train.users, split.train.items] = 1.0
    du, di = (a.sum(1) + 1e-7) ** -0.5, (a.sum(0) + 1e-7) ** -0.5
    norm = du[:, None] * a * di[None, :]
    total, u, i = items.copy(), users, items
    for _ in range(LAYERS):
        u, i = norm @ i, norm.T @ u
        total = total + i
    freq = np.bincount(split.train.items, minlength=N_ITEMS)
    served = stats.spearmanr(np.linalg.norm(total / (LAYERS + 1), axis=1), freq)
    stored = stats.spearmanr(np.linalg.norm(items, axis=1), freq)
    return float(served.statistic), float(stored.statistic), float(stored.pvalue)


def test_without_retrieval_the_severity_rests_on_the_served_vectors_correlation(
    graph_model: tuple[Path, Path], tmp_path: Path,
) -> None:
    model, inter = graph_model
    served_rho, stored_rho, stored_p = numpy_rhos(model, inter)
    assert served_rho >= 0.5 and stored_p > 0.05  # the construction: strong served, no stored correlation
    out = tmp_path / "r.json"
    result = CliRunner().invoke(cli, [
        "check", str(model), "--interactions", str(inter), "--no-retrieval", "--no-probes", "-q", "--json", str(out),
        "--markdown", str(tmp_path / "r.md"), "--fail-on", "severity_level>=2",
    ], catch_exceptions=False)
    report = json.loads(out.read_text())
    assert report["served_vectors"]["frequency_norm"]["spearman"] == pytest.approx(served_rho, abs=1e-6)
    assert report["frequency_norm"]["spearman"] == pytest.approx(stored_rho, abs=1e-6)  # still the stored table's
    lo, hi = report["served_vectors"]["frequency_norm"]["spearman_ci"]
    assert lo > 0.3  # strong and significant: at most moderate without a graded harm
    assert report["verdict"]["severity"] == "moderate" and result.exit_code == 3, result.output  # old: none, 0
    summary = report["verdict"]["summary"]
    assert summary.startswith(f"Popularity bias detected (moderate): item norms grow with training frequency "
                              f"(Spearman ρ = {served_rho:.2f}, ")
    assert (f"over {N_ITEMS} items, of the item vectors LightGCN serves, against ρ = {stored_rho:.2f} for its stored "
            "item table)") in summary
    markdown = (tmp_path / "r.md").read_text()
    assert (f"**Popularity bias detected (severity moderate)**: item norm vs training frequency Spearman ρ = "
            f"{served_rho:.2f}, 95% CI ") in markdown
    assert "of the item vectors LightGCN serves, against ρ" in markdown


def test_a_graded_harm_is_not_said_to_go_against_the_served_correlation(
    graph_model: tuple[Path, Path], tmp_path: Path,
) -> None:
    """With retrieval the harm grades it; the summary no longer reads 'although the CI of the
    frequency–norm correlation includes 0' from the stored table."""
    model, inter = graph_model
    out = tmp_path / "r.json"
    CliRunner().invoke(cli, ["check", str(model), "--interactions", str(inter), "-k", "5", "--no-probes", "-q",
                             "--json", str(out)], catch_exceptions=False)
    summary = json.loads(out.read_text())["verdict"]["summary"]
    assert "although" not in summary and "item norms grow with training frequency" in summary

"""``popaudit check MODEL.pth --interactions DATASET.inter`` on RecBole checkpoints (issue #21
items 1 and 2, wired): RecBole's own split and test masking reproduced from the checkpoint's
``eval_args``, audited with the vectors the model serves.

The references are RecBole 1.2.1's own (tests/data/recbole/eval.json, make_eval.py): the
test metrics its Trainer gave for BPR, LightGCN and SimpleX checkpoints trained on
eval.inter, and LightGCN's ``forward()`` for the saved weights.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.audit import run_audit
from auditor.cli import cli
from auditor.config import AuditConfig, LoadOptions
from auditor.loading import load_model
from auditor.loading.checkpoints import read_torch
from auditor.loading.served import read_cache
from auditor.plugin_api import RenderContext
from auditor.plugins import get_plugin_manager
from auditor.plugins.renderers import render_document
from auditor.report.audit_doc import audit_document
from auditor.result import AuditResult
from recbole_helpers import assert_recboles, write_checkpoint

DATA = Path(__file__).parent / "data" / "recbole"
INTER = DATA / "eval.inter"
RECORD = json.loads((DATA / "eval.json").read_text(encoding="utf-8"))
METRICS = {"recall": "recall", "ndcg": "ndcg", "hit": "hit_rate", "mrr": "mrr"}
FAST = dict(ks=(10, 20), bootstrap=100, probes=False)


def _audit(model: Path, **options: Any) -> AuditResult:
    return run_audit(AuditConfig(model=model, interactions=INTER, **{**FAST, **options}))


def _recboles_names(result: AuditResult, scoring: str) -> dict[str, float]:
    """The audit's accuracy of ``scoring`` under RecBole's metric names (``recall@10``)."""
    assert result.accuracy is not None
    return {f"{name}@{k}": getattr(result.accuracy.at[k][scoring], field)
            for k in (10, 20) for name, field in METRICS.items()}  # fmt: skip


@pytest.fixture(scope="module")
def lightgcn() -> AuditResult:
    return _audit(DATA / "LightGCN-eval.pth")


def test_zero_option_check_equals_recboles_test_metrics(tmp_path: Path) -> None:
    """BPR: nothing but the checkpoint and its .inter; RecBole's printed and unrounded test
    metrics @10 and @20 under dot, the split said where every report says its inputs."""
    out = tmp_path / "bpr.json"
    result = CliRunner().invoke(cli, ["check", str(DATA / "BPR-eval.pth"), "--interactions", str(INTER), "--k", "10", "--k", "20",
                                      "--bootstrap", "100", "--no-probes", "-q", "--json", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    found = {f"{name}@{k}": report["accuracy"]["at"][str(k)]["dot"][field]
             for k in (10, 20) for name, field in METRICS.items()}  # fmt: skip
    assert_recboles(found, RECORD["runs"]["BPR"])
    split = report["inputs"]["split"]
    assert "ratio split [0.8, 0.1, 0.1] per user, in time order" in split and "eval_args" in split
    assert "2,499 training, 248 validation and 248 test interactions" in split
    # the training part is the training log: its counts, not the whole file's 2,995 rows with ids
    assert report["inputs"]["n_interactions"] == 2499
    population = report["retrieval"]["population"]["description"]
    assert "160 users in the training part of RecBole's split" in population and "validation items" in population
    assert report["accuracy"]["n_users_evaluated"] == 160 and report["accuracy"]["n_dropped"] == 0
    assert report["served_vectors"] == {"model": "BPR", "source": "tables", "description": "the stored tables",
                                "scoring": "dot", "as_served": True, "frequency_norm": None, "not_served": None,
                                "item_bias_spearman": None, "score": None}  # fmt: skip
    assert not any("also appear in the training log" in w for w in report["warnings"])


def test_training_part_is_the_training_log() -> None:
    """Frequencies are the training part's counts per item row (hand-counted from RecBole's
    own split recorded in eval.json), and nobody is served an item RecBole masks."""
    result = _audit(DATA / "BPR-eval.pth", ks=(10,))
    parts = RECORD["splits"]["RS-TO-user"]["labels"]  # each data row's part: "0" train, "1" valid, "2" test
    rows = [line.split("\t") for line in INTER.read_text().splitlines()[1:]]
    tokens = RECORD["tokens"]["item_id"][1:]
    counts = dict.fromkeys(tokens, 0)
    for part, row in zip(parts, rows):
        if part == "0":
            counts[row[1]] += 1
    assert result.plot_data.frequencies is not None
    assert result.plot_data.frequencies.tolist() == [counts[t] for t in tokens]


def test_lightgcn_served_vectors_give_recboles_metrics(lightgcn: AuditResult) -> None:
    """LightGCN serves its cache (restore_*), said in the report; accuracy equals RecBole's."""
    assert_recboles(_recboles_names(lightgcn, "dot"), RECORD["runs"]["LightGCN"])
    served = lightgcn.served_vectors
    assert served is not None and (served.source, served.scoring, served.as_served) == ("cache", "dot", True)
    assert "restore_user_e/restore_item_e" in served.description


def test_lightgcn_audit_equals_an_audit_of_recboles_forward(lightgcn: AuditResult, tmp_path: Path) -> None:
    """The same audit of a checkpoint whose stored tables are RecBole's forward() vectors:
    ρ (served), every head share and every accuracy figure equal."""
    forward = np.load(DATA / "LightGCN-eval.forward.npz")
    config = load_model(DATA / "LightGCN-eval.pth", LoadOptions()).config
    assert config is not None
    path = tmp_path / "forward.pth"
    write_checkpoint(path, "BPR", {"eval_args": config["eval_args"], "load_col": config["load_col"]}, 160, 120,
                     tables=(forward["user"], forward["item"]))  # fmt: skip
    plain = _audit(path)
    assert plain.served_vectors is not None and plain.served_vectors.source == "tables"
    assert lightgcn.served_vectors is not None and lightgcn.served_vectors.frequency_norm is not None and plain.frequency_norm
    assert lightgcn.served_vectors.frequency_norm.spearman == pytest.approx(plain.frequency_norm.spearman, abs=1e-12)
    assert lightgcn.served_vectors.frequency_norm.loglog_slope == pytest.approx(plain.frequency_norm.loglog_slope, abs=1e-9)
    assert lightgcn.retrieval is not None and plain.retrieval is not None
    for k in (10, 20):
        for scoring in ("dot", "cosine", "popular"):
            got, want = getattr(lightgcn.retrieval.at[k], scoring), getattr(plain.retrieval.at[k], scoring)
            for share in ("head_share_1pct", "head_share_10pct", "head_share_20pct"):
                assert got[share] == pytest.approx(want[share], abs=1e-12), (k, scoring, share)
    assert lightgcn.accuracy is not None and plain.accuracy is not None
    assert lightgcn.accuracy.at == plain.accuracy.at
    # the stored table is another matter: its ρ is far below the served vectors'
    assert lightgcn.frequency_norm is not None
    assert lightgcn.served_vectors.frequency_norm.spearman - lightgcn.frequency_norm.spearman > 0.5
    # served_* gate what dot serving sees: the served vectors here, the stored table where it serves
    flat, flat_plain = lightgcn.flat_metrics(), plain.flat_metrics()
    assert flat["served_spearman"] == lightgcn.served_vectors.frequency_norm.spearman != flat["spearman"]
    assert flat["served_loglog_slope"] == lightgcn.served_vectors.frequency_norm.loglog_slope
    assert flat_plain["served_spearman"] == flat_plain["spearman"] == plain.frequency_norm.spearman


def test_simplex_is_audited_with_its_own_users_and_cosine() -> None:
    result = _audit(DATA / "SimpleX-eval.pth")
    assert_recboles(_recboles_names(result, "cosine"), RECORD["runs"]["SimpleX"])
    served = result.served_vectors
    assert served is not None and (served.source, served.scoring) == ("simplex", "cosine")
    assert served.frequency_norm is None  # its served item vectors are the stored table
    assert len(result.warnings) == 1 and "SimpleX scores by cosine: its own lists are the 'cosine'" in result.warnings[0]


def test_every_format_labels_the_stored_and_served_statistics(lightgcn: AuditResult, tmp_path: Path) -> None:
    pm = get_plugin_manager(entry_points=False)
    for fmt, suffix in (("markdown", ".md"), ("html", ".html"), ("console", None)):
        context = RenderContext(destination=None if suffix is None else tmp_path / f"report{suffix}", width=400)
        text = str(render_document(audit_document(lightgcn, figures=()), fmt, pm, context))  # figures undrawn: fast
        assert "stored item table (the training mechanism)" in text, fmt
        assert "served item vectors (what dot serving sees)" in text, fmt
        assert "cache (restore" in text, fmt
    report = lightgcn.to_dict()
    assert report["served_vectors"]["frequency_norm"]["spearman"] == pytest.approx(0.9329, abs=1e-4)
    assert report["frequency_norm"]["spearman"] == pytest.approx(0.3058, abs=1e-4)  # the stored table, as before


def test_a_model_scoring_otherwise_is_named(tmp_path: Path) -> None:
    """NeuMF scores with an MLP: the stored tables are audited, and the warning says so."""
    write_checkpoint(tmp_path / "neumf.pth", "NeuMF", {"load_col": {"inter": ["user_id", "item_id", "rating",
                                                                                "timestamp"]}}, 160, 120)  # fmt: skip
    result = _audit(tmp_path / "neumf.pth", ks=(10,))
    assert result.served_vectors is not None and not result.served_vectors.as_served
    assert any(re.search(r"audited the stored tables .* \(NeuMF\) scores with an MLP", w) for w in result.warnings)


def test_explicit_holdout_keeps_the_ordinary_route(tmp_path: Path) -> None:
    """--holdout is the user's choice: the whole .inter is the training log (no split), and
    LightGCN is still served from its cache."""
    lines = INTER.read_text().splitlines()
    holdout = tmp_path / "held.csv"
    holdout.write_text("user_id,item_id\n" + "\n".join(",".join(line.split("\t")[:2]) for line in lines[-40:]) + "\n")
    result = run_audit(AuditConfig(model=DATA / "LightGCN-eval.pth", interactions=INTER, holdout=holdout, ks=(10,),
                                   bootstrap=0, probes=False))  # fmt: skip
    assert result.inputs.split is None and result.inputs.n_interactions == 2995
    assert result.served_vectors is not None and result.served_vectors.source == "cache"
    assert result.accuracy is not None
    assert any("is a subset of the training log" in w for w in result.warnings)  # the whole file trained on


def test_lightgcn_without_its_cache_is_propagated(tmp_path: Path) -> None:
    """The same weights saved without restore_user_e/restore_item_e: popaudit propagates over
    the training part of the reproduced split, says so, and still gives RecBole's metrics."""
    weights = read_torch(DATA / "LightGCN-eval.pth", trust_pickle=False).tensors
    config = load_model(DATA / "LightGCN-eval.pth", LoadOptions()).config
    assert config is not None
    path = tmp_path / "uncached.pth"
    write_checkpoint(path, "LightGCN", {"eval_args": config["eval_args"], "load_col": config["load_col"],
                                        "n_layers": config["n_layers"], "dataset": config["dataset"]}, 160, 120,
                     tables=(weights["user_embedding.weight"].numpy(), weights["item_embedding.weight"].numpy()))
    result = _audit(path)
    assert result.served_vectors is not None and result.served_vectors.source == "propagated"
    assert "n_layers=2" in result.served_vectors.description and "2,499 training interactions" in result.served_vectors.description
    assert_recboles(_recboles_names(result, "dot"), RECORD["runs"]["LightGCN"])
    assert not result.warnings


def test_ngcf_without_its_cache_says_the_stored_tables_stand_in(tmp_path: Path) -> None:
    """NGCF propagates through learned layers popaudit cannot rebuild: without the cache the
    stored tables are audited, and the first warning, the top of 'Served vectors' and the
    accuracy section say that these are not the vectors NGCF serves."""
    config = load_model(DATA / "LightGCN-eval.pth", LoadOptions()).config
    assert config is not None
    path = tmp_path / "ngcf.pth"
    write_checkpoint(path, "NGCF", {"eval_args": config["eval_args"], "load_col": config["load_col"]}, 160, 120)
    result = _audit(path, ks=(10,), bootstrap=0)
    served = result.served_vectors
    assert served is not None and not served.as_served and served.source == "tables"
    assert result.warnings[0] == served.not_served and result.to_dict()["served_vectors"]["not_served"] == served.not_served
    assert re.search(r"the model \(NGCF\) scores with .* caches no restore_user_e/restore_item_e\); to audit the "
                     r"vectors it serves, give a checkpoint saved with that cache .*eval_step > 0", served.not_served or "")
    pm = get_plugin_manager(entry_points=False)
    text = str(render_document(audit_document(result, figures=()), "markdown", pm, RenderContext(destination=None, width=400)))
    vectors = text[text.index("## Served vectors"):]
    assert vectors.split("\n\n")[1].startswith("These are not the vectors NGCF serves with: popaudit could not rebuild")
    accuracy = text[text.index("## Accuracy and the trade-off"):]
    assert accuracy.split("\n\n")[1].startswith("These figures are of the stored tables scored by dot product, not of "
                                                "the vectors NGCF serves with")
    bpr = _audit(DATA / "BPR-eval.pth", ks=(10,), bootstrap=0)  # serves its tables: nothing stands in
    assert bpr.served_vectors is not None and bpr.served_vectors.as_served and bpr.served_vectors.not_served is None
    assert "These are not the vectors" not in str(render_document(audit_document(bpr, figures=()), "markdown", pm,
                                                                  RenderContext(destination=None, width=400)))


def test_audit_measures_see_the_served_vectors() -> None:
    """plugins/norm_measures.py on LightGCN: its norm Gini is of the served (cached) item
    vectors, the ones the list measures rank by, not of the stored table."""
    plugin = Path(__file__).resolve().parents[1] / "plugins" / "norm_measures.py"
    result = _audit(DATA / "LightGCN-eval.pth", ks=(10,), bootstrap=0, plugins=(plugin,))
    cache = read_cache(DATA / "LightGCN-eval.pth")
    assert cache is not None

    def gini(values: np.ndarray) -> float:  # mean |x_i - x_j| over all pairs / (2 mean)
        return float(np.abs(values[:, None] - values[None, :]).mean() / (2 * values.mean()))

    served = np.linalg.norm(cache.items.astype(np.float64), axis=1)
    stored = np.linalg.norm(load_model(DATA / "LightGCN-eval.pth", LoadOptions()).item_table.astype(np.float64), axis=1)
    assert result.measures["norm_gini"] == pytest.approx(gini(served), rel=1e-9)
    assert abs(gini(served) - gini(stored)) > 0.01  # the two tables differ: the test tells them apart

"""One audit, one meaning: the same model audited with an incidental option changed gives the
same exposure figures, severity and gate outcomes (holdout on/off, -j 1/-j 2, a memory
ceiling that shards the search, .pt vs .npy vs Parquet tables, a manifest row vs check), and
every ratio is dot / cosine."""

from __future__ import annotations

import math

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli

N_USERS, N_ITEMS, DIM = 300, 2000, 16
GATES = ("--fail-on", "head_share_1pct_ratio@10>2", "--fail-on", "spearman>0.9", "--fail-on", "gini_dot@10<0.1")
EXPOSURE = re.compile(r"^(?!recall|ndcg|hit_rate|mrr)\w+_(dot|cosine|popular|alpha_[\d.]+|ratio)@\d+$")
"""Flat names of exposure figures (accuracy ones start with an accuracy measure)."""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A skewed two-tower model in three formats, its training log and a holdout."""
    root = tmp_path_factory.mktemp("meaning")
    rng = np.random.default_rng(11)
    popularity = 1.0 / np.arange(1, N_ITEMS + 1) ** 0.8
    popularity /= popularity.sum()
    users = rng.integers(0, N_USERS, 12_000)
    items = rng.choice(N_ITEMS, size=users.size, p=popularity)
    held = rng.random(users.size) < 0.2
    freq = np.bincount(items[~held], minlength=N_ITEMS)
    directions = rng.normal(size=(N_ITEMS, DIM))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    item_table = (directions * (1.0 + freq[:, None]) ** 0.35).astype(np.float32)
    # Users a little towards the items they trained on, so accuracy is not noise.
    user_table = rng.normal(size=(N_USERS + 40, DIM)).astype(np.float32)  # 40 rows never trained
    np.add.at(user_table, users[~held], 0.3 * directions[items[~held]].astype(np.float32))
    torch.save({"user_embedding.weight": torch.from_numpy(user_table),
                "item_embedding.weight": torch.from_numpy(item_table)}, root / "model.pt")
    torch.save({"item_embedding.weight": torch.from_numpy(item_table)}, root / "items.pt")
    np.save(root / "items.npy", item_table)
    pq.write_table(pa.table({"item_id": np.arange(N_ITEMS), "embedding": list(item_table)}), root / "items.parquet")
    pq.write_table(pa.table({"user_id": users[~held], "item_id": items[~held]}), root / "train.parquet")
    pq.write_table(pa.table({"user_id": users[held], "item_id": items[held]}), root / "holdout.parquet")
    return root


def _check(files: Path, tmp_path: Path, model: str, *extra: str) -> tuple[int, dict[str, Any], list[str]]:
    """Exit code, JSON report and gate lines of one `popaudit check`."""
    out = tmp_path / f"{model}-{len(list(tmp_path.iterdir()))}.json"
    ran = CliRunner().invoke(cli, ["check", str(files / model), "--interactions", str(files / "train.parquet"),
                                   "-k", "10", "-k", "50", "--no-probes", "--bootstrap", "200", "--json", str(out),
                                   *GATES, *extra], catch_exceptions=False)
    assert ran.exit_code in (0, 3), ran.output
    gates = [line for line in ran.stderr.splitlines() if line.startswith("gate ")]
    return ran.exit_code, json.loads(out.read_text()), gates


HOLDOUT_MEASURES = {"ndcg_niche", "ndcg_diverse", "ndcg_blockbuster", "pop_reo"}


def _exposure(report: dict[str, Any]) -> dict[str, Any]:
    """What must not move: every exposure figure, the population, the verdict."""
    retrieval = report["retrieval"]
    # The group NDCG and PopREO are measured on the holdout itself (null without one).
    at = {k: {scoring: {name: value for name, value in measures.items() if name not in HOLDOUT_MEASURES}
              if isinstance(measures, dict) else measures for scoring, measures in cut.items()}
          for k, cut in retrieval["at"].items()}
    return {
        "at": at,
        "population": retrieval["population"],
        "verdict": {key: report["verdict"][key] for key in ("severity", "bias_detected", "quoted_k")},
    }


def test_holdout_memory_ceiling_and_threads_change_no_exposure_figure(files: Path, tmp_path: Path) -> None:
    code, plain, gates = _check(files, tmp_path, "model.pt")
    assert code == 3 and plain["verdict"]["severity"] == "high"
    population = plain["retrieval"]["population"]
    assert population["n_untrained_user_rows"] == 40 and population["seen_items"] == "excluded"
    assert any("40 user-table rows belong to users who never appear in the training log" in w
               for w in plain["warnings"])
    variants = {
        "holdout": ("--holdout", str(files / "holdout.parquet")),
        "sharded": ("--max-memory", "130K"),  # the 128 KB table and its sorted copy: 2 row shards
    }
    for name, extra in variants.items():
        other_code, other, other_gates = _check(files, tmp_path, "model.pt", *extra)
        assert _exposure(other) == _exposure(plain), name
        assert (other_code, other_gates) == (code, gates), name
    sharded = _check(files, tmp_path, "model.pt", "--max-memory", "130K")[1]
    assert "shards merged" in sharded["retrieval"]["definitions"]["index"]
    with_holdout = _check(files, tmp_path, "model.pt", "--holdout", str(files / "holdout.parquet"))[1]
    assert with_holdout["accuracy"]["n_users_evaluated"] > 250  # the queried users with a held-out item


def test_table_format_changes_no_figure(files: Path, tmp_path: Path) -> None:
    reports = {name: _check(files, tmp_path, name) for name in ("items.pt", "items.npy", "items.parquet")}
    first = reports["items.pt"]
    assert first[1]["retrieval"]["population"]["source"] == "history"
    for name, (code, report, gates) in reports.items():
        assert _exposure(report) == _exposure(first[1]), name
        assert report["frequency_norm"]["spearman"] == first[1]["frequency_norm"]["spearman"], name
        assert (code, gates) == (first[0], first[2]), name


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_manifest_row_equals_check(files: Path, tmp_path: Path, jobs: str) -> None:
    _code, checked, _gates = _check(files, tmp_path, "model.pt", "--holdout", str(files / "holdout.parquet"))
    manifest = tmp_path / "manifest.csv"
    manifest.write_text(
        "model,interactions,holdout,k,bootstrap,probes\n"
        + "".join(f"{files / 'model.pt'},{files / 'train.parquet'},{files / 'holdout.parquet'},10;50,200,false\n"
                  for _ in range(2))
    )
    out = tmp_path / f"results-{jobs}.parquet"
    ran = CliRunner().invoke(cli, ["batch", str(manifest), "-o", str(out), "-j", jobs, "-q", *GATES],
                             catch_exceptions=False)
    assert ran.exit_code == 3, ran.output
    rows = pq.read_table(out).to_pylist()
    for row in rows:
        report = json.loads(row["report_json"])
        assert _exposure(report) == _exposure(checked)
        assert report["accuracy"]["at"] == checked["accuracy"]["at"]


def test_every_ratio_is_dot_over_cosine(files: Path, tmp_path: Path) -> None:
    from auditor.audit import run_audit
    from auditor.config import AuditConfig

    result = run_audit(AuditConfig(model=files / "model.pt", interactions=files / "train.parquet",
                                   holdout=files / "holdout.parquet", ks=(10, 50), probes=False, bootstrap=0))
    from auditor.flat import flat_entries

    # The names the report holds (flat_metrics() adds every other gateable name, as None).
    flat = {name: entry.value for name, entry in flat_entries(result.to_dict()).items()}
    assert flat.items() <= result.flat_metrics().items()
    ratios = [name for name in flat if "_ratio@" in name]
    assert any(name.startswith("ndcg_ratio@") for name in ratios) and any(name.startswith("gini_ratio@") for name in ratios)
    assert len(ratios) == 2 * (len(result.retrieval.list_measures) + 4)
    for name in ratios:
        metric, k = name.split("_ratio@")
        dot, cosine = flat[f"{metric}_dot@{k}"], flat[f"{metric}_cosine@{k}"]
        if dot is None or cosine is None or dot < 0 or cosine < 0 or dot == cosine == 0:
            assert flat[name] is None, name  # no ratio of signed figures (two negative ΔGAPs) nor of two zeros
        elif cosine == 0:
            assert flat[name] == math.inf, name
        else:
            assert flat[name] == pytest.approx(dot / cosine, rel=1e-12), name
    # The JSON report holds the same parts: the ratio of its numbers is the flat ratio.
    report = result.to_dict()
    ndcg = report["accuracy"]["at"]["10"]
    assert flat["ndcg_ratio@10"] == pytest.approx(ndcg["dot"]["ndcg"] / ndcg["cosine"]["ndcg"])
    head = report["retrieval"]["at"]["10"]
    assert flat["head_share_1pct_ratio@10"] == pytest.approx(
        head["dot"]["head_share_1pct"] / head["cosine"]["head_share_1pct"])
    assert all(EXPOSURE.match(name) or name.startswith(("recall", "ndcg", "hit_rate", "mrr")) or "@" not in name
               for name in flat)

"""``overlap_served_<scoring>@K`` at a K that holds every candidate of the model's queries (QA
"Served F3"): the served lists are not kept to the candidates (they may name training items),
so saturation fixes nothing in their overlap with a scoring's list. It is measured and gated
beside a model as alone, in ``check`` and in batch rows (auditor/gate_names.py
``compares_scorings``); the ratio dot/cosine at that K is still voided."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli

N_USERS, N_ITEMS, TRAINED, K = 40, 20, 12, 8


@pytest.fixture()
def files(tmp_path: Path) -> tuple[Path, dict[int, set[int]], list[int]]:
    """Every user trains on 12 of 20 items (8 candidates: K=8 saturates every query); the
    served lists are the 8 most trained items, training items included."""
    rng = np.random.default_rng(5)
    seen = {u: set(int(i) for i in rng.choice(N_ITEMS, size=TRAINED, replace=False)) for u in range(N_USERS)}
    (tmp_path / "train.csv").write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u in seen for i in sorted(seen[u])))
    counts = np.bincount([i for u in seen for i in seen[u]], minlength=N_ITEMS)
    served = [int(i) for i in np.argsort(-counts, kind="stable")[:K]]
    (tmp_path / "recs.csv").write_text("user_id,item_id,rank\n" + "".join(
        f"{u},{i},{r + 1}\n" for u in range(N_USERS) for r, i in enumerate(served)))
    torch.save({"user_embedding.weight": torch.from_numpy(rng.normal(size=(N_USERS, 4)).astype(np.float32)),
                "item_embedding.weight": torch.from_numpy(rng.normal(size=(N_ITEMS, 4)).astype(np.float32))},
               tmp_path / "model.pt")
    return tmp_path, seen, served


def test_served_overlaps_are_gated_at_a_saturated_k(files: tuple[Path, dict[int, set[int]], list[int]],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    folder, seen, served = files
    monkeypatch.chdir(folder)
    # every scoring's list at K=8 is the user's 8 untrained items: the overlap is |served - trained| / 8
    expected = float(np.mean([len(set(served) - seen[u]) / K for u in range(N_USERS)]))
    assert 0 < expected < 0.9
    args = ["check", "model.pt", "--recommendations", "recs.csv", "--interactions", "train.csv", "-k", str(K),
            "--no-probes", "--bootstrap", "0", "-q", "--json", "with.json"]
    result = CliRunner().invoke(cli, [*args, "--fail-on", f"overlap_served_popular@{K}<0.9", "--fail-on",
                                      f"overlap_served_dot@{K}<0.9"], catch_exceptions=False)
    assert result.exit_code == 3, result.output  # old: 1, "dot and cosine serve the same items"
    assert f"gate overlap_served_popular@{K}<0.9: {expected:.4f} (TRIPPED)" in result.output
    report = json.loads(Path("with.json").read_text())
    assert report["retrieval"]["saturated"][str(K)] is True
    at = report["retrieval"]["at"][str(K)]
    assert at["overlap_served_popular"] == pytest.approx(expected) and at["overlap_served_dot"] == pytest.approx(expected)
    result = CliRunner().invoke(cli, [*args, "--fail-on", f"head_share_1pct_ratio@{K}>0.5"], catch_exceptions=False)
    assert result.exit_code == 1 and "measures nothing" in result.output  # the dot/cosine ratio stays void
    Path("manifest.csv").write_text(f"model,interactions,recommendations,k\n,train.csv,recs.csv,{K}\n"
                                    f"model.pt,train.csv,recs.csv,{K}\n")
    result = CliRunner().invoke(cli, ["batch", "manifest.csv", "-o", "rows.parquet", "-q", "--no-probes", "-j", "1"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = pq.read_table("rows.parquet").to_pylist()
    assert [r[f"overlap_served_popular@{K}"] for r in rows] == pytest.approx([expected, expected])  # old: [x, None]


def test_served_lists_that_grade_at_a_saturated_k_are_quoted(files: tuple[Path, dict[int, set[int]], list[int]],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """QA "Served F4": where the model's harm is not measured (K=8 saturates), the served lists
    grade the severity: ``quoted_k`` is their K, as alone, and the headline names them."""
    folder, seen, served = files
    monkeypatch.chdir(folder)
    counts = np.bincount([i for u in seen for i in seen[u]], minlength=N_ITEMS)
    head = counts >= np.sort(counts)[::-1][max(1, N_ITEMS // 100) - 1]  # the top 1%: ties at the cut join it
    share, log_share = sum(head[i] for i in served) / K, counts[head].sum() / counts.sum()
    assert share / log_share >= 1.25 and share - log_share >= 0.02  # moderate by the lists-only rule
    for model in ([], ["model.pt"]):
        CliRunner().invoke(cli, ["check", *model, "--recommendations", "recs.csv", "--interactions", "train.csv",
                                 "-k", str(K), "--no-probes", "--bootstrap", "0", "-q", "--json", "r.json",
                                 "--markdown", "r.md"], catch_exceptions=False)
        verdict = json.loads(Path("r.json").read_text())["verdict"]
        assert (verdict["severity"], verdict["graded_by"], verdict["quoted_k"]) == ("moderate", "served", K)  # old: None
    headline = Path("r.md").read_text().splitlines()[2]
    assert (f"served lists: top-1% items' share of the served top-{K} slots {100 * share:.1f}% vs "
            f"{100 * log_share:.1f}% of the training interactions, which graded the severity") in headline
    assert "rests on the correlation" not in headline

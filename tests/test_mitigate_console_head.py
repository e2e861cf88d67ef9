"""Accuracy QA9 N2: `mitigate --alpha auto`'s console table shows the head share the α was
chosen by (the sidecar's `tradeoff.head_percent`, check's graded head), first, with the
top-1% row beside it; the old table printed only the top 1% (1.5% → 1.1%) above a sentence
about the top 10% (39.1% → 31.0%) that justified the rescale."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from qa_norm_model import write_norm_model


def _history_head_share(items: np.ndarray, users: np.ndarray, rows: np.ndarray, percent: int, k: int = 10) -> float:
    """Top-``percent``% head share of dot serving with history queries (each user's mean
    training-item vector), training items excluded, ties by the lower row, in numpy."""
    counts = np.bincount(rows, minlength=items.shape[0])
    head = counts >= np.sort(counts)[::-1][max(1, items.shape[0] * percent // 100) - 1]  # ties at the cut in
    held = filled = 0
    for user in np.unique(users):
        seen = np.unique(rows[users == user])
        scores = items @ items[seen].mean(axis=0)
        scores[seen] = -np.inf
        top = np.lexsort((np.arange(scores.size), -scores))[:k]
        held, filled = held + int(head[top].sum()), filled + top.size
    return held / filled


@pytest.mark.filterwarnings("ignore")
def test_the_console_shows_the_head_the_alpha_was_chosen_by(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_norm_model(tmp_path)
    result = CliRunner().invoke(cli, ["mitigate", "items.npy", "--alpha", "auto", "-o", "out.npy", "--interactions",
                                      "train.parquet", "--holdout", "hold.parquet", "--accuracy-tolerance", "0.8"])
    assert result.exit_code == 0, result.output
    tradeoff = json.loads(Path("out.npy.popaudit.json").read_text())["tradeoff"]
    assert tradeoff["head_percent"] == 10 and tradeoff["scoring"] == "alpha_0.75"
    table = np.load("items.npy").astype(np.float64)
    norms = np.linalg.norm(table, axis=1, keepdims=True)
    rescaled = (table * norms ** (0.75 - 1)).astype(np.float32).astype(np.float64)  # as written: float32
    log = pq.read_table("train.parquet")
    users, rows = log["user_id"].to_numpy(), log["item_id"].to_numpy()
    before, after = (_history_head_share(t, users, rows, 10) for t in (table, rescaled))
    assert (round(100 * before, 1), round(100 * after, 1)) == (39.1, 31.0)  # the QA's numpy figures
    lines = result.output.splitlines()
    judged = next(i for i, line in enumerate(lines) if "top-10% head share @10 (graded the severity)" in line)
    assert re.findall(r"\d+\.\d%", lines[judged]) == [f"{100 * before:.1f}%", f"{100 * after:.1f}%"]
    assert "top-1% head share @10" in lines[judged + 1]  # beside it, after it


@pytest.mark.filterwarnings("ignore")
def test_a_top_1_percent_choice_shows_one_head_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_norm_model(tmp_path)
    result = CliRunner().invoke(cli, ["mitigate", "model.pt", "--alpha", "auto", "-o", "out.pt", "--interactions",
                                      "train.parquet", "--holdout", "hold.parquet"])
    assert result.exit_code == 0, result.output
    assert json.loads(Path("out.pt.popaudit.json").read_text())["tradeoff"]["head_percent"] == 1
    rows = [line for line in result.output.splitlines() if "head share @10" in line]
    assert len(rows) == 1 and "top-1% head share @10" in rows[0] and "graded the severity" not in rows[0]
    assert re.findall(r"\d+\.\d+%", rows[0]) == ["3.4%", "2.8%"]  # the QA's numpy: 3.40% -> 2.80%

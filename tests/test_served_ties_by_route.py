"""Tied ranks or scores in served lists break by the file's item ids on both routes
(Served F3, docs/served-lists.md "Policies"): beside a RecBole checkpoint, whose table
numbers items by first appearance (i0, i1, ..., i10, i11), and alone, whose catalogue is
the sorted ids ('i1' < 'i10' < 'i11' < 'i2'), one file gives one top K. Before, the row
broke the tie, so the same file kept {i1, i2} beside the model and {i1, i10} alone.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.config import LoadOptions
from auditor.loading import load_model
from auditor.loading.recbole_split import recbole_split
from auditor.loading.served_lists import read_served_lists
from auditor.values import ItemRows, LogSpec
from recbole_helpers import write_checkpoint, write_inter

N_USERS, N_ITEMS, K = 12, 14, 2
TIED = r"tied items are ordered by their item id in \S*tied\.csv \(lower first: numbers numerically, text as text\), " \
       r"with or without a model"


def _tied_lists(path: Path) -> dict[str, list[str]]:
    """Every user lists five items with one score; the users' sets differ, so the top K cut
    decides which items are covered. Returns each user's items."""
    rng = np.random.default_rng(4)
    chosen = {f"u{u}": [f"i{i}" for i in rng.choice(N_ITEMS, size=5, replace=False)] for u in range(N_USERS)}
    path.write_text("user_id,item_id,score\n" + "".join(
        f"{u},{i},1.0\n" for u, items in chosen.items() for i in items), encoding="utf-8")
    return chosen


def test_the_reader_breaks_ties_by_item_id_whatever_the_rows(tmp_path: Path) -> None:
    chosen = _tied_lists(tmp_path / "tied.csv")
    first_appearance = np.asarray([f"i{k}" for k in range(N_ITEMS)], dtype=object)  # a RecBole table's order
    beside = read_served_lists(LogSpec(tmp_path / "tied.csv"), items=ItemRows(first_appearance, N_ITEMS))
    alone = read_served_lists(LogSpec(tmp_path / "tied.csv"))
    assert alone.items.item_ids is not None
    as_ids = {
        "beside": [[first_appearance[r] for r in row] for row in beside.lists],
        "alone": [[alone.items.item_ids[r] for r in row] for row in alone.lists],
    }
    expected = [sorted(chosen[str(u)]) for u in alone.user_ids]  # text ids, sorted as text
    assert as_ids["beside"] == as_ids["alone"] == expected
    assert any(re.search(TIED, w) for w in beside.warnings) and any(re.search(TIED, w) for w in alone.warnings)


def _check(*args: str) -> None:
    result = CliRunner().invoke(cli, ["check", *args, "-k", str(K), "-q"], catch_exceptions=False)
    assert result.exit_code == 0, result.output


def test_the_same_tied_lists_give_the_same_figures_by_route(tmp_path: Path) -> None:
    inter, model = tmp_path / "x.inter", tmp_path / "BPR.pth"
    write_inter(inter, N_USERS, N_ITEMS, per_user=6, seed=3)
    write_checkpoint(model, "BPR", {}, N_USERS, N_ITEMS, dim=4, seed=1)
    chosen = _tied_lists(tmp_path / "tied.csv")
    # The run's training part, for lists alone (the whole .inter would change the counts: Served F1).
    config = load_model(model, LoadOptions()).config
    assert config is not None
    split = recbole_split(config, inter)
    train = tmp_path / "x.train.inter"
    train.write_text("user_id:token\titem_id:token\n" + "".join(
        f"{split.user_ids[u]}\t{split.item_ids[i]}\n" for u, i in zip(split.train.users, split.train.items)))
    _check(str(model), "--interactions", str(inter), "--recommendations", str(tmp_path / "tied.csv"), "--no-probes",
           "--bootstrap", "0", "--json", str(tmp_path / "with.json"))
    _check("--interactions", str(train), "--recommendations", str(tmp_path / "tied.csv"),
           "--json", str(tmp_path / "alone.json"))
    with_model, alone = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("with", "alone"))
    mine, theirs = with_model["retrieval"]["at"][str(K)]["served"], alone["retrieval"]["at"][str(K)]["served"]
    for name in ("coverage", "arp", "novelty", "gini", "head_share_10pct", "aplt"):
        assert mine[name] == pytest.approx(theirs[name]), name
    # Known answer: the first K ids of each user's set, sorted as text, over the 14 items.
    covered = {i for items in chosen.values() for i in sorted(items)[:K]}
    assert mine["coverage"] == pytest.approx(len(covered) / N_ITEMS)
    counts = {str(split.item_ids[i]): int(c) for i, c in enumerate(np.bincount(split.train.items, minlength=split.n_items))}
    assert mine["arp"] == pytest.approx(np.mean([counts[i] for items in chosen.values() for i in sorted(items)[:K]]))
    assert any(re.search(TIED, w) for w in with_model["warnings"]) and any(re.search(TIED, w) for w in alone["warnings"])

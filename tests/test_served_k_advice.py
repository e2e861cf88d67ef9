"""The advice for a served-lists gate at a K not asked for says what else that K needs
(QA11 report F5): the lists must hold K items, which ``check`` knows only once it reads
them, so the advice "add -k K" says so, and following it on shorter lists names the K to
gate instead; on lists that long it measures the gate as advised.

Known answer: 40 items, item i seen i + 1 times by 10 users; every user is served item 39
(the top 1% of 40 items is that one item) and then items 0, 1, 2, ...: its share of the
top-K slots is 1/K."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from auditor.cli import cli

N_ITEMS, N_USERS = 40, 10
GATE = "head_share_1pct_served@8>0.1"


def _run(folder: Path, length: int, *ks: int) -> tuple[int, str]:
    items = np.repeat(np.arange(N_ITEMS), np.arange(1, N_ITEMS + 1))
    pq.write_table(pa.table({"user_id": np.arange(items.size) % N_USERS, "item_id": items}), folder / "log.parquet")
    listed = np.concatenate([[N_ITEMS - 1], np.arange(length - 1)])
    pq.write_table(pa.table({"user_id": np.repeat(np.arange(N_USERS), length), "item_id": np.tile(listed, N_USERS),
                             "rank": np.tile(np.arange(1, length + 1), N_USERS)}), folder / "recs.parquet")
    args = ["check", "--recommendations", str(folder / "recs.parquet"), "--interactions", str(folder / "log.parquet"),
            "-q", "--fail-on", GATE, *(arg for k in ks for arg in ("-k", str(k)))]
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.stderr


def test_the_advice_says_the_lists_must_hold_k_items(tmp_path: Path) -> None:
    code, said = _run(tmp_path, 5, 5)
    assert code == 1
    assert (f"Error: cannot evaluate --fail-on {GATE}: K=8 was not asked for (add -k 8; -k replaces the cut-offs "
            "measured now (5), so pass them all: -k 5 -k 8); the served lists are measured at K=8 only if the longest "
            "of them holds 8 items or more: a K past every list is not measured, and the gate then names the K to "
            "gate instead") in said, said


def test_followed_on_shorter_lists_it_names_the_k_to_gate(tmp_path: Path) -> None:
    code, said = _run(tmp_path, 5, 5, 8)
    assert code == 1
    assert "cut-off K=8 exceeds the longest served list (5 items" in said
    assert "(gate head_share_1pct_served@5)" in said, said


def test_followed_on_lists_that_long_it_measures_the_gate(tmp_path: Path) -> None:
    code, said = _run(tmp_path, 8, 5, 8)
    assert code == 3, said  # item 39 holds 1 of every user's 8 slots: 1/8 = 0.125 > 0.1
    assert f"gate {GATE}: {1 / 8:.4g} (TRIPPED)" in said, said

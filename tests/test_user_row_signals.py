"""Logs QA12 verify-2 N4 (and Loaders verify-2 N2 e): under ``--assume-row-ids`` the user ids'
check said nothing, so a wrong ``--id-offset 1`` on 0-based user ids (every user on its
neighbour's row, user 0 a zero query) or stored user ids shifted against the log audited
the shifted pairing silently, while the item ids got the offset or id-file advice. The user
mapping's check (auditor/idmap.py ``table_rows``) now turns its finding into the same
warning (id_shifts ``offset_signals``, idmap ``mapped_shift_signals``) for the users.

Known answer: the dot head share at K=10, numpy, training items excluded, under the pairing
audited (rows = id − 1, user 0 unqueried) and the one the warning names (rows = id).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli
from tests.loader_world import K, N_ITEMS, N_USERS, loader_world


def _head_share(user_rows: np.ndarray, log_users: np.ndarray) -> float:
    """Head share of the lists of log users ``log_users`` queried by user-table rows ``user_rows``."""
    users, items, freq, user_table, item_table, _ = loader_world()
    threshold = np.sort(freq)[::-1][max(1, int(0.1 * N_ITEMS)) - 1]
    head = (freq >= threshold) & (freq > 0)
    scores = user_table[user_rows].astype(np.float64) @ item_table.T.astype(np.float64)
    for position, user in enumerate(log_users):
        scores[position, items[users == user]] = -np.inf
    top = np.argsort(-scores, axis=1, kind="stable")[:, :K]
    return float(head[top].mean())


def _audit(*args: str) -> tuple[int, str, dict[str, object] | None]:
    result = CliRunner().invoke(cli, ["check", *args, "--no-probes", "--bootstrap", "0", "-q", "-k", str(K),
                                      "--format", "json"], catch_exceptions=False)
    try:
        return result.exit_code, result.output, json.loads(result.stdout)
    except ValueError:
        return result.exit_code, result.output, None


def _files(tmp_path: Path, stored_ids: bool, log_offset: int) -> tuple[Path, Path]:
    users, items, _, user_table, item_table, _ = loader_world()
    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": users + log_offset, "item_id": items}), log)
    state = {"user_embedding.weight": torch.from_numpy(user_table), "item_embedding.weight": torch.from_numpy(item_table)}
    if stored_ids:
        state["user_ids"] = torch.arange(N_USERS, dtype=torch.int64)
    model = tmp_path / "model.pt"
    torch.save(state, model)
    return model, log


def _dot(report: dict[str, object]) -> dict[str, float]:
    return report["retrieval"]["at"][str(K)]["dot"]  # type: ignore[index,no-any-return]


def test_a_wrong_id_offset_on_user_ids_taken_as_rows_is_warned_with_the_offset_that_fits(tmp_path: Path) -> None:
    model, log = _files(tmp_path, stored_ids=False, log_offset=0)
    item_ids = tmp_path / "items.txt"  # the items mapped through ids: --id-offset moves only the users
    item_ids.write_text("".join(f"{i}\n" for i in range(N_ITEMS)))
    code, output, report = _audit(str(model), "--interactions", str(log), "--item-ids", str(item_ids), "--id-offset",
                                  "1", "--assume-row-ids")
    assert code == 0 and report is not None, output
    shifted = np.arange(1, N_USERS)  # log users 1..39 on rows 0..38; user 0 a zero query
    assert report["retrieval"]["population"]["n_queries"] == N_USERS - 1  # type: ignore[index]
    assert _dot(report)["head_share_10pct"] == pytest.approx(_head_share(shifted - 1, shifted), abs=1e-12)
    # was: only '1 user of the training log ... has no row in the user table', no offset named
    assert (f"1 of the 40 distinct user ids of the training log {log} have no row of the 40-row user table taken "
            "minus 1 as rows (--assume-row-ids took them as rows and made each without one a zero query), while "
            "every id has a row without --id-offset 1 (row = id): if the rows are the ids, drop --id-offset"
            ) in report["warnings"], report["warnings"]  # type: ignore[operator]
    code, output, report = _audit(str(model), "--interactions", str(log), "--item-ids", str(item_ids))  # the advice
    assert code == 0 and report is not None, output
    assert _dot(report)["head_share_10pct"] == pytest.approx(_head_share(np.arange(N_USERS), np.arange(N_USERS)),
                                                             abs=1e-12)
    assert _dot(report)["head_share_10pct"] == pytest.approx(0.1225)


def test_stored_user_ids_shifted_against_the_log_audited_as_mapped_are_warned(tmp_path: Path) -> None:
    model, log = _files(tmp_path, stored_ids=True, log_offset=1)  # log users 1..40, stored ids 0..39
    code, output, report = _audit(str(model), "--interactions", str(log), "--assume-row-ids")
    assert code == 0 and report is not None, output
    moved = np.arange(1, N_USERS)  # log user u + 1 on row u + 1 (user u's neighbour); log user 40 a zero query
    assert _dot(report)["head_share_10pct"] == pytest.approx(_head_share(moved, moved - 1), abs=1e-12)
    said = [w for w in report["warnings"] if "the ids look shifted" in w]  # type: ignore[union-attr]
    assert said and said[0].startswith(  # was: no warning named the shift (Loaders verify-2 N2 e)
        f"1 of the 40 distinct user ids in the training log {log} have no row under the user ids stored in {model} "
        "(`user_ids`), while every id minus 1 has one: the ids look shifted: if the rows are the ids minus 1 (1-based "
        "ids), --assume-row-ids audited each user on its neighbour's row and made each without one a zero query; pass "
        f"--user-ids FILE holding each row's id under the user ids stored in {model} (`user_ids`) +1, in row order"), said

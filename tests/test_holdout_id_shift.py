"""Loaders QA12 verify-2 A: a ``--holdout`` numbering its users 1..40 against a training log
(and stored user ids, or user rows taken as ids) numbering them 0..39 was used silently:
39 held-out users were evaluated on their neighbours' lists, recall@10 0.2564 for a true 1.0.
The holdout's ids are now held to the one shift rule the training log's are
(auditor/idmap.py ``check_holdout_shift`` over id_shifts ``evident_shift``/``fitting_shift``):
users against the training log's users, items against the item table's raw ids; refused
where evident, warned under ``--assume-row-ids`` and where a shift of one only fits.

Known answer: each user's held-out item is its own top-1 dot item (numpy, training items
excluded), so recall@10 is 1 under the true pairing; under the shifted pairing it is the
share of users whose list holds their predecessor's top-1 item, computed here.
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
from auditor.errors import IdMappingError, setting
from auditor.idmap import check_holdout_shift
from auditor.values import RowIdPolicy
from tests.loader_world import K, N_ITEMS, N_USERS, loader_world


def _lists() -> np.ndarray:
    """Each user's top-K dot items, its training items excluded."""
    users, items, _, user_table, item_table, _ = loader_world()
    scores = user_table.astype(np.float64) @ item_table.T.astype(np.float64)
    scores[users, items] = -np.inf
    return np.argsort(-scores, axis=1, kind="stable")[:, :K]


def _files(tmp_path: Path, stored_ids: bool) -> tuple[Path, Path]:
    users, items, _, user_table, item_table, _ = loader_world()
    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": users, "item_id": items}), log)
    model = tmp_path / "model.pt"
    state = {"user_embedding.weight": torch.from_numpy(user_table), "item_embedding.weight": torch.from_numpy(item_table)}
    if stored_ids:
        state["user_ids"] = torch.arange(N_USERS, dtype=torch.int64)
    torch.save(state, model)
    return model, log


def _holdout(path: Path, users: np.ndarray, items: np.ndarray) -> Path:
    pq.write_table(pa.table({"user_id": users, "item_id": items}), path)
    return path


def _check(*args: str) -> tuple[int, str, dict[str, object] | None]:
    result = CliRunner().invoke(cli, ["check", *args, "--no-probes", "--bootstrap", "0", "-q", "-k", str(K),
                                      "--format", "json"], catch_exceptions=False)
    try:
        report = json.loads(result.stdout)
    except ValueError:
        report = None
    return result.exit_code, " ".join(result.output.split()), report


def _recall(report: dict[str, object]) -> float:
    return float(report["accuracy"]["at"]["10"]["dot"]["recall"])  # type: ignore[index]


@pytest.mark.parametrize("stored_ids", [True, False], ids=["stored-user-ids", "user-rows-as-ids"])
def test_a_holdout_with_user_ids_shifted_against_the_training_log_is_refused(tmp_path: Path, stored_ids: bool) -> None:
    model, log = _files(tmp_path, stored_ids)
    top = _lists()
    held_users, held_items = np.arange(N_USERS), top[:, 0]
    shifted = _holdout(tmp_path / "hold_u1.parquet", held_users + 1, held_items)
    # Under the shifted pairing held-out user u + 1 is evaluated on user u + 1's list with user u's item.
    mine_shifted = float(np.mean([held_items[u] in top[u + 1] for u in range(N_USERS - 1)]))
    assert mine_shifted == pytest.approx(0.2564, abs=1e-4)

    code, output, _ = _check(str(model), "--interactions", str(log), "--holdout", str(shifted))
    assert code == 1, output  # was 0: recall@10 0.2564, only 'held-out user ... has no row' said
    assert (f"Error: 1 of the 40 distinct user ids of the held-out log {shifted} (--holdout) is not among the user ids "
            f"of {log}, while every id minus 1 is: the holdout's user ids look shifted by +1 against them, so each "
            "held-out user would be read as its neighbour. Write the holdout's user ids as the training log numbers "
            "them (if they are shifted: each id -1), or pass --assume-row-ids to use the holdout as numbered "
            "anyway") in output, output

    code, output, report = _check(str(model), "--interactions", str(log), "--holdout", str(shifted),
                                  "--assume-row-ids")
    assert code == 0 and report is not None, output
    assert _recall(report) == pytest.approx(mine_shifted, abs=1e-12)
    assert any("the holdout's user ids look shifted by +1 against them, and --assume-row-ids read each held-out user "
               "as its neighbour; write the holdout's user ids as the training log numbers them (if they are "
               "shifted: each id -1)" in w for w in report["warnings"]), report["warnings"]  # type: ignore[union-attr]

    fixed = _holdout(tmp_path / "hold_u0.parquet", held_users, held_items)  # the message's fix
    code, output, report = _check(str(model), "--interactions", str(log), "--holdout", str(fixed))
    assert code == 0 and report is not None, output
    assert _recall(report) == pytest.approx(1.0)
    assert not any("shifted" in w for w in report["warnings"])  # type: ignore[union-attr]


def test_a_holdout_with_item_ids_shifted_against_the_item_table_is_refused(tmp_path: Path) -> None:
    """Every item held out once (the holdout covers the catalogue), numbered 1..60 against the
    table's 0..59: evident, refused; the true numbering is accepted."""
    model, log = _files(tmp_path, stored_ids=True)
    users = np.arange(N_ITEMS) % N_USERS
    shifted = _holdout(tmp_path / "hold_i1.parquet", users, np.arange(N_ITEMS) + 1)
    code, output, _ = _check(str(model), "--interactions", str(log), "--holdout", str(shifted))
    assert code == 1, output  # was 0, the one item past the table dropped, every other on its neighbour's row
    assert (f"Error: 1 of the 60 distinct item ids of the held-out log {shifted} (--holdout) is not among the raw ids "
            "of the item table's 60 rows, while every id minus 1 is: the holdout's item ids look shifted by +1") in output
    code, output, report = _check(str(model), "--interactions", str(log), "--holdout",
                                  str(_holdout(tmp_path / "hold_i0.parquet", users, np.arange(N_ITEMS))))
    assert code == 0 and report is not None, output


def test_the_rule_on_held_out_ids() -> None:
    """Refused where evident (the ids cover 90% of the known ones), warned for a shift of one
    where only possible, nothing for new ids no shift explains or a wider shift that k new ids
    beside k absent ones fit."""
    known, policy = np.arange(40), RowIdPolicy()
    with pytest.raises(IdMappingError, match=r"1 of the 40 distinct user ids of H is not among K, while every id minus 1"):
        check_holdout_shift(np.arange(1, 41), known, policy, "user", "H", "K")
    with pytest.raises(IdMappingError, match=r"every id plus 1 is: the holdout's user ids look shifted by -1"):
        check_holdout_shift(np.arange(-1, 39), known, policy, "user", "H", "K")
    [possible] = check_holdout_shift(np.array([3, 7, 20, 40]), known, policy, "user", "H", "K")
    assert possible.startswith("1 of the 4 distinct user ids of H is not among K, while every id minus 1 is: if the "
                               "holdout's user ids are shifted by +1 against them, each held-out user was read as its "
                               "neighbour; write the holdout's user ids as the training log numbers them")
    assert check_holdout_shift(np.array([0, 7, 20, 40]), known, policy, "user", "H", "K") == []  # 0 and 40: no shift
    assert check_holdout_shift(np.array([500, 3, 4]), known, policy, "user", "H", "K") == []
    assert check_holdout_shift(np.array([5, 9, 40, 41, 42]), known, policy, "user", "H", "K") == []  # new 40..42
    assert check_holdout_shift(np.arange(40), known, policy, "user", "H", "K") == []
    assert check_holdout_shift(np.array(["a", "b"], dtype=object), known, policy, "user", "H", "K") == []
    [warned] = check_holdout_shift(np.arange(1, 41), known, RowIdPolicy(assume_row_ids=True), "user", "H", "K")
    assert f"{setting('assume_row_ids')} read each held-out user as its neighbour" in warned


def test_a_shifted_holdout_beside_served_lists_alone_is_refused(tmp_path: Path) -> None:
    """The same rule where no model maps the users: the served lists and the training log
    number users 0..39, the holdout 1..40 (each user's held-out item its own list's first)."""
    users, items, _, _, _, _ = loader_world()
    top = _lists()
    log, lists = tmp_path / "log.parquet", tmp_path / "lists.parquet"
    pq.write_table(pa.table({"user_id": users, "item_id": items}), log)
    pq.write_table(pa.table({"user_id": np.repeat(np.arange(N_USERS), K), "item_id": top.ravel(),
                             "rank": np.tile(np.arange(1, K + 1), N_USERS)}), lists)
    shifted = _holdout(tmp_path / "hold_u1.parquet", np.arange(N_USERS) + 1, top[:, 0])
    args = ["--interactions", str(log), "--recommendations", str(lists), "--holdout"]
    result = CliRunner().invoke(cli, ["check", *args, str(shifted), "--bootstrap", "0", "-q", "-k", str(K)])
    output = " ".join(result.output.split())
    assert result.exit_code == 1, output  # was 0, each held-out user evaluated on its neighbour's list
    assert (f"1 of the 40 distinct user ids of the held-out log {shifted} (--holdout) is not among the user ids of the "
            "training log, while every id minus 1 is: the holdout's user ids look shifted by +1") in output, output
    fixed = _holdout(tmp_path / "hold_u0.parquet", np.arange(N_USERS), top[:, 0])
    result = CliRunner().invoke(cli, ["check", *args, str(fixed), "--bootstrap", "0", "-q", "-k", str(K), "--format",
                                      "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["accuracy"]["at"]["10"]["served"]["recall"] == pytest.approx(1.0)
    assert not any("shifted" in w for w in report["warnings"])
    # --assume-row-ids uses the holdout as numbered, warned; it is read here, so not said to be ignored
    result = CliRunner().invoke(cli, ["check", *args, str(shifted), "--bootstrap", "0", "-q", "-k", str(K), "--format",
                                      "json", "--assume-row-ids"])
    assert result.exit_code == 0, result.output
    warnings = json.loads(result.stdout)["warnings"]
    assert any("--assume-row-ids read each held-out user as its neighbour" in w for w in warnings), warnings
    assert not any("--assume-row-ids ignored" in w or ", --assume-row-ids" in w for w in warnings), warnings

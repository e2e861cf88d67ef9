"""Loaders QA12 verify-2 A: a ``--holdout`` numbering its users 1..40 against a training log
(and stored user ids, or user rows taken as ids) numbering them 0..39 was used silently:
39 held-out users were evaluated on their neighbours' lists, recall@10 0.2564 for a true 1.0.
The holdout's ids are now held to the one shift rule the training log's are
(auditor/idmap.py ``check_holdout_shift`` over id_shifts ``evident_shift``/``fitting_shift``):
users against the training log's users, items against the item table's raw ids. QA13
accuracy F1: ids alone cannot tell a shift from churned ids beside new ones (a time split),
so it is a warning giving both readings, the holdout used as numbered, never a refusal.

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
from auditor.idmap import check_holdout_shift
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


WARNED_40 = ("1 of the 40 distinct user ids of the held-out log {shifted} (--holdout) is not among the user ids of "
             "{log}, while every id minus 1 is: the holdout was used as numbered. If its user ids are shifted by +1 "
             "against them, each held-out user was evaluated on its neighbour's list: write them as the training log "
             "numbers them (each id -1); if it is a new user (left out and counted) beside 1 user among them without "
             "held-out items, nothing is wrong")


@pytest.mark.parametrize("stored_ids", [True, False], ids=["stored-user-ids", "user-rows-as-ids"])
def test_a_holdout_with_user_ids_shifted_against_the_training_log_is_warned_and_used_as_numbered(
    tmp_path: Path, stored_ids: bool
) -> None:
    model, log = _files(tmp_path, stored_ids)
    top = _lists()
    held_users, held_items = np.arange(N_USERS), top[:, 0]
    shifted = _holdout(tmp_path / "hold_u1.parquet", held_users + 1, held_items)
    # As numbered, held-out user u + 1 is evaluated on user u + 1's list with user u's item (user 40 never trained).
    mine_shifted = float(np.mean([held_items[u] in top[u + 1] for u in range(N_USERS - 1)]))
    assert mine_shifted == pytest.approx(0.2564, abs=1e-4)

    for extra in ((), ("--assume-row-ids",)):  # one warning: the option no longer changes what the holdout gets
        code, output, report = _check(str(model), "--interactions", str(log), "--holdout", str(shifted), *extra)
        assert code == 0 and report is not None, output  # was exit 1 (refused), a legitimate time split included
        assert _recall(report) == pytest.approx(mine_shifted, abs=1e-12)
        warned = [w for w in report["warnings"] if "used as numbered" in w]  # type: ignore[union-attr]
        assert warned == [WARNED_40.format(shifted=shifted, log=log)], report["warnings"]
        assert not any("read each held-out user as its neighbour" in w for w in report["warnings"])  # type: ignore[union-attr]

    fixed = _holdout(tmp_path / "hold_u0.parquet", held_users, held_items)  # the first reading's fix
    code, output, report = _check(str(model), "--interactions", str(log), "--holdout", str(fixed))
    assert code == 0 and report is not None, output
    assert _recall(report) == pytest.approx(1.0)
    assert not any("shifted" in w for w in report["warnings"])  # type: ignore[union-attr]


def test_a_holdout_with_item_ids_shifted_against_the_item_table_is_warned(tmp_path: Path) -> None:
    """Every item held out once (the holdout covers the catalogue), numbered 1..60 against the
    table's 0..59: warned with both readings (was refused); the true numbering says nothing."""
    model, log = _files(tmp_path, stored_ids=True)
    users = np.arange(N_ITEMS) % N_USERS
    shifted = _holdout(tmp_path / "hold_i1.parquet", users, np.arange(N_ITEMS) + 1)
    code, output, report = _check(str(model), "--interactions", str(log), "--holdout", str(shifted))
    assert code == 0 and report is not None, output
    assert any(w.startswith(f"1 of the 60 distinct item ids of the held-out log {shifted} (--holdout) is not among the "
                            "raw ids of the item table's 60 rows, while every id minus 1 is: the holdout was used as "
                            "numbered. If its item ids are shifted by +1 against them, each held-out item was looked "
                            "for as its neighbour") and w.endswith("(left out and counted) beside 1 item among them "
                                                                   "without held-out interactions, nothing is wrong")
               for w in report["warnings"]), report["warnings"]  # type: ignore[union-attr]
    code, output, report = _check(str(model), "--interactions", str(log), "--holdout",
                                  str(_holdout(tmp_path / "hold_i0.parquet", users, np.arange(N_ITEMS))))
    assert code == 0 and report is not None, output
    assert not any("used as numbered" in w for w in report["warnings"])  # type: ignore[union-attr]


def test_the_rule_on_held_out_ids() -> None:
    """Warned where evident (the ids cover 90% of the known ones) and for a shift of one where
    only possible, never raised; nothing for new ids no shift explains or a wider shift that k
    new ids beside k absent ones fit."""
    known = np.arange(40)
    [plus] = check_holdout_shift(np.arange(1, 41), known, "user", "H", "K")
    assert plus.startswith("1 of the 40 distinct user ids of H is not among K, while every id minus 1 is: the holdout "
                           "was used as numbered. If its user ids are shifted by +1 against them, each held-out user "
                           "was evaluated on its neighbour's list: write them as the training log numbers them (each id "
                           "-1); if it is a new user (left out and counted) beside 1 user among them")
    [minus] = check_holdout_shift(np.arange(-1, 39), known, "user", "H", "K")
    assert "every id plus 1 is: the holdout was used as numbered. If its user ids are shifted by -1" in minus
    assert "(each id +1)" in minus
    [ten] = check_holdout_shift(np.arange(10, 50), known, "user", "H", "K")  # evident: 10 churned, 10 new
    assert ten.startswith("10 of the 40 distinct user ids of H are not among K, while every id minus 10 is")
    assert ten.endswith("if they are new users (left out and counted) beside 10 users among them without held-out "
                        "items, nothing is wrong")
    [possible] = check_holdout_shift(np.array([3, 7, 20, 40]), known, "user", "H", "K")
    assert possible.startswith("1 of the 4 distinct user ids of H is not among K, while every id minus 1 is: the holdout "
                               "was used as numbered")
    assert possible.endswith("beside 37 users among them without held-out items, nothing is wrong")
    assert check_holdout_shift(np.array([0, 7, 20, 40]), known, "user", "H", "K") == []  # 0 and 40: no shift
    assert check_holdout_shift(np.array([500, 3, 4]), known, "user", "H", "K") == []
    assert check_holdout_shift(np.array([5, 9, 40, 41, 42]), known, "user", "H", "K") == []  # new 40..42
    assert check_holdout_shift(np.arange(40), known, "user", "H", "K") == []
    assert check_holdout_shift(np.array(["a", "b"], dtype=object), known, "user", "H", "K") == []


def test_a_shifted_holdout_beside_served_lists_alone_is_warned(tmp_path: Path) -> None:
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
    json_args = ["--bootstrap", "0", "-q", "-k", str(K), "--format", "json"]
    result = CliRunner().invoke(cli, ["check", *args, str(shifted), *json_args])
    assert result.exit_code == 0, result.output  # was exit 1 (refused)
    report = json.loads(result.stdout)
    mine = float(np.mean([top[u, 0] in top[u + 1] for u in range(N_USERS - 1)]))  # as numbered
    assert report["accuracy"]["at"]["10"]["served"]["recall"] == pytest.approx(mine, abs=1e-12)
    assert WARNED_40.format(shifted=shifted, log=log).replace(f"user ids of {log}", "user ids of the training log") in \
        report["warnings"], report["warnings"]
    fixed = _holdout(tmp_path / "hold_u0.parquet", np.arange(N_USERS), top[:, 0])
    result = CliRunner().invoke(cli, ["check", *args, str(fixed), *json_args])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["accuracy"]["at"]["10"]["served"]["recall"] == pytest.approx(1.0)
    assert not any("shifted" in w for w in report["warnings"])
    # --assume-row-ids no longer changes what a holdout gets: beside lists alone it is said to be ignored
    result = CliRunner().invoke(cli, ["check", *args, str(shifted), *json_args, "--assume-row-ids"])
    assert result.exit_code == 0, result.output
    warnings = json.loads(result.stdout)["warnings"]
    assert any("used as numbered" in w for w in warnings), warnings
    assert any(w.startswith("--assume-row-ids, --bootstrap ignored: they apply to a model") for w in warnings), warnings

"""The transformer user tower's recent items are the latest by the log's time column (retrain
QA F2), ties in file order; a log with no time column uses file order and says so once."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from click.testing import CliRunner

from auditor.cli import cli
from auditor.train.data import TrainingData


def _expected(users: np.ndarray, items: np.ndarray, times: np.ndarray, n_users: int, n_items: int, k: int) -> np.ndarray:
    """Each user's k latest items by (time, row), right-aligned, padded with n_items: plain Python."""
    out = np.full((n_users, k), n_items, dtype=np.int64)
    for u in range(n_users):
        rows = sorted((t, r) for r, (uu, t) in enumerate(zip(users, times)) if uu == u)
        latest = [items[r] for _, r in rows][-k:]
        if latest:
            out[u, k - len(latest):] = latest
    return out


def test_histories_sort_by_time_with_ties_in_file_order() -> None:
    users = np.array([0, 1, 0, 0, 1, 0, 2, 0])
    items = np.array([5, 1, 4, 3, 2, 0, 6, 7])
    times = np.array([9.0, 2.0, 1.0, 5.0, 1.0, 5.0, 3.0, 0.0])  # user 0: rows 3 and 5 tie at t = 5
    data = TrainingData(users, items, 3, 8, list(range(3)), list(range(8)), {"kind": "file"}, timestamps=times)
    got = data.histories(3)
    # user 0 by time: 7 (t0), 4 (t1), 3 (t5, row 3), 0 (t5, row 5), 5 (t9) -> latest three 3, 0, 5
    assert got.tolist() == [[3, 0, 5], [8, 2, 1], [8, 8, 6]]
    assert np.array_equal(got, _expected(users, items, times, 3, 8, 3))
    assert np.array_equal(TrainingData(users, items, 3, 8, list(range(3)), list(range(8)), {}).histories(3),
                          [[3, 0, 7], [8, 1, 2], [8, 8, 6]])  # no times: file order


def _unsorted_log(path: Path, n: int = 1500) -> Path:
    rng = np.random.default_rng(1)
    u, i, t = rng.integers(0, 30, n), rng.integers(0, 100, n), rng.permutation(n) + 1_000_000
    path.write_text("user_id,item_id,timestamp\n" + "".join(f"{a},{b},{c}\n" for a, b, c in zip(u, i, t)))
    return path


def test_retrain_histories_are_latest_by_timestamp(tmp_path: Path) -> None:
    log = _unsorted_log(tmp_path / "unsorted.csv")
    out = tmp_path / "hist.pt"
    got = CliRunner().invoke(cli, ["retrain", "--data", str(log), "--user-encoder", "transformer", "--history-length",
                                   "5", "--epochs", "1", "--threads", "1", "-q", "-o", str(out)])
    assert got.exit_code == 0, got.output
    assert "no time column" not in got.stderr
    ckpt = torch.load(out, weights_only=False)
    ids, uids = [str(x) for x in ckpt["item_ids"]], [str(x) for x in ckpt["user_ids"]]
    by_time: dict[str, list[tuple[int, str]]] = defaultdict(list)
    with log.open() as fh:
        for row in csv.DictReader(fh):
            by_time[row["user_id"]].append((int(row["timestamp"]), row["item_id"]))
    hist = ckpt["user_histories"].numpy()
    for row, user in enumerate(uids):
        assert [ids[x] for x in hist[row] if x < len(ids)] == [item for _, item in sorted(by_time[user])][-5:]


def test_retrain_without_a_time_column_warns_once_of_file_order(tmp_path: Path) -> None:
    log = tmp_path / "notime.csv"
    log.write_text("user_id,item_id\n" + "".join(f"{u % 10},{u % 13}\n" for u in range(200)))
    got = CliRunner().invoke(cli, ["retrain", "--data", str(log), "--user-encoder", "transformer", "--epochs", "1",
                                   "--threads", "1", "-q", "-o", str(tmp_path / "m.pt")])
    assert got.exit_code == 0, got.output
    assert got.stderr.count("has no time column") == 1 and "last rows in file order" in got.stderr
    plain = CliRunner().invoke(cli, ["retrain", "--data", str(log), "--epochs", "1", "--threads", "1", "-q", "-o",
                                     str(tmp_path / "e.pt")])
    assert plain.exit_code == 0 and "time column" not in plain.stderr  # no history tower: nothing to say


def _file_order(users: list[str], items: list[str], k: int) -> dict[str, list[str]]:
    """Each user's last k items in file order: plain Python."""
    out: dict[str, list[str]] = defaultdict(list)
    for user, item in zip(users, items):
        out[user].append(item)
    return {user: seen[-k:] for user, seen in out.items()}


def test_an_unusable_time_column_leaves_file_order_when_only_histories_read_it(tmp_path: Path) -> None:
    """Retrain QA N1: a blank time at data row 6 (or free text from row 1) stopped a transformer run
    with advice (--split random) that could not work; it now trains on file order and says why."""
    rng = np.random.default_rng(3)
    users, items = [str(u) for u in rng.integers(0, 12, 300)], [str(i) for i in rng.integers(0, 40, 300)]
    times = [str(2_000 - r) if r != 5 else "" for r in range(300)]  # reversed: by time would flip each history
    log = tmp_path / "oneblank.csv"
    log.write_text("user_id,item_id,timestamp\n" + "".join(f"{u},{i},{t}\n" for u, i, t in zip(users, items, times)))
    out = tmp_path / "m.pt"
    got = CliRunner().invoke(cli, ["retrain", "--data", str(log), "--user-encoder", "transformer", "--history-length",
                                   "4", "--epochs", "1", "--threads", "1", "-q", "-o", str(out)])
    assert got.exit_code == 0, got.output
    assert got.stderr.count("Warning:") == 1
    assert (f"the time column 'timestamp' of {log} has no usable time at data row 6 (it is blank): each user's "
            "recent items for the transformer user tower are its last rows in file order") in got.stderr
    assert "--split" not in got.stderr
    ckpt = torch.load(out, weights_only=False)
    ids, uids = [str(x) for x in ckpt["item_ids"]], [str(x) for x in ckpt["user_ids"]]
    hist, expected = ckpt["user_histories"].numpy(), _file_order(users, items, 4)
    for row, user in enumerate(uids):
        assert [ids[x] for x in hist[row] if x < len(ids)] == expected[user]


def test_a_time_split_or_a_named_time_column_still_refuses_an_unusable_time(tmp_path: Path) -> None:
    log = tmp_path / "free.csv"
    log.write_text("user_id,item_id,timestamp\n" + "".join(f"{u % 5},{u % 7},{u}\n" for u in range(30)) + "1,2,soon\n")
    base = ["retrain", "--data", str(log), "--user-encoder", "transformer", "--epochs", "1", "--threads", "1", "-q"]
    split = CliRunner().invoke(cli, [*base, "--holdout-fraction", "0.2", "-o", str(tmp_path / "a.pt")])
    assert split.exit_code == 1
    assert "has no usable time at data row 31 (neither a number nor an ISO 8601 date and time); fix the column or " \
           "pass --split random" in split.stderr
    named = CliRunner().invoke(cli, [*base, "--time-col", "timestamp", "-o", str(tmp_path / "b.pt")])
    assert named.exit_code == 1 and "data row 31" in named.stderr and "leave out --time-col" in named.stderr
    assert "--split" not in named.stderr

"""An empty recorded holdout (retrain QA F1): the split keeps no pair when every user has one
interaction (kept for training) or every held-out interaction repeats a training pair.
``retrain`` says so and why, ``check`` audits the model and lists accuracy under Not
measured (exit 0: the printed ``Next:`` command runs), ``experiment mitigations`` refuses
up front naming the user's log."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from auditor.cli import cli
from auditor.train.data import read_interactions
from auditor.train.split import split_holdout


def _single(path: Path, n_users: int = 50) -> Path:
    path.write_text("user_id,item_id\n" + "".join(f"{u},{u % 7}\n" for u in range(n_users)))
    return path


def _repeats(path: Path, n_users: int = 60) -> Path:
    path.write_text("user_id,item_id,timestamp\n" + "".join(f"{u},{u % 9},{t}\n" for u in range(n_users) for t in (1, 2)))
    return path


def test_split_counts_single_users_and_repeats(tmp_path: Path) -> None:
    single = split_holdout(read_interactions(_single(tmp_path / "s.csv")), 0.2, "random", seed=0)
    record = single.record()
    # 50 users of one interaction each: floor(0.2*1) = 0 held out, each keeps its one item
    assert (record["n_holdout_pairs"], record["n_holdout_interactions"], record["n_users_one_interaction"]) == (0, 0, 50)
    repeats = split_holdout(read_interactions(_repeats(tmp_path / "r.csv"), times="split"), 0.2, "time", seed=0)
    record = repeats.record()
    # 60 users x 2 rows of one item: one held out each (n = 2), each repeats the training pair
    assert (record["n_holdout_pairs"], record["n_holdout_interactions"], record["n_repeats_dropped"],
            record["n_users_one_interaction"]) == (0, 60, 60, 0)


def _retrain(data: Path, out: Path) -> tuple[int, str, str]:
    got = CliRunner().invoke(cli, ["retrain", "--data", str(data), "--holdout-fraction", "0.2", "--epochs", "1",
                                   "--threads", "1", "-o", str(out)])
    return got.exit_code, got.stdout, got.stderr


def test_retrain_says_empty_and_its_next_step_runs(tmp_path: Path) -> None:
    for data, why in ((_single(tmp_path / "single.csv"), r"50 users with a single interaction keep it for training"),
                      (_repeats(tmp_path / "repeats.csv"), r"all 60 held-out interactions repeat one of the user's")):
        out = tmp_path / f"{data.stem}.pt"
        code, stdout, stderr = _retrain(data, out)
        assert code == 0, stderr
        assert f"Warning: the holdout of {data} came out empty" in stderr and why in stderr
        assert "measures accuracy on them" not in stdout and "lists accuracy under Not measured" in stdout
        next_line = [line for line in stdout.splitlines() if line.startswith("Next: ")][-1]
        args = shlex.split(next_line[len("Next: "):])[1:]
        report = tmp_path / f"{data.stem}.json"
        got = CliRunner().invoke(cli, [*args, "--bootstrap", "0", "--no-probes", "-q", "--json", str(report)])
        assert got.exit_code == 0, got.output
        audit = json.loads(report.read_text())
        assert "came out empty" not in audit["not_measured"]["accuracy"]
        assert why in audit["not_measured"]["accuracy"] and "kept no (user, item) pair" in audit["not_measured"]["accuracy"]
        # everything else is audited: rho over the 7 / 9 items of the log
        assert np.isfinite(audit["frequency_norm"]["spearman"])


def test_experiment_mitigations_refuses_before_training_naming_the_log(tmp_path: Path) -> None:
    data = _single(tmp_path / "single.csv")
    got = CliRunner().invoke(cli, ["experiment", "mitigations", "--data", str(data), "--epochs", "1", "--seeds", "1",
                                   "--threads", "1", "-q", "-o", str(tmp_path / "mit")])
    assert got.exit_code == 1
    assert f"on {data} (random split, seed 0)" in got.stderr and "50 users with a single interaction" in got.stderr
    assert "popaudit-mitigation" not in got.output and not (tmp_path / "mit").exists()

"""``popaudit experiment`` through click's CliRunner."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.cli.experiment import command, name_first

SMALL = ["--n-users", "200", "--n-items", "200", "--n-interactions", "6000", "--epochs", "2", "--bootstrap", "100"]


def test_conditions_subset_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "cond"
    res = CliRunner().invoke(
        cli, ["experiment", "conditions", *SMALL, "--seeds", "1", "--settings", "reference,adam,low-lr", "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["angle_histograms.png", "results.json", "results.md", "rho_vs_lr.png"]
    doc = json.loads((out / "results.json").read_text())
    assert [r["name"] for r in doc["rows"]] == ["reference", "adam", "low-lr"]
    assert doc["seeds"] == [0] and doc["sizes"]["n_items"] == 200
    ref, adam = doc["rows"][0]["runs"][0], doc["rows"][1]["runs"][0]
    assert ref["share_90pm1"] >= 0.99 > adam["share_90pm1"]
    # results.md holds the Markdown table; the console shows it as a rich table, not Markdown
    assert "| setting | violates |" in (out / "results.md").read_text() and f"Wrote {out / 'results.md'}" in res.output
    assert "┃ setting" in res.stdout and "┃ violates" in res.stdout and "|---" not in res.stdout


def test_lr_sweep_with_given_rates_and_seeds(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        cli, ["experiment", "lr-sweep", *SMALL, "--lrs", "0.1,10", "--seeds", "2", "--seed", "4", "-o", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["experiment"] == "lr-sweep" and doc["seeds"] == [4, 5]
    assert [r["config"]["lr"] for r in doc["rows"]] == [0.1, 10.0]
    assert [run["seed"] for run in doc["rows"][0]["runs"]] == [4, 5]
    assert (tmp_path / "rho_vs_lr.png").stat().st_size > 0


def test_errors_and_usage(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["experiment", "lr-sweep", "--lrs", "0.1,fast", "-o", str(tmp_path)])
    # QA retrain F6: a bad list option is a usage error (exit 2), as the same value of a one-value option
    assert res.exit_code == 2 and "Error: Invalid value for '--lrs': 'fast' is not a number" in res.output
    res = runner.invoke(cli, ["experiment", "conditions", "--settings", "reference,rmsprop", "-o", str(tmp_path)])
    assert res.exit_code == 2 and "Invalid value for '--settings': unknown 'rmsprop'; choose from reference," in res.output
    assert runner.invoke(cli, ["experiment", "ablation", "-o", str(tmp_path)]).exit_code == 2
    for alpha, scoring in (("1", "dot"), ("0", "cosine")):  # their alpha column stayed empty, with no word
        res = runner.invoke(cli, ["experiment", "mitigations", "--alpha", "0.5", "--alpha", alpha, "-o", str(tmp_path)])
        assert res.exit_code == 1 and (f"Error: --alpha {alpha} is {scoring} serving, which the table holds already: "
                                       "pass alphas strictly between 0 and 1") in " ".join(res.output.split())
    assert runner.invoke(cli, ["experiment", "conditions"]).exit_code == 2  # -o is required
    help_text = runner.invoke(cli, ["experiment", "--help"]).output
    for word in ("conditions", "lr-sweep", "mitigations", "NAME --help"):
        assert word in help_text


# The options of each grid, and those it must not list (another grid's).
OWN = {
    "conditions": ({"--settings", "--lr", "--bootstrap"}, {"--lrs", "--mitigations", "--holdout-fraction", "--split", "--alpha"}),
    "lr-sweep": ({"--lrs", "--bootstrap"}, {"--settings", "--lr", "--mitigations", "--holdout-fraction", "--split", "--alpha"}),
    "mitigations": ({"--mitigations", "--lr", "--holdout-fraction", "--split", "--alpha"}, {"--settings", "--lrs", "--bootstrap"}),
}
SHARED = {"--output", "--seeds", "--seed", "--data", "--data-format", "--user-col", "--item-col", "--epochs",
          "--batch-size", "--dim", "--k", "--jobs", "--threads", "--debug"}


@pytest.mark.parametrize("name", sorted(OWN))
def test_each_grid_lists_only_its_own_options(name: str) -> None:
    result = CliRunner().invoke(cli, ["experiment", name, "--help"])
    assert result.exit_code == 0, result.output
    listed = set(re.findall(r"^\s+(?:-\w, )?(--[\w-]+)", result.output, re.M))
    own, foreign = OWN[name]
    assert own | SHARED <= listed and not foreign & listed, sorted(listed)
    assert "--plugin" not in listed  # F2: refused there (a grid runs no plugin hook), so not offered


@pytest.mark.parametrize("name", sorted(OWN))
def test_another_grids_option_is_refused_by_name(name: str, tmp_path: Path) -> None:
    values = {"--settings": "reference", "--lrs": "1", "--mitigations": "reference", "--lr": "1",
              "--bootstrap": "100", "--holdout-fraction": "0.1", "--split": "random", "--alpha": "0.5"}
    for flag in sorted(OWN[name][1]):
        res = CliRunner().invoke(cli, ["experiment", name, flag, values[flag], "-o", str(tmp_path / "o")])
        owners = " and ".join(repr(g) for g in sorted(OWN, key=list(OWN).index) if flag in OWN[g][0])
        assert res.exit_code == 2 and f"{flag} applies to {owners} only, not {name!r}" in res.output, res.output
    assert not (tmp_path / "o").exists()


def test_options_may_come_before_the_name(tmp_path: Path) -> None:
    """As when experiment was one command: ``experiment -o DIR --seeds 1 lr-sweep ...``."""
    out = tmp_path / "lr-sweep"  # an option value that is also a grid's name stays a value
    res = CliRunner().invoke(cli, ["experiment", "-o", str(out), "--seeds", "1", "lr-sweep", "--n-users", "50", "--n-items", "40",
                                   "--n-interactions", "1000", "--epochs", "1", "--bootstrap", "0", "--lrs", "1"])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "results.json").read_text())
    assert doc["experiment"] == "lr-sweep" and doc["seeds"] == [0]
    assert name_first(["-o", "lr-sweep", "-j", "2", "conditions"], command.commands) == [
        "conditions", "-o", "lr-sweep", "-j", "2"]
    assert name_first(["--debug", "conditions", "-o", "x"], command.commands) == ["conditions", "--debug", "-o", "x"]
    assert name_first(["ablation", "conditions"], command.commands) == ["ablation", "conditions"]


def test_quiet_prints_nothing_but_writes_the_results(tmp_path: Path) -> None:
    """-q: no progress and no table (the files hold them), as README's progress paragraph says."""
    out = tmp_path / "lr"
    res = CliRunner().invoke(cli, ["experiment", "lr-sweep", "-q", "-o", str(out), "--seeds", "1", "--n-users", "50",
                                   "--n-items", "40", "--n-interactions", "1000", "--epochs", "1", "--bootstrap", "0",
                                   "--lrs", "1"])
    assert res.exit_code == 0, res.output
    assert res.stdout == "" and res.stderr == ""
    assert json.loads((out / "results.json").read_text())["experiment"] == "lr-sweep"


# ------------------------------------------------------------------ on a user's own log


def _recbole_log(path: Path, n_users: int = 40, n_items: int = 60, per_user: int = 15, seed: int = 0) -> tuple[int, int, int]:
    """A RecBole .inter log with Zipf-like item popularity; returns (users, items, interactions)
    as counted here, independently of popaudit."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, n_items + 1)
    lines = ["user_id:token\titem_id:token\trating:float\ttimestamp:float"]
    users, items = set(), set()
    t = 880_000_000
    for u in range(n_users):
        for i in rng.choice(n_items, size=per_user, replace=False, p=weights / weights.sum()):
            lines.append(f"u{u}\ti{i}\t4\t{t}")
            users.add(u)
            items.add(int(i))
            t += 1
    path.write_text("\n".join(lines) + "\n")
    return len(users), len(items), n_users * per_user


FAST = ["--epochs", "2", "--batch-size", "64", "--bootstrap", "100", "-k", "10", "--dim", "8"]


def test_conditions_on_a_recbole_log_states_the_data_and_one_seed_values(tmp_path: Path) -> None:
    log = tmp_path / "mine.inter"
    n_users, n_items, n_inter = _recbole_log(log)
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["experiment", "conditions", "--data", str(log), *FAST, "--seeds", "1", "--seed", "3",
                                   "--settings", "reference,low-lr", "-o", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "results.json").read_text())
    assert doc["data"] == {"kind": "file", "path": str(log), "format": "recbole", "user_col": "user_id",
                           "item_col": "item_id", "n_interactions": n_inter, "n_users": n_users, "n_items": n_items}
    assert [doc["sizes"][k] for k in ("n_users", "n_items", "n_interactions", "zipf")] == [None] * 4  # QA accuracy F3
    md = (out / "results.md").read_text()
    assert (f"Data: {log} (recbole, columns user_id/item_id): {n_users} users, {n_items} items, {n_inter} interactions, "
            "the same interactions for every seed. Seed 3 (one run per setting); 2 epochs per run.") in md
    rows = [line for line in md.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == 2 and all(" ± " not in row for row in rows)  # one seed: the value alone
    rho = doc["rows"][0]["runs"][0]["spearman"]
    assert f"| {rho:.3f} |" in rows[0]
    assert "┃ setting" in res.stdout and f"{n_items} items" in res.stdout and " ± " not in res.stdout


@pytest.mark.slow
def test_parallel_runs_equal_serial_runs(tmp_path: Path) -> None:
    log = tmp_path / "u.data"
    rng = np.random.default_rng(1)
    rows = [f"{u}\t{i}\t4\t{880000000 + n}" for n, (u, i) in
            enumerate(zip(rng.integers(1, 30, 500), rng.zipf(1.5, 500) % 50 + 1))]
    log.write_text("\n".join(rows) + "\n")
    docs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"j{jobs}"
        res = CliRunner().invoke(cli, ["experiment", "conditions", "--data", str(log), *FAST, "--seeds", "2",
                                       "--settings", "reference,weight-decay,mlp", "-j", jobs, "-o", str(out)])
        assert res.exit_code == 0, res.output
        docs.append(json.loads((out / "results.json").read_text()))
    assert docs[0]["rows"] == docs[1]["rows"] and docs[0]["data"] == docs[1]["data"]
    assert [run["seed"] for run in docs[1]["rows"][2]["runs"]] == [0, 1]
    assert " ± " in (tmp_path / "j2" / "results.md").read_text()  # two seeds: mean ± std


def test_data_options_belong_to_their_kind_of_data(tmp_path: Path) -> None:
    runner = CliRunner()
    log = tmp_path / "mine.inter"
    _recbole_log(log)
    res = runner.invoke(cli, ["experiment", "conditions", "--data", str(log), "--n-users", "5", "-o", str(tmp_path / "o")])
    assert res.exit_code == 2 and "--n-users applies to synthetic data" in res.output
    res = runner.invoke(cli, ["experiment", "lr-sweep", "--user-col", "uid", "-o", str(tmp_path / "o")])
    assert res.exit_code == 2 and "--user-col applies to a --data PATH log" in res.output
    res = runner.invoke(cli, ["experiment", "conditions", "--holdout-fraction", "0.1", "-o", str(tmp_path / "o")])
    assert res.exit_code == 2 and "--holdout-fraction applies to 'mitigations' only" in res.output
    res = runner.invoke(cli, ["experiment", "conditions", "--data", str(tmp_path / "none.csv"), "-o", str(tmp_path / "o")])
    assert res.exit_code == 1 and "none.csv" in res.output
    help_text = runner.invoke(cli, ["experiment", "conditions", "--help"]).output
    for option in ("--data", "--data-format", "--user-col", "--item-col", "--jobs", "--threads", "asymmetric"):
        assert option in help_text, option

"""``popaudit retrain`` through click's CliRunner."""

from __future__ import annotations

from pathlib import Path

import torch
from click.testing import CliRunner

from auditor.cli import cli

SMALL = ["--n-users", "100", "--n-items", "120", "--n-interactions", "3000", "--batch-size", "128"]


def test_retrain_writes_a_checkpoint_and_names_the_next_command(tmp_path: Path) -> None:
    out = tmp_path / "m.pt"
    res = CliRunner().invoke(cli, ["retrain", *SMALL, "--epochs", "2", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert f"popaudit check {out}" in res.output
    assert "Spearman" in res.output and "100 users, 120 items, 3000 interactions" in res.output
    ck = torch.load(out, weights_only=True)
    assert ck["popaudit_checkpoint"] == 1
    cfg = ck["config"]
    assert cfg["lr"] == 10.0 and cfg["optimizer"] == "sgd" and cfg["epochs"] == 2 and cfg["batch_size"] == 128
    assert cfg["data"] == {
        "kind": "synthetic", "n_users": 100, "n_items": 120, "n_interactions": 3000, "zipf": 1.0, "seed": 0,
        "n_topics": 10, "affinity": 0.8,
    }
    assert len(ck["trace"]) == 2


def test_every_option_is_recorded(tmp_path: Path) -> None:
    out = tmp_path / "m.pt"
    args = [
        "retrain", *SMALL, "--epochs", "1", "--optimizer", "momentum", "--lr", "0.5", "--momentum", "0.7",
        "--weight-decay", "0.001", "--item-encoder", "mlp", "--user-encoder", "transformer",
        "--user-optimizer", "adamw", "--user-lr", "0.002", "--loss", "infonce-dot", "--temperature", "0.2",
        "--dim", "8", "--seed", "5", "--init-std", "0.05", "--zipf", "0.8", "--hidden-dim", "16",
        "--history-length", "4", "-o", str(out),
    ]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    ck = torch.load(out, weights_only=True)
    expected = {
        "optimizer": "momentum", "lr": 0.5, "momentum": 0.7, "weight_decay": 0.001, "item_encoder": "mlp",
        "user_encoder": "transformer", "user_optimizer": "adamw", "user_lr": 0.002, "loss": "infonce-dot",
        "temperature": 0.2, "dim": 8, "seed": 5, "init_std": 0.05, "hidden_dim": 16, "history_length": 4,
    }
    for key, value in expected.items():
        assert ck["config"][key] == value, key
    assert ck["config"]["data"]["zipf"] == 0.8
    assert ck["user_histories"].shape == (100, 4) and ck["item_embeddings"].shape == (120, 8)


def test_retrain_on_a_movielens_file_keeps_raw_ids(tmp_path: Path) -> None:
    log = tmp_path / "u.data"
    rows = [f"{u}\t{i}\t4\t{880000000 + n}" for n, (u, i) in enumerate((u, i) for u in (3, 9, 27) for i in (50, 7, 1000))]
    log.write_text("\n".join(rows) + "\n")
    out = tmp_path / "ml.pt"
    res = CliRunner().invoke(cli, ["retrain", "--data", str(log), "--epochs", "1", "--batch-size", "4", "-o", str(out)])
    assert res.exit_code == 0, res.output
    ck = torch.load(out, weights_only=True)
    assert ck["item_ids"] == [7, 50, 1000] and ck["user_ids"] == [3, 9, 27]
    assert ck["item_frequencies"].tolist() == [3, 3, 3]
    assert ck["config"]["data"]["kind"] == "file" and ck["config"]["data"]["path"] == str(log)


def test_errors_and_usage(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["retrain", "--data", str(tmp_path / "missing.csv"), "-o", str(tmp_path / "x.pt")])
    assert res.exit_code == 1 and "Error:" in res.output and "missing.csv" in res.output
    assert not (tmp_path / "x.pt").exists()
    res = runner.invoke(cli, ["retrain", "--optimizer", "rmsprop"])
    assert res.exit_code == 2
    res = runner.invoke(cli, ["retrain", *SMALL, "--loss", "infonce-dot", "--lr", "10000", "--epochs", "2", "-o", str(tmp_path / "y.pt")])
    assert res.exit_code == 1 and "lower --lr" in res.output
    assert not (tmp_path / "y.pt").exists()


def test_help_lists_the_contract_options() -> None:
    res = CliRunner().invoke(cli, ["retrain", "--help"])
    assert res.exit_code == 0
    for option in (
        "--data", "--data-format", "--optimizer", "--lr", "--momentum", "--weight-decay", "--item-encoder",
        "--user-encoder", "--user-optimizer", "--user-lr", "--loss", "--temperature", "--dim", "--epochs",
        "--batch-size", "--seed", "--output", "--n-users", "--n-items", "--n-interactions", "--zipf", "--init-std",
    ):
        assert option in res.output, option


def test_quiet_prints_nothing_but_writes_the_checkpoint(tmp_path: Path) -> None:
    """-q, as README's progress paragraph says of every command: no progress, no summary."""
    out = tmp_path / "m.pt"
    res = CliRunner().invoke(cli, ["retrain", *SMALL, "--epochs", "1", "-q", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert res.stdout == "" and res.stderr == ""
    assert torch.load(out, weights_only=True)["popaudit_checkpoint"] == 1


def test_the_pointwise_loss_records_no_temperature(tmp_path: Path) -> None:
    """QA retrain F5: the cosine loss has no softmax, so --temperature changed nothing yet was
    recorded; now a checkpoint of it records none (and --temperature with it is refused)."""
    import torch

    base = ["retrain", "--n-users", "20", "--n-items", "10", "--n-interactions", "100", "--epochs", "1", "-q"]
    for loss, recorded in (("cosine", None), ("infonce-cos", 0.1)):
        out = tmp_path / f"{loss}.pt"
        assert CliRunner().invoke(cli, [*base, "--loss", loss, "-o", str(out)]).exit_code == 0
        assert torch.load(out, weights_only=True)["config"].get("temperature") == recorded
    refused = CliRunner().invoke(cli, [*base, "--loss", "cosine", "--temperature", "10", "-o", str(tmp_path / "t.pt")])
    assert refused.exit_code == 2 and "--loss cosine is pointwise and has no temperature" in refused.output
    assert not (tmp_path / "t.pt").exists()

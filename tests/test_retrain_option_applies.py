"""Training options given where they do nothing are usage errors naming the option and why
(retrain QA F4), from one table (``auditor.train.OPTION_APPLIES``); where they apply they
are used."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli
from auditor.train import OPTION_APPLIES, inapplicable

SMALL = ["--n-users", "20", "--n-items", "30", "--n-interactions", "300", "--epochs", "1", "--threads", "1", "-q"]
BASE = {"loss": "infonce-cos", "optimizer": "sgd", "user_optimizer": None, "item_encoder": "embedding",
        "user_encoder": "embedding"}


@pytest.mark.parametrize(("option", "changes", "applies"), [
    ("momentum", {}, False), ("momentum", {"optimizer": "adam"}, False), ("momentum", {"optimizer": "momentum"}, True),
    ("momentum", {"user_optimizer": "momentum"}, True), ("momentum", {"optimizer": "momentum", "user_optimizer": "adam"}, True),
    ("hidden_dim", {}, False), ("hidden_dim", {"item_encoder": "mlp"}, True), ("hidden_dim", {"user_encoder": "mlp"}, True),
    ("hidden_dim", {"item_encoder": "embedding-linear"}, True), ("hidden_dim", {"user_encoder": "transformer"}, True),
    ("hidden_dim", {"item_encoder": "dense-linear"}, False), ("history_length", {"user_encoder": "mlp"}, False),
    ("history_length", {"user_encoder": "transformer"}, True), ("temperature", {"loss": "cosine"}, False),
    ("temperature", {"loss": "infonce-dot"}, True), ("logq", {"loss": "cosine"}, False), ("lr", {}, True),
])
def test_table(option: str, changes: dict[str, str], applies: bool) -> None:
    assert (inapplicable(option, {**BASE, **changes}) is None) is applies


@pytest.mark.parametrize(("args", "message"), [
    (["--momentum", "0.9"], "--momentum is the momentum of the 'momentum' optimizer, which neither tower uses "
                            "(--optimizer sgd, --user-optimizer sgd): pass --optimizer momentum or --user-optimizer momentum"),
    (["--optimizer", "adam", "--momentum", "0.9"], "(--optimizer adam, --user-optimizer adam)"),
    (["--hidden-dim", "7"], "--hidden-dim is the hidden width of the embedding-linear and mlp item towers and the mlp "
                            "and transformer user towers; --item-encoder embedding and --user-encoder embedding have no hidden layer"),
    (["--history-length", "5", "--user-encoder", "mlp"], "--history-length is the number of recent items the transformer "
                                                         "user tower reads; --user-encoder mlp reads none"),
])
def test_inapplicable_options_are_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    got = CliRunner().invoke(cli, ["retrain", *SMALL, *args, "-o", str(tmp_path / "m.pt")])
    assert got.exit_code == 2 and message in got.stderr
    assert not (tmp_path / "m.pt").exists()


def test_applicable_options_are_used(tmp_path: Path) -> None:
    out = tmp_path / "m.pt"
    got = CliRunner().invoke(cli, ["retrain", *SMALL, "--user-optimizer", "momentum", "--momentum", "0.5",
                                   "--user-encoder", "mlp", "--hidden-dim", "12", "-o", str(out)])
    assert got.exit_code == 0, got.output
    ck = torch.load(out, weights_only=False)
    assert ck["config"]["user_momentum"] == 0.5 and ck["config"]["momentum"] == 0.0 and ck["config"]["hidden_dim"] == 12
    assert set(OPTION_APPLIES) == {"temperature", "logq", "momentum", "hidden_dim", "history_length", "on_alert"}

"""F4: a printed ``Next:`` command runs as printed, also for a model whose name starts with '-'
(quoting alone leaves it an option word: ``check -dash.pt`` was "No such option '-d'")."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.cli._next import check_command, path_word


@pytest.mark.parametrize(("name", "printed"), [
    ("-dash.pt", "popaudit check ./-dash.pt"),
    ("-my model (v2).pt", "popaudit check './-my model (v2).pt'"),
    ("sub/-x.pt", "popaudit check sub/-x.pt"),
    ("/abs/-x.pt", "popaudit check /abs/-x.pt"),
    ("model.pt", "popaudit check model.pt"),
])
def test_check_command_never_starts_a_path_with_a_dash(name: str, printed: str) -> None:
    assert check_command(Path(name), {}) == printed
    assert not path_word(name).startswith("-")


def test_retrains_next_command_runs_as_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    trained = runner.invoke(cli, ["retrain", "--n-users", "30", "--n-items", "20", "--n-interactions", "200",
                                  "--epochs", "1", "--threads", "1", "-o", "-dash.pt"])
    assert trained.exit_code == 0, trained.output
    line = next(text for text in trained.stdout.splitlines() if text.startswith("Next: "))
    assert line == "Next: popaudit check ./-dash.pt"  # before: popaudit check -dash.pt (exit 2)
    words = shlex.split(line.removeprefix("Next: "))
    checked = runner.invoke(cli, [*words[1:], "--no-probes", "--bootstrap", "0", "-q"])
    assert checked.exit_code in (0, 3), checked.output  # it ran: an audit, not a usage error

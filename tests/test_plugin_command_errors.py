"""Plugin commands (``popaudit_cli_commands``) fail as hooks do: one ``Error:`` line naming
the plugin and the command, the traceback only with ``--debug``; ``common_options`` passes
``plugins`` only to a command that takes it (QA plugins F3)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli import cli

COMMANDS = '''
import click
from auditor.cli._common import common_options
from auditor.errors import InputError
from auditor.hookspecs import hookimpl


@click.command("qahello")
@common_options
def qahello():
    click.echo("hello")


@click.command("qaboom")
@common_options
def qaboom(plugins):
    raise ValueError("qa command failed")


@click.command("qabad")
@common_options
def qabad(**options):
    raise InputError(f"bad input ({len(options['plugins'])} plugin)")


@click.command("qabare")
def qabare():
    raise KeyError("no common_options")


@hookimpl
def popaudit_cli_commands():
    return [qahello, qaboom, qabad, qabare]
'''


@pytest.fixture()
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "cmds.py").write_text(COMMANDS)
    monkeypatch.chdir(tmp_path)
    return "cmds.py"


def _run(*args: str) -> tuple[int, str, str, BaseException | None]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr, result.exception


def test_a_command_without_a_plugins_parameter_runs(plugin: str) -> None:
    code, out, err, _ = _run("qahello", "--plugin", plugin)
    assert (code, out, err) == (0, "hello\n", "")  # before: TypeError: unexpected keyword argument 'plugins'


def test_a_plugin_command_that_raises_is_one_error_line(plugin: str) -> None:
    code, out, err, _ = _run("qaboom", "--plugin", plugin)
    assert code == 1 and out == ""
    assert err == "Error: plugin 'file:cmds.py' failed in command qaboom: ValueError: qa command failed\n"
    code, _, _, exc = _run("qaboom", "--plugin", plugin, "--debug")
    assert code == 1 and isinstance(exc, ValueError)  # --debug: the traceback


def test_a_plugin_commands_audit_error_names_the_plugin_and_keeps_its_code(plugin: str) -> None:
    code, _, err, _ = _run("qabad", "--plugin", plugin)
    assert code == 1 and err == "Error: plugin 'file:cmds.py' (command qabad): bad input (1 plugin)\n"


def test_a_command_without_common_options_is_named_too(plugin: str) -> None:
    from auditor.cli._group import plugin_commands

    commands = plugin_commands([Path(plugin)])
    result = CliRunner().invoke(commands["qabare"], [])
    assert result.exit_code == 1
    assert result.stderr == "Error: plugin 'file:cmds.py' failed in command qabare: KeyError: 'no common_options'\n"

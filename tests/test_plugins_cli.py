"""``popaudit plugins`` and plugin-provided commands, through click's CliRunner."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from click.testing import CliRunner

from auditor.cli import cli
from auditor.plugins import BUILTIN_PLUGINS, hook_names

ROOT = Path(__file__).resolve().parents[1]
FEATURE_TOWER = ROOT / "plugins" / "feature_tower.py"

COMMAND_PLUGIN = """
import click
from auditor.cli._common import common_options
from auditor.hookspecs import hookimpl

@click.command("hello")
@click.argument("who")
@common_options
def hello(who, plugins):
    \"\"\"Say hello (a plugin command).\"\"\"
    click.echo(f"hello {who} from {len(plugins)} plugin file(s)")

@hookimpl
def popaudit_cli_commands():
    return [hello]
"""


def test_plugins_lists_builtins_as_json() -> None:
    result = CliRunner().invoke(cli, ["plugins", "--json", "--no-entry-points"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["hooks"] == list(hook_names())
    assert [p["module"] for p in payload["plugins"]] == list(BUILTIN_PLUGINS)
    assert all(p["builtin"] and p["kind"] == "builtin" for p in payload["plugins"])
    loading = payload["plugins"][0]
    assert loading["name"] == "builtin:loading" and loading["hooks"] == ["popaudit_load_model"]


def test_plugins_with_feature_tower_file() -> None:
    result = CliRunner().invoke(cli, ["plugins", "--plugin", str(FEATURE_TOWER), "--json"])
    assert result.exit_code == 0, result.output
    plugins = {p["name"]: p for p in json.loads(result.output)["plugins"]}
    mine = plugins[f"file:{FEATURE_TOWER}"]
    assert mine["kind"] == "file" and mine["builtin"] is False
    assert mine["path"] == str(FEATURE_TOWER)
    assert mine["hooks"] == ["popaudit_condition_evidence", "popaudit_load_model"]


def test_plugins_table_marks_builtins() -> None:
    result = CliRunner().invoke(cli, ["plugins", "--plugin", str(FEATURE_TOWER)])
    assert result.exit_code == 0, result.output
    assert "builtin:loading" in result.output and "built-in" in result.output
    assert "popaudit_condition_evidence" in result.output and "file" in result.output


def test_broken_plugin_is_an_error_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "typo.py"
    bad.write_text("from auditor.hookspecs import hookimpl\n@hookimpl\ndef popaudit_load_modle(path, options):\n    pass\n")
    result = CliRunner().invoke(cli, ["plugins", "--plugin", str(bad)])
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: plugin 'file:{bad}' defines popaudit_load_modle")
    assert "did you mean popaudit_load_model?" in result.output
    assert "Traceback" not in result.output


def test_plugin_command_is_found_from_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "hello_plugin.py"
    path.write_text(textwrap.dedent(COMMAND_PLUGIN))
    runner = CliRunner()
    result = runner.invoke(cli, ["hello", "world", "--plugin", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output == "hello world from 1 plugin file(s)\n"
    # Its help, and the group's help, show it when the file is named.
    result = runner.invoke(cli, ["hello", "--plugin", str(path), "--help"])
    assert result.exit_code == 0 and "Say hello (a plugin command)." in result.output
    # Without the file the command does not exist: click's usage error.
    result = runner.invoke(cli, ["hello", "world"])
    assert result.exit_code == 2 and "No such command 'hello'" in result.output


def test_plugin_command_clashing_with_builtin_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "clash.py"
    path.write_text(textwrap.dedent(COMMAND_PLUGIN).replace('@click.command("hello")', '@click.command("plugins")'))
    result = CliRunner().invoke(cli, ["nosuch", "--plugin", str(path)])
    assert result.exit_code == 1
    assert f"Error: plugin 'file:{path}' adds command 'plugins', which is a built-in popaudit command" in result.output

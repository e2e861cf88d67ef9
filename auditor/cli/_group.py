"""The ``popaudit`` click group: built-in commands plus commands added by plugins.

Plugin commands (hook ``popaudit_cli_commands``) come from installed entry points and
from the ``--plugin PATH`` files named anywhere on the command line, read before click
parses it. The plugin manager is built only when a name is not a built-in command or
the command list is asked for (``popaudit --help``) while a plugin is installed or
named, and without the built-in plugin modules (they add no commands): ``popaudit
--help`` imports only installed plugins (none, and no manager, when the entry-point
group is empty), and ``popaudit check`` none for this (its own manager comes later, in
the command).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from auditor.errors import PluginError
from auditor.plugin_names import installed_entry_points

_ARGV_KEY = "popaudit.plugin_paths"
_COMMANDS_KEY = "popaudit.plugin_commands"
ISOLATED = frozenset({"check", "batch", "mitigate"})
"""Built-in commands that check plugin command names themselves, in the child process
their plugin code runs in (auditor/cli/_isolation.py): no plugin is imported here for them."""


def plugin_paths_from_argv(argv: Iterable[str]) -> tuple[Path, ...]:
    """``--plugin PATH`` / ``--plugin=PATH`` values in a raw command line, in order.

    The CLI reads these before click parses, so plugin commands can be found.
    """
    args = list(argv)
    paths: list[Path] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        if arg == "--plugin" and i + 1 < len(args):
            paths.append(Path(args[i + 1]))
            i += 2
            continue
        if arg.startswith("--plugin="):
            paths.append(Path(arg.split("=", 1)[1]))
        i += 1
    return tuple(paths)


def refuses_plugins(command: click.Command) -> bool:
    """Whether ``command`` (every subcommand of a group) refuses ``--plugin``
    (``_training.refuse_plugins``): no plugin file is imported for it, so the refusal is
    the same usage error whatever the file holds, or when it does not exist."""
    group = command.commands.values() if isinstance(command, click.Group) else ()
    return all(refuses_plugins(sub) for sub in group) if group else any(
        getattr(getattr(param, "callback", None), "refuses_plugins", False) for param in command.params)


class PluginGroup(click.Group):
    """A click group whose command list also holds the plugins' commands."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_ARGV_KEY] = plugin_paths_from_argv(args)
        return super().parse_args(ctx, args)

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = set(super().list_commands(ctx))
        try:
            names |= set(self._plugin_commands(ctx))
        except PluginError:
            pass  # listing stays usable; running a command reports the broken plugin
        return sorted(names)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        try:
            if command is not None and cmd_name in ISOLATED:
                paths = ctx.meta.get(_ARGV_KEY, ())
                if paths:  # the plugin manager (and numpy with it) loads only when a plugin is named
                    from auditor.plugins.manager import check_plugin_file

                    for path in paths:  # said before click's own path checks
                        check_plugin_file(path)
                return command
            if command is not None and refuses_plugins(command):
                return command  # click's callback refuses --plugin, before any plugin code runs
            # Asked for built-ins too: a plugin adding a command named like one (check) is an
            # error, not silently shadowed. Plugins load anyway for the command that runs.
            plugin = self._plugin_commands(ctx).get(cmd_name)
            return command if command is not None else plugin
        except PluginError as exc:
            # click cannot carry our exit code from here; fail like common_options does.
            from auditor.cli._common import fail

            fail(str(exc), exc.exit_code)
            return None

    def _plugin_commands(self, ctx: click.Context) -> dict[str, click.Command]:
        cached: dict[str, click.Command] | None = ctx.meta.get(_COMMANDS_KEY)
        if cached is not None:
            return cached
        paths = ctx.meta.get(_ARGV_KEY, ())
        if paths or installed_entry_points():
            commands = plugin_commands(paths, builtin_names=self.commands)
        else:  # no plugin can add a command: no manager (pluggy, numpy) is built to say so
            commands = {}
        ctx.meta[_COMMANDS_KEY] = commands
        return commands


def plugin_commands(plugin_paths: Any, *, builtin_names: Any = ()) -> dict[str, click.Command]:
    """Commands from installed plugins and ``plugin_paths``, by name.

    A command that is not a ``click.Command``, or whose name is taken by a built-in
    command or another plugin, is a PluginError naming the plugin.
    """
    from auditor.plugins import get_plugin_manager, hook_results
    from auditor.plugins.prints import prints_to_stderr

    with prints_to_stderr():  # plugin files are imported here: their prints must not reach stdout
        pm = get_plugin_manager(plugin_paths, builtins=False)
        results = hook_results(pm, "popaudit_cli_commands")
    commands: dict[str, click.Command] = {}
    owners: dict[str, str] = {}
    for result in results:
        if not isinstance(result.value, (list, tuple)):
            raise PluginError(
                f"plugin {result.plugin!r} returned {type(result.value).__name__} from hook "
                "popaudit_cli_commands; expected a list of click commands"
            )
        for command in result.value:
            if not isinstance(command, click.Command) or not command.name:
                raise PluginError(
                    f"plugin {result.plugin!r} returned {command!r} from hook "
                    "popaudit_cli_commands, which is not a named click command"
                )
            if command.name in builtin_names:
                raise PluginError(
                    f"plugin {result.plugin!r} adds command {command.name!r}, "
                    "which is a built-in popaudit command"
                )
            if command.name in owners:
                raise PluginError(
                    f"command {command.name!r} is added by both plugin {owners[command.name]!r} "
                    f"and plugin {result.plugin!r}"
                )
            owners[command.name] = result.plugin
            commands[command.name] = _owned(command, result.plugin)
    return commands


def _owned(command: click.Command, plugin: str) -> click.Command:
    """``command`` with its failures named after ``plugin``: one ``Error:`` line, decorated
    with ``common_options`` or not (:func:`~auditor.cli._common.command_failed`; ``--debug``
    where the command has it: the traceback). Wrapped once, however often it is listed."""
    callback = command.callback
    if callback is None or getattr(callback, "popaudit_plugin", None) is not None:
        return command

    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        from auditor.cli._common import PLUGIN_COMMAND, command_failed

        context = click.get_current_context()
        context.meta[PLUGIN_COMMAND] = (plugin, command.name)
        try:
            return callback(*args, **kwargs)
        except (Exception, KeyboardInterrupt) as exc:
            command_failed(exc, bool(context.params.get("debug")))

    setattr(run, "popaudit_plugin", plugin)
    command.callback = run
    return command

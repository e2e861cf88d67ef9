"""``popaudit plugins``: the loaded plugins and the hooks each implements."""

from __future__ import annotations

import json
from pathlib import Path

import click

from auditor.cli._common import common_options
from auditor.cli._stdout import echo_stdout, stdout_console, write_stdout


@click.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON on stdout.")
@click.option(
    "--no-entry-points",
    is_flag=True,
    help="Leave out plugins installed through the `popaudit` entry-point group.",
)
@common_options
def command(as_json: bool, no_entry_points: bool, plugins: tuple[Path, ...]) -> None:
    """List the loaded plugins (built-ins marked) and the hooks each implements.

    Plugins come from the built-ins, the entry-point group `popaudit` (installed
    packages) and `--plugin PATH` files. A plugin that fails to load is reported as an
    error naming it (exit 1).
    """
    from rich.table import Table

    from auditor.plugins import describe_plugins, get_plugin_manager, hook_names
    from auditor.plugins.prints import prints_to_stderr

    with prints_to_stderr():  # a plugin printing as it is imported must not corrupt --json
        pm = get_plugin_manager(plugins, entry_points=not no_entry_points)
        infos = describe_plugins(pm)
    if as_json:
        payload = {"plugins": [info.to_dict() for info in infos], "hooks": list(hook_names())}
        echo_stdout(json.dumps(payload, indent=2))
        return
    table = Table(title="popaudit plugins", show_lines=False)
    table.add_column("plugin", style="bold")
    table.add_column("kind")
    table.add_column("source", overflow="fold")
    table.add_column("hooks", no_wrap=True)
    for info in infos:
        kind = "built-in" if info.builtin else info.kind
        if info.builtin:
            source = info.module or ""
        elif info.distribution:
            source = f"{info.distribution} {info.version or ''}".strip()
        else:
            source = info.path or info.module or ""
        table.add_row(info.name, kind, source, "\n".join(info.hooks) or "(none)")
    console = stdout_console(width=160)  # off a terminal: paths and hook names not folded at 80 columns
    console.print(table)
    write_stdout(console.file.getvalue())

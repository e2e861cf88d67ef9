"""The ``popaudit`` command: a click group whose commands are thin wrappers over the library.

Each command lives in its own module below; plugins add commands through the
``popaudit_cli_commands`` hook.
"""

from __future__ import annotations

import importlib

import click

from auditor import __version__
from auditor.cli._common import option_names
from auditor.cli._group import PluginGroup
from auditor.cli._startup import frozen_at_exit
from auditor.cli._termination import stopped_by_sigterm
from auditor.errors import spelled_as

# Modules that define one command each (a module-level ``command``).
COMMAND_MODULES = (
    "auditor.cli.check",
    "auditor.cli.plugins",
    "auditor.cli.batch",
    "auditor.cli.retrain",
    "auditor.cli.experiment",
    "auditor.cli.mitigate",
    "auditor.cli.diff",
)


@click.group(
    cls=PluginGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="popaudit")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Audit trained two-tower recommenders for popularity bias in item embedding norms.

    Start with `popaudit check MODEL --interactions LOG`. Exit codes: 0 ran, 1 error,
    2 usage error, 3 a --fail-on gate tripped.
    """
    # Library messages name settings; while a command runs they are its flags.
    ctx.with_resource(spelled_as(option_names))


for _name in COMMAND_MODULES:
    cli.add_command(importlib.import_module(_name).command)


def main() -> None:
    """Console-script entry point; the process exits after it, its objects frozen out of
    the shutdown's collections (:func:`~auditor.cli._startup.frozen_at_exit`). SIGTERM
    stops the command as Ctrl-C does, and it exits 143 (:mod:`auditor.cli._termination`)."""
    try:
        with stopped_by_sigterm():
            cli(prog_name="popaudit")
    finally:
        frozen_at_exit()

"""``popaudit diff BASE NEW``: two JSON reports compared (docs/diff.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from auditor.cli._common import QUIET_HELP, PathArg, common_options, refuse_stdout_twice, report_to_stdout, stderr
from auditor.cli._stdout import stdout_is_terminal, write_stdout

if TYPE_CHECKING:
    import pluggy

FORMATS = ("console", "markdown", "html", "json")


@click.command("diff")
@click.argument("base", type=PathArg)
@click.argument("new", type=PathArg)
@click.option("--format", "fmt", default="console", show_default=True, help=f"Format of the comparison: {', '.join(FORMATS)} (plus any a --plugin registers).")
@click.option("-o", "--output", type=PathArg, help="Write the --format comparison to this file instead of the terminal.")
@click.option("--json", "json_path", type=PathArg, help="Also write the comparison as JSON (every figure) here.")
@click.option("--markdown", "markdown_path", type=PathArg, help="Also write the Markdown comparison (short enough for a pull-request comment) here.")
@click.option("--html", "html_path", type=PathArg, help="Also write the HTML comparison (every figure) here.")
@click.option("--all", "show_all", is_flag=True, help="List every figure in the console and Markdown comparison too (HTML and JSON always do).")
@click.option("--fail-on", multiple=True, metavar="EXPR", help="Gate on a change: exit 3 when NAME[.delta|.rel] OP NUMBER holds, e.g. 'head_share_1pct_dot@10.delta>0.01' or 'ndcg_dot@10.rel<-0.02' (NAME alone: the new value; repeatable).")
@click.option("-q", "--quiet", is_flag=True, help=QUIET_HELP)
@common_options
def command(base: Path, new: Path, fmt: str, output: Path | None, json_path: Path | None, markdown_path: Path | None,
            html_path: Path | None, show_all: bool, fail_on: tuple[str, ...], quiet: bool,
            plugins: tuple[Path, ...]) -> None:
    """Compare two JSON reports of `popaudit check` (BASE before, NEW after).

    Every flat metric side by side with its change and whether it moved towards less
    bias or more accuracy, the verdict's and the conditions' changes, and the settings
    that keep figures from being compared (another popularity definition, population,
    holdout or group cut-offs: those figures are flagged, never compared; another
    schema version is refused). Exit codes: 0 compared, 1 error, 2 usage error, 3 a
    --fail-on gate tripped.

    \b
    Example:
      popaudit diff before.json after.json --markdown diff.md \\
          --fail-on 'head_share_1pct_dot@10.delta>0.01'
    """
    from auditor.diff import diff_reports, parse_diff_gates, read_report
    from auditor.diff.gates import gate_line, require_evaluated
    from auditor.errors import GateError
    from auditor.gate import evaluate_gates
    from auditor.output_guard import check_not_inputs

    files = {"-o": (fmt, output), "--json": ("json", json_path), "--markdown": ("markdown", markdown_path),
             "--html": ("html", html_path)}  # fmt: skip
    shown = f"{fmt} report" if report_to_stdout(output, fmt, quiet) else None
    refuse_stdout_twice({flag: path for flag, (_fmt, path) in files.items()}, shown, messages=not quiet)
    check_not_inputs({flag: path for flag, (_fmt, path) in files.items()},
                     {"BASE": base, "NEW": new, **{f"--plugin {p}": p for p in plugins}})
    from auditor.plugins import get_plugin_manager
    from auditor.plugins.prints import prints_to_stderr
    from auditor.plugins.renderers import renderers

    with prints_to_stderr():  # plugin files print as they are imported: not into a report on stdout
        pm = get_plugin_manager(plugins, entry_points=bool(plugins))  # plugins only for their report formats
    if fmt not in renderers(pm):
        raise click.BadParameter(f"{fmt!r} is not a report format; choose from {', '.join(sorted(renderers(pm)))}",
                                 param_hint="--format")
    reports = (read_report(base, "base"), read_report(new, "new"))
    diff = diff_reports(*reports, base_name=str(base), new_name=str(new))
    try:
        gates = parse_diff_gates(fail_on, [change.name for change in diff.metrics])
    except GateError as exc:
        raise click.UsageError(str(exc)) from exc
    written = _render(diff.to_dict(), files, fmt, report_to_stdout(output, fmt, quiet), show_all, (base.name, new.name), pm)
    if not quiet:
        for path in written:
            stderr.print(f"Wrote {path}", markup=False, highlight=False, soft_wrap=True)
    outcomes = evaluate_gates(gates, diff.flat())
    for outcome in outcomes:
        if outcome.tripped or not quiet:
            stderr.print(f"gate {gate_line(outcome, diff)}", style="red" if outcome.tripped else None, markup=False)
    require_evaluated(outcomes, diff, reports)
    if any(o.tripped for o in outcomes):
        sys.exit(3)


def _render(data: dict[str, Any], files: dict[str, tuple[str, Path | None]], fmt: str, to_terminal: bool,
            show_all: bool, names: tuple[str, str], pm: pluggy.PluginManager) -> list[Path]:
    """Every requested file written (all or none), then the terminal's view; the files written."""
    from auditor.plugin_api import RenderContext
    from auditor.plugins.renderers import render_document, write_all
    from auditor.report.diff_doc import diff_document

    def document(chosen: str) -> Any:
        return diff_document(data, full=show_all or chosen in ("html", "json"), base_name=names[0],
                             new_name=names[1])

    written: dict[Path, bytes] = {}
    for chosen, path in files.values():
        if path is None:
            continue
        context = RenderContext(destination=path)
        text = render_document(document(chosen), chosen, pm, context)
        written[path] = text if isinstance(text, bytes) else text.encode("utf-8")
        written.update(context.attachments)
    write_all(written)
    if to_terminal:
        color = stdout_is_terminal() and fmt == "console"
        text = render_document(document(fmt), fmt, pm, RenderContext(color=color, width=100))
        write_stdout(text)
    return list(written)

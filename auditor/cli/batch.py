"""``popaudit batch MANIFEST``: audit every model a manifest lists into one results Parquet."""

from __future__ import annotations

import json
import os
import shlex
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from auditor.cli._common import (
    MemorySize,
    PathArg,
    RichProgress,
    audit_fields,
    common_options,
    group_options,
    option_names,
    ranged,
    declared_training_options,
    frequencies_options,
    id_mapping_options,
    log_column_options,
    accuracy_options,
    retrieval_options,
    sampling_options,
    refuse_stdout_twice,
    stderr,
    table_key_options,
)
from auditor.cli._batch_advice import cell_advice, gate_values, refuse_unasked_rows
from auditor.cli._isolation import run_isolated, third_party_plugins
from auditor.errors import GateError, UnmeasuredGateError, interruption, setting, spelled_as
from auditor.output_guard import parquet_name_problem

if TYPE_CHECKING:
    import pyarrow as pa

    from auditor.batch import BatchOutcome, Manifest
    from auditor.gate import Gate

_RAW_ARGS = "popaudit.batch_args"

# This command's own settings that library messages name (the audit settings are named
# for every command in auditor.cli).


class _BatchCommand(click.Command):
    """Keeps the command's arguments as typed, to print the command that resumes a run."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_RAW_ARGS] = list(args)
        return super().parse_args(ctx, args)


@click.command("batch", cls=_BatchCommand)
@click.argument("manifest", type=PathArg)
@click.option("-o", "--output", type=PathArg, required=True, help="Results Parquet file (one row per manifest row; rewritten atomically as rows finish; a .csv, .tsv, .txt or .json name is refused: the file is Parquet). /dev/stdout gets the results once, at the end, and needs -q.")
@click.option("-j", "--jobs", type=ranged("jobs"), default=1, show_default=True, help="Audits run in parallel, each in a worker process (a row that crashes its worker fails only that row).")
@click.option("--resume", is_flag=True, help="Keep the rows already ok in --output and run only the others.")
@click.option("--scheduler", metavar="ADDRESS", help="Run the audits on an existing Dask cluster (e.g. tcp://host:8786) instead of local processes (never a manifest column).")
@click.option("--row-timeout", type=ranged("row_timeout"), default=3600.0, show_default=True, metavar="SECONDS", help="Stop a row whose audit runs longer (its worker process is killed), record it as an error and go on (0: no limit; local workers, not --scheduler).")
@click.option("--flush-interval", type=ranged("flush_interval"), default=0.0, show_default=True, metavar="SECONDS", help="Minimum time between rewrites of --output (0: as audits finish, spaced so rewriting takes at most about a fiftieth of the run; each finished row is appended to a journal beside it at once, which --resume reads after a crash).")
@click.option("--html", "html_path", type=PathArg, help="Also write an HTML summary (ranking, trend plot, failures) here.")
@click.option("--rank-by", default="spearman", show_default=True, help="Results column the summary ranks models by, most biased first in the direction the measure means more bias (lowest first for aplt, aclt, coverage, novelty; highest first for ΔGAP, a higher popularity lift being more bias, as for the other bias measures; highest first for a column that is no bias measure), shown beside the ranking: a name --fail-on accepts, or n_items, dim, n_interactions, seconds; checked before any row is audited.")
@click.option("--fail-on", multiple=True, metavar="EXPR", help="Gate: exit 3 when METRIC OP NUMBER holds for any audited row, e.g. 'spearman>0.5' (every ratio is dot / cosine; shares gate as fractions: 0.2 for 20%; repeatable).")
@click.option("--interactions", type=PathArg, help="Default training log for rows without an interactions cell.")
@log_column_options
@frequencies_options
@click.option("--item-ids", type=PathArg, help="Default raw item id of each table row, in row order.")
@id_mapping_options
@table_key_options
@retrieval_options
@accuracy_options
@declared_training_options
@sampling_options
@click.option("--max-memory", type=MemorySize(), help="Memory ceiling per audit for the item table, its search and approximate indexes (not the whole process): bytes or a size such as 8G or 512M. A larger Parquet table is streamed to a temporary disk-backed file and searched in shards. With -j N, audits run side by side: give each a share. [default: half the memory available when each audit starts]")
@click.option("--trust-pickle", is_flag=True, help="Allow loading full pickled models for every row (runs code from the files; never a manifest column).")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors, failed rows and tripped gates.")
@group_options
@common_options
def command(
    manifest: Path,
    output: Path,
    jobs: int,
    resume: bool,
    scheduler: str | None,
    flush_interval: float,
    row_timeout: float,
    html_path: Path | None,
    rank_by: str,
    fail_on: tuple[str, ...],
    quiet: bool,
    plugins: tuple[Path, ...],
    **settings: Any,
) -> None:
    """Audit every model listed in MANIFEST and write one results row per model.

    MANIFEST is Parquet or CSV with a `model` column; optional columns `interactions`,
    `item_ids`, `label` (free text carried into the results) and any check option by its
    name (`item_key` or `item-key`, `k` as "10,100", `max_queries`, `seed`, `optimizer`,
    ...). A cell overrides the option given here for its row; relative paths are
    resolved against the manifest's folder. A manifest cannot grant trust or pick
    where code runs: `trust_pickle`, `scheduler` and `plugins` columns are refused (use
    --trust-pickle, --scheduler, --plugin). Outputs never overwrite an input.

    The results Parquet has, per row: row, model, label, status (ok/error), error, the
    verdict and C1-C5 statuses, the flat metrics (spearman, <metric>_<scoring>@<k>,
    <metric>_ratio@<k>, ...) for every K requested, and report_json. It is rewritten
    atomically as audits finish, so it is always a valid file; --resume continues an
    interrupted run (Ctrl-C and SIGTERM print the command). Each audit runs in a worker process: a
    failing row, even one that crashes its worker, is recorded and never stops the
    others; the command still exits 0 (3 when a --fail-on gate holds for an audited row,
    else 1 with --fail-on when a row failed or did not measure a gate's metric, each named,
    130 when interrupted by Ctrl-C, 143 by SIGTERM: the rows finished are saved and the
    command that resumes the run is printed).

    \b
    Example:
      popaudit batch nightly.csv -o results.parquet --interactions train.parquet -j 4
      popaudit batch nightly.csv -o results.parquet --scheduler tcp://host:8786
    """
    # Messages name a setting batch has no option for by the manifest column that sets it.
    click.get_current_context().with_resource(spelled_as(_batch_spelling))
    if settings.get("interactions") is not None and settings.get("frequencies") is not None:
        raise click.UsageError("--interactions and --frequencies both give the default item counts; pass one")
    misnamed = parquet_name_problem(output, "-o", "the batch results")
    named = [manifest, *(value for value in settings.values() if isinstance(value, Path))]
    if misnamed is not None and not (output.exists() and any(p.exists() and os.path.samefile(output, p) for p in named)):
        raise click.UsageError(misnamed)  # -o naming the manifest or an input: the inputs' guard says so (exit 1)
    refuse_stdout_twice({"-o": output, "--html": html_path}, None if quiet else "summary", messages=not quiet)
    defaults = {**audit_fields(settings), "plugins": plugins}
    parsed, gates = _manifest_and_gates(manifest, defaults, fail_on, rank_by, plugins)
    if scheduler is None:  # now: the workers' imports (torch: seconds) run while this process goes on
        from auditor.batch.preload import start_workers

        start_workers(models=parsed.has_models)
    from auditor.batch import run_batch

    try:
        outcome = run_batch(
            parsed, output, defaults=defaults, jobs=jobs, resume=resume, scheduler=scheduler,
            progress=RichProgress(enabled=not quiet, task_seconds=0.0),  # off a terminal: a line per audited row
            flush_interval=flush_interval, other_outputs={"--html": html_path}, row_timeout=row_timeout,
        )
    except KeyboardInterrupt as exc:
        _interrupted(exc, output)
    _report(outcome, manifest, output, rank_by=rank_by, quiet=quiet, html_path=html_path)
    if gates and _gates_trip(gates, outcome.table, parsed, defaults):
        sys.exit(3)


def _batch_spelling() -> dict[str, str]:
    """Settings as batch names them: its own option where it has one, else the manifest
    column that sets it (``recommendations``: batch has no --recommendations)."""
    flags = {flag for param in command.params for flag in (*param.opts, *param.secondary_opts)}
    return {name: flag if flag in flags else f"the {name} column" for name, flag in option_names().items()}


def _manifest_and_gates(
    manifest: Path, defaults: dict[str, Any], fail_on: tuple[str, ...], rank_by: str, plugins: tuple[Path, ...],
) -> tuple[Manifest, list[Gate]]:
    """The parsed manifest and the ``--fail-on`` gates over every K and alpha it (or the
    defaults) asks for, and over the plugins' measures (named in an isolated child);
    ``--rank-by`` checked against the same names. Both before any row is audited: a typo
    is a usage error now, not after the whole batch."""
    from auditor.batch import read_manifest
    from auditor.batch.rank_by import rank_by_problem
    from auditor.flat import metric_names
    from auditor.gate import parse_run_gates

    parsed = read_manifest(manifest)
    # What the rows will measure: a row's cell overrides the default (-k, --alpha) for that row.
    ks = [k for row in parsed.rows for k in row.settings.get("ks", defaults["ks"])] or list(defaults["ks"])
    alphas = [a for row in parsed.rows for a in row.settings.get("alphas", defaults["alphas"])] or list(defaults["alphas"])
    # The measures' names are needed for gates, or for a --rank-by outside the built-in names.
    named = bool(fail_on) or rank_by_problem(rank_by, metric_names(sorted(set(ks)), (), alphas), ks) is not None
    measures: list[str] = []
    list_measures: list[str] | None = None  # the built-in ones
    if third_party_plugins(plugins):  # never in this process: its exit code is the gate's
        debug = bool(click.get_current_context().params.get("debug"))
        measures, list_measures = run_isolated(_plugin_measures, plugins, named, timeout=None,
                                               what="loading the plugins", debug=debug)
    elif named:  # the built-in measures alone: no plugin code, so in this process
        from auditor.plugins import collect_measures, get_plugin_manager

        registered = collect_measures(get_plugin_manager(plugins))
        measures, list_measures = registered.audit_names, registered.list_names
    try:
        gates = parse_run_gates(fail_on, ks, measures, alphas, list_measures)
    except GateError as exc:
        raise click.UsageError(str(exc)) from exc
    # A gate some row cannot measure by its cells (or the options): exit 1 with what would, before any audit
    refuse_unasked_rows(gates, parsed, defaults, list_measures)
    problem = rank_by_problem(rank_by, metric_names(sorted(set(ks)), measures, alphas, list_measures), ks)
    if problem is not None:
        raise click.UsageError(problem)
    return parsed, gates


def _report(outcome: BatchOutcome, manifest: Path, output: Path, *, rank_by: str, quiet: bool,
            html_path: Path | None) -> None:
    """Rows audited again on resume, the summary (unless quiet), failed rows, the HTML page."""
    from auditor.cli._reports import print_report, rendered
    from auditor.io import write_atomic
    from auditor.batch.jobs import row_title
    from auditor.batch.summary import summarise
    from auditor.report.batch_summary import batch_document

    if outcome.recomputed:  # said even with -q: a resumed file is not what it was
        shown = "; ".join(f"row {row}: {why}" for row, why in outcome.recomputed[:10])
        more = f"; and {len(outcome.recomputed) - 10} more" if len(outcome.recomputed) > 10 else ""
        stderr.print(f"--resume: {len(outcome.recomputed)} finished row(s) audited again because what produced "
                     f"them changed or could not be checked ({shown}{more})", markup=False, highlight=False, soft_wrap=True)
    summary = summarise(outcome.table, rank_by=rank_by, checked=True)  # checked before the run
    document = batch_document(summary, title=f"popaudit batch: {manifest.name}", n_resumed=outcome.n_resumed,
                              output=output, html=html_path)
    if not quiet:
        from rich.console import Console  # here: `popaudit --help` needs no rich

        print_report(document, width=max(100, Console().width))
    for row, model, error in summary.failures:
        stderr.print(f"{row_title(row, model)} failed: {error}", style="red", markup=False, highlight=False, soft_wrap=True)
    if html_path is not None:
        write_atomic(html_path, rendered(document, "html"))


def _gates_trip(gates: list[Gate], table: pa.Table, parsed: Manifest, defaults: dict[str, Any]) -> bool:
    """Each gate that trips for an audited row, said on stderr; True when any did.
    GateError when no audited row measured a gate's metric."""
    from auditor.batch.jobs import row_title
    from auditor.gate import evaluate_gates, gate_notes, require_measured, without_void

    records = table.to_pylist()
    audited = [record for record in records if record["status"] == "ok"]
    runs = [evaluate_gates(gates, without_void(gates, record, partial(_row_report, record)))
            for record in audited]  # a ratio at a row's saturated K is unmeasured there
    for record, outcomes in zip(audited, runs):
        tripped = any(gate.tripped for gate in outcomes)  # a row's report is read only for a line to print
        said = gate_notes(gates, record, json.loads(record.get("report_json") or "{}")) if tripped else {}
        for gate in outcomes:
            if gate.tripped:
                stderr.print(
                    f"gate {row_title(record['row'], record['model'])}: {gate.describe()}"
                    + (f", {said[gate.gate]}" if gate.gate in said else ""),
                    style="red", markup=False, highlight=False, soft_wrap=True,
                )
    try:
        require_measured(gates, runs, where="in any audited row", reasons=_row_reasons(gates, audited, runs))
    except UnmeasuredGateError as exc:  # advice that works in a batch, as before the audits
        raise UnmeasuredGateError(cell_advice(str(exc), parsed, parsed.rows, defaults,
                                              gate_values(gates, None))) from None
    tripped = any(gate.tripped for outcomes in runs for gate in outcomes)
    unseen = _rows_not_gated(gates, audited, runs, [record for record in records if record["status"] != "ok"], parsed,
                             defaults)
    if unseen and not tripped:  # never a silent pass: exit 1, as check of such a row
        gate_first = any(unseen.startswith(f"{gate}: ") for gate in gates)  # "--fail-on G: why", as every reason reads
        raise UnmeasuredGateError(f"cannot evaluate {setting('fail_on')}{' ' if gate_first else ': '}{unseen}")
    if unseen:  # the gates already fail the run (exit 3): the rows they could not read are named beside them
        stderr.print(f"gates not evaluated everywhere: {unseen}", style="red", markup=False, highlight=False,
                     soft_wrap=True)
    return tripped


def _row_report(record: dict[str, Any]) -> dict[str, Any]:
    """An audited row's JSON report."""
    made: dict[str, Any] = json.loads(record.get("report_json") or "{}")
    return made


def _rows_not_gated(gates: list[Gate], audited: list[dict[str, Any]], runs: list[list[Any]],
                    failed: list[dict[str, Any]], parsed: Manifest, defaults: dict[str, Any]) -> str:
    """Each audited row without a gate's figure, with its reason, and every row that failed
    ("" when none): a gate passes a batch only where it passes every row, as it passes
    ``check`` of that row only when measured."""
    from auditor.batch.jobs import row_title
    from auditor.gate_reasons import why_unmeasured

    said = []
    named = gate_values(gates, None)
    for gate in dict.fromkeys(gates):
        rows = [record for record, outcomes in zip(audited, runs)
                if any(o.gate == gate and o.value is None for o in outcomes)]
        if rows:
            shown = "; ".join(f"{row_title(r['row'], r['model'])}: " + cell_advice(
                why_unmeasured(gate.metric, json.loads(r.get("report_json") or "{}")), parsed,
                [row for row in parsed.rows if row.index == r["row"]], defaults, named) for r in rows[:3])
            said.append(f"{gate}: not measured in {len(rows)} of the {len(audited)} audited rows ({shown}"
                        + ("; ..." if len(rows) > 3 else "") + ")")
    if failed:
        titles = ", ".join(row_title(r["row"], r["model"]) for r in failed[:5]) + (", ..." if len(failed) > 5 else "")
        said.append(f"{len(failed)} row{'s' * (len(failed) != 1)} failed ({titles}): no gate can pass a row that was "
                    "not audited")
    return "; ".join(said)


def _row_reasons(gates: list[Gate], audited: list[dict[str, Any]], runs: list[list[Any]]) -> dict[Gate, str]:
    """Why each gate that no audited row measured has no value, from the rows' reports:
    one reason when every row gives it, else each row's (the first three)."""
    from auditor.batch.jobs import row_title
    from auditor.gate_reasons import why_unmeasured

    measured = {outcome.gate for outcomes in runs for outcome in outcomes if outcome.value is not None}
    missing = [gate for gate in dict.fromkeys(gates) if gate not in measured]
    reports = [json.loads(record.get("report_json") or "{}") for record in audited] if missing else []
    reasons = {}
    for gate in missing:
        said = {row_title(r["row"], r["model"]): why_unmeasured(gate.metric, report) for r, report in zip(audited, reports)}
        if not said:
            reasons[gate] = "not measured in any audited row (no row was audited)"
        elif len(set(said.values())) == 1:
            reasons[gate] = f"in every audited row, {next(iter(said.values()))}"
        else:
            shown = "; ".join(f"{title}: {why}" for title, why in list(said.items())[:3])
            reasons[gate] = f"not measured in any audited row ({shown}" + ("; ..." if len(said) > 3 else "") + ")"
    return reasons


def _plugin_measures(plugins: tuple[Path, ...], gated: bool) -> tuple[list[str], list[str] | None]:
    """Check the plugins' commands against the built-in ones; with gates (or a --rank-by
    to check), the names of their measures (run in the isolated child: plugin code may end
    its process)."""
    from auditor.cli import cli
    from auditor.cli._group import plugin_commands
    from auditor.plugins import collect_measures, get_plugin_manager

    plugin_commands(plugins, builtin_names=cli.commands)
    if not gated:
        return [], None
    registered = collect_measures(get_plugin_manager(plugins))
    return registered.audit_names, registered.list_names


def _interrupted(exc: KeyboardInterrupt, output: Path) -> NoReturn:
    """Ctrl-C or SIGTERM: say what is saved and the command that continues the run; exit
    130 or 143 (:func:`~auditor.errors.interruption`)."""
    from auditor.batch import BatchInterrupted

    if isinstance(exc, BatchInterrupted):
        failed = exc.n_saved - exc.n_ok
        saved = (
            f"{exc.n_saved} of {exc.n_rows} rows are saved in {output} ({exc.n_ok} ok, {failed} failed)"
            if exc.n_saved
            else f"no row was finished; {output} was left as it was" if exc.untouched
            else f"no row was finished; {output} holds none of the {exc.n_rows} rows"
        )
    else:
        saved = "no row was audited yet"
    said, code = interruption(exc)
    click.echo(
        f"Error: {said}: {saved}. To continue (rows already ok are kept), run:\n"
        f"  {resume_command()}",
        err=True,
    )
    sys.exit(code)


def resume_command() -> str:
    """The command line of this ``batch`` run, as typed, with --resume added (shell-quoted)."""
    ctx = click.get_current_context()
    args = list(ctx.meta.get(_RAW_ARGS, ()))
    if "--resume" not in args:  # before a "--" that ends the options
        args.insert(args.index("--") if "--" in args else len(args), "--resume")
    root = ctx.find_root().info_name or "popaudit"
    return " ".join([*(shlex.quote(p) for p in root.split()), shlex.quote(ctx.info_name or "batch"), *(shlex.quote(a) for a in args)])

"""``popaudit check MODEL``: audit one trained model or embedding table."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from auditor.cli._common import (
    QUIET_HELP,
    MemorySize,
    ranged,
    refuse_stdout_twice,
    report_to_stdout,
    PathArg,
    RichProgress,
    audit_fields,
    common_options,
    group_options,
    declared_training_options,
    frequencies_options,
    id_mapping_options,
    log_column_options,
    accuracy_options,
    retrieval_options,
    sampling_options,
    stderr,
    table_key_options,
)
from auditor.cli._isolation import run_isolated, third_party_plugins
from auditor.cli._next import check_command, runnable_advice
from auditor.cli._startup import frozen_for_the_run, imports_without_gc
from auditor.cli._stdout import stdout_is_terminal, write_stdout
from auditor.cli._tracking import REPORT_FORMATS, log_to_mlflow, require_mlflow
from auditor.config import AuditConfig
from auditor.devices import DEVICES, resolve_device
from auditor.errors import GateError, UnmeasuredGateError
from auditor.output_guard import check_not_inputs

if TYPE_CHECKING:
    from auditor.result import AuditResult

FORMATS_HELP = "console, json, markdown, html (plus any a plugin registers)"



@click.command("check")
@click.argument("model", type=PathArg, required=False)
@click.option("--interactions", type=PathArg, help="Training log: Parquet, CSV/TSV, MovieLens u.data / ratings.dat / ratings.csv, RecBole .inter. Item frequencies are counted from it.")
@log_column_options
@frequencies_options
@click.option("--item-ids", type=PathArg, help="Raw item id of each table row, in row order (default: row index = id, or the ids in a popaudit checkpoint).")
@id_mapping_options
@table_key_options
@retrieval_options
@accuracy_options
@declared_training_options
@click.option("--format", "fmt", default="console", show_default=True, help=f"Report format: {FORMATS_HELP}.")
@click.option("-o", "--output", type=PathArg, help="Write the --format report to this file instead of the terminal.")
@click.option("--json", "json_path", type=PathArg, help="Also write the JSON report here.")
@click.option("--html", "html_path", type=PathArg, help="Also write the HTML report (self-contained, with plots) here.")
@click.option("--markdown", "markdown_path", type=PathArg, help="Also write the Markdown report (images beside it) here.")
@click.option("--fail-on", multiple=True, metavar="EXPR", help="Gate: exit 3 when METRIC OP NUMBER holds, e.g. 'spearman>0.5' or 'head_share_1pct_ratio@100>1.5' (every ratio is dot / cosine; shares gate as fractions: 0.2 for 20%; repeatable).")
@sampling_options
@click.option("--max-memory", type=MemorySize(), help="Memory ceiling for the item table, its search and approximate indexes (not the whole process: the log's counts, the queries, the lists and the libraries come on top): bytes or a size such as 8G or 512M. A larger Parquet table is streamed to a temporary disk-backed file and searched in shards, each of which ranks every query (small shards cost time). [default: half the available memory]")
@click.option("--scheduler", metavar="ADDRESS", help="Search the retrieval shards of a table larger than --max-memory on an existing Dask cluster (e.g. tcp://host:8786); workers need the table's file under the same path.")
@click.option("--trust-pickle", is_flag=True, help="Allow loading a full pickled model. This runs code from the file: only for files you trust.")
@click.option("-q", "--quiet", is_flag=True, help=QUIET_HELP)
@click.option("--plugin-timeout", type=ranged("plugin_timeout"), default=0.0, show_default=True, metavar="SECONDS", help="With third-party plugins (--plugin files, installed entry points) the audit runs in a child process: stop it after SECONDS (0: no limit). A plugin that ends that process or runs out of time is an error (exit 1), never a passed gate, and its prints go to stderr.")
@click.option("--trace", type=PathArg, help="A training trace the monitor wrote (retrain --trace, the PyTorch, Lightning, Keras or RecBole monitor): adds a training section (ρ, slope and the 90° share over steps, alerts) to every report, and its measured update angles to the evidence of C1, C4 and C5.")
@click.option("--mlflow", "mlflow", is_flag=True, help="Also log the audit to MLflow: flat metrics, the verdict (tags) and the HTML and JSON reports as artifacts, in the active run or a new one under MLFLOW_TRACKING_URI (default ./mlruns). Needs popaudit[mlflow].")
@group_options
@click.option("--recommendations", type=PathArg, help="Served lists to audit (Parquet or CSV/TSV: user id, item id, and a rank or score per row). Without MODEL: a lists-only audit against --interactions; with MODEL: the lists become the 'served' scoring beside dot, cosine and popular (docs/served-lists.md).")
@click.option("--rank-col", help="Rank column of --recommendations (lower first). [default: auto-detected: rank, position, pos...]")
@click.option("--score-col", help="Score column of --recommendations (higher first). [default: auto-detected: score, prediction...]")
@click.option("--device", type=click.Choice(DEVICES), default="cpu", show_default=True, help="Where the exact retrieval's inner products and the numeric probes run: cpu, cuda (an error when torch sees no CUDA device), or auto (cuda when there is one). Lists equal the CPU's up to float32 near-ties.")
@common_options
def command(
    model: Path | None,
    fmt: str,
    output: Path | None,
    json_path: Path | None,
    html_path: Path | None,
    markdown_path: Path | None,
    fail_on: tuple[str, ...],
    quiet: bool,
    plugin_timeout: float,
    plugins: tuple[Path, ...],
    mlflow: bool,
    **options: Any,
) -> None:
    """Audit one trained model or embedding table (or the lists it served) for popularity bias.

    MODEL: a .pt/.pth state dict or checkpoint (incl. Lightning and popaudit retrain
    checkpoints), a TorchScript archive, a .safetensors file, a .npy item table, or a
    Parquet item table (id column + list<float> column).

    The report gives the frequency–norm correlation (Spearman ρ with a bootstrap CI,
    Pearson on log(1+freq), Kendall τ, log–log slope, deciles), the retrieval skew of
    dot-product vs cosine serving vs most-popular (head_share_1pct/10pct/20pct: share of
    recommended slots taken by the top P% most frequent items, ties at the cut included;
    arp: mean frequency of recommended items; aplt: share of long-tail items, the short
    head holding 80% of interactions; gini: of exposure over the whole catalogue;
    coverage; novelty: mean -log2(users(i)/n_users)), conditions C1-C5 and a verdict.

    MODEL may be left out when --recommendations gives served lists: the lists alone are
    audited against --interactions (every list measure at each K, gates, reports).

    \b
    Example:
      popaudit check model.pt --interactions train.parquet --html report.html \\
          --fail-on 'spearman>0.5'
      popaudit check --recommendations recs.parquet --interactions train.parquet \\
          --fail-on 'head_share_1pct_served@10>0.2'
    """
    _require_model_or_lists(model, options)
    _refuse_count_conflicts(options)
    config = AuditConfig(model=model, plugins=plugins, **audit_fields(options))
    config.check_inputs()
    resolve_device(config.device)  # cuda without a CUDA device: said before any work
    if mlflow:
        require_mlflow()
    files = {"-o": output, "--json": json_path, "--html": html_path, "--markdown": markdown_path}
    formats = {"-o": fmt, "--json": "json", "--html": "html", "--markdown": "markdown"}
    shown = f"{fmt} report" if report_to_stdout(output, fmt, quiet) else None
    refuse_stdout_twice(files, shown, messages=not quiet)  # -o sets no shown: stderr alone
    job = _Job(config, fmt, files, formats, fail_on, quiet, stdout_is_terminal() and fmt == "console", _width(), mlflow)
    if third_party_plugins(plugins):  # their death or their prints must not pass for a report
        audited = run_isolated(_audit, job, timeout=plugin_timeout or None, what="the audit with plugins",
                               debug=bool(click.get_current_context().params.get("debug")))
    else:
        with frozen_for_the_run():
            audited = _audit(job)

    from auditor.gate import evaluate_gates
    from auditor.plugins.renderers import stale_figures, write_all

    outcomes = evaluate_gates(audited.gates, audited.metrics)
    if any(outcome.value is None for outcome in outcomes):  # exit 1, an error: no output of the run, as for bad input
        _say_gates(outcomes, audited, quiet)
        _refuse_unmeasured(outcomes, audited, written=any(path is not None for path in files.values()) or mlflow,
                           printed=audited.stdout is not None)
    outputs = [(formats[flag], path) for flag, path in files.items()]
    write_all(audited.files, remove=stale_figures(outputs, audited.files))  # no plot of an earlier run left beside
    if audited.stdout is not None:  # whole or an error, before the gates decide the exit code
        write_stdout(audited.stdout)
    chosen = [(formats[flag], path) for flag, path in files.items() if path is not None]
    if not quiet:
        _confirm_written(chosen, list(audited.files), bool(fail_on), suggest=output is None and fmt == "console",
                         config=config, gate=audited.gate)
    if audited.result is not None:  # --mlflow: logged before the gates decide the exit code
        log_to_mlflow(audited.result, audited.mlflow_reports, quiet=quiet)
    _say_gates(outcomes, audited, quiet)
    if any(o.tripped for o in outcomes):
        sys.exit(3)


def _say_gates(outcomes: list[Any], audited: _Audited, quiet: bool) -> None:
    """Each gate's line on stderr (with -q, the tripped ones alone)."""
    for outcome in outcomes:
        if outcome.tripped or not quiet:
            said = audited.gate_notes.get(outcome.gate)
            stderr.print(f"gate {outcome.describe()}" + (f", {said}" if said else ""),
                         style="red" if outcome.tripped else None)


NO_REPORT = {(True, False): "No report was written", (False, True): "No report was printed",
             (True, True): "No report was written or printed"}
"""The last words of a refused gate's ``Error:`` line, by (report files or MLflow asked
for, a report asked for on stdout): the run ends with none of them; nothing is added
where neither was asked for (``-q`` and no output)."""


def _refuse_unmeasured(outcomes: list[Any], audited: _Audited, *, written: bool, printed: bool) -> None:
    """UnmeasuredGateError (exit 1) for the gates the finished audit left without a value
    (a ratio of two zeros, a CI the bootstrap could not give), before any report is
    written or printed: a run that ends in an error replaces no earlier report (outputs
    are all of a run or none), so a CI step that keeps the report after a failed step
    never keeps one of a run it failed, and a pipe reading stdout gets no report."""
    from auditor.gate import require_measured

    try:
        require_measured(audited.gates, [outcomes], where="in this run", reasons=audited.reasons)
    except UnmeasuredGateError as exc:
        ending = NO_REPORT.get((written, printed))
        raise UnmeasuredGateError(f"{exc}. {ending}" if ending else str(exc)) from None


def _refuse_count_conflicts(options: dict[str, Any]) -> None:
    """UsageError for two sources of item counts, or a --frequencies column without the file."""
    if options.get("interactions") is not None and options.get("frequencies") is not None:
        raise click.UsageError("--interactions and --frequencies both give the item counts; pass one")
    for flag in ("count_col", "user_count_col"):
        if options.get(flag) is not None and options.get("frequencies") is None:
            raise click.UsageError(f"--{flag.replace('_', '-')} names a column of --frequencies, which was not given")


def _require_model_or_lists(model: Path | None, options: dict[str, Any]) -> None:
    """MODEL may be left out only when --recommendations gives served lists to audit alone."""
    if model is None and options.get("recommendations") is None:
        raise click.UsageError("Missing argument 'MODEL' (or --recommendations FILE to audit served lists alone).")
    for flag in ("rank_col", "score_col"):
        if options.get(flag) is not None and options.get("recommendations") is None:
            raise click.UsageError(f"--{flag.replace('_', '-')} names a column of --recommendations, which was not given")


@dataclass(frozen=True)
class _Job:
    """What one ``check`` audits and renders (sent to the isolated child as it is)."""

    config: AuditConfig
    fmt: str
    files: dict[str, Path | None]
    formats: dict[str, str]
    fail_on: tuple[str, ...]
    quiet: bool
    color: bool
    width: int
    mlflow: bool = False


@dataclass(frozen=True)
class _Audited:
    """A completed audit: the report files to write, the stdout report, the gates (and,
    for ``--mlflow``, the result and the reports to log)."""

    files: dict[Path, bytes]
    stdout: str | bytes | None
    metrics: dict[str, float | None]
    gates: list[Any]
    result: AuditResult | None = None
    mlflow_reports: dict[str, str | bytes] = field(default_factory=dict)
    gate: str | None = None
    """The verdict's CI gate (:attr:`~auditor.result.Verdict.gate`), which ``Next:`` suggests."""
    reasons: dict[Any, str] = field(default_factory=dict)
    """Why each gate without a value has none (:func:`~auditor.gate.unmeasured_reasons`)."""
    gate_notes: dict[Any, str] = field(default_factory=dict)
    """What each gate's line adds: an approximate index's lists, another protocol than the log's (:func:`~auditor.gate.gate_notes`)."""


def _audit(job: _Job) -> _Audited:
    """Everything of ``check`` that may run plugin code: loading plugins, parsing gates
    against their measures, the audit and every renderer. Writes nothing."""
    with imports_without_gc():  # the plugins import torch, pyarrow and the loaders
        # Imported once the inputs exist: --help and a missing file need neither numpy nor pluggy.
        from auditor.cli._group import plugin_commands
        from auditor.gate import gate_notes, gates_for, unmeasured_reasons, without_void
        from auditor.plugins import collect_measures, get_plugin_manager
        from auditor.plugin_api import RenderContext
        from auditor.plugins.renderers import planned_outputs, render, render_files, renderers

        config = job.config
        if third_party_plugins(config.plugins):  # a plugin command named like a built-in one is refused here
            from auditor.cli import cli

            plugin_commands(config.plugins, builtin_names=cli.commands)
        pm = get_plugin_manager(config.plugins)
        available = renderers(pm)
    if job.fmt not in available:
        raise click.BadParameter(
            f"{job.fmt!r} is not a report format; choose from {', '.join(sorted(available))}",
            param_hint="--format",
        )
    try:
        registered = collect_measures(pm)
        given = {"trace": config.trace, "recommendations": config.recommendations, "bootstrap": config.bootstrap}
        # A K not asked for waits for the model: the catalogue it clamps such a K to decides the advice.
        gates = gates_for(job.fail_on, config.ks, registered.audit_names, config.alphas, registered.list_names,
                          given=given, wait_for_catalogue=config.model is not None)
    except UnmeasuredGateError:
        raise  # a gate these settings cannot measure: exit 1 with what would, not a usage error
    except GateError as exc:
        raise click.UsageError(str(exc)) from exc
    from auditor.loading.side_files import side_inputs  # here: auditor.loading brings numpy

    # Every file the run writes (a Markdown report's figures included) before the audit.
    check_not_inputs(planned_outputs({flag: (job.formats[flag], path) for flag, path in job.files.items()}),
                     {**config.input_files(), **side_inputs(config.model, "the model")})

    # Import here so `popaudit --help` stays fast (torch and faiss load on demand).
    with imports_without_gc():
        from auditor.audit import run_audit

    result = run_audit(config, pm=pm, progress=RichProgress(enabled=not job.quiet),
                       inputs_read=partial(_refuse_at_read, job, registered, gates, given))
    result = runnable_advice(result, config)  # the advice's mitigate command, with this run's inputs
    chosen = [(flag, path) for flag, path in job.files.items() if path is not None]
    files = render_files(result, [(job.formats[flag], path) for flag, path in chosen], pm,
                         labels=[flag for flag, _path in chosen], inputs=config.input_files())
    stdout = None
    if report_to_stdout(job.files["-o"], job.fmt, job.quiet):
        stdout = render(result, job.fmt, pm, RenderContext(color=job.color, width=job.width))
    made = result.to_dict() if gates else {}
    metrics = without_void(gates, result.flat_metrics(), lambda: made)  # a ratio at a saturated K: unmeasured
    reasons = unmeasured_reasons(gates, metrics, lambda: made)
    said = gate_notes(gates, metrics, made)
    if not job.mlflow:
        return _Audited(files, stdout, metrics, gates, gate=result.verdict.gate, reasons=reasons, gate_notes=said)
    logged = {fmt: render(result, fmt, pm, RenderContext(color=False, width=job.width)) for fmt in REPORT_FORMATS}
    return _Audited(files, stdout, metrics, gates, result, logged, gate=result.verdict.gate, reasons=reasons,
                    gate_notes=said)


def _refuse_at_read(job: _Job, registered: Any, gates: list[Any], given: dict[str, Any], unread: Mapping[str, str],
                    catalogue: Mapping[str, Any]) -> None:
    """Once the model is read, before anything is measured: the gates at a K not asked for,
    advised by the catalogue (:func:`~auditor.gate.gates_for`), then those whose section the
    inputs leave unmeasured (:func:`~auditor.gate.refuse_unread`)."""
    from auditor.gate import gates_for, refuse_unread

    config = job.config
    gates_for(job.fail_on, config.ks, registered.audit_names, config.alphas, registered.list_names, given=given,
              catalogue=catalogue)
    refuse_unread(gates, unread, registered.list_names)


def _confirm_written(chosen: list[tuple[str, Path]], written: list[Path], gated: bool, *, suggest: bool,
                     config: AuditConfig, gate: str | None) -> None:
    """Say which file was written (each report, then any figures beside it); after a
    console report (``suggest``), suggest the same audit with the outputs this run did
    not produce and the verdict's ``gate``, as a command that runs as printed."""
    reports = [(Path(path), fmt) for fmt, path in chosen]  # a list: /dev/null may take two reports
    for path, fmt in reports:
        stderr.print(f"Wrote the {_FORMAT_NAMES.get(fmt, fmt)} report: {path}", markup=False, highlight=False,
                     soft_wrap=True)  # a path is never broken across lines
    beside = [path for path in written if path not in {path for path, _fmt in reports}]  # a Markdown report's figures
    if beside:
        folders = ", ".join(sorted({f"{path.parent}{os.sep}" for path in beside}))
        stderr.print(f"Wrote {len(beside)} figure file{'s' * (len(beside) != 1)} in {folders}",
                     markup=False, highlight=False, soft_wrap=True)
    done = {fmt for _path, fmt in reports}
    extra = [word for fmt, flag, name in (("html", "--html", "report.html"), ("json", "--json", "report.json"))
             if fmt not in done for word in (flag, name)]
    settings = {f.name: getattr(config, f.name) for f in dataclass_fields(config)}
    if gate is not None and not gated:
        extra += ["--fail-on", gate]
    if extra and suggest:
        stderr.print("Next: " + check_command(config.model, settings, extra),
                     style="dim", markup=False, highlight=False, soft_wrap=True)


_FORMAT_NAMES = {"html": "HTML", "json": "JSON", "markdown": "Markdown", "console": "text"}


def _width() -> int:
    return max(80, min(120, shutil.get_terminal_size().columns)) if stdout_is_terminal() else 100

"""``popaudit batch MANIFEST``: audit every model a manifest lists into one results Parquet."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from auditor.cli._common import (
    MemorySize,
    PathArg,
    RichProgress,
    audit_fields,
    common_options,
    declared_training_options,
    log_column_options,
    retrieval_options,
    sampling_options,
    stderr,
    table_key_options,
)
from auditor.errors import GateError

MAX_ORDER_ROWS = 40
"""The console lists every row in manifest order up to this many (the HTML always does)."""


@click.command("batch")
@click.argument("manifest", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("-o", "--output", type=PathArg, required=True, help="Results Parquet file (one row per manifest row; rewritten atomically as rows finish).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Audits run in parallel worker processes (1: in this process).")
@click.option("--resume", is_flag=True, help="Keep the rows already ok in --output and run only the others.")
@click.option("--scheduler", metavar="ADDRESS", help="Run the audits on an existing Dask cluster (e.g. tcp://host:8786) instead of local processes.")
@click.option("--flush-interval", type=click.FloatRange(min=0), default=0.0, show_default=True, metavar="SECONDS", help="Minimum time between rewrites of --output (0: after every finished audit; raise it for huge manifests of quick audits: a crash then also loses rows finished in the last interval).")
@click.option("--html", "html_path", type=PathArg, help="Also write an HTML summary (ranking, trend plot, failures) here.")
@click.option("--rank-by", default="spearman", show_default=True, help="Results column the summary ranks models by (most biased first).")
@click.option("--fail-on", multiple=True, metavar="EXPR", help="Gate: exit 3 when METRIC OP NUMBER holds for any audited row, e.g. 'spearman>0.5' (repeatable).")
@click.option("--interactions", type=PathArg, help="Default training log for rows without an interactions cell.")
@log_column_options
@click.option("--item-ids", type=PathArg, help="Default raw item id of each table row, in row order.")
@table_key_options
@retrieval_options
@declared_training_options
@sampling_options
@click.option("--max-memory", type=MemorySize(), help="Memory ceiling per audit for tables and indexes: bytes or a size such as 8G.")
@click.option("--trust-pickle", is_flag=True, help="Allow loading full pickled models (runs code from the files).")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors, failed rows and tripped gates.")
@common_options
def command(
    manifest: Path,
    output: Path,
    jobs: int,
    resume: bool,
    scheduler: str | None,
    flush_interval: float,
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
    resolved against the manifest's folder.

    The results Parquet has, per row: row, model, label, status (ok/error), error, the
    verdict and C1-C5 statuses, the flat metrics (spearman, <metric>_<scoring>@<k>,
    <metric>_ratio@<k>, ...) for every K requested, and report_json. It is rewritten
    atomically as audits finish, so it is always a valid file; --resume continues an
    interrupted run. A failing row is recorded and never stops the others; the command
    still exits 0 (3 when a --fail-on gate holds for an audited row).

    \b
    Example:
      popaudit batch nightly.csv -o results.parquet --interactions train.parquet -j 4
      popaudit batch nightly.csv -o results.parquet --scheduler tcp://host:8786
    """
    from auditor.batch import read_manifest, run_batch, summarise, summary_html
    from auditor.gate import evaluate_gates, metric_names, parse_gates
    from auditor.io import write_atomic

    defaults = {**audit_fields(settings), "plugins": plugins}
    parsed = read_manifest(manifest)
    row_ks = {k for row in parsed.rows for k in row.settings.get("ks", ())}
    try:
        gates = parse_gates(fail_on, metric_names(sorted(set(defaults["ks"]) | row_ks)))
    except GateError as exc:
        raise click.UsageError(str(exc)) from exc

    outcome = run_batch(
        parsed,
        output,
        defaults=defaults,
        jobs=jobs,
        resume=resume,
        scheduler=scheduler,
        progress=RichProgress(enabled=not quiet),
        flush_interval=flush_interval,
    )
    summary = summarise(outcome.table, rank_by=rank_by)
    if not quiet:
        _print_summary(summary, outcome.n_resumed, output)
    for row, model, error in summary.failures:
        stderr.print(f"row {row} ({model}) failed: {error}", style="red", markup=False, highlight=False, soft_wrap=True)
    if html_path is not None:
        write_atomic(html_path, summary_html(summary, title=f"popaudit batch: {manifest.name}"))

    tripped = False
    for record in outcome.table.to_pylist():
        if record["status"] != "ok":
            continue
        for gate in evaluate_gates(gates, record):
            if gate.tripped:
                tripped = True
                stderr.print(
                    f"gate row {record['row']} ({record['model']}): {gate.describe()}",
                    style="red", markup=False, highlight=False, soft_wrap=True,
                )
    if tripped:
        sys.exit(3)


def _print_summary(summary: Any, n_resumed: int, output: Path) -> None:
    from auditor.report.content import fmt_num  # here, so `popaudit --help` stays light

    console = Console(highlight=False, soft_wrap=False, width=max(100, Console().width))
    resumed = f" ({n_resumed} kept from the earlier run)" if n_resumed else ""
    console.print(
        f"[bold]{summary.n_rows} rows[/bold]: {summary.n_ok} ok, "
        f"{summary.n_error} failed{resumed}. Results: {output}"
    )
    share = summary.head_share_metric or "head share ratio"
    ranking = Table(title=f"Models ranked by {summary.rank_by} (most biased first)", title_justify="left")
    for name, justify in (("#", "right"), ("row", "right"), ("model", "left"), ("label", "left"),
                          ("severity", "left"), ("spearman", "right"), (share, "right")):
        ranking.add_column(name, justify=justify)  # type: ignore[arg-type]
    for i, s in enumerate(summary.ranking, 1):
        ranking.add_row(str(i), str(s.row), s.model, s.label or "", s.severity or "n/a",
                        fmt_num(s.spearman), fmt_num(s.head_share))
    console.print(ranking)
    if len(summary.order) > 1:
        trend = Table(title="Across the manifest order", title_justify="left")
        for name in ("metric", "first", "last", "change", "Kendall τ", "p", "trend"):
            trend.add_column(name, justify="left" if name in ("metric", "trend") else "right")
        for t in summary.trends:
            trend.add_row(t.metric, fmt_num(t.first), fmt_num(t.last), fmt_num(t.change),
                          fmt_num(t.kendall_tau), fmt_num(t.p_value), t.direction)
        console.print(trend)
    if 1 < len(summary.order) <= MAX_ORDER_ROWS:
        order = Table(title="Row by row (changes from the previous audited row)", title_justify="left")
        for name in ("row", "model", "label", "spearman", "Δ", share, "Δ "):
            order.add_column(name, justify="left" if name in ("model", "label") else "right")
        for s in summary.order:
            order.add_row(str(s.row), s.model, s.label or "", fmt_num(s.spearman), fmt_num(s.delta_spearman),
                          fmt_num(s.head_share), fmt_num(s.delta_head_share))
        console.print(order)

"""``popaudit mitigate MODEL --alpha A -o OUT``: the model with its item table rescaled."""

from __future__ import annotations

import functools

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from auditor.cli._isolation import run_isolated, third_party_plugins
from auditor.cli._next import check_command
from auditor.cli._stdout import echo_stdout, stdout_console, write_stdout
from auditor.cli._common import (
    MemorySize,
    PathArg,
    RichProgress,
    common_options,
    id_mapping_options,
    log_column_options,
    ranged,
    stderr,
    table_key_options,
)

_ALPHA = ranged("alphas")


class AlphaValue(click.ParamType):  # type: ignore[type-arg]  # generic in recent click only
    """A finite number in [0, 1], or ``auto``."""

    name = "A|auto"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float | str:
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        return _ALPHA.convert(value, param, ctx)


@click.command("mitigate")
@click.argument("model", type=PathArg)
@click.option("--alpha", "alpha", type=AlphaValue(), required=True, metavar="A|auto", help="Exponent A in [0, 1]: each item row k becomes k*|k|^(A-1), so dot-product serving of the output ranks by alpha_A (0: cosine, 1: unchanged). 'auto': the A that check's accuracy trade-off recommends (needs --interactions and --holdout, or a retrain --holdout-fraction checkpoint's stored split; without a user table, measured with the history queries rebuilt from the output, as check of the output builds them); when no scoring is clearly better than dot, nothing is written (exit 1) and the remedies that apply are named.")
@click.option("-o", "--output", type=PathArg, required=True, help="The rescaled model, in MODEL's format (never MODEL itself); for a RecBole graph model (LightGCN, ...), a .npy or .parquet name: its served item vectors, rescaled. A JSON sidecar OUT.popaudit.json is written beside it.")
@click.option("--interactions", type=PathArg, help="Training log: the sidecar then records the log-log slope of norm on frequency before and after.")
@log_column_options
@click.option("--item-ids", type=PathArg, help="Raw item id of each table row, in row order (as for check).")
@id_mapping_options
@table_key_options
@click.option("--holdout", type=PathArg, help="With --alpha auto: held-out interactions for check's accuracy trade-off.")
@click.option("--accuracy-tolerance", type=ranged("accuracy_tolerance"), default=0.98, show_default=True, help="With --alpha auto: the chosen scoring keeps at least this share of dot's NDCG@K.")
@click.option("--seed", type=ranged("seed"), default=0, show_default=True, help="With --alpha auto: seed of the trade-off's paired bootstrap over users.")
@click.option("--tensors-only", is_flag=True, help="A PyTorch file that holds objects popaudit cannot write back (pickled modules, config objects, TorchScript): write its tensors as a plain state dict instead of refusing.")
@click.option("--max-memory", type=MemorySize(), help="Memory ceiling: bytes or a size such as 8G. [default: half the available memory]")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.option("--plugin-timeout", type=ranged("plugin_timeout"), default=0.0, show_default=True, metavar="SECONDS", help="With third-party plugins (--plugin files, installed entry points) the run (its audit, reading and writing the model) happens in a child process: stop it after SECONDS (0: no limit). A plugin that ends that process or runs out of time is an error (exit 1) and nothing is written; its prints go to stderr.")
@common_options
def command(model: Path, alpha: float | str, output: Path, quiet: bool, plugins: tuple[Path, ...], **options: Any) -> None:
    """Write MODEL with its item table rescaled for norm-aware serving.

    Each item row k becomes k*|k|^(A-1): its direction is kept and its norm becomes
    |k|^A. An inner-product index (FAISS, ScaNN, a vector database) built from the output
    then serves the alpha_A scoring of `popaudit check` with no change to the query
    side: dot products over OUT equal (q.k)*|k|^(A-1) over MODEL. A model without a user
    table is queried by check with means of its item rows, which change too: --alpha auto
    then measures OUT with those queries rebuilt, as check of OUT does.

    MODEL and OUT share a format: a .pt/.pth/.ckpt state dict or checkpoint (every other
    key kept), a RecBole checkpoint (only the item table's bytes changed), .safetensors
    (other tensors and metadata kept), .npy, Parquet (other columns kept), or a plugin's
    format with a writer. The table is the one `check` reads (--item-key to choose it). The
    sidecar OUT.popaudit.json records A, MODEL's sha256, the rule and the norms before
    and after (and, with --interactions, the log-log slope of norm on frequency;
    Spearman rho is not recorded: the rescaling keeps the norms' order). With
    third-party plugins the run happens in a child process, as check's audit does.

    \b
    Example:
      popaudit mitigate model.pt --alpha 0.5 -o model.alpha05.pt --interactions train.parquet
    """
    holdout, user_ids = options.pop("holdout"), options.pop("user_ids")
    tolerance, seed, plugin_timeout = options.pop("accuracy_tolerance"), options.pop("seed"), options.pop("plugin_timeout")
    _refuse_auto_only(alpha, holdout, user_ids)
    job = _Job(model, alpha, output, quiet, plugins, options, holdout, user_ids, tolerance, seed)
    if third_party_plugins(plugins):  # their death must not pass for a written model (exit 0, nothing written)
        from auditor.io import atomic_path
        from auditor.output_guard import check_not_inputs
        from auditor.mitigation.run import refuse_special_outputs
        from auditor.mitigation.sidecar import sidecar_path

        # Before anything is staged beside them: an output that is an input is said as such.
        check_not_inputs(refuse_special_outputs(output), _inputs(job)[1])
        # The parent holds the temporary files: a child that dies leaves neither them nor OUT behind.
        with atomic_path(sidecar_path(output)) as side_tmp, atomic_path(output) as out_tmp:
            result = run_isolated(_work, job, (out_tmp, side_tmp), timeout=plugin_timeout or None,
                                  what="mitigate with plugins", debug=bool(click.get_current_context().params.get("debug")),
                                  consequence="nothing is written")
    else:
        result = _work(job, None)
    if quiet:
        return
    for warning in result.warnings:
        stderr.print(f"note: {warning}", style="yellow", markup=False, highlight=False)
    _summary(result)
    stderr.print(f"Wrote {output}", markup=False, highlight=False)
    stderr.print(f"Wrote {result.output['sidecar']}", markup=False, highlight=False)
    # The plugins too: an output in a plugin's format is read only with the plugin that defines it.
    echo_stdout("Next: " + _next_check(result, output, {**options, "user_ids": user_ids, "holdout": holdout,
                                                        "plugins": plugins}))



def _refuse_auto_only(alpha: float | str, holdout: object, user_ids: object) -> None:
    """UsageError for an option read only with ``--alpha auto`` given beside a number: the
    two without a default when set, the two with one (``--accuracy-tolerance``, ``--seed``)
    when given on the command line, never silently ignored (QA accuracy F5)."""
    if alpha == "auto":
        return
    ctx = click.get_current_context()
    given = [flag for flag, set_ in (
        ("--holdout", holdout is not None), ("--user-ids", user_ids is not None),
        ("--accuracy-tolerance", ctx.get_parameter_source("accuracy_tolerance") is ParameterSource.COMMANDLINE),
        ("--seed", ctx.get_parameter_source("seed") is ParameterSource.COMMANDLINE),
    ) if set_]  # fmt: skip
    if given:
        raise click.UsageError(f"{' and '.join(given)} {'is' if len(given) == 1 else 'are'} read only with --alpha "
                               f"auto (--alpha {alpha} writes that α unchecked: drop {'it' if len(given) == 1 else 'them'}"
                               ", or pass --alpha auto to choose α by the trade-off)", ctx=ctx)

def _next_check(result: Any, output: Path, settings: dict[str, Any]) -> str:
    """``check OUT``, or ``check MODEL`` with the scoring OUT serves as where the output's
    serving is measured (a graph model's served item table, :func:`served_table_check`)."""
    from auditor.config import DEFAULT_ALPHAS
    from auditor.mitigation.writers import served_table_check

    found = served_table_check(result.source, result.output, result.alpha)
    if found is None:
        return check_command(output, settings)
    model, scoring = found
    alphas = DEFAULT_ALPHAS if result.alpha in (0.0, 1.0, *DEFAULT_ALPHAS) else (result.alpha,)
    stderr.print(f"note: {served_table_note(output, model, scoring)}", style="yellow", markup=False, highlight=False)
    return check_command(model, {**settings, "alphas": alphas})


def served_table_note(output: Path, model: Path, scoring: str) -> str:
    """Why ``Next`` names ``check`` of the model, not of the output: a graph model's served
    item table is served with the model's own served users, which only that check rebuilds."""
    return (f"{output}, served with the user vectors {model} serves, gives the lists that the '{scoring}' scoring of "
            f"this audit of {model} measures")


@dataclass(frozen=True)
class _Job:
    """What one ``mitigate`` run reads and writes (sent to the isolated child as it is)."""

    model: Path
    alpha: float | str
    output: Path
    quiet: bool
    plugins: tuple[Path, ...]
    options: dict[str, Any]
    holdout: Path | None
    user_ids: Path | None
    tolerance: float
    seed: int


def _work(job: _Job, staged: tuple[Path, Path] | None) -> Any:
    """Everything of ``mitigate`` that may run plugin code: loading plugins, checking the
    outputs against their formats, the ``auto`` audit, reading and writing the model.
    ``staged``: the temporary files (model, sidecar) to write instead of renaming into
    place, which the caller renames when this returns."""
    from auditor.config import AuditConfig
    from auditor.loading.statistics import InputCache
    from auditor.mitigation.auto import auto_alpha, figures_as_written
    from auditor.mitigation.run import MitigateConfig, check_outputs, mitigate, writable_formats
    from auditor.plugins import get_plugin_manager

    options, model, output = job.options, job.model, job.output
    if third_party_plugins(job.plugins):  # a plugin command named like a built-in one is refused here
        from auditor.cli import cli
        from auditor.cli._group import plugin_commands

        plugin_commands(job.plugins, builtin_names=cli.commands)
    config, inputs = _inputs(job)
    pm = get_plugin_manager(job.plugins)
    check_outputs(config, inputs, writable_formats(pm))
    progress = RichProgress(enabled=not job.quiet)
    if job.alpha == "auto":
        audit = AuditConfig(
            model=model, interactions=options["interactions"], interactions_format=options["interactions_format"],
            user_col=options["user_col"], item_col=options["item_col"], item_ids=options["item_ids"],
            item_key=options["item_key"], user_key=options["user_key"], user_ids=job.user_ids,
            id_offset=options["id_offset"], assume_row_ids=options["assume_row_ids"], max_memory=options["max_memory"],
            holdout=job.holdout, accuracy_tolerance=job.tolerance, seed=job.seed, probes=False, plugins=job.plugins,
        )
        audit.check_inputs()
        cache = InputCache()  # the log read once, for the audit and the output as written
        chosen, sentence, figures, said = auto_alpha(audit, pm=pm, progress=progress, cache=cache)
        config = MitigateConfig(model=model, output=output, alpha=chosen, alpha_source=sentence, tradeoff=figures,
                                audit_warnings=said, **options)
        as_written = functools.partial(figures_as_written, audit, figures, output, pm=pm, progress=progress, cache=cache)
        return mitigate(config, pm=pm, progress=progress, inputs=inputs, staged=staged, as_written=as_written)
    return mitigate(config, pm=pm, progress=progress, inputs=inputs, staged=staged)


def _inputs(job: _Job) -> tuple[Any, dict[str, Path | None]]:
    """The run's MitigateConfig (at the given α; 1 until ``auto`` chooses) and every file
    it reads, named by option."""
    from auditor.mitigation.run import MitigateConfig

    chosen = 1.0 if job.alpha == "auto" else float(job.alpha)
    config = MitigateConfig(model=job.model, output=job.output, alpha=chosen, **job.options)
    inputs = {**config.input_files(), "--holdout": job.holdout, "--user-ids": job.user_ids}
    inputs.update({f"--plugin {p}": p for p in job.plugins})
    return config, inputs


def _summary(result: Any) -> None:
    """The before/after figures the rescaling changes, as a small table on stdout."""
    console = stdout_console(width=100)
    _summary_lines(console, result)
    write_stdout(console.file.getvalue())  # printed whole, or an error


def _summary_lines(console: Any, result: Any) -> None:
    """The lines :func:`_summary` prints, on ``console``."""
    from rich.table import Table

    from auditor.wording import pct_pair

    key = f" {result.item_key}" if result.item_key else ""
    console.print(f"Item table{key} rescaled, k -> k*|k|^(alpha-1) with alpha = {result.alpha:g}", markup=False)
    table = Table()
    table.add_column("")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    before, after = result.norms["before"], result.norms["after"]
    for name in ("mean", "median", "max"):
        table.add_row(f"norm {name}", f"{before[name]:.4g}", f"{after[name]:.4g}")
    ratio = [f"{s['max'] / s['median']:.3g}" if s["median"] > 0 else "n/a" for s in (before, after)]
    table.add_row("max / median norm", *ratio)
    if result.frequency_norm is not None:
        slopes = [result.frequency_norm[w]["loglog_slope"] for w in ("before", "after")]
        table.add_row("log-log slope (norm on frequency)", *(f"{v:.3f}" if v is not None else "n/a" for v in slopes))
    if result.tradeoff is not None:
        k, figures = result.tradeoff["k"], result.tradeoff
        table.add_row(f"held-out NDCG@{k} of dot serving", *(f"{figures['ndcg'][w]:.4f}" for w in ("before", "after")))
        judged = int(figures.get("head_percent", 1))  # the head the α was chosen by (the severity's)
        for head in dict.fromkeys((judged, 1)):  # that head first; the top 1% beside a wider one
            share = figures[f"head_share_{head}pct"]
            label = f"top-{head}% head share @{k}" + (" (graded the severity)" if head != 1 else "")
            table.add_row(label, *pct_pair(share["before"], share["after"]))
    console.print(table)
    if result.tradeoff is not None and result.tradeoff.get("read_back"):
        console.print(f"Held-out figures: of the {result.dtype} table as written, read back as `popaudit check` of the "
                      "output reads it (its rounding moves some lists).", markup=False)
    if result.tradeoff is not None and str(result.tradeoff.get("queries", "")).startswith("history"):
        console.print("Held-out figures: dot serving of the output with each user's mean training-item vector rebuilt "
                      "from the rescaled table as queries, as `popaudit check` of the output builds them (the model "
                      "has no user table).", markup=False)
    console.print(f"{result.n_items:,} items x {result.dim} ({result.dtype}); alpha: {result.alpha_source}",
                  markup=False)

"""``popaudit experiment NAME``: the grids of docs/theory.md §7, on synthetic data or a log.

One subcommand per grid, so ``popaudit experiment lr-sweep --help`` lists lr-sweep's
options only. Every subcommand parses the same options: one that belongs to another grid
is hidden from its help and, when given, is a usage error that names the grid it belongs
to (silently ignoring it would mislead). Options may still come before NAME
(``popaudit experiment -o out lr-sweep``), as when ``experiment`` was one command.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from auditor.cli._common import RichProgress, common_options, option_group, ranged
from auditor.cli._training import DataChoice, data_options, holdout_options, jobs_option, refuse_plugins, threads_option
from auditor.config import DEFAULT_ALPHAS
from auditor.errors import InputError
from auditor.output_guard import check_not_inputs
from auditor.ranges import seed_run
from auditor.train import CONDITION_SETTINGS, EXPERIMENTS, MITIGATION_SETTINGS

if TYPE_CHECKING:
    from auditor.progress import Progress
    from auditor.report.document import Document
    from auditor.train.data import TrainingData
    from auditor.train.experiments import ExperimentSizes

OUTPUT_FILES = ("results.json", "results.md", "angle_histograms.png", "rho_vs_lr.png", "accuracy_vs_head_share.png")

OWN_OPTIONS: dict[str, tuple[str, ...]] = {
    "settings": ("conditions",),
    "lrs": ("lr-sweep",),
    "mitigation_names": ("mitigations",),
    "lr": ("conditions", "mitigations"),
    "bootstrap": ("conditions", "lr-sweep"),
    "holdout_fraction": ("mitigations",),
    "split": ("mitigations",),
    "alphas": ("mitigations",),
}
"""Options that only some grids use, by parameter name: the grids that use them. The
others parse them (hidden) only to refuse them by name."""

HELP = {
    "conditions": (
        "the all-conditions-hold reference beside one violation at a time",
        """The all-conditions-hold reference (id embeddings, plain SGD, cosine InfoNCE, high lr)
        beside one violation at a time (momentum, Adam, weight decay, MLP tower,
        embedding->linear, dense-linear, dot-product InfoNCE, low lr) and the asymmetric model
        (transformer user tower over history, id item table): update-angle shares within
        90°±1° and ±10°, frequency-norm Spearman rho with its bootstrap CI, and
        head_share_1pct@K of dot vs cosine retrieval. Writes results.json, results.md (a
        table), angle_histograms.png and rho_vs_lr.png into -o DIR.""",
        "popaudit experiment conditions --seeds 3 -o results/conditions",
    ),
    "lr-sweep": (
        "the reference across learning rates: where the bias appears (C5)",
        """The all-conditions-hold reference trained at each learning rate of --lrs: where
        the popularity bias appears (C5). Writes results.json, results.md (a table) and
        rho_vs_lr.png (Spearman rho and the head-share ratio against the learning rate)
        into -o DIR.""",
        "popaudit experiment lr-sweep --data ml-100k/u.data --seeds 1 -j 4 -o results/lr",
    ),
    "mitigations": (
        "what each cure costs: held-out accuracy against exposure",
        """The reference and each training-side mitigation (logQ correction, weight decay,
        Adam) trained on the same held-out split, and the reference served by cosine and
        norm-aware alpha scoring: held-out NDCG@K and recall@K against head_share_1pct@K
        and Gini@K. Writes results.json, results.md (a table) and
        accuracy_vs_head_share.png into -o DIR.""",
        "popaudit experiment mitigations --data ml-100k/u.data -o results/mitigations",
    ),
}
"""Per grid: the one-line summary listed by ``experiment --help``, the description and an example."""


LR_HELP = {
    "conditions": "Learning rate of the reference setting and the other SGD settings (infonce-dot uses lr/10, low-lr lr/100, adam 0.01).",
    "mitigations": "Learning rate of the reference and of the other SGD models (logq, weight-decay; adam uses 0.01).",
}


class CommaList(click.ParamType):  # type: ignore[type-arg]  # generic in recent click only
    """A comma-separated list, each part a name of ``choices`` or a number of ``item``'s
    range: a bad part is a usage error (exit 2) when the command line is parsed, as the
    same value of a one-value option is."""

    name = "LIST"

    def __init__(self, item: click.ParamType | None = None, choices: tuple[str, ...] = ()) -> None:  # type: ignore[type-arg]  # generic in recent click only
        self.item, self.choices = item, choices

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, (list, tuple)):
            return value
        parts = [part.strip() for part in str(value).split(",")]
        if not any(parts):
            self.fail(f"{value!r} names nothing: give one or more, comma-separated", param, ctx)
        if "" in parts:  # a typo (1,,3) would otherwise run a grid other than the one written
            self.fail(f"{value!r} has an empty entry (entry {parts.index('') + 1}): give one or more, "
                      "comma-separated, with nothing empty between commas", param, ctx)
        if self.item is not None:
            converted = [self.item.convert(part, param, ctx) for part in parts]
        else:
            unknown = [part for part in parts if part not in self.choices]
            if unknown:
                self.fail(f"unknown {', '.join(map(repr, unknown))}; choose from {', '.join(self.choices)}", param, ctx)
            converted = parts
        first: dict[Any, int] = {}  # each value (numbers as numbers: 1 and 1.0 are one rate) and where it first appears
        for at, item in enumerate(converted):
            if item in first:  # the same run twice: twice the work, the same row listed twice
                self.fail(f"{value!r} repeats {parts[first[item]]!r} (entries {first[item] + 1} and {at + 1}, "
                          f"{parts[at]!r}): give each once", param, ctx)
            first[item] = at
        return converted


def _own_options(name: str) -> Callable[[Any], Any]:
    """The grid-specific options, shown in ``name``'s help only where ``name`` uses them."""

    def hide(param: str) -> bool:
        return name not in OWN_OPTIONS[param]

    return option_group(
        click.option("--settings", type=CommaList(choices=CONDITION_SETTINGS), metavar="NAMES", hidden=hide("settings"), help="Comma-separated subset of reference, momentum, adam, weight-decay, mlp, embedding-linear, dense-linear, infonce-dot, low-lr, asymmetric (transformer user tower over history, id item table). [default: all]"),
        click.option("--mitigations", "mitigation_names", type=CommaList(choices=MITIGATION_SETTINGS), metavar="NAMES", hidden=hide("mitigation_names"), help="Comma-separated subset of the trained models reference, logq, weight-decay, adam (cosine and alpha serving come with reference). [default: all]"),
        click.option("--lrs", type=CommaList(ranged("train_lr")), metavar="LRS", hidden=hide("lrs"), help="Comma-separated learning rates. [default: 0.03,0.1,0.3,1,3,10,30]"),
        click.option("--lr", type=ranged("train_lr"), default=10.0, show_default=True, hidden=hide("lr"), help=LR_HELP.get(name, "")),
        click.option("--bootstrap", type=ranged("bootstrap"), default=1000, show_default=True, hidden=hide("bootstrap"), help="Bootstrap resamples for the CI of Spearman rho (0: no CI). C5 and the violates labels read rho's p-value, never the CI, so no value of it changes them."),
        _hidden_unless(holdout_options(0.2), hide("holdout_fraction")),
        click.option("--alpha", "alphas", type=ranged("alphas"), multiple=True, hidden=hide("alphas"), help="Norm-aware serving alpha_A of the reference model (repeatable). [default: 0.25, 0.5, 0.75]"),
    )


def _hidden_unless(decorator: Callable[[Any], Any], hidden: bool) -> Callable[[Any], Any]:
    """``decorator`` (options defined elsewhere), its options hidden when ``hidden``."""

    def apply(function: Any) -> Any:
        before = len(getattr(function, "__click_params__", []))
        function = decorator(function)
        for param in function.__click_params__[before:]:
            param.hidden = hidden
        return function

    return apply


PLUGINS_REFUSED = (
    "a grid measures each run with check's own functions (rho, head shares, C5 from the run's settings), not a "
    "whole audit, so no plugin hook would run; audit one run with the plugin: `popaudit retrain` with the run's "
    "settings, then `popaudit check MODEL.pt --plugin FILE`"
)
"""Why ``experiment --plugin`` is a usage error (``refuse_plugins``)."""


def _refuse_foreign(name: str, ctx: click.Context) -> None:
    """An option of another grid, given on the command line, is a usage error."""
    for param in ctx.command.params:
        users = OWN_OPTIONS.get(param.name or "")
        if users is None or name in users or ctx.get_parameter_source(param.name or "") != ParameterSource.COMMANDLINE:
            continue
        flag = max(param.opts, key=len)
        which = " and ".join(repr(u) for u in users)
        raise click.UsageError(f"{flag} applies to {which} only, not {name!r}")


def _subcommand(name: str) -> click.Command:
    summary, description, example = HELP[name]

    @click.command(name, short_help=summary, help=f"{' '.join(description.split())}\n\n\b\nExample:\n  {example}")
    @click.option("-o", "--output", "out_dir", type=click.Path(path_type=Path, file_okay=False), required=True, help="Folder for results.json, results.md and the plots (created if missing).")
    @click.option("--seeds", type=ranged("seeds"), default=3, show_default=True, help="Number of seeds per setting (seeds SEED, SEED+1, ...); the table reports mean ± std (one seed: the value).")
    @click.option("--seed", type=ranged("seed"), default=0, show_default=True, help="First seed.")
    @_own_options(name)
    @data_options
    @click.option("--epochs", type=ranged("epochs"), default=5, show_default=True, help="Training epochs per run.")
    @click.option("--batch-size", type=ranged("batch_size"), default=256, show_default=True, help="Interactions per batch.")
    @click.option("--dim", type=ranged("dim"), default=32, show_default=True, help="Embedding dimension.")
    @click.option("-k", "--k", type=ranged("k"), default=100, show_default=True, help="Retrieval cut-off of head_share_1pct@K" + (" and of the accuracy measures." if name == "mitigations" else ", at most 10% of the catalogue (the verdict's rule)."))
    @jobs_option
    @threads_option
    @click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors: no progress, no table (the files hold it).")
    @common_options
    @refuse_plugins(PLUGINS_REFUSED)
    def run(**options: Any) -> None:
        _refuse_foreign(name, click.get_current_context())
        run_experiment(name, **options)

    return run


class ExperimentGroup(click.Group):
    """The grids as subcommands; NAME may follow options, as it could before."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, name_first(args, self.commands))


def name_first(args: list[str], commands: Mapping[str, click.Command]) -> list[str]:
    """``args`` with the first subcommand name moved to the front, when options (and
    their values) come before it; otherwise unchanged."""
    takes_value = {
        opt for cmd in commands.values() for param in cmd.params
        if isinstance(param, click.Option) and not param.is_flag and not param.count for opt in param.opts
    }
    i = 0
    while i < len(args) and args[i] != "--":
        if args[i] in commands:
            return [args[i], *args[:i], *args[i + 1:]]
        if not args[i].startswith("-") or args[i] == "-":
            break
        i += 2 if args[i] in takes_value else 1
    return args


@click.group("experiment", cls=ExperimentGroup)
def command() -> None:
    """Reproduce the published ablations on synthetic data or your own log, into -o DIR.

    --data PATH runs every setting on a log (MovieLens, RecBole .inter, Parquet, CSV):
    where does your own catalogue start to skew? -j N runs a grid's runs in N processes
    (identical results). `popaudit experiment NAME --help` lists NAME's options.

    \b
    Examples:
      popaudit experiment conditions --seeds 3 -o results/conditions
      popaudit experiment lr-sweep --data ml-100k/u.data --seeds 1 -j 4 -o results/lr
      popaudit experiment mitigations --data ml-100k/u.data -o results/mitigations
    """


for _name in EXPERIMENTS:
    command.add_command(_subcommand(_name))


def run_experiment(
    name: str,
    *,
    out_dir: Path,
    seeds: int,
    seed: int,
    settings: list[str] | None,
    mitigation_names: list[str] | None,
    lrs: list[float] | None,
    lr: float,
    data: DataChoice,
    epochs: int,
    batch_size: int,
    dim: int,
    bootstrap: int,
    k: int,
    holdout_fraction: float,
    split: str,
    alphas: tuple[float, ...],
    jobs: int,
    threads: int | None,
    quiet: bool = False,
) -> None:
    """Run grid ``name`` with the parsed options, print its table (not ``quiet``) and write its files."""
    from auditor.train.data import times_use
    from auditor.train.experiments import ExperimentSizes, builds_histories
    from auditor.train.threads import set_threads

    try:  # a command line whose seeds pass the range is a usage error, before any work
        seed_list = seed_run(seed, seeds)
    except InputError as exc:
        raise click.UsageError(str(exc)) from exc
    if data.path is not None:
        check_not_inputs({f"-o {file}": out_dir / file for file in OUTPUT_FILES}, {"--data": data.path})
    sizes = ExperimentSizes(
        n_users=data.n_users, n_items=data.n_items, n_interactions=data.n_interactions, zipf=data.zipf,
        epochs=epochs, batch_size=batch_size, dim=dim, lr=lr, k=k, n_bootstrap=bootstrap,
    )
    names = settings or mitigation_names
    progress = RichProgress(enabled=not quiet)
    if jobs == 1:
        set_threads(threads)
    histories = name == "conditions" and builds_histories(names, sizes)  # recent items: latest by time
    log = (data.read(times=times_use(name == "mitigations" and split != "random", histories), progress=progress)
           if data.path else None)
    notes = [*log.warnings, *([log.history_order_warning()] if histories else [])] if log is not None else []
    for note in filter(None, notes):
        click.echo(f"Warning: {note}", err=True)
    if name == "mitigations":
        from auditor.report.mitigation_summary import mitigation_document
        from auditor.report.mitigation_summary import write_results as write_mitigations
        from auditor.mitigation.experiment import run_mitigations

        found = run_mitigations(
            seed_list, sizes, fraction=holdout_fraction, split=split, alphas=alphas or DEFAULT_ALPHAS,
            settings=names, data=log, jobs=jobs, threads=threads, progress=progress,
        )
        show(mitigation_document(found), write_mitigations(found, out_dir), quiet)
    else:
        _run_grid(name, seed_list, sizes, names, lrs, out_dir, log, jobs, threads, progress, quiet)


def _run_grid(
    name: str, seeds: list[int], sizes: ExperimentSizes, names: list[str] | None, lrs: list[float] | None, out_dir: Path,
    log: TrainingData | None, jobs: int, threads: int | None, progress: Progress, quiet: bool,
) -> None:
    """``conditions`` or ``lr-sweep``: run it, print its table, write its files."""
    from auditor.report.experiment_summary import experiment_document, write_results
    from auditor.train.experiments import DEFAULT_LRS, run_conditions, run_lr_sweep

    if name == "conditions":
        result = run_conditions(seeds, sizes, settings=names, data=log, jobs=jobs, threads=threads, progress=progress)
    else:
        rates = lrs or list(DEFAULT_LRS)
        result = run_lr_sweep(rates, seeds, sizes, data=log, jobs=jobs, threads=threads, progress=progress)
    show(experiment_document(result), write_results(result, out_dir), quiet)


def show(document: Document, written: list[Path], quiet: bool = False) -> None:
    """The data sentence and table on stdout, then each file written (nothing when
    ``quiet``); off a terminal (a log file) the table keeps its natural width and the
    sentence one line, as in results.md."""
    if quiet:
        return
    from rich.console import Console

    from auditor.cli._reports import print_report
    from auditor.cli._stdout import echo_stdout

    console = Console()
    print_report(document, width=console.width if console.is_terminal else 0)
    for path in written:
        echo_stdout(f"Wrote {path}")

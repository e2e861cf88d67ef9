"""What commands share: --debug/--plugin options, error handling, progress bars, and the
audit options of ``check`` and ``batch``."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from auditor.alpha import name_clash
from auditor.config import (
    DEFAULT_ALPHAS, INDEX_KINDS, INTERACTION_FORMATS, POPULARITY_KINDS, DeclaredTraining, GroupPolicy,
)
from auditor.errors import AuditError, interruption
from auditor.io import descriptor_named
from auditor.output_guard import file_key
from auditor.ranges import RANGES
from auditor.cli._queries_option import QuerySource
from auditor.cli._progress import RichProgress as RichProgress  # bars, or plain lines off a terminal

if TYPE_CHECKING:
    from rich.console import Console

F = TypeVar("F", bound=Callable[..., Any])


class _StderrConsole:
    """rich's Console on stderr, made on first print: rich takes about 30 ms to import,
    which ``popaudit --help`` and an error path never need."""

    @functools.cached_property
    def console(self) -> Console:
        from rich.console import Console

        return Console(stderr=True, highlight=False)

    def print(self, *objects: Any, **kwargs: Any) -> None:
        self.console.print(*objects, **kwargs)


stderr = _StderrConsole()


class FilePath(click.Path):
    """A file path: click's Path (a folder that exists is a usage error), and also a usage
    error when empty (``--json "$UNSET"``) or when it names a folder that does not exist
    yet: a trailing ``/`` (``-o newdir/``, which would otherwise write a file ``newdir``),
    or a last part ``.`` or ``..``; and ``-``, the common spelling of stdin and stdout,
    which popaudit does not take (it would read or write a file named ``-``): stdout is
    ``/dev/stdout``, or no ``-o`` at all."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):  # as typed (a converted Path has lost its trailing /)
            if not value:
                self.fail("the path is empty; give a file name", param, ctx)
            if value == "-":  # leaving out -o sends a report to stdout: said only where -o was the option
                leave_out = " (or, for a report, leave out -o)" if param is not None and "-o" in param.opts else ""
                self.fail(f"'-' is not stdin or stdout here; write to stdout with /dev/stdout{leave_out}, and name a "
                          "file called - as ./-", param, ctx)
            seps = tuple(sep for sep in (os.sep, os.altsep) if sep)
            names_folder = value.endswith(seps) or os.path.basename(value) in (".", "..")
            if names_folder and not os.path.isdir(value):  # an existing one: click says "is a directory"
                self.fail(f"{value!r} names a folder, not a file; give a file name", param, ctx)
        return super().convert(value, param, ctx)


PathArg = FilePath(path_type=Path, dir_okay=False)


PLUGIN_COMMAND = "popaudit.plugin_command"
"""``ctx.meta`` key: (plugin, command) of the plugin command running, whose failures name
the plugin (set by :func:`~auditor.cli._group.plugin_commands`)."""


def common_options(command: F) -> F:
    """Add ``--plugin`` and ``--debug`` and turn failures into ``Error: ...`` + exit code
    (:func:`command_failed`). The command gets ``plugins`` (the ``--plugin`` paths) when it
    has a parameter of that name or ``**kwargs``: a plugin command that needs none takes none."""
    parameters = inspect.signature(command).parameters.values()
    takes_plugins = any(p.name == "plugins" or p.kind is p.VAR_KEYWORD for p in parameters)
    refused = any(param.name == "plugins" for param in getattr(command, "__click_params__", ()))

    @click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
    @functools.wraps(command)
    def wrapper(*args: Any, debug: bool = False, **kwargs: Any) -> Any:
        if not takes_plugins:
            kwargs.pop("plugins", None)
        try:
            return command(*args, **kwargs)
        except (Exception, KeyboardInterrupt) as exc:
            command_failed(exc, debug)

    if refused:  # the command runs no plugin hook: _training.refuse_plugins took --plugin
        return wrapper  # type: ignore[return-value]
    plugin_option = click.option(
        "--plugin",
        "plugins",
        multiple=True,
        type=click.Path(path_type=Path, dir_okay=False),
        help="Load a single-file plugin (repeatable).",
    )
    return plugin_option(wrapper)  # type: ignore[return-value]


def command_failed(exc: BaseException, debug: bool) -> NoReturn:
    """The one error policy of every command: an AuditError is ``Error: ...`` with its exit
    code (a tripped alert, 3, said as a tripped gate), Ctrl-C exit 130 (SIGTERM 143), MemoryError and
    OSError exit 1; anything else a plugin command raised is ``Error: plugin 'NAME'
    failed in command CMD: Type: message`` (exit 1, as a failing hook is said), and a
    built-in's other exception, a bug, propagates. ``debug``: the traceback instead
    (Ctrl-C aside). click's own exceptions (usage errors, ``ctx.exit``) pass through."""
    if isinstance(exc, KeyboardInterrupt):
        fail(*interruption(exc))
    if debug or isinstance(exc, (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort)):
        raise exc
    context = click.get_current_context(silent=True)
    owner = None if context is None else context.meta.get(PLUGIN_COMMAND)
    said = "" if owner is None else f"plugin {owner[0]!r} (command {owner[1]}): "
    if isinstance(exc, AuditError):
        if exc.exit_code == 3:  # a tripped alert is no error: said as check says a tripped gate
            click.secho(said + str(exc), err=True, fg="red")
            sys.exit(3)
        fail(said + str(exc), exc.exit_code)
    if owner is not None:
        from auditor.plugins.manager import describe_failure  # loaded already: the plugin's command came from it

        fail(f"plugin {owner[0]!r} failed in command {owner[1]}: {describe_failure(exc)}", 1)
    if isinstance(exc, (MemoryError, OSError)):
        fail(f"{type(exc).__name__}: {exc}", 1)
    raise exc


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``Error: message`` on stderr and exit with ``code``."""
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


# ------------------------------------------------------------ audit options (check, batch)


QUIET_HELP = ("Print nothing but errors and tripped gates (for CI); a --format other than console still goes to "
              "stdout when no -o is given.")


def report_to_stdout(output: Path | None, fmt: str, quiet: bool) -> bool:
    """Whether the --format report goes to stdout: with no -o, unless -q silences a console
    report (a JSON, Markdown or HTML report asked for by name is the output, not chatter)."""
    return output is None and (not quiet or fmt != "console")


def refuse_stdout_twice(outputs: dict[str, Path | None], shown: str | None, messages: bool = False) -> None:
    """UsageError for an output on this process's stdout (``--json /dev/stdout``) while
    ``shown`` (the console report, a summary: None when nothing else goes there) is
    printed on stdout too, and for an output on its stderr (``--markdown /dev/stderr``)
    while ``messages`` (progress, "Wrote ...", ``Next:``: no -q) are printed there: the
    two would be mixed into one stream that reads as neither. A descriptor is on a stream
    when it is that descriptor or holds the same open file (``2>&1``, one terminal);
    ``/dev/null`` keeps nothing to mix."""
    for flag, path in outputs.items():
        fd = None if path is None else descriptor_named(path)
        if fd is None:
            continue
        if shown is not None and _on_stream(fd, 1):
            raise click.UsageError(f"{flag} {path} is standard output, where the {shown} is printed too; "
                                   "pass -q (or write it to a file)")
        if messages and _on_stream(fd, 2):
            where = "standard error" if fd == 2 else "the file standard error goes to"
            raise click.UsageError(f"{flag} {path} is {where}, where progress and messages are printed too; "
                                   "pass -q (or write it to a file)")


def _on_stream(fd: int, stream: int) -> bool:
    """Whether descriptor ``fd`` writes where ``stream`` (1 or 2) does: the same descriptor,
    or the same open file (:func:`~auditor.output_guard.file_key`, None for the null
    device); False for a descriptor not open (refused, worded, with the other outputs)."""
    try:
        key = file_key(os.fstat(fd))
        return key is not None and (fd == stream or key == file_key(os.fstat(stream)))
    except OSError:
        return False


def option_group(*options: Callable[[F], F]) -> Callable[[F], F]:
    """One decorator applying ``options`` in the order listed (as if stacked)."""

    def apply(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


class FiniteFloat(click.FloatRange):
    """A finite float (nan and inf are usage errors) in [low, high], ends excluded when
    ``open``/``high_open``; click's FloatRange lets nan through (nan < low is false).
    A FloatRange for click's help, which then shows the range."""

    name = "FLOAT"

    def __init__(
        self, low: float = -math.inf, high: float = math.inf, *, open: bool = False, high_open: bool = False
    ) -> None:
        super().__init__(
            None if math.isinf(low) else low, None if math.isinf(high) else high, min_open=open, max_open=high_open
        )
        self.low, self.high, self.open, self.high_open = low, high, open, high_open

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if number < self.low or (self.open and number == self.low):
            self.fail(f"{value!r} must be {'>' if self.open else '>='} {self.low:g}", param, ctx)
        if number > self.high or (self.high_open and number == self.high):
            self.fail(f"{value!r} must be {'<' if self.high_open else '<='} {self.high:g}", param, ctx)
        return number


Positive = FiniteFloat(0.0, open=True)
NonNegative = FiniteFloat(0.0)


class GappedInt(click.IntRange):
    """An integer setting whose range has a gap above 0 (``Range.least_nonzero``): 0 or
    from that much up to the bound, said with the range's own words."""

    def __init__(self, setting_name: str) -> None:
        self.range = RANGES[setting_name]
        super().__init__(int(self.range.low), int(self.range.high))

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not self.range.contains(number):
            self.fail(f"{number} is not {self.range.describe()} ({self.range.why}).", param, ctx)
        return number

    def _describe_range(self) -> str:
        return f"x=0 or {int(self.range.least_nonzero or 0)}<=x<={int(self.range.high)}"


def ranged(name: str) -> click.ParamType:  # type: ignore[type-arg]  # generic in recent click only
    """The option type of numeric setting ``name``: its range from auditor/ranges.py (the
    table manifest cells and library calls are checked against too), shown in --help."""
    found = RANGES[name]
    if found.least_nonzero is not None:
        return GappedInt(name)
    if found.integer:
        return click.IntRange(int(found.low), int(found.high), min_open=found.low_open, max_open=found.high_open)
    return FiniteFloat(found.low, found.high, open=found.low_open, high_open=found.high_open)


log_column_options = option_group(
    click.option("--interactions-format", type=click.Choice(INTERACTION_FORMATS), default="auto", show_default=True, help="Format of the interaction log when the name does not tell."),
    click.option("--user-col", help="User column of the interaction log (auto-detected from common names)."),
    click.option("--item-col", help="Item column of the interaction log (auto-detected from common names)."),
)
"""--interactions-format, --user-col, --item-col."""

frequencies_options = option_group(
    click.option("--frequencies", type=PathArg, help="Item counts computed elsewhere (Parquet/CSV: item id, count, optionally distinct users per item) in place of --interactions: the frequency-norm figures, popularity and head/tail sets are the log's; retrieval then queries every user-table row with training items among the candidates (not the log's protocol, as the report and gate lines say); history queries, probe batches and seen-item filtering need the log (the report says what was not measured). --item-col names its id column."),
    click.option("--count-col", help="Count column of --frequencies (auto-detected: count, frequency, freq, interactions, ...)."),
    click.option("--user-count-col", help="Distinct-users column of --frequencies (optional; auto-detected: users, n_users, distinct_users, ...)."),
)
"""--frequencies, --count-col, --user-count-col."""

table_key_options = option_group(
    click.option("--item-key", help="Name of the item table tensor when auto-detection is ambiguous."),
    click.option("--user-key", help="Name of the user table tensor when auto-detection is ambiguous."),
)
"""--item-key, --user-key."""

retrieval_options = option_group(
    click.option("-k", "--k", "ks", type=ranged("ks"), multiple=True, help="Retrieval cut-off K (repeatable). [default: 10 and 100]"),
    click.option("--queries", type=QuerySource(), default="auto", show_default=True, help="Who is queried: users (the training log's users by their user-table rows; rows of users absent from the log are untrained and not queried), history (each training user's mean training-item vector) or a .npy/Parquet file of vectors (no user identity: nothing excluded); auto picks users, else history. Every scoring serves each user the top-K of the items they did not train on."),
    click.option("--max-queries", type=ranged("max_queries"), default=10_000, show_default=True, help="Sample at most N of the population's users per audit (seeded)."),
    click.option("--index", type=click.Choice(INDEX_KINDS), default="auto", show_default=True, help="FAISS index: exact (IndexFlatIP), ivf or hnsw (approximate: recall is measured and reported, the figures are said to be approximate and can err either way, IVF tending to understate the skew and HNSW to overstate it, with the sign measured on the recall sample; norm-aware scorings are not measured). On CPU an index pays off only for very many queries: its two builds cost at least as much as exact search of about 28,000 (IVF) to 68,000 (HNSW) queries at 100k items, more on larger tables, and its searches about as much as exact search's (measured at 300k items x 2,000 queries x 32 dims: exact 2 s of CPU, IVF 58 s, HNSW 199 s; at 100k items x 20,000 queries IVF still took twice exact's CPU), so it is slower than exact unless the queries are far more, which is said before the build. auto is exact up to 2*items*queries*dim = 4e12, else ivf."),
    click.option("--popularity", type=click.Choice(POPULARITY_KINDS), default="interactions", show_default=True, help="Popularity for the exposure measures: interactions per item, or distinct users per item."),
    click.option("--no-retrieval", is_flag=True, help="Skip the retrieval-skew section."),
    click.option("--no-probes", is_flag=True, help="Skip the numeric probes on live encoders."),
)
"""-k, --queries, --max-queries, --index, --popularity, --no-retrieval, --no-probes."""

accuracy_options = option_group(
    click.option("--holdout", type=PathArg, help="Held-out interactions (any --interactions format, same id columns): recall, NDCG, hit rate and MRR @K of the lists retrieval serves (dot, cosine, popular, norm-aware), for the queried users with a held-out item (users the training log, or a checkpoint's recorded pairs, names: not with --frequencies alone); changes no exposure figure."),
    click.option("--alpha", "alphas", type=ranged("alphas"), multiple=True, help="Norm-aware scoring alpha_A measured beside dot and cosine: score = |q|^A |k|^A cos(q, k) (0 is cosine, 1 is dot); repeatable. [default: 0.25, 0.5, 0.75]"),
    click.option("--accuracy-tolerance", type=ranged("accuracy_tolerance"), default=0.98, show_default=True, help="A scoring is recommended over dot only when it keeps at least this share of dot's NDCG@K and its head-share reduction's 95% interval excludes 0."),
    click.option("--keep-seen", is_flag=True, help="Keep each user's training items among every scoring's candidates, for exposure and accuracy alike (default: excluded, as a deployed recommender serves); held-out repeats of a training pair are then hittable for every row, served lists included (default: a miss for every row)."),
)
"""--holdout, --alpha, --accuracy-tolerance, --keep-seen."""

declared_training_options = option_group(
    click.option("--optimizer", help="Declare the item tower's optimizer when the file does not record it (sgd, momentum, adam, adamw, adagrad, rmsprop)."),
    click.option("--momentum", type=ranged("momentum"), help="Declare the item tower's SGD momentum (0: plain SGD)."),
    click.option("--weight-decay", type=ranged("weight_decay"), help="Declare the weight decay on the item parameters."),
    click.option("--lr", type=ranged("lr"), help="Declare the item tower's learning rate (used by C5)."),
    click.option("--loss", help="Declare the training loss (infonce-cos, cosine, infonce-dot, bpr, mse, ...)."),
)
"""--optimizer, --momentum, --weight-decay, --lr, --loss (what a file does not record)."""

id_mapping_options = option_group(
    click.option("--user-ids", type=PathArg, help="Raw user id of each user-table row, in row order (where user rows meet log users: probes)."),
    click.option("--id-offset", type=ranged("id_offset"), help="Table row = raw id - N wherever ids are taken as rows (1 for 1-based ids, as in MovieLens)."),
    click.option("--assume-row-ids", is_flag=True, help="Take raw ids as table rows even when the log shows they evidently are not (ids beyond the table); the report says so."),
)
"""--user-ids, --id-offset, --assume-row-ids."""

sampling_options = option_group(
    click.option("--seed", type=ranged("seed"), default=0, show_default=True, help="Seed for sampling, bootstrap and probes."),
    click.option("--bootstrap", type=ranged("bootstrap"), default=1000, show_default=True, help="Bootstrap resamples for the 95% intervals: Spearman's ρ, and with --holdout each scoring's change against dot (paired over users); 0 to skip. C5 grades ρ by its p-value, never the CI, so it does not change C5."),
)
"""--seed, --bootstrap."""

group_options = option_group(
    click.option("--head-mass", type=ranged("head_mass"), default=0.2, show_default=True, help="Head items of the user-side measures: the most popular items holding this share of the popularity mass."),
    click.option("--tail-mass", type=ranged("tail_mass"), default=0.2, show_default=True, help="Tail items: those outside the most popular items holding 1 - this share (cold items included)."),
    click.option("--popular-percent", type=ranged("popular_percent"), default=20.0, show_default=True, help="Users are grouped by the share of their training items among the top P% most popular items."),
    click.option("--niche-fraction", type=ranged("niche_fraction"), default=0.2, show_default=True, help="Share of users, lowest popular share first, who are niche."),
    click.option("--blockbuster-fraction", type=ranged("blockbuster_fraction"), default=0.2, show_default=True, help="Share of users, highest popular share first, who are blockbuster (the rest are diverse)."),
    click.option("--short-head-mass", type=ranged("short_head_mass"), default=0.8, show_default=True, help="Short head of PopRSP, PopREO and ACLT: the most popular items holding this share of the mass."),
    click.option("--top-items", type=ranged("top_items"), default=20, show_default=True, metavar="N", help="Items listed in the table of items dot serving raises most over cosine, and of those it lowers most."),
)
"""The popularity groups' cut-offs (docs/measures.md) and --top-items."""


def audit_fields(options: dict[str, Any]) -> dict[str, Any]:
    """:class:`~auditor.config.AuditConfig` fields from parsed options.

    The options above that the config names differently become ``ks`` (default 10 and
    100), ``retrieval``, ``probes`` and ``declared``; every other option passes through
    under its own name, which is the config field's.
    """
    fields = dict(options)
    declared = [fields.pop(name) for name in ("optimizer", "momentum", "weight_decay", "lr", "loss")]
    fields["ks"] = tuple(fields.pop("ks")) or (10, 100)  # repeats: AuditConfig drops them (ranges.plain_numbers)
    fields["retrieval"] = not fields.pop("no_retrieval")
    fields["probes"] = not fields.pop("no_probes")
    fields["declared"] = DeclaredTraining(*declared)
    if (clash := GroupPolicy.overlap(fields)) is not None:  # options that cannot hold together: usage
        raise click.UsageError(clash)
    if "alphas" in fields:
        fields["alphas"] = tuple(fields["alphas"]) or DEFAULT_ALPHAS
        if (clash := name_clash(fields["alphas"])) is not None:  # never merged silently into one scoring
            raise click.UsageError(f"--alpha {clash}")
    return fields


@functools.cache
def option_names() -> dict[str, str]:
    """Setting (an AuditConfig field, or a command's own setting) -> the command-line flag
    that sets it, for messages: the one place the CLI's spellings are registered."""
    from auditor.config import AuditConfig, DeclaredTraining, GroupPolicy

    special = {"model": "MODEL", "ks": "-k", "retrieval": "--no-retrieval", "probes": "--no-probes",
               "plugins": "--plugin", "alphas": "--alpha", "output": "-o", "alerts": "--alert",
               "interval": "--trace-every"}
    names = [f.name for f in dataclasses.fields(AuditConfig)] + [f.name for f in dataclasses.fields(DeclaredTraining)]
    # Settings of the commands themselves (batch, retrain) that library messages name.
    names += ["output", "jobs", "flush_interval", "fail_on", "resume", "data_format", "zipf", "row_timeout", "plugin_timeout"]
    names += ["threads", "holdout_fraction", "split", "time_col", "logq"]  # retrain, experiment
    names += ["temperature", "epochs", "batch_size", "init_std", "hidden_dim", "history_length", "item_encoder",
              "user_encoder", "user_optimizer"]  # retrain, experiment (training settings)
    names += ["alpha", "tensors_only"]  # popaudit mitigate
    names += ["markdown", "html"]  # check's and batch's report outputs
    names += ["rank_by"]  # batch's summary
    names += ["alerts", "trace", "interval"]  # the training monitor (retrain)
    names += ["seeds", "lrs", "settings", "mitigations"]  # experiment's own
    names += [f.name for f in dataclasses.fields(GroupPolicy)]  # the popularity groups (AuditConfig fields of these names)
    return {name: special.get(name, "--" + name.replace("_", "-")) for name in names}


class MemorySize(click.ParamType):  # type: ignore[type-arg]  # generic in recent click only
    """Bytes, or a size such as 4G / 512MiB."""

    name = "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        from auditor.config import parse_memory_size

        try:
            size = parse_memory_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if not RANGES["max_memory"].contains(size):
            self.fail(f"{value!r} is more than 1 PiB", param, ctx)
        return size

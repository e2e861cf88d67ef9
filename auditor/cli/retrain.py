"""``popaudit retrain``: train a two-tower baseline and write a self-contained checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from auditor.cli._common import PathArg, RichProgress, common_options, ranged
from auditor.cli._next import check_command
from auditor.cli._stdout import echo_stdout
from auditor.wording import plural, training_rho
from auditor.cli._training import DataChoice, data_options, holdout_options, refuse_inapplicable, refuse_plugins, threads_option
from auditor.output_guard import check_not_inputs
from auditor.train import ITEM_ENCODERS, LOSSES, OPTIMIZERS, USER_ENCODERS

if TYPE_CHECKING:
    from auditor.train.retrain import Retrained


@click.command("retrain")
@data_options
@holdout_options(None)
@click.option("--optimizer", type=click.Choice(OPTIMIZERS), default="sgd", show_default=True, help="Item-tower optimizer (C1 holds only for plain sgd without weight decay).")
@click.option("--lr", type=ranged("train_lr"), help="Item-tower learning rate. [default: 10 for sgd/momentum on a cosine loss, 1 for sgd/momentum on infonce-dot, 0.01 for adam/adamw]")
@click.option("--momentum", type=ranged("train_momentum"), default=0.9, show_default=True, help="Momentum of the 'momentum' optimizer (a usage error unless --optimizer or --user-optimizer is momentum).")
@click.option("--weight-decay", type=ranged("weight_decay"), default=0.0, show_default=True, help="Weight decay of both towers' optimizers.")
@click.option("--item-encoder", type=click.Choice(ITEM_ENCODERS), default="embedding", show_default=True, help="Item tower: id table (embedding, onehot-linear: C2/C3 hold), linear over dense features (dense-linear: C3 violated), embedding-linear or mlp (C2 and C3 violated).")
@click.option("--user-encoder", type=click.Choice(USER_ENCODERS), default="embedding", show_default=True, help="User tower: id table, MLP, or a small transformer over the user's recent items.")
@click.option("--user-optimizer", type=click.Choice(OPTIMIZERS), help="User-tower optimizer. [default: --optimizer]")
@click.option("--user-lr", type=ranged("train_lr"), help="User-tower learning rate. [default: --lr when the towers share an optimizer, else that optimizer's default]")
@click.option("--loss", type=click.Choice(LOSSES), default="infonce-cos", show_default=True, help="infonce-cos (in-batch softmax over cosine/temperature), infonce-dot (over dot products: C4 violated) or cosine (pointwise).")
@click.option("--temperature", type=ranged("temperature"), default=0.1, show_default=True, help="Softmax temperature of the InfoNCE losses (the pointwise cosine loss has none: refused with it).")
@click.option("--logq", is_flag=True, help="logQ correction (Yi et al. 2019): subtract log p_j, item j's share of the training interactions, from its in-batch softmax logits (infonce losses only: refused with --loss cosine). It removes the softmax's sampling bias against popular items, so it raises their exposure: a training-side change to compare, not a cure for popularity bias.")
@click.option("--dim", type=ranged("dim"), default=32, show_default=True, help="Embedding dimension of both towers.")
@click.option("--epochs", type=ranged("epochs"), default=10, show_default=True, help="Passes over the interactions.")
@click.option("--batch-size", type=ranged("batch_size"), default=256, show_default=True, help="Interactions per batch (the other items of a batch are the negatives).")
@click.option("--seed", type=ranged("seed"), default=0, show_default=True, help="Seed of the data generator, initialisation and shuffling (runs are deterministic on CPU: the same settings and seed write a byte-identical checkpoint on the same machine and --threads).")
@click.option("--init-std", type=ranged("init_std"), default=0.1, show_default=True, help="Standard deviation of the normal initialisation of the id tables.")
@click.option("--hidden-dim", type=ranged("hidden_dim"), default=64, show_default=True, help="Hidden width of the mlp, embedding-linear and transformer towers (a usage error with towers that have no hidden layer; a multiple of the transformer's 2 attention heads).")
@click.option("--history-length", type=ranged("history_length"), default=20, show_default=True, help="Recent items per user seen by the transformer user tower (a usage error with other user towers): the latest by the log's time column (ties in file order); a log with no time column, or one with a blank or unreadable time, gives its last rows in file order (with a warning).")
@click.option("-o", "--output", type=PathArg, default="model.pt", show_default=True, help="Checkpoint to write (atomically).")
@click.option("--trace", type=click.Path(path_type=Path, dir_okay=False), help="Write the training monitor's trace (JSON lines: rho, slope, update angles, head share every --trace-every steps and at each epoch end, alerts) as training goes; readable if training dies (docs/monitor.md).")
@click.option("--trace-every", type=click.IntRange(min=0), default=500, show_default=True, help="Optimizer steps between the monitor's step records (0: epoch records only). It applies without --trace too: the checkpoint's epoch trace measures update angles around these steps (0: none, NaN).")
@click.option("--alert", "alerts", multiple=True, metavar="EXPR", help="Training alert in --fail-on syntax over the monitor's figures, e.g. 'spearman>0.5' or 'angle_share_90_1>0.9'; repeatable.")
@click.option("--on-alert", type=click.Choice(["warn", "stop", "fail"]), default="warn", show_default=True, help="When an alert fires: print it, stop training (the checkpoint holds the model so far), or fail (exit 3, no checkpoint). A usage error without --alert.")
@threads_option
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors and alerts: no progress, no summary.")
@common_options
@refuse_plugins("retrain writes a checkpoint and runs no plugin hook; pass the plugin to `popaudit check` on that checkpoint")
def command(
    data: DataChoice,
    holdout_fraction: float | None,
    split: str,
    output: Path,
    trace: Path | None,
    trace_every: int,
    alerts: tuple[str, ...],
    on_alert: str,
    threads: int | None,
    quiet: bool,
    **settings: Any,
) -> None:
    """Train a two-tower baseline and write a checkpoint `popaudit check` audits as is.

    The checkpoint holds the state dict, both optimizers' state, every setting, the raw
    item and user ids, item frequencies, the encoders' outputs and a per-epoch trace
    (loss, frequency-norm Spearman rho, mean item norm). The defaults train the
    all-conditions-hold baseline (id embeddings, plain SGD, cosine InfoNCE, high
    learning rate), the case most exposed to popularity bias.

    With --holdout-fraction F the latest F of each user's interactions (--split time)
    or a seeded random F are held out, never trained on, and stored in the
    checkpoint: `popaudit check model.pt` then measures accuracy beside exposure.
    --logq trains with the logQ correction, which raises popular items' exposure
    (it is a correction of the loss, not a cure for popularity bias).

    The training monitor watches every run: its per-epoch figures are the checkpoint's
    trace; --trace also writes every record to a file as training goes, and --alert
    'spearman>0.5' (with --on-alert stop) ends training when the bias appears.

    torch uses --threads threads (default: the cores this process may use that the load
    average leaves idle, at most 8; torch's own default, every core of the machine,
    crawls when other processes keep them busy).

    \b
    Examples:
      popaudit retrain -o baseline.pt
      popaudit retrain --optimizer adam -o adam.pt
      popaudit retrain --data ml-100k/u.data --user-encoder transformer -o ml.pt
      popaudit retrain --data ml-100k/u.data --holdout-fraction 0.2 --logq -o logq.pt
      popaudit retrain --trace trace.jsonl --alert 'spearman>0.5' --on-alert stop
    """
    from auditor.train.loop import TrainConfig
    from auditor.train.retrain import retrain
    from auditor.train.watch import WatchOptions

    if holdout_fraction is None and split != "auto":
        raise click.UsageError("--split applies with --holdout-fraction only")
    refuse_inapplicable({**settings, "alerts": alerts})  # --on-alert needs an --alert
    check_not_inputs({"-o": output, "--trace": trace}, {"--data": data.path})
    progress = RichProgress(enabled=not quiet)
    config = TrainConfig(**settings)  # every other option is a training setting of the same name
    watch = WatchOptions(trace=trace, interval=trace_every, alerts=alerts, on_alert="raise" if on_alert == "fail" else on_alert)
    done = retrain(
        lambda times: data.read(config.seed, times=times, progress=progress), config, output,
        holdout_fraction=holdout_fraction, split=split, watch=watch, threads=threads, progress=progress,
    )
    for left_out in done.data.warnings:
        click.echo(f"Warning: {left_out}", err=True)
    if (note := done.history_order_warning()) is not None:
        click.echo(f"Warning: {note}", err=True)
    if done.holdout is not None and not len(done.holdout.holdout):
        from auditor.loading.recorded_split import empty_holdout_reason  # here: auditor.loading brings numpy

        where = "synthetic data" if data.path is None else str(data.path)
        click.echo(f"Warning: the holdout of {where} came out empty: "
                   f"{empty_holdout_reason({'holdout': done.holdout.record()})}.", err=True)
    if not quiet:
        _summary(done, data.path, output, trace)


def _summary(done: Retrained, path: Path | None, output: Path, trace: Path | None) -> None:
    """What was trained on, the split, the model, the final epoch, and the files written."""
    result, config, trained_on, holdout = done.result, done.result.config, done.train_data, done.holdout
    last = result.trace[-1]
    source = "synthetic" if path is None else str(path)
    echo_stdout(
        f"Trained on {source}: {done.data.n_users} users, {done.data.n_items} items, "
        f"{trained_on.n_interactions} interactions, {plural(len(result.trace), 'epoch')} in {done.seconds:.1f} s "
        f"({done.threads} thread{'s' if done.threads != 1 else ''})."
    )
    if holdout is not None:
        from auditor.loading.recorded_split import recorded_split_notes  # here: auditor.loading brings numpy

        record = holdout.record()
        # check's own sentence on a recorded split (interactions held out vs distinct pairs evaluated)
        said = recorded_split_notes({"holdout": record}, f"Held out ({holdout.method} split, never trained on)")
        echo_stdout(
            (said[0] if said else
             f"Held out ({holdout.method} split, fraction {holdout.fraction:g}): "
             f"{plural(record['n_holdout_interactions'], 'interaction')} of {plural(record['n_holdout_users'], 'user')}, "
             "never trained on") + "."
        )
        if record["n_holdout_pairs"]:
            echo_stdout("The held-out pairs are stored in the checkpoint: `popaudit check` of it measures accuracy on them.")
        else:  # the model is fine: check audits it and lists accuracy as not measured (the warning said why)
            echo_stdout("The holdout came out empty, so `popaudit check` of it audits the model and lists accuracy "
                       "under Not measured.")
    echo_stdout(
        f"Model: {config.item_encoder} item tower, {config.user_encoder} user tower, dim {config.dim}, "
        f"loss {config.loss}{' with logQ correction' if config.logq else ''}; "
        f"item optimizer {config.optimizer} (lr {config.item_lr:g}), user optimizer "
        f"{config.resolved_user_optimizer} (lr {config.resolved_user_lr:g})."
    )
    echo_stdout(
        f"Final epoch: loss {last['loss']:.4f}, frequency-norm Spearman ρ {training_rho(last['spearman'])}, "
        f"mean item norm {last['mean_norm']:.3f}."
    )
    if result.stopped is not None:
        echo_stdout(f"Training {result.stopped}; the checkpoint holds the model at that point.")
    echo_stdout(f"Wrote {output}" + (f" and the trace {trace}" if trace is not None else ""))
    echo_stdout("Next: " + check_command(output, {}))

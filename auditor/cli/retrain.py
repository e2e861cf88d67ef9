"""``popaudit retrain``: train a two-tower baseline and write a self-contained checkpoint."""

from __future__ import annotations

import time
from pathlib import Path

import click

from auditor.cli._common import FiniteFloat, NonNegative, Positive, RichProgress, common_options
from auditor.config import INTERACTION_FORMATS
from auditor.errors import name_settings
from auditor.io import check_not_inputs
from auditor.train import ITEM_ENCODERS, LOSSES, OPTIMIZERS, USER_ENCODERS



name_settings({"data_format": "--data-format", "zipf": "--zipf"})  # as library messages name them


@click.command("retrain")
@click.option("--data", "data_source", default="synthetic", show_default=True, metavar="synthetic|PATH", help="Training data: 'synthetic' (Zipf popularity, topical users) or an interaction log (MovieLens u.data/ratings.dat/ratings.csv, RecBole .inter, Parquet, CSV/TSV).")
@click.option("--data-format", type=click.Choice(INTERACTION_FORMATS), default="auto", show_default=True, help="Format of the --data file when its name does not tell.")
@click.option("--user-col", help="User column of the --data file (auto-detected from common names).")
@click.option("--item-col", help="Item column of the --data file (auto-detected from common names).")
@click.option("--optimizer", type=click.Choice(OPTIMIZERS), default="sgd", show_default=True, help="Item-tower optimizer (C1 holds only for plain sgd without weight decay).")
@click.option("--lr", type=Positive, help="Item-tower learning rate. [default: 10 for sgd/momentum on a cosine loss, 1 for sgd/momentum on infonce-dot, 0.01 for adam/adamw]")
@click.option("--momentum", type=FiniteFloat(0, 1, open=True, high_open=True), default=0.9, show_default=True, help="Momentum of the 'momentum' optimizer.")
@click.option("--weight-decay", type=NonNegative, default=0.0, show_default=True, help="Weight decay of both towers' optimizers.")
@click.option("--item-encoder", type=click.Choice(ITEM_ENCODERS), default="embedding", show_default=True, help="Item tower: id table (embedding, onehot-linear: C2/C3 hold), linear over dense features (dense-linear: C3 violated), embedding-linear or mlp (C2 violated).")
@click.option("--user-encoder", type=click.Choice(USER_ENCODERS), default="embedding", show_default=True, help="User tower: id table, MLP, or a small transformer over the user's recent items.")
@click.option("--user-optimizer", type=click.Choice(OPTIMIZERS), help="User-tower optimizer. [default: --optimizer]")
@click.option("--user-lr", type=Positive, help="User-tower learning rate. [default: --lr when the towers share an optimizer, else that optimizer's default]")
@click.option("--loss", type=click.Choice(LOSSES), default="infonce-cos", show_default=True, help="infonce-cos (in-batch softmax over cosine/temperature), infonce-dot (over dot products: C4 violated) or cosine (pointwise).")
@click.option("--temperature", type=Positive, default=0.1, show_default=True, help="Softmax temperature of the InfoNCE losses.")
@click.option("--dim", type=click.IntRange(min=1), default=32, show_default=True, help="Embedding dimension of both towers.")
@click.option("--epochs", type=click.IntRange(min=1), default=10, show_default=True, help="Passes over the interactions.")
@click.option("--batch-size", type=click.IntRange(min=2), default=256, show_default=True, help="Interactions per batch (the other items of a batch are the negatives).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the data generator, initialisation and shuffling (runs are deterministic on CPU).")
@click.option("--init-std", type=Positive, default=0.1, show_default=True, help="Standard deviation of the normal initialisation of the id tables.")
@click.option("--hidden-dim", type=click.IntRange(min=1), default=64, show_default=True, help="Hidden width of the mlp, embedding-linear and transformer towers.")
@click.option("--history-length", type=click.IntRange(min=1), default=20, show_default=True, help="Recent items per user seen by the transformer user tower.")
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), default="model.pt", show_default=True, help="Checkpoint to write (atomically).")
@click.option("--n-users", type=click.IntRange(min=1), default=1000, show_default=True, help="Synthetic data: users.")
@click.option("--n-items", type=click.IntRange(min=2), default=1000, show_default=True, help="Synthetic data: items.")
@click.option("--n-interactions", type=click.IntRange(min=1), default=50_000, show_default=True, help="Synthetic data: interactions.")
@click.option("--zipf", type=NonNegative, default=1.0, show_default=True, help="Synthetic data: Zipf exponent of item popularity.")
@common_options
def command(
    data_source: str,
    data_format: str,
    user_col: str | None,
    item_col: str | None,
    optimizer: str,
    lr: float | None,
    momentum: float,
    weight_decay: float,
    item_encoder: str,
    user_encoder: str,
    user_optimizer: str | None,
    user_lr: float | None,
    loss: str,
    temperature: float,
    dim: int,
    epochs: int,
    batch_size: int,
    seed: int,
    init_std: float,
    hidden_dim: int,
    history_length: int,
    output: Path,
    n_users: int,
    n_items: int,
    n_interactions: int,
    zipf: float,
    plugins: tuple[Path, ...],
) -> None:
    """Train a two-tower baseline and write a checkpoint `popaudit check` audits as is.

    The checkpoint holds the state dict, both optimizers' state, every setting, the raw
    item and user ids, item frequencies, the encoders' outputs and a per-epoch trace
    (loss, frequency-norm Spearman rho, mean item norm). The defaults train the
    all-conditions-hold baseline (id embeddings, plain SGD, cosine InfoNCE, high
    learning rate), the case most exposed to popularity bias.

    \b
    Examples:
      popaudit retrain -o baseline.pt
      popaudit retrain --optimizer adam -o adam.pt
      popaudit retrain --data ml-100k/u.data --user-encoder transformer -o ml.pt
    """
    from auditor.train.data import read_interactions, synthetic_interactions
    from auditor.train.loop import TrainConfig, save_checkpoint, train

    if data_source != "synthetic":
        check_not_inputs({"-o": output}, {"--data": Path(data_source)})
    progress = RichProgress()
    config = TrainConfig(
        optimizer=optimizer,
        lr=lr,
        momentum=momentum,
        weight_decay=weight_decay,
        item_encoder=item_encoder,
        user_encoder=user_encoder,
        user_optimizer=user_optimizer,
        user_lr=user_lr,
        loss=loss,
        temperature=temperature,
        dim=dim,
        init_std=init_std,
        epochs=epochs,
        batch_size=batch_size,
        seed=seed,
        hidden_dim=hidden_dim,
        history_length=history_length,
    )
    if data_source == "synthetic":
        data = synthetic_interactions(n_users, n_items, n_interactions, zipf, seed=seed)
    else:
        progress.note(f"reading {data_source}")
        data = read_interactions(
            Path(data_source), fmt=data_format, user_col=user_col, item_col=item_col, progress=progress
        )
    tic = time.perf_counter()
    result = train(data, config, progress=progress)
    seconds = time.perf_counter() - tic
    save_checkpoint(result, output)

    last = result.trace[-1]
    source = "synthetic" if data_source == "synthetic" else data_source
    click.echo(
        f"Trained on {source}: {data.n_users} users, {data.n_items} items, "
        f"{data.n_interactions} interactions, {epochs} epochs in {seconds:.1f} s."
    )
    click.echo(
        f"Model: {item_encoder} item tower, {user_encoder} user tower, dim {dim}, loss {loss}; "
        f"item optimizer {optimizer} (lr {config.item_lr:g}), user optimizer "
        f"{config.resolved_user_optimizer} (lr {config.resolved_user_lr:g})."
    )
    click.echo(
        f"Final epoch: loss {last['loss']:.4f}, frequency-norm Spearman ρ {last['spearman']:+.3f}, "
        f"mean item norm {last['mean_norm']:.3f}."
    )
    click.echo(f"Wrote {output}")
    click.echo(f"Next: popaudit check {output}")

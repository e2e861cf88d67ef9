"""Overhead of ``popaudit retrain``'s loop over a minimal hand-written PyTorch loop.

Both train the same model (same seed, same initial weights) on the same synthetic data
with the same batches; popaudit's loop adds the per-epoch trace (all item norms,
Spearman rho) and a rich progress bar (rendered into a string buffer, as it would on a
terminal). The two are timed alternately, ``--repeats`` times each, and the best of
each is compared, in process CPU time (all threads, so the progress bar's refresh
thread counts; robust on a shared machine) and in wall time. The requirement is a
ratio of at most 1.10.

    OMP_NUM_THREADS=1 python benchmarks/bench_train.py
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
from rich.console import Console
from rich.progress import BarColumn, TextColumn
from rich.progress import Progress as RichBar

from auditor.progress import Advance, Progress
from auditor.train.data import TrainingData, synthetic_interactions
from auditor.train.losses import two_tower_loss
from auditor.train.loop import TrainConfig, train, tower_inputs
from auditor.train.models import build_model
from auditor.train.optim import make_optimizer


class BufferedRichProgress(Progress):
    """A real rich progress bar drawn into a string buffer (a terminal stand-in)."""

    def __init__(self) -> None:
        self.console = Console(file=io.StringIO(), force_terminal=True, width=100)

    @contextmanager
    def track(self, description: str, total: float | None = None) -> Iterator[Advance]:
        with RichBar(TextColumn("{task.description}"), BarColumn(), console=self.console, transient=True) as bar:
            task = bar.add_task(description, total=total)
            yield lambda n=1: bar.advance(task, n)

    def note(self, message: str) -> None:
        self.console.print(message)


def minimal_loop(data: TrainingData, config: TrainConfig) -> float:
    """The hand-written baseline: same model, optimizers and batches; no bookkeeping."""
    features, histories = tower_inputs(config, data)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = build_model(config.model_spec(data), item_features=features, user_histories=histories)
    item_opt = make_optimizer(config.optimizer, model.item_parameters(), lr=config.item_lr)
    user_opt = make_optimizer(config.resolved_user_optimizer, model.user_parameters(), lr=config.resolved_user_lr)
    rng = np.random.default_rng(config.seed)
    users, items = torch.from_numpy(data.users), torch.from_numpy(data.items)
    n, bs = data.n_interactions, config.batch_size
    last = 0.0
    for _ in range(config.epochs):
        perm = torch.from_numpy(rng.permutation(n))
        eu, ei = users[perm], items[perm]
        for start in range(0, n, bs):
            loss = two_tower_loss(
                config.loss, model.encode_users(eu[start : start + bs]),
                model.encode_items(ei[start : start + bs]), config.temperature,
            )
            item_opt.zero_grad(set_to_none=True)
            user_opt.zero_grad(set_to_none=True)
            loss.backward()
            item_opt.step()
            user_opt.step()
        last = float(loss.detach())
    return last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-users", type=int, default=2000)
    parser.add_argument("--n-items", type=int, default=5000)
    parser.add_argument("--n-interactions", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--item-encoder", default="embedding")
    parser.add_argument("--user-encoder", default="embedding")
    args = parser.parse_args()

    data = synthetic_interactions(args.n_users, args.n_items, args.n_interactions, 1.0, seed=0)
    config = TrainConfig(
        item_encoder=args.item_encoder, user_encoder=args.user_encoder, epochs=args.epochs, seed=0
    )
    # warm-up (allocator, lazy imports)
    minimal_loop(data, TrainConfig(item_encoder=args.item_encoder, user_encoder=args.user_encoder, epochs=1))
    runs: dict[str, list[tuple[float, float]]] = {"minimal": [], "popaudit": []}
    for _ in range(args.repeats):
        for name in ("minimal", "popaudit"):
            wall, cpu = time.perf_counter(), time.process_time()
            if name == "minimal":
                minimal_loop(data, config)
            else:
                train(data, config, progress=BufferedRichProgress())
            runs[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    print(
        f"data: {args.n_users} users, {args.n_items} items, {args.n_interactions} interactions; "
        f"{args.item_encoder}/{args.user_encoder} towers, {args.epochs} epochs, "
        f"torch threads {torch.get_num_threads()}, best of {args.repeats}"
    )
    best = {name: (min(r[0] for r in rs), min(r[1] for r in rs)) for name, rs in runs.items()}
    for name, (wall, cpu) in best.items():
        print(f"{name:9s}: {cpu / args.epochs:.4f} CPU s/epoch, {wall / args.epochs:.4f} wall s/epoch")
    print(
        f"ratio popaudit/minimal: {best['popaudit'][1] / best['minimal'][1]:.3f} CPU time, "
        f"{best['popaudit'][0] / best['minimal'][0]:.3f} wall time (requirement <= 1.10)"
    )


if __name__ == "__main__":
    main()

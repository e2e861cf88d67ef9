"""Overhead of the training monitor on ``popaudit retrain``'s default model.

The same hand-written loop (retrain's default two-tower model: id embeddings, dim 32,
plain SGD at lr 10, cosine InfoNCE, batch 256, on retrain's default synthetic data:
1,000 users, 1,000 items, 50,000 interactions) runs with and without the monitor, as
``retrain`` configures it (every item's vector through the item tower, the data's
counts, the user tower on 128 users as queries, a trace file), at the default interval
unless ``--interval`` says otherwise. Both start from the same weights and see the same
batches; they are timed alternately, ``--repeats`` times each, and the best of each is
compared, in process CPU time and in wall time; the time spent inside the monitor's calls
(construction and close included) is also timed directly, which gives the same ratio
without the noise of other processes. The requirement is a ratio of at most 1.05.

    OMP_NUM_THREADS=1 python benchmarks/bench_monitor.py
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from auditor.monitor import DEFAULT_INTERVAL, TrainingMonitor
from auditor.train.data import TrainingData, synthetic_interactions
from auditor.train.losses import two_tower_loss
from auditor.train.loop import TrainConfig
from auditor.train.models import build_model
from auditor.train.watch import query_users


def run(data: TrainingData, config: TrainConfig, interval: int | None, trace: Path) -> tuple[int, float]:
    """One training run; ``interval`` None: no monitor. Returns (steps, wall seconds spent
    inside the monitor's calls, construction and close included)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = build_model(config.model_spec(data))
    item_opt, user_opt = config.optimizers(model)
    monitor, inside = None, 0.0
    if interval is not None:
        tic = time.perf_counter()
        users_sample = query_users(data.n_users, config.seed)
        monitor = TrainingMonitor(model.encode_items, n_items=data.n_items, counts=data.item_frequencies,
                                  interval=interval, optimizer=item_opt, trace=trace,
                                  queries=lambda: model.encode_users(users_sample))
        inside += time.perf_counter() - tic
    rng = np.random.default_rng(config.seed)
    users, items = torch.from_numpy(data.users), torch.from_numpy(data.items)
    steps = 0
    for _ in range(config.epochs):
        perm = torch.from_numpy(rng.permutation(data.n_interactions))
        for start in range(0, data.n_interactions, config.batch_size):
            batch = perm[start : start + config.batch_size]
            batch_items = items[batch]
            loss = two_tower_loss(config.loss, model.encode_users(users[batch]), model.encode_items(batch_items),
                                  config.temperature)
            item_opt.zero_grad(set_to_none=True)
            user_opt.zero_grad(set_to_none=True)
            loss.backward()
            if monitor is not None:
                tic = time.perf_counter()
                monitor.before_step(batch_items)
                inside += time.perf_counter() - tic
            item_opt.step()
            user_opt.step()
            if monitor is not None:
                tic = time.perf_counter()
                monitor.after_step()
                inside += time.perf_counter() - tic
            steps += 1
        if monitor is not None:
            tic = time.perf_counter()
            monitor.end_epoch(loss=float(loss.detach()))
            inside += time.perf_counter() - tic
    if monitor is not None:
        tic = time.perf_counter()
        monitor.close()
        inside += time.perf_counter() - tic
    return steps, inside


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--interval", type=int, default=DEFAULT_INTERVAL)
    args = parser.parse_args()

    data = synthetic_interactions(1000, 1000, 50_000, 1.0, seed=0)
    config = TrainConfig(epochs=args.epochs, seed=0)
    runs: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
    recorded: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        run(data, TrainConfig(epochs=1), args.interval, trace)  # warm-up (allocator, lazy imports)
        for _ in range(args.repeats):
            for name in ("off", "on"):
                wall, cpu = time.perf_counter(), time.process_time()
                steps, spent = run(data, config, None if name == "off" else args.interval, trace)
                runs[name].append((time.perf_counter() - wall, time.process_time() - cpu))
                if name == "on":
                    recorded.append(spent)
    best = {name: (min(r[0] for r in rs), min(r[1] for r in rs)) for name, rs in runs.items()}
    print(
        f"retrain's default model and data: 1000 users, 1000 items, 50000 interactions, {args.epochs} epochs "
        f"({steps} steps), torch threads {torch.get_num_threads()}, monitor interval {args.interval}, best of {args.repeats}"
    )
    for name, (wall, cpu) in best.items():
        print(f"monitor {name:3s}: {1000 * cpu / steps:.3f} CPU ms/step, {1000 * wall / steps:.3f} wall ms/step")
    n_records = args.epochs + (steps // args.interval if args.interval else 0)
    spent = float(np.median(recorded))
    print(f"inside the monitor: {1000 * spent:.1f} ms per run (median), {n_records} records")
    print(
        f"ratio monitor-on/monitor-off step time: {best['on'][1] / best['off'][1]:.3f} CPU time, "
        f"{best['on'][0] / best['off'][0]:.3f} wall time, measured A/B (noisy on a shared machine); "
        f"{(best['off'][0] + spent) / best['off'][0]:.3f} from the time spent inside the monitor "
        "(requirement <= 1.05)"
    )


if __name__ == "__main__":
    main()

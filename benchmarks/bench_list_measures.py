"""Benchmark: the list measures of one ``popaudit batch`` row, by CPU time (issue 25, goal 5).

Builds ``bench_batch.py``'s inputs (an ML-100K-size log, 943 users x 1,682 items, and a
64-dim item table), audits one model as a batch row does (``--bootstrap 0``, no probes:
dot, cosine, popular and the three alphas at K = 10 and 100, 943 queried users), keeps the
lists, measures and cut-offs the audit handed to ``retrieval.measure._measure_lists`` (the
"list measures" phase of ``bench_batch.py --profile``), then times that phase alone,
``--repeat`` rounds of ``--rows`` calls, by CPU time (``time.process_time``: on a shared
machine wall clocks swing with the neighbours' load). ``--holdout`` holds out 10% of the log
(NDCG per group and PopREO measured too).

``--baseline DIR`` also times another copy of popaudit in the same run, rounds interleaved
with this one's, e.g. the commit before a change::

    mkdir /tmp/base && git archive HEAD~3 auditor | tar -x -C /tmp/base
    python benchmarks/bench_list_measures.py --baseline /tmp/base

Goal (issue 25, goal 5): the phase at most :data:`GOAL_MS` ms CPU a row.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

GOAL_MS = 20.0
"""CPU milliseconds the list measures of one ML-100K-size row may take (issue 25, goal 5)."""
HERE = Path(__file__).resolve().parent


def captured_phase(folder: Path, holdout: bool) -> tuple[Any, ...]:
    """The arguments one audit of the bench's first model passes to ``_measure_lists``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import auditor.retrieval.measure as measure
    from auditor.audit import run_audit
    from auditor.config import AuditConfig

    sys.path.insert(0, str(HERE))
    from bench_batch import make_inputs

    tables = make_inputs(folder, 1, seed=0)
    log = folder / "log.parquet"
    held = None
    if holdout:
        table = pq.read_table(log).to_pydict()
        users, items = np.asarray(table["user_id"]), np.asarray(table["item_id"])
        out = np.random.default_rng(1).random(users.size) < 0.1
        log, held = folder / "train.parquet", folder / "holdout.parquet"
        pq.write_table(pa.table({"user_id": users[~out], "item_id": items[~out]}), log)
        pq.write_table(pa.table({"user_id": users[out], "item_id": items[out]}), held)
    calls: list[tuple[Any, ...]] = []
    original = measure._measure_lists

    def keep(*args: Any) -> Any:
        calls.append(args)
        return original(*args)

    measure._measure_lists = keep
    try:
        run_audit(AuditConfig(model=tables[0], interactions=log, holdout=held, bootstrap=0, probes=False))
    finally:
        measure._measure_lists = original
    return calls[0]


def time_phase(rows: int, repeat: int, holdout: bool) -> list[float]:
    """CPU ms per call of ``_measure_lists`` in each of ``repeat`` rounds of ``rows`` calls."""
    import auditor.retrieval.measure as measure
    from auditor.progress import SILENT

    with tempfile.TemporaryDirectory(prefix="bench_list_measures_") as tmp:
        lists, ks, measures, n_items, _ = captured_phase(Path(tmp), holdout)
        rounds = []
        for _ in range(repeat):
            start = time.process_time()
            for _ in range(rows):
                measure._measure_lists(lists, ks, measures, n_items, SILENT)
            rounds.append((time.process_time() - start) / rows * 1000)
    return rounds


def _run(baseline: Path | None, args: argparse.Namespace) -> list[float]:
    """One round set in a subprocess (this copy of popaudit, or ``baseline``'s first on the path)."""
    env = dict(os.environ)
    if baseline is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(baseline), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--inner", "--rows", str(args.rows),
           "--repeat", str(args.repeat), *(["--holdout"] if args.holdout else [])]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"benchmark failed ({done.returncode}): {done.stderr[-2000:]}")
    rounds: list[float] = json.loads(done.stdout.strip().splitlines()[-1])
    return rounds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=15, help="calls of the phase per round (default 15)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--holdout", action="store_true", help="hold out 10%% of the log (NDCG, PopREO measured)")
    parser.add_argument("--baseline", type=Path, help="a folder holding another auditor package, timed alongside")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner:
        print(json.dumps(time_phase(args.rows, args.repeat, args.holdout)))
        return 0
    copies: dict[str, Path | None] = {"this copy": None}
    if args.baseline is not None:
        copies["baseline"] = args.baseline
    rounds: dict[str, list[float]] = {name: [] for name in copies}
    for _ in range(2):  # interleaved, so both see the same neighbours
        for name, folder in copies.items():
            rounds[name] += _run(folder, args)
    print(f"list measures of one row (6 scorings x K = 10, 100; 943 users, 1,682 items"
          f"{'; 10% held out' if args.holdout else ''}), CPU ms per row:")
    for name, values in rounds.items():
        print(f"  {name:10s} min {min(values):6.1f}  median {statistics.median(values):6.1f}")
    best = min(rounds["this copy"])
    print(f"goal <= {GOAL_MS:.0f} ms: {'met' if best <= GOAL_MS else 'NOT met'} ({best:.1f} ms, the fastest round)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What the experiment grids measure in one trained run (docs/theory.md §7).

For each run: the angle between q_i and its update Δq_i in one real training step
(float64, on a copy), the frequency-norm Spearman rho with a bootstrap CI, and
head_share_1pct@K of dot-product against cosine retrieval (FAISS exact search); then
the mean, std, min and max of each over seeds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from auditor.metrics.exposure import HeadShare
from auditor.metrics.frequency_norm import frequency_norm_stats, item_norms, norm_precision
from auditor.probes import ProbeBatch, summarise_angles, update_step, working_copy
from auditor.probes.eager import compiler_free
from auditor.retrieval import sharded_topk
from auditor.result import FrequencyNorm
from auditor.sections import share_ratio
from auditor.summaries import ANGLE_EDGES
from auditor.train.live import PopauditLiveModel
from auditor.train.loop import TrainResult


def update_angles(result: TrainResult, users: torch.Tensor, items: torch.Tensor) -> np.ndarray:
    """Degrees between q_i and Δq_i for the items of one real training step.

    :func:`auditor.probes.update_step` on a float64 copy of the run's live model, with
    the item tower's optimizer and its state (so momentum/Adam act as in training); the
    original is untouched. Items whose embedding did not move are left out.
    """
    with compiler_free():  # an eager step: see auditor/probes/eager.py
        live = PopauditLiveModel(
            result.model, result.config.record(result.data), result.item_optimizer.state_dict()
        )
        module, _ = working_copy(live)
        batch = ProbeBatch(users.numpy(), items.numpy(), "training pairs")
        return update_step(live, module, [batch], extra_rows=np.zeros(0, np.int64), fallback_lr=None).angles


def angle_summary(angles: np.ndarray) -> dict[str, Any]:
    """:func:`auditor.probes.summarise_angles`' n, median and shares within 90°±1° and
    ±10° (NaN when there are no angles), with a 1° histogram over :data:`ANGLE_EDGES`."""
    s = summarise_angles(angles)
    nan = float("nan")
    return {
        "n": s.n,
        "share_90pm1": nan if s.share_90pm1 is None else s.share_90pm1,
        "share_90pm10": nan if s.share_90pm10 is None else s.share_90pm10,
        "median": nan if s.median is None else s.median,
        "counts": np.histogram(angles, bins=ANGLE_EDGES)[0].astype(int).tolist(),
    }


def retrieval_head_share(
    users: np.ndarray, items: np.ndarray, frequencies: np.ndarray, k: int, pct: float = 1.0
) -> dict[str, float]:
    """head_share_{pct}pct@k (:class:`HeadShare`) of exact dot-product and cosine
    retrieval (:func:`auditor.retrieval.sharded_topk`), and their ratio by the audit's
    policy (:func:`~auditor.sections.share_ratio`: +inf when only cosine's is 0, NaN when
    both are)."""
    k = min(k, items.shape[0])
    head = HeadShare(frequencies, pct)
    out: dict[str, float] = {}
    for scoring in ("dot", "cosine"):
        _, lists = sharded_topk(users, [items], k, normalise=scoring == "cosine")
        out[scoring] = head.measure(lists)
    ratio = share_ratio(out["dot"], out["cosine"])
    out["ratio"] = math.nan if ratio is None else ratio
    return out


def rank_section(item_emb: np.ndarray, freq: np.ndarray, *, n_bootstrap: int, seed: int) -> FrequencyNorm:
    """The frequency–norm statistics of a trained item table, as the audit takes them: norms
    equal to within the table's rounding (:func:`norm_precision`: its dtype and width)
    count as constant, so a table trained to one norm has no ρ (NaN) instead of one drawn
    from rounding noise."""
    section, _ = frequency_norm_stats(item_norms(item_emb), freq, n_bootstrap=n_bootstrap, seed=seed,
                                      precision=norm_precision(item_emb))
    return section


def measure_run(
    result: TrainResult, *, k: int, n_bootstrap: int, seed: int
) -> tuple[dict[str, Any], np.ndarray]:
    """All measures of one trained run; returns (measures, update-angle counts over
    :data:`ANGLE_EDGES`)."""
    data = result.data
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xA9]))
    pick = torch.from_numpy(rng.choice(data.n_interactions, min(result.config.batch_size, data.n_interactions), replace=False))
    users = torch.from_numpy(data.users)[pick]
    items = torch.from_numpy(data.items)[pick]
    angles = update_angles(result, users, items)
    summary = angle_summary(angles)

    item_emb = result.item_embeddings().numpy()
    user_emb = result.user_embeddings().numpy()
    freq = data.item_frequencies
    rho_section = rank_section(item_emb, freq, n_bootstrap=n_bootstrap, seed=seed)
    share = retrieval_head_share(user_emb, item_emb, freq, k)
    k_eff = min(k, data.n_items)
    measures = {
        "seed": seed,
        "share_90pm1": summary["share_90pm1"],
        "share_90pm10": summary["share_90pm10"],
        "angle_median": summary["median"],
        "n_angles": summary["n"],
        "spearman": rho_section.spearman,
        "spearman_ci": list(rho_section.spearman_ci),
        f"head_share_1pct_dot@{k_eff}": share["dot"],
        f"head_share_1pct_cosine@{k_eff}": share["cosine"],
        f"head_share_1pct_ratio@{k_eff}": share["ratio"],
        "final_loss": result.trace[-1]["loss"],
        "mean_norm": result.trace[-1]["mean_norm"],
    }
    return measures, np.asarray(summary["counts"], dtype=np.int64)


def aggregate(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """mean, std (ddof=1 when there are several seeds), min and max of each scalar measure."""
    out: dict[str, dict[str, float]] = {}
    for key, value in runs[0].items():
        if key == "seed" or not isinstance(value, (int, float)):
            continue
        vals = np.array([r[key] for r in runs], dtype=np.float64)
        out[key] = {
            "mean": float(np.mean(vals)),
            "std": float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0,
            "min": float(np.min(vals)),
            "max": float(np.max(vals)),
        }
    return out

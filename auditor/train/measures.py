"""What the experiment grids measure in one trained run (docs/theory.md §7).

For each run: the angle between q_i and its update Δq_i in one real training step
(float64, on a copy), the frequency-norm Spearman rho with a bootstrap CI, and
head_share_1pct@K of dot-product against cosine retrieval over the lists ``check``
serves on the run's checkpoint (:func:`served_head_share`: the users trained on, each
without their training items, exact search) at the verdict's K rule (:func:`served_k`);
then the mean, std, min and max of each over seeds.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from auditor.conditions.c4_loss import classify_loss
from auditor.conditions.c5_growth import grade_projection, growth_sample, project_growth, shrank
from auditor.conditions.c5_table import table_growth
from auditor.harm import SERVED_SHARE
from auditor.metrics.exposure import HeadShare
from auditor.metrics.frequency_norm import frequency_norm_stats, item_norms
from auditor.metrics.norm_rounding import norm_precision
from auditor.probes import ProbeBatch, summarise_angles, update_step, working_copy
from auditor.probes.eager import compiler_free
from auditor.retrieval.scorings import multi_scoring_topk
from auditor.probe_results import UpdateProbe
from auditor.result import CONDITION_NAMES, ORTHOGONALITY_IDS, Condition, FrequencyNorm, Status
from auditor.sections import share_ratio
from auditor.summaries import ANGLE_EDGES
from auditor.train.live import PopauditLiveModel
from auditor.train import ENCODER_VIOLATES
from auditor.train.loop import TrainConfig, TrainResult


def update_angles(result: TrainResult, users: torch.Tensor, items: torch.Tensor) -> np.ndarray:
    """Degrees between q_i and Δq_i for the items of one real training step
    (:func:`update_probe`'s angles)."""
    return update_probe(result, users, items).angles


def update_probe(result: TrainResult, users: torch.Tensor, items: torch.Tensor) -> UpdateProbe:
    """One real training step's update angles and norm growth.

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
        return update_step(live, module, [batch], extra_rows=np.zeros(0, np.int64), fallback_lr=None)


def c5_status(result: TrainResult, probe: UpdateProbe, frequency_norm: FrequencyNorm) -> str:
    """C5 of the run as ``check`` grades it from its probe step
    (:func:`~auditor.conditions.c5_growth.project_growth`: the median signed growth per
    appearance projected over the run's epochs of the item frequencies, none where the step
    shrank the norms), by ``check``'s own rule
    (:func:`~auditor.conditions.c5_growth.grade_projection`, with C1–C4 as the run's settings
    make them, :func:`settings_conditions`): a projection above the init spread holds unless
    one of C1–C4 is violated (then unknown); below it the trained table decides.
    ``holds``, ``violated``, or ``unknown`` (also when no item moved)."""
    sample = growth_sample(probe)
    freq = result.data.item_frequencies
    if sample.size == 0 or not np.any(freq > 0):
        return "unknown"
    # a step that shrank the norms (weight decay) grew nothing: a projection of 0
    g = 0.0 if shrank(probe) else float(np.median(sample))
    p = project_growth(g, freq, float(result.config.epochs), result.config.dim)
    table = table_growth(result.item_embeddings().numpy(), freq, frequency_norm)
    return grade_projection(p, table, settings_conditions(result.config))[0]


def settings_conditions(config: TrainConfig) -> dict[str, Condition]:
    """C1–C4 as a run's settings make them, as ``check`` finds them on its checkpoint:
    plain SGD without weight decay (C1), the item encoder's own
    (:data:`~auditor.train.ENCODER_VIOLATES`: C2, C3), a loss that scores by cosine (C4,
    C4's own rule)."""
    plain = config.optimizer == "sgd" and config.weight_decay == 0
    encoder = ENCODER_VIOLATES[config.item_encoder]
    c4 = classify_loss(config.loss)[0]
    statuses: dict[str, Status] = {"C1": "holds" if plain else "violated",
                                   "C2": "violated" if "C2" in encoder else "holds",
                                   "C3": "violated" if "C3" in encoder else "holds", "C4": c4}
    return {k: Condition(CONDITION_NAMES[k], statuses[k], "the run's settings") for k in ORTHOGONALITY_IDS}


def violated_by_settings(config: TrainConfig) -> list[str]:
    """The conditions among C1–C4 a run's settings violate (:func:`settings_conditions`)."""
    return [k for k, c in settings_conditions(config).items() if c.status == "violated"]


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
    users: np.ndarray, items: np.ndarray, frequencies: np.ndarray, k: int, pct: float = 1.0,
    exclude: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, float]:
    """head_share_{pct}pct@k (:class:`HeadShare`) of exact dot-product and cosine
    retrieval (:func:`~auditor.retrieval.scorings.multi_scoring_topk`, the audit's one-pass
    kernel; ``exclude``: CSR of each query's rows never served), and their ratio by the
    audit's policy (:func:`~auditor.sections.share_ratio`: +inf when only cosine's is 0,
    NaN when both are)."""
    k = min(k, items.shape[0])
    head = HeadShare(frequencies, pct)
    found = multi_scoring_topk(users, items, k, (1.0, 0.0), exclude=exclude)
    out = {"dot": head.measure(found[1.0][1]), "cosine": head.measure(found[0.0][1])}
    ratio = share_ratio(out["dot"], out["cosine"])
    out["ratio"] = math.nan if ratio is None else ratio
    return out


def served_head_share(result: TrainResult, k: int, seed: int) -> tuple[dict[str, float], int]:
    """:func:`retrieval_head_share` over the lists ``popaudit check`` serves on the run's
    checkpoint, and the number of users queried.

    No serving rule of its own: the checkpoint ``retrain`` would write
    (:func:`~auditor.train.loop.build_checkpoint`) is read by the loader's own code, its
    query population drawn by :func:`~auditor.loading.population.population_of` with
    ``check``'s defaults and ``seed`` (the users who appear in the training pairs, by
    their user-table rows, a seeded sample of ``max_queries`` when there are more; each
    user's training items excluded), and the head counted from the item statistics
    ``check`` takes. So the figures equal ``check``'s on the saved run to the last bit.
    """
    from auditor.config import AuditConfig
    from auditor.loading.checkpoints import interpret
    from auditor.loading.population import population_of
    from auditor.loading.statistics import item_stats
    from auditor.loading.torch_bundle import bundle_from_raw
    from auditor.retrieval.popularity import popularity_of
    from auditor.train.loop import build_checkpoint

    where = Path(f"run-seed{seed}.pt")  # no file is written: the name messages would give it
    config = AuditConfig(model=where, ks=(k,), seed=seed)
    bundle = bundle_from_raw(interpret(build_checkpoint(result), where), where, config.load_options)
    stats = item_stats(bundle, None, None, config.row_ids, [])
    assert stats is not None  # a popaudit checkpoint records its item frequencies
    population = population_of(bundle, config)
    share = retrieval_head_share(population.vectors, bundle.item_table, popularity_of(stats, config.popularity), k,
                                 exclude=population.exclude)
    return share, population.n_queries


def rank_section(item_emb: np.ndarray, freq: np.ndarray, *, n_bootstrap: int, seed: int) -> FrequencyNorm:
    """The frequency–norm statistics of a trained item table, as the audit takes them: norms
    equal to within the table's rounding (:func:`norm_precision`: its dtype and width)
    count as constant, so a table trained to one norm has no ρ (NaN) instead of one drawn
    from rounding noise."""
    section, _ = frequency_norm_stats(item_norms(item_emb), freq, n_bootstrap=n_bootstrap, seed=seed,
                                      precision=norm_precision(item_emb))
    return section


def served_k(k: int, n_items: int) -> int:
    """The cut-off a grid measures the head share at: ``k`` capped at
    :data:`~auditor.harm.SERVED_SHARE` of the catalogue, and at least 1. The verdict quotes no
    K above that share beside a smaller one (:func:`~auditor.harm.served_ks`); a grid measures
    one K, so it caps it instead (K=100 of 300 items hides a 13× skew at K=10)."""
    return max(1, min(k, math.floor(SERVED_SHARE * n_items)))


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
    probe = update_probe(result, users, items)
    summary = angle_summary(probe.angles)

    item_emb = result.item_embeddings().numpy()
    freq = data.item_frequencies
    rho_section = rank_section(item_emb, freq, n_bootstrap=n_bootstrap, seed=seed)
    k_eff = served_k(k, data.n_items)
    share, n_queries = served_head_share(result, k_eff, seed)
    measures = {
        "seed": seed,
        "k": k_eff,
        "share_90pm1": summary["share_90pm1"],
        "share_90pm10": summary["share_90pm10"],
        "angle_median": summary["median"],
        "n_angles": summary["n"],
        "spearman": rho_section.spearman,
        "spearman_ci": list(rho_section.spearman_ci),
        "c5": c5_status(result, probe, rho_section),
        f"head_share_1pct_dot@{k_eff}": share["dot"],
        f"head_share_1pct_cosine@{k_eff}": share["cosine"],
        f"head_share_1pct_ratio@{k_eff}": share["ratio"],
        "n_queries": n_queries,
        "final_loss": result.trace[-1]["loss"],
        "mean_norm": result.trace[-1]["mean_norm"],
    }
    return measures, np.asarray(summary["counts"], dtype=np.int64)


def aggregate(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """mean, std (ddof=1 when there are several seeds; NaN when a seed's value is not
    finite), min and max of each scalar measure."""
    out: dict[str, dict[str, float]] = {}
    for key, value in runs[0].items():
        if key in ("seed", "k") or not isinstance(value, (int, float)):
            continue
        vals = np.array([r[key] for r in runs], dtype=np.float64)
        # A ratio of +inf (only cosine's head share 0) makes the mean +inf and the spread
        # undefined (NaN), not a warning.
        if len(vals) == 1:
            spread = 0.0
        else:
            spread = float(np.std(vals, ddof=1)) if np.isfinite(vals).all() else math.nan
        out[key] = {
            "mean": float(np.mean(vals)),
            "std": spread,
            "min": float(np.min(vals)),
            "max": float(np.max(vals)),
        }
    return out

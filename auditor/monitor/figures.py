"""The figures of one monitor record, from arrays.

Each reuses the audit's own definition, so a trace and ``popaudit check`` agree on the
same table and counts: ρ and the log–log slope as :func:`auditor.metrics.frequency_norm.
frequency_norm_stats` computes them (the same function on the same float64 arrays,
bit for bit, with the same rounding rule :class:`~auditor.metrics.norm_rounding.NormPrecision`), the update geometry of :func:`auditor.probes.update.step_geometry`, and the
head share of :class:`auditor.metrics.exposure.HeadShare` over exact top-K lists kept
to the retrieval contract, and their ratio by :func:`auditor.sections.share_ratio`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from auditor.metrics.correlations import spearman
from auditor.metrics.exposure import HeadShare
from auditor.metrics.frequency_norm import loglog_slope, undefined_reason
from auditor.metrics.norm_rounding import NormPrecision, plateau_ties
from auditor.metrics.student_t import normal_quantile
from auditor.probes.copies import tolerance
from auditor.probes.update import step_geometry
from auditor.retrieval.search import select_topk
from auditor.sections import share_ratio

LEVEL = 0.95
"""Confidence level of a sampled ρ's interval."""
SCORE_BLOCK = 1 << 22
"""Scores (queries x items) computed at once for the head share's top-K."""


@dataclass(frozen=True)
class RankFigures:
    """ρ of counts against norms, its interval when sampled, and the log–log slope."""

    spearman: float | None
    n: int
    method: str
    ci: tuple[float, float] | None
    slope: float | None


def table_precision(vectors: torch.Tensor) -> NormPrecision:
    """The precision of a watched table's norms: its dtype as torch stores it (``bfloat16``
    too, which numpy lacks) and its width, the audit's rule (:class:`NormPrecision`)."""
    return NormPrecision(str(vectors.dtype).removeprefix("torch."), int(vectors.shape[1]))


def rank_figures(
    norms: np.ndarray, counts: np.ndarray, *, population: int, precision: NormPrecision | None = None
) -> RankFigures:
    """Spearman ρ and the log–log slope of ``counts`` against ``norms``.

    ``precision``: the table's (:func:`table_precision`): norms equal to within its
    rounding count as constant and ρ is undefined (None), as in the audit; None counts
    only exact ties.

    ``population``: the catalogue size. When the arrays hold fewer items (a fixed
    sample of a large catalogue), ρ comes with a 95% Fisher-z interval: standard error
    sqrt((1 + ρ²/2)/(m − 3)) (Bonett & Wright 2000, as :mod:`auditor.metrics.spearman_ci`
    uses) times the finite-population factor sqrt((N − m)/(N − 1)), m items of N.
    """
    norms = np.asarray(norms, dtype=np.float64)
    freqs = np.asarray(counts, dtype=np.float64)
    m = norms.shape[0]
    rho: float | None = None
    if undefined_reason(norms, freqs, precision) is None:
        rho = spearman(freqs, plateau_ties(norms, precision)).statistic  # as the audit ranks them
    warm = freqs > 0
    slope = loglog_slope(freqs[warm], norms[warm], precision) if np.isfinite(norms).all() else None
    if m >= population:
        return RankFigures(rho, m, "exact", None, slope)
    return RankFigures(rho, m, "sample", sample_interval(rho, m, population), slope)


def sample_interval(rho: float | None, m: int, population: int, level: float = LEVEL) -> tuple[float, float] | None:
    """The Fisher-z interval of ρ measured on ``m`` of ``population`` items (None when ρ is)."""
    if rho is None or m <= 3:
        return None
    if abs(rho) >= 1.0:
        return (rho, rho)
    fpc = math.sqrt(max(population - m, 0) / max(population - 1, 1))
    se = math.sqrt((1.0 + rho * rho / 2.0) / (m - 3)) * fpc
    half = normal_quantile(0.5 + level / 2.0) * se
    z = math.atanh(rho)
    return (min(math.tanh(z - half), rho), max(math.tanh(z + half), rho))


@dataclass(frozen=True)
class UpdateSample:
    """Angles (degrees) and growth c/s² per appearance of the items one step moved (per
    step when ``per_step``: the batch's rows were not known)."""

    angles: np.ndarray
    growth: np.ndarray
    per_step: bool = False

    @staticmethod
    def empty() -> UpdateSample:
        return UpdateSample(np.zeros(0), np.zeros(0))

    @staticmethod
    def pooled(samples: list[UpdateSample]) -> UpdateSample:
        if not samples:
            return UpdateSample.empty()
        return UpdateSample(
            np.concatenate([s.angles for s in samples]), np.concatenate([s.growth for s in samples]),
            any(s.per_step and s.growth.size for s in samples),
        )


def update_sample(before: torch.Tensor, after: torch.Tensor, copies: torch.Tensor | None) -> UpdateSample:
    """The geometry of one step from the rows before and after it.

    ``copies``: how often each row appeared in the batch (growth is then per appearance,
    as C5 reads it); None when the rows are the whole table (items moved by optimizer
    state count too). Rows that did not move are left out.
    """
    rel_tol = tolerance(before.dtype) * 1e-4
    b = before.detach().to("cpu", torch.float64)
    a = after.detach().to("cpu", torch.float64)
    angles, _, growth, _, moved = step_geometry(b, a, rel_tol)
    if copies is not None:
        k = copies.detach().cpu().numpy()[moved].astype(np.float64)
        growth = growth / np.maximum(k, 1.0)
    return UpdateSample(angles, growth, copies is None)


@dataclass(frozen=True)
class AngleFigures:
    """Shares of angles within 90° ± 1° and ± 10°, their median, and the median growth."""

    n: int
    share_90_1: float | None
    share_90_10: float | None
    median: float | None
    growth: float | None
    growth_basis: str | None = None
    """``appearance`` (divided by each row's copies in the batch) or ``step`` (rows unknown)."""


def angle_figures(sample: UpdateSample) -> AngleFigures:
    """The record's angle figures (None where no item moved)."""
    a = sample.angles
    if a.size == 0:
        return AngleFigures(0, None, None, None, None)
    off = np.abs(a - 90.0)
    growth = float(np.median(sample.growth)) if sample.growth.size else None
    basis = None if growth is None else ("step" if sample.per_step else "appearance")
    return AngleFigures(int(a.size), float(np.mean(off <= 1.0)), float(np.mean(off <= 10.0)), float(np.median(a)),
                        growth, basis)


@dataclass(frozen=True)
class HeadFigures:
    """head_share of dot-product and cosine top-K lists of the same queries, and dot/cosine
    (:func:`~auditor.sections.share_ratio`: +inf when only cosine's share is 0)."""

    dot: float | None
    cosine: float | None
    ratio: float | None


def head_figures(queries: torch.Tensor, table: torch.Tensor, counts: np.ndarray, k: int, percent: float) -> HeadFigures:
    """Exact top-K of ``queries`` over ``table`` by dot product and by cosine, and the
    share of their slots the head (``percent`` of the catalogue, by ``counts``) takes
    (None while no interaction is counted: no item is popular, as ρ is undefined then)."""
    if table.shape[0] == 0 or queries.shape[0] == 0 or not bool(torch.isfinite(queries).all()):
        return HeadFigures(None, None, None)
    if not np.asarray(counts).any():  # nothing counted yet: there is no head to take a share
        return HeadFigures(None, None, None)
    head = HeadShare(np.asarray(counts), percent)
    shares = []
    for cosine in (False, True):
        value = head.measure(topk_rows(queries, table, min(k, table.shape[0]), cosine=cosine))
        shares.append(None if math.isnan(value) else value)
    dot, cos = shares
    return HeadFigures(dot, cos, share_ratio(dot, cos))


def topk_rows(queries: torch.Tensor, table: torch.Tensor, k: int, *, cosine: bool) -> np.ndarray:
    """(n_queries, k) rows of each query's top-K under the retrieval contract
    (:func:`auditor.retrieval.search.select_topk`: score descending, ties by lower row;
    with ``cosine``, zero rows are never served and empty slots are -1).

    ``torch.topk`` on the table's own device (a GPU table stays there), in query blocks
    of bounded size; the few lists whose K-th score ties the next one, where torch's
    order is unspecified, are re-selected by ``select_topk``. In float64 when float32
    scores overflow (the table is finite: the caller checked).
    """
    q, t = queries.to(table.device), table
    if cosine:
        q, t = _unit(q), _unit(t)
        zero = t.norm(dim=1) == 0
    k_plus = min(k + 1, t.shape[0])
    block = max(1, SCORE_BLOCK // max(1, t.shape[0]))
    out = []
    for start in range(0, q.shape[0], block):
        scores = q[start : start + block] @ t.T
        if cosine:  # a zero row has no direction: never served
            scores[:, zero] = -math.inf
        best, found = torch.topk(scores, k_plus, dim=1)
        if bool(torch.isnan(best).any() or (best == math.inf).any()):  # float32 overflowed
            scores = q[start : start + block].double() @ t.double().T
            if cosine:
                scores[:, zero] = -math.inf
            best, found = torch.topk(scores, k_plus, dim=1)
        values, top = best[:, :k].cpu().numpy(), found[:, :k].cpu().numpy()
        values, top = select_topk(values, top, k)  # the contract's order within each list
        if k_plus > k:  # the K-th score ties one left out: which rows are in is the contract's too
            tied = np.flatnonzero(values[:, k - 1] == best[:, k].cpu().numpy())
            if tied.size:
                chosen = scores[torch.from_numpy(tied).to(scores.device)].cpu().numpy()
                every = np.broadcast_to(np.arange(chosen.shape[1]), chosen.shape)
                values[tied], top[tied] = select_topk(chosen, every, k)
        top[values == -math.inf] = -1
        out.append(top)
    return np.concatenate(out).astype(np.int64)


def _unit(vectors: torch.Tensor) -> torch.Tensor:
    """Rows scaled to unit length, in float64 first so no finite row over- or underflows; zero rows stay zero."""
    v = vectors.double()
    norms = v.norm(dim=1, keepdim=True)
    return torch.where(norms > 0, v / torch.where(norms > 0, norms, 1.0), 0.0).to(vectors.dtype)

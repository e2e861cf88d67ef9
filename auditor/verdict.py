"""The verdict: is there popularity bias in the item norms, how severe, and what to do.

Bias is claimed only when the frequency–norm Spearman ρ is positive with a 95% CI that
excludes 0 (the p-value stands in when no bootstrap ran) and ρ is at least
:data:`RHO_NEGLIGIBLE`, or when its CI excludes 0 and dot-product retrieval measurably
skews towards the head. Severity follows ρ with the usual correlation bands (0.1 / 0.3
/ 0.5) and is raised when dot-product retrieval gives the top-1% items a clearly larger
share of the slots than cosine retrieval does (at the largest K whose lists hold at most
10% of the catalogue). Recommendations are chosen from the
evidence (conditions, retrieval, probes), each with its caveat.
"""

from __future__ import annotations

import math
from typing import Any

from auditor.result import AuditResult, Condition, CutoffMeasures, Severity, Verdict

RHO_NEGLIGIBLE = 0.1
RHO_MODERATE = 0.3
RHO_HIGH = 0.5
SKEW_MODERATE = 1.25
"""Dot/cosine head-share ratio from which dot-product serving visibly skews to the head."""
SKEW_HIGH = 2.0
_ORDER: tuple[Severity, ...] = ("none", "low", "moderate", "high")
_IN_BATCH_WORDS = ("infonce", "softmax", "in-batch", "inbatch", "sampled", "contrastive", "nce")


def decide_verdict(result: AuditResult) -> Verdict:
    """The verdict of one audit; sections that are None count as not measured."""
    fn = result.frequency_norm
    rho = _finite(fn.spearman) if fn is not None else None
    lo, hi = (_finite(fn.spearman_ci[0]), _finite(fn.spearman_ci[1])) if fn is not None else (None, None)
    p = _finite(fn.spearman_p) if fn is not None else None
    if lo is not None and hi is not None:
        significant = lo > 0 or hi < 0
    else:
        significant = p is not None and p < 0.05
    skew = _head_skew(result)
    conditions = result.conditions or {}

    severity: Severity = "none"
    detected = False
    if rho is not None and significant and rho > 0:
        if rho >= RHO_HIGH:
            severity = "high"
        elif rho >= RHO_MODERATE:
            severity = "moderate"
        elif rho >= RHO_NEGLIGIBLE:
            severity = "low"
        skewed = skew is not None and skew["ratio"] is not None and skew["ratio"] >= SKEW_MODERATE
        detected = severity != "none" or skewed
        if skewed:
            floor: Severity = "high" if skew["ratio"] >= SKEW_HIGH else "moderate"
            severity = max(severity, floor, key=_ORDER.index)
    summary = _summary(result, detected, severity, rho, lo, hi, p, significant, skew, conditions)
    recommendations = _recommendations(result, detected, skew, conditions)
    return Verdict(bias_detected=detected, severity=severity, summary=summary, recommendations=recommendations)


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def quoted_cutoff(result: AuditResult) -> int | None:
    """The K that verdicts and headlines quote.

    The largest K whose lists hold at most 10% of the catalogue (the smallest K when
    none does): a list covering a large part of a small catalogue shows no skew.
    """
    if result.retrieval is None or not result.retrieval.at:
        return None
    ks = sorted(result.retrieval.at)
    small = [k for k in ks if k <= 0.1 * result.inputs.n_items]
    return small[-1] if small else ks[0]


def _head_skew(result: AuditResult) -> dict[str, Any] | None:
    """head_share_1pct under dot and cosine at the quoted K."""
    k = quoted_cutoff(result)
    if k is None or result.retrieval is None:
        return None
    cut: CutoffMeasures = result.retrieval.at[k]
    dot, cos = _finite(cut.dot.head_share_1pct), _finite(cut.cosine.head_share_1pct)
    ratio = dot / cos if dot is not None and cos else None
    if ratio is None and dot is not None and cos == 0.0:
        ratio = math.inf if dot > 0 else None
    return {"k": k, "dot": dot, "cosine": cos, "ratio": ratio, "overlap": _finite(cut.overlap_dot_cosine)}


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _skew_text(skew: dict[str, Any]) -> str:
    ratio = skew["ratio"]
    times = "∞" if ratio == math.inf else f"{ratio:.2f}"
    return (
        f"dot-product retrieval gives the top-1% items {times}× the slots cosine retrieval does at "
        f"K={skew['k']} ({_pct(skew['dot'])} vs {_pct(skew['cosine'])})"
    )


def _conditions_text(conditions: dict[str, Condition]) -> str:
    if not conditions:
        return "conditions C1–C5 not assessed"
    groups: dict[str, list[str]] = {"holds": [], "violated": [], "unknown": []}
    for key in sorted(conditions):
        groups.setdefault(conditions[key].status, []).append(key)
    parts = []
    for status in ("holds", "violated", "unknown"):
        keys = groups[status]
        if keys:
            word = ("holds" if len(keys) == 1 else "hold") if status == "holds" else status
            parts.append(f"{', '.join(keys)} {word}")
    text = "conditions: " + "; ".join(parts)
    if all(conditions.get(k) is not None and conditions[k].status == "holds" for k in ("C1", "C2", "C3", "C4")):
        text += " (C1–C4 make norm growth structural: every update is orthogonal to the embedding)"
    return text


def _summary(
    result: AuditResult, detected: bool, severity: Severity, rho: float | None, lo: float | None,
    hi: float | None, p: float | None, significant: bool, skew: dict[str, Any] | None,
    conditions: dict[str, Condition],
) -> str:
    fn = result.frequency_norm
    if fn is None or rho is None:
        why = result.not_measured.get("frequency_norm", "no item frequencies (give --interactions)")
        lead = f"Popularity bias not assessed: the frequency–norm correlation was not measured ({why})"
    else:
        ci = f"95% CI [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else (
            f"p = {p:.2g}" if p is not None else "no CI")
        stat = f"Spearman ρ = {rho:.2f}, {ci}, over {fn.n_items} items"
        if detected:
            lead = f"Popularity bias detected ({severity}): item norms grow with training frequency ({stat})"
        elif significant and rho < 0:
            lead = (f"No popularity bias: norms fall with training frequency ({stat}), so dot-product "
                    "scores favour less popular items")
        elif significant:
            lead = f"No material popularity bias: the correlation is significant but negligible ({stat})"
        else:
            lead = f"No popularity bias detected: the CI of the frequency–norm correlation includes 0 ({stat})"
    parts = [lead]
    if skew is not None and skew["ratio"] is not None:
        parts.append(_skew_text(skew))
    parts.append(_conditions_text(conditions))
    if detected and any(conditions.get(k) is not None and conditions[k].status == "violated"
                        for k in ("C1", "C2", "C3", "C4")):
        parts.append("the conditions are sufficient, not necessary, so the bias can appear without them")
    return "; ".join(parts) + "."


def _recommendations(
    result: AuditResult, detected: bool, skew: dict[str, Any] | None, conditions: dict[str, Condition]
) -> list[str]:
    recs: list[str] = []
    status = {k: c.status for k, c in conditions.items()}
    skewed = skew is not None and skew["ratio"] is not None and skew["ratio"] >= SKEW_MODERATE
    if result.frequency_norm is None:
        recs.append(
            "Give the training interactions (--interactions) so the frequency–norm correlation and the "
            "popularity of retrieved items can be measured; without them this audit cannot claim or rule out bias."
        )
    if detected or skewed:
        if skew is not None and skew["ratio"] is not None:
            overlap = f", and the two lists overlap {_pct(skew['overlap'])}" if skew["overlap"] is not None else ""
            measured = (
                f"here the top-1% items' share of the top-{skew['k']} slots goes from {_pct(skew['dot'])} (dot) "
                f"to {_pct(skew['cosine'])} (cosine){overlap}"
            )
        else:
            measured = "retrieval was not measured in this audit (give queries or a user table to see the change)"
        recs.append(
            "Serve with cosine similarity, or L2-normalise item vectors before indexing: " + measured + ". "
            "Caveat: norms may also carry useful signal (item quality, confidence); check offline accuracy "
            "(recall/NDCG) before switching."
        )
        recs.append(
            "Norm-aware scoring keeps part of the norm signal: score with ‖q‖^α‖k‖^α·cos(q, k) for α in (0, 1) "
            "(α = 0 is cosine, α = 1 is dot product). Caveat: α must be tuned on held-out data; it trades "
            "accuracy against exposure."
        )
    if detected:
        c1 = conditions.get("C1")
        if c1 is not None and c1.status in ("holds", "unknown"):
            recs.append(
                "Training the item table with weight decay or an adaptive optimizer (Adam, Adagrad) breaks C1, "
                "the orthogonality of plain-SGD updates"
                + (" (C1 holds here: " + c1.evidence + ")" if c1.status == "holds" else "")
                + ". Caveat: this changes C1, not the popularity signal in the gradients; measure, do not assume, "
                "that the coupling goes away (popaudit retrain / experiment conditions, then check again)."
            )
        c5 = conditions.get("C5")
        if c5 is not None and c5.status in ("holds", "unknown"):
            g = c5.details.get("growth_per_update")
            lr = c5.details.get("probe_lr") or c5.details.get("lr")
            numbers = ""
            if g is not None:
                numbers = f" (measured growth per update c/s² = {g:.3g}" + (f" at lr = {lr:g}" if lr else "") + ")"
            recs.append(
                "A lower learning rate on the item table, or a higher softmax temperature, shrinks the per-update "
                f"norm growth c/s², which scales with η² and, for cosine logits, with 1/τ²{numbers}. Caveat: "
                "slower or softer training; the correlation weakens at low learning rates but need not vanish, "
                "so audit the retrained model."
            )
        c4 = conditions.get("C4")
        loss = str((c4.details.get("loss") if c4 is not None else None) or "")
        if loss and any(word in loss.lower() for word in _IN_BATCH_WORDS):
            recs.append(
                f"The loss ({loss!r}) uses in-batch or sampled negatives, in which popular items appear as "
                "negatives more often: apply logQ correction (subtract log of each item's sampling probability "
                "from its logit). Caveat: it corrects the sampling bias of the loss, not the norm growth itself; "
                "audit again after retraining."
            )
    elif result.frequency_norm is not None and all(status.get(k) == "holds" for k in ("C1", "C2", "C3", "C4")):
        recs.append(
            "The model meets C1–C4, so its updates grow item norms with every appearance; no bias shows now, but "
            "a higher learning rate or longer training can bring it out. Re-audit after retraining "
            "(e.g. with --fail-on in CI)."
        )
    return recs

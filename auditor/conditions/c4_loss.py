"""C4 (a cosine-based loss): measured gradient alignment, else the loss's name."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, replace
from typing import Any

from auditor.conditions.facts import RecordedConfig, TraceFacts
from auditor.config import DeclaredTraining
from auditor.errors import setting
from auditor.model import LiveModel
from auditor.probe_results import ProbeOutcome
from auditor.result import C1, C2, C3, C4, CONDITION_NAMES, Condition, Status

_COSINE_WORDS = frozenset({"cos", "cosine", "cossim", "normalized", "normalised", "normalize", "normalise",
                           "l2norm", "angular", "spherical", "arcface", "cosface", "sphereface"})
"""Words of a loss name that say it scores by cosine (``normalize``: torch's ``F.normalize``)."""
_NORMALISING = frozenset({"norm", "normed", "normalize", "normalise", "normalized", "normalised", "normalization",
                          "normalisation"})
"""Words that, right after ``l2``, make it L2 normalisation (q/‖q‖: a cosine, ``l2_normalize``,
``l2norm``), not L2 distances: the pair reads as the one cosine word ``l2norm``."""
_NEGATING = frozenset({"no", "non", "not", "without", "un"})
"""Words that, right before a cosine word, say the scores are *not* cosines
(``no_normalize``, ``non_normalized``, ``unnormalized``, ``without_cosine``)."""
_NOT_COSINE_WORDS = {
    "dot": "dot-product logits", "inner": "inner-product logits",
    "bpr": "BPR ranks by dot-product scores", "mse": "squared error on raw scores",
    "rmse": "squared error on raw scores", "l2": "L2 distances", "euclid": "Euclidean distances",
    "euclidean": "Euclidean distances",
    "triplet": "distance-based triplet loss", "hinge": "margin loss on raw scores",
    "bce": "binary cross-entropy on raw scores", "logistic": "logistic loss on raw scores",
    "wmf": "matrix-factorisation loss on dot products", "als": "matrix-factorisation loss on dot products",
    "cosh": "log-cosh, a regression loss log(cosh(ŷ − y)) on raw scores",
    "logcosh": "log-cosh, a regression loss log(cosh(ŷ − y)) on raw scores",
    "huber": "Huber regression loss on raw scores", "mae": "absolute error on raw scores",
}
"""Words of a loss name that say it scores by dot products or distances."""
_NEUTRAL_WORDS = frozenset({
    "loss", "losses", "info", "nce", "infonce", "softmax", "sampled", "sampling", "cross", "entropy", "crossentropy",
    "ce", "contrastive", "embedding", "embeddings", "margin", "ranking", "pairwise", "pointwise", "listwise", "with",
    "logits", "logit", "log", "logq", "temperature", "temp", "scaled", "weighted", "focal", "product", "products",
    "similarity", "sim", "score", "scores", "distance", "neg", "negative", "negatives", "in", "batch", "inbatch",
    "full", "cost", "costs", "norm", "normed", "normalization", "normalisation", "sensitive", "mf", "nn", "torch", "criterion", "objective", "fn", "function", "multi",
    "label", "class", "smoothing", "soft", "hard", "mean", "sum", "custom", "my", "gcn", "sgd", "ssm", "ccl",
})
"""Words that say nothing of the scores, read so that their letters are not taken for
another word's (``cost`` is no ``cos``, ``infonce`` no ``info`` and ``nce``)."""
_VOCABULARY = _COSINE_WORDS | frozenset(_NOT_COSINE_WORDS) | _NEUTRAL_WORDS | _NEGATING
_LONGEST_WORD = max(map(len, _VOCABULARY))
_GLUED = 3
"""Unknown letters glued to a word, fewer than this, make it part of a longer unknown word
(``cos`` in ``cost``: ``cos`` + ``t``); a run of this many or more is a word of its own."""


_SOFT_BOUNDARY = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])")
"""Where a segment changes case (``Cosine|BPR``, ``BPR|Loss``) or between letters and digits (``bpr|2``)."""


def loss_words(name: str) -> list[str]:
    """The words of a loss name, the same however it is run together (``CosineBPR``,
    ``cosinebpr``): each segment between separators (``_``, ``-``, ``.``…) is read,
    lower-cased, as known words with the fewest unknown letters, then the fewest words. A
    known word counts unless fewer than :data:`_GLUED` unknown letters touch it inside the
    same run of letters (part of a longer word: ``cos`` in ``cost``); a separator, a case
    change or a digit ends that run, so the tags users add (``bpr_v2``, ``cos_t0.07``,
    ``BPRLossV2``) never hide a word."""
    return [word for word in _name_tokens(name) if word]


def _name_tokens(name: str) -> list[str]:
    """The words of a loss name in order (:func:`loss_words`), with ``""`` where unknown
    letters stand between them (a word glued into a longer unknown one included), so that
    two words are adjacent in the name exactly when they are adjacent here."""
    tokens: list[str] = []
    for segment in re.findall(r"[A-Za-z0-9]+", str(name)[:200]):
        cuts = {0, len(segment)} | {m.start() for m in _SOFT_BOUNDARY.finditer(segment)}
        tokens += _segment_words(segment.lower(), sorted(cuts))
    return tokens


def _segment_words(text: str, cuts: list[int]) -> list[str]:
    """Known words of one separator-free segment (see :func:`loss_words`), ``""`` for each
    run of unknown letters; ``cuts`` are its case and letter/digit boundaries, 0 and its
    length included."""
    n = len(text)
    best: list[tuple[int, int]] = [(0, 0)] + [(n + 1, n + 1)] * n
    back: list[int] = [0] * (n + 1)
    for i in range(n):
        unknown, count = best[i]
        if (unknown + 1, count + 1) < best[i + 1]:
            best[i + 1], back[i + 1] = (unknown + 1, count + 1), i
        for j in range(i + 2, min(n, i + _LONGEST_WORD) + 1):
            if text[i:j] in _VOCABULARY and (unknown, count + 1) < best[j]:
                best[j], back[j] = (unknown, count + 1), i
    pieces: list[tuple[int, int, bool]] = []  # (start, end, known), unknown letters merged into runs
    end = n
    while end > 0:
        start = back[end]
        known = text[start:end] in _VOCABULARY and end - start > 1
        if not known and pieces and not pieces[-1][2]:
            pieces[-1] = (start, pieces[-1][1], False)
        else:
            pieces.append((start, end, known))
        end = start
    pieces.reverse()

    def glued(k: int, at: int) -> bool:
        """Whether unknown piece ``k`` glues fewer than _GLUED letters to a word at ``at``."""
        if not 0 <= k < len(pieces) or pieces[k][2] or at in cuts:
            return False
        start, end, _ = pieces[k]
        if start == at:  # letters after the word, up to the next boundary
            return min(end, min(c for c in cuts if c > at)) - at < _GLUED
        return at - max(start, max(c for c in cuts if c < at)) < _GLUED

    return [text[start:end] if known and not glued(k - 1, start) and not glued(k + 1, end) else ""
            for k, (start, end, known) in enumerate(pieces)]


# Models whose loss is fixed by the model itself, checked in RecBole 1.2.1's
# recbole/model/general_recommender/: bpr, lightgcn, ngcf, dgcf, spectralcf train BPRLoss on
# torch.mul(u, i).sum; sgl and ncl add contrastive terms on normalised vectors to that BPR
# loss; simplex trains its CCL loss on cosines (F.normalize of both sides) plus an L2
# penalty (reg_weight) on the sampled embeddings.
_GRAPH_BPR = "the BPR loss on dot products of its propagated embeddings (not cosines)"
_MODEL_LOSSES: dict[str, tuple[str, str]] = {
    "bpr": ("BPR", "the BPR loss, a pairwise loss on dot-product scores u·i (not cosines)"),
    "lightgcn": ("BPR", _GRAPH_BPR),
    "ngcf": ("BPR", _GRAPH_BPR),
    "dgcf": ("BPR", _GRAPH_BPR),
    "spectralcf": ("BPR", _GRAPH_BPR),
    "sgl": ("BPR", _GRAPH_BPR + ", with a contrastive term on normalised views"),
    "ncl": ("BPR", _GRAPH_BPR + ", with contrastive terms on normalised embeddings"),
    "simplex": ("CCL (cosine contrastive loss)", "its CCL loss on cosines between the aggregated user vector and "
                "the items (F.normalize of both sides)"),
}


def _l2_normalisation(tokens: list[str]) -> list[str]:
    """``l2`` right before a normalising word in the name (``tokens``: :func:`_name_tokens`),
    read as the cosine word ``l2norm``; plain ``l2``, or one that an unknown or other word
    parts from it (``l2_dist_normalized``), stays L2 distances."""
    out: list[str] = []
    for word in tokens:
        if word in _NORMALISING and out and out[-1] == "l2":
            out[-1] = "l2norm"
        else:
            out.append(word)
    return out


def _negated(tokens: list[str]) -> tuple[list[str], list[str]]:
    """The tokens without the cosine words a negating word stands right before, and those
    pairs as the evidence quotes them (``'non' before 'normalized'``)."""
    kept: list[str] = []
    negated: list[str] = []
    for word in tokens:
        if word in _COSINE_WORDS and kept and kept[-1] in _NEGATING:
            negated.append(f"{kept[-1]!r} before {word!r}")
        else:
            kept.append(word)
    return kept, negated


def classify_loss(name: str) -> tuple[Status, str]:
    """C4 verdict from a loss name: cosine-based names hold, dot/distance ones do not.

    The name is read as words (:func:`loss_words`), the same in every spelling, never as
    substrings: ``cos`` counts as a word of its own (``infonce-cos``), not inside
    ``log_cosh`` or ``cost_sensitive``. A name with words of both kinds (``cosine_bpr``,
    ``cosinebpr``), or of neither, is unknown and says so. A cosine word right after a
    negating word (``no_normalize``, ``non_normalized``, ``unnormalized``,
    ``without_cosine``) says the scores are not cosines: it is no cosine word, and unless a
    dot-product or distance word decides (violated), the name is unknown and says why.
    """
    words, negated = _negated(_l2_normalisation(_name_tokens(name)))
    cosine = [w for w in words if w in _COSINE_WORDS]
    other = [(w, _NOT_COSINE_WORDS[w]) for w in words if w in _NOT_COSINE_WORDS]
    if cosine and other:
        return "unknown", (f"the name has a cosine word ({cosine[0]!r}) and a dot-product or distance word "
                           f"({other[0][0]!r}), so it does not say which the scores are")
    if negated and (cosine or not other):
        also = f", beside the cosine word {cosine[0]!r}" if cosine else ""
        return "unknown", (f"the name negates a cosine word ({negated[0]}{also}): it says the scores are not "
                           "cosines, not whether they are dot products or distances")
    if cosine:
        return "holds", "scores items by cosine (direction only)"
    if other:
        return "violated", other[0][1]
    return "unknown", "a loss name popaudit does not recognise: it does not say whether scores are cosines or dot products"


def assess_c4(
    config: RecordedConfig, declared: DeclaredTraining, live: LiveModel | None, probe: ProbeOutcome | None,
    warnings: list[str],
) -> Condition:
    """The gradient-alignment probe decides when it ran and graded a slot; a loss name that
    disagrees with it is a warning. Without it, the recorded, live or declared loss name (in
    that order), beside why the probe did not measure (it failed, or graded no slot: every
    gradient at rounding level or not finite)."""
    condition = _assess_c4(config, declared, live, probe, warnings)
    error = probe.error("c4") if probe is not None else None
    if error is not None:  # the weaker evidence says the measurement it stands in for failed (as C2 and C3 do)
        return replace(condition, evidence=f"{condition.evidence} (numeric check failed: {error})",
                       details={**condition.details, "probe_error": error})
    alignment = probe.gradient_alignment if probe is not None else None
    if alignment is None or alignment.unmeasured is None:
        return condition
    details = {**condition.details, "gradient_alignment": alignment.to_dict()}
    return replace(condition, evidence=f"{condition.evidence}; the gradient-alignment probe graded no item slot: "
                   f"{alignment.unmeasured}", details=details)


def _assess_c4(
    config: RecordedConfig, declared: DeclaredTraining, live: LiveModel | None, probe: ProbeOutcome | None,
    warnings: list[str],
) -> Condition:
    """:func:`assess_c4` before the probe's reason for grading nothing is added."""
    name = CONDITION_NAMES[C4]
    named: tuple[str, str] | None = None
    by_model = False
    if config.loss is not None and config.loss.value:
        named = (config.loss.value, f"recorded loss ({config.loss.key})")
    elif live is not None and live.loss_name:
        named = (live.loss_name, "the live model's loss")
    elif config.model is not None and str(config.model.value).lower() in _MODEL_LOSSES:
        loss, how = _MODEL_LOSSES[str(config.model.value).lower()]
        named = (loss, f"recorded model {config.model.value!r} ({config.model.key}), trained with {how}")
        by_model = True
    if declared.loss:
        if named is None:
            named = (declared.loss, setting("loss"))
        elif classify_loss(declared.loss)[0] != classify_loss(named[0])[0] or declared.loss.lower() != named[0].lower():
            warnings.append(
                f"{setting('loss')} {declared.loss} conflicts with the file ({named[0]!r}, {named[1]}); the file wins"
            )
    details: dict[str, Any] = {"loss": named[0] if named else None, "loss_source": named[1] if named else None,
                               "logq": config.logq}
    alignment = probe.gradient_alignment if probe is not None else None
    if alignment is not None and alignment.orthogonal is not None:
        details["gradient_alignment"] = alignment.to_dict()
        status: Status = "holds" if alignment.orthogonal else "violated"
        evidence = (
            f"gradient alignment |q·∇_qL|/(‖q‖‖∇_qL‖) on a real batch: max {alignment.max:.2e}, median "
            f"{alignment.median:.2e} over {alignment.n} item slots (tolerance {alignment.tolerance:.0e})"
        )
        if named:
            evidence += f"; loss {named[0]!r}"
            by_name = classify_loss(named[0])[0]
            if by_name != "unknown" and by_name != status:
                warnings.append(
                    f"the loss is named {named[0]!r} but the measured gradients say C4 {status}; the measurement wins"
                )
        return Condition(name, status, evidence, details)
    scored = _cosine_scores(config, named, details)
    if scored is not None:
        return scored
    if named is None and config.loss_unnamed:
        return Condition(name, "unknown", f"the recorded config's loss entry ({config.loss_unnamed}) names no loss "
                         f"(no name, type, class_path or _target_), and there is no live loss or {setting('loss')}",
                         details)
    if named is None:
        return Condition(name, "unknown", f"no recorded loss, live loss or {setting('loss')}", details)
    status, why = classify_loss(named[0])
    if by_model:  # the loss is the model's own, not a recorded name
        evidence = f"{named[1]}: {why}"
        if status == "holds" and config.reg_weight is not None and config.reg_weight.value:
            details["norm_penalty"] = config.reg_weight.value
            evidence += (
                f"; its L2 penalty ({config.reg_weight.key} = {config.reg_weight.value:g}) pulls the sampled "
                "embeddings towards 0 as weight decay does, so norms grow only where the cosine gradient outweighs it"
            )
        return Condition(name, status, evidence, details)
    return Condition(name, status, f"{named[1]} {named[0]!r}: {why}", details)


def _cosine_scores(config: RecordedConfig, named: tuple[str, str] | None, details: dict[str, Any]) -> Condition | None:
    """C4 holds where the file shows the model's scores are cosines (a Keras
    ``Dot(normalize=True)`` score layer): whatever its loss, it is taken on cosines."""
    if config.scoring is None or config.scoring.value != "cosine":
        return None
    where = config.scoring_evidence.value if config.scoring_evidence else f"recorded scoring ({config.scoring.key})"
    on = f"; the recorded loss {named[0]!r} is taken on them" if named else ""
    details["scoring"] = "cosine"
    return Condition(CONDITION_NAMES[C4], "holds", f"{where}: the model's scores are cosines (direction only){on}", details)


def with_trace_angles_c4(c4: Condition, trace: TraceFacts, others: Mapping[str, Condition],
                         warnings: list[str]) -> Condition:
    """C4 with the update angles a training trace measured, when no probe measured the
    gradient alignment (which is the direct measurement and stays decisive).

    Orthogonal updates mean the loss's gradient had no component along q, as a cosine
    loss gives: C4 holds. Updates that are not orthogonal while plain SGD (C1) and a
    linear, non-shared item tower (C2, C3) are known make the loss the cause: violated.
    Otherwise the angles cannot single out the loss, and the loss's name decides. A name
    that disagrees with a decisive measurement is a warning; the measurement wins.
    """
    angles = trace.angles
    if angles is None or "gradient_alignment" in c4.details:
        return c4
    details = {**c4.details, "trace_angles": {**asdict(angles), "orthogonal": angles.orthogonal}}
    measured = f"{angles.describe()} (source: trace)"
    rest = all(key in others and others[key].status == "holds" for key in (C1, C2, C3))
    status: Status | None = None
    if angles.orthogonal:
        status, why = "holds", "orthogonal: the gradient had no component along q, as a cosine loss gives"
    elif angles.orthogonal is False and rest:
        status, why = "violated", "not orthogonal although C1–C3 hold, so the loss pulls along q (not a cosine loss)"
    if status is None:
        return replace(c4, evidence=f"{c4.evidence}; {measured}", details=details)
    if c4.status not in ("unknown", status) and details.get("loss"):
        warnings.append(
            f"the loss is named {details['loss']!r} but the update angles of the training trace say C4 {status}; "
            "the measurement wins"
        )
    details["decided_by_trace"] = True  # the measured angles decided (a rank above a recorded or declared name)
    evidence = f"{measured}: {why}" + (f" [{c4.evidence}]" if details.get("loss") else "")
    return Condition(CONDITION_NAMES[C4], status, evidence, details)

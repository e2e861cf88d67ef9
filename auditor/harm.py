"""The harm to serving: how much more of the top-K slots the top-1% items get under
dot-product than under cosine retrieval, per cut-off K (:class:`Skew`), the bands that
grade it (:func:`harm_band`), the K that decides (:func:`worst_skew`), and the gate that
trips on a run graded low or worse (:data:`SEVERITY_GATE`). :mod:`auditor.verdict`
turns it into the severity; :mod:`auditor.lists_verdict` grades served lists in the same
bands."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from auditor.result import SEVERITIES, MeasuredSections, Severity
from auditor.sections import finite_figure, share_ratio

HARM_BANDS: tuple[tuple[Severity, float, float], ...] = (
    ("high", 2.0, 0.05),
    ("moderate", 1.25, 0.02),
    ("low", 1.1, 0.005),
)
"""(severity, minimum dot/cosine ratio, minimum excess share) of top-1% head share."""
EDGE_SLACK = 1e-9
"""Relative slack at a band's edges: head shares are ratios of slot counts, and their
quotient and difference carry float rounding (0.06 - 0.01 = 0.04999...), which must not
drop a figure that sits exactly on an edge into the band below."""
SERVED_SHARE = 0.1
"""Cut-offs K up to this share of the catalogue are the lists a user is served."""


@dataclass(frozen=True)
class Skew:
    """The top-1% head share of dot vs cosine lists at one cut-off K, and its harm band."""

    k: int
    dot: float | None
    cosine: float | None
    overlap: float | None

    @property
    def ratio(self) -> float | None:
        return share_ratio(self.dot, self.cosine)

    @property
    def excess(self) -> float | None:
        return None if self.dot is None or self.cosine is None else self.dot - self.cosine

    @property
    def severity(self) -> Severity:
        return harm_band(self.ratio, self.excess)


def harm_band(ratio: float | None, excess: float | None) -> Severity:
    """The band of :data:`HARM_BANDS` a ratio and an excess share reach (``none``: below
    every band, or not measured); a figure on an edge reaches it (:data:`EDGE_SLACK`)."""
    if ratio is None or excess is None:
        return "none"
    low = 1 - EDGE_SLACK
    return next((name for name, r, e in HARM_BANDS if ratio >= r * low and excess >= e * low), "none")


SEVERITY_GATE = "severity_level>=1"
"""The CI gate ``check`` suggests: the verdict's own grade (flat ``severity_level``, the
severity's rank), so it trips exactly on a run graded low or worse, whichever rule graded
it (the harm bands against this run's cosine share, or the correlation and its interval).
A threshold on a head share could not: it fixes this run's cosine share, rounds across
a band's edge, and cannot say "and the interval excludes 0"."""


def served_ks(ks: Iterable[int], n_items: int | None) -> list[int]:
    """Of ``ks``, ascending, those whose lists are the size a user is served: K at most
    :data:`SERVED_SHARE` of the catalogue (the smallest K when none is; a list covering a
    large part of a small catalogue shows no skew; every K when the size is unknown)."""
    ks = sorted(ks)
    if n_items is None or n_items < 1:
        return ks
    return [k for k in ks if k <= SERVED_SHARE * n_items] or ks[:1]


def served_cutoffs(result: MeasuredSections) -> list[int]:
    """The measured cut-offs K the verdict may quote (:func:`served_ks`)."""
    if result.retrieval is None or not result.retrieval.at:
        return []
    return served_ks(result.retrieval.at, result.inputs.n_items)


def skew_at(result: MeasuredSections, k: int) -> Skew:
    """The head-share skew of the lists at cut-off ``k`` (which must be measured)."""
    assert result.retrieval is not None
    cut = result.retrieval.at[k]
    return Skew(k, finite_figure(cut.dot.get("head_share_1pct")), finite_figure(cut.cosine.get("head_share_1pct")),
                finite_figure(cut.overlap_dot_cosine))


def worst_skew(result: MeasuredSections) -> Skew | None:
    """The served cut-off with the most harm (ties: the larger ratio, then the smaller K):
    the one severity follows and reports quote."""
    skews = [skew_at(result, k) for k in served_cutoffs(result)]
    if not skews:
        return None

    def weight(skew: Skew) -> tuple[int, float, int]:
        ratio = skew.ratio if skew.ratio is not None else -1.0
        return (SEVERITIES.index(skew.severity), ratio, -skew.k)

    return max(skews, key=weight)


def dot_serves_cosine(result: MeasuredSections) -> bool:
    """Whether dot-product and cosine retrieval served the same items to every query at
    every served K (overlap 1): dot serving then has no skew of its own, whatever the
    head shares are (an equal-norm table, such as ``mitigate --alpha 0``'s output)."""
    skews = [skew_at(result, k) for k in served_cutoffs(result)]
    return bool(skews) and all(skew.overlap == 1.0 for skew in skews)


def quoted_cutoff(result: MeasuredSections) -> int | None:
    """The K that verdicts and headlines quote (see :func:`worst_skew`)."""
    skew = worst_skew(result)
    return None if skew is None else skew.k


def first_seen_skew(result: MeasuredSections) -> Skew | None:
    """The skew at the smallest served K (the first slots a user sees) when it is not the
    quoted K: reports quote it beside the worst K (it never changes the severity)."""
    served, worst = served_cutoffs(result), worst_skew(result)
    if not served or worst is None or served[0] == worst.k:
        return None
    return skew_at(result, served[0])


def approximate_lead(result: MeasuredSections) -> str:
    """The verdict's first words when an approximate index found the lists: every
    retrieval figure it quotes is then approximate, at the quoted K's recall ("" when exact)."""
    retrieval = result.retrieval
    if retrieval is None or not retrieval.recall:
        return ""
    skew = worst_skew(result)
    said = retrieval.approximate(skew.k if skew is not None else None)
    return f"{said[0].upper()}{said[1:]}: the retrieval figures come from an approximate index's lists, not exact search's. "

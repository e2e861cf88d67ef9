"""Comparability rules of inputs and retrieval that change what a figure means without a
setting of ``check`` saying so (docs/diff.md, "Comparability"), and the notes on inputs
that differ but leave figures comparable:

* the catalogue size (``inputs.n_items``): a top-p% head is the items at least as popular
  as the c-th most popular one, c = max(1, floor(p/100 · n_items))
  (:func:`~auditor.metrics.popularity_sets.head_count`); where c differs, the head is another
  set of items, so every figure of that head (``head_share_<p>pct`` of every scoring, its
  ratio, ``head_share_log`` for the top 1%) is **flagged**, and so are the user groups'
  figures where the top ``popular_percent``% that groups users moved. Where every c is the
  same, the heads are the same items and the figures are compared (a note says the sizes differ).
* the retrieval index (``retrieval.index``: exact search or an approximate index): an
  approximate index misses candidates (its recall), which moves every figure of the model's
  own lists, so those are **flagged**; served lists (``served`` scoring) are the lists given,
  whatever index the model's figures used.
* the raw id → row mapping (:mod:`auditor.diff.id_mappings`): another item mapping flags every
  figure of the model, another user mapping its lists.
* the accuracy protocol (``accuracy.protocol``) and held-out set (its content
  ``accuracy.holdout_fingerprint``, else its file ``accuracy.holdout``; its size, seen-item and
  repeat handling: :func:`accuracy_flags`): every accuracy figure is **flagged**.
* another sample of queries (``retrieval.population.seed`` or ``n_queries`` where both
  reports sampled theirs: :func:`sample_flags`): every figure of the model's own lists is
  **flagged**; one sampled report against one that queried every user is a note.
* another resampling (``settings.seed`` or ``settings.bootstrap``: :func:`resampling_flags`):
  spearman's bootstrap interval bounds are **flagged**.
* notes (:mod:`auditor.diff.notes`): another declaration about training (``settings.declared``),
  another accuracy tolerance (the recommended scoring's rule, not a figure), another model
  file, training popularity (log, count file given by ``--frequencies``, a checkpoint's
  recorded counts), served-lists file, catalogue size, log size or number of queries.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from auditor.flat import FlatEntry, flat_entries
from auditor.metrics.popularity_sets import head_count
from auditor.protocol import RECORDED_SPLIT_REPEATS, of_model_lists
from auditor.served_section import UNTRAINED_SERVED

Differs = Callable[[str, Any, Any, Callable[[FlatEntry], bool], str], None]
"""The comparability rule's recorder: setting, base value, new value, the figures it
affects, its effect (``auditor.diff.compare._comparability``)."""
GROUPED_BY_USERS = re.compile(r"(gap_delta|miscalibration|ndcg)_(niche|diverse|blockbuster)")
"""The user groups' figures: users grouped by their share of the top popular_percent% items."""
_HEAD_SHARE = re.compile(r"head_share_(\d+(?:\.\d+)?)pct")
LOG_HEAD_PERCENT = 1.0
"""``head_share_log``: the top-1% items' share of the training popularity (retrieval/served.py)."""


def retrieved(entry: FlatEntry) -> bool:
    """A figure of lists an index retrieved (the most-popular list is counted, not searched)."""
    return of_model_lists(entry) and entry.scoring != "popular" and entry.measure != "overlap_served_popular"


def head_percent(entry: FlatEntry) -> float | None:
    """The p of the top-p% head the figure measures a share of (None: no head share)."""
    if entry.measure == "head_share_log":
        return LOG_HEAD_PERCENT
    match = _HEAD_SHARE.fullmatch(entry.measure)
    return float(match.group(1)) if match else None


def catalogue_flags(base: dict[str, Any], new: dict[str, Any], differs: Differs) -> None:
    """Flag the figures whose head holds another number of items (module docstring)."""
    nb, nn = (_int((r.get("inputs") or {}).get("n_items")) for r in (base, new))
    if nb is None or nn is None or nb == nn:
        return

    def head_moved(percent: float) -> bool:
        return head_count(percent, nb) != head_count(percent, nn)

    def affected(entry: FlatEntry) -> bool:
        percent = head_percent(entry)
        return head_moved(percent) if percent is not None else grouped and bool(GROUPED_BY_USERS.fullmatch(entry.measure))

    popular = [_popular_percent(r) for r in (base, new)]
    grouped = popular[0] is not None and popular[0] == popular[1] and head_moved(popular[0])
    heads = {head_percent(e) for report in (base, new) for e in flat_entries(report).values()} - {None}
    if not grouped and not any(head_moved(p) for p in heads if p is not None):
        return  # every head holds the same number of items: the same items, compared (a note says so)
    differs("inputs.n_items", nb, nn, affected,
            "head shares whose top-p% head holds another number of items (c = max(1, floor(p/100 · n_items))) "
            "are not compared" + (", nor the user groups' figures (their popular items moved)" if grouped else ""))


HELD_OUT_SET = ("holdout", "n_holdout_interactions", "seen_excluded", "repeats", "popular_seen_excluded")
"""What the held-out set is (its content, else its file: :func:`held_out_source`), and how
``|H_u|`` counts repeats of a training pair."""
FINGERPRINT = "holdout_fingerprint"
RECORDED_HOLDOUT = " (recorded holdout)"
"""How ``accuracy.holdout`` ends for a checkpoint's recorded split (auditor/loading/holdout.py)."""


def held_out_source(ab: dict[str, Any], an: dict[str, Any]) -> tuple[str, Any, Any]:
    """The held-out sets' identities, and the setting that names them: the content
    (``accuracy.holdout_fingerprint``: the same pairs by another path or format are one set,
    a file regenerated in place or another split seed another, QA9 diff N2) where both
    reports record it; else, for older reports, ``accuracy.holdout``: the file given, a
    checkpoint's recorded split counting as one set whichever checkpoint recorded it."""
    fb, fn = ab.get(FINGERPRINT), an.get(FINGERPRINT)
    if isinstance(fb, str) and isinstance(fn, str):
        return f"accuracy.{FINGERPRINT}", fb, fn
    hb, hn = (h if not (isinstance(h, str) and h.endswith(RECORDED_HOLDOUT)) else "a checkpoint's recorded split"
              for h in (ab.get("holdout"), an.get("holdout")))
    return "accuracy.holdout", hb, hn


def one_held_out_set(ab: dict[str, Any], an: dict[str, Any]) -> bool:
    """Whether both reports evaluated one held-out set by content (their fingerprints agree):
    the evaluation keeps each user's distinct held-out items (a repeated row of a pair counts
    once, ``HeldOutUsers.item_rows``), so the rows read (``n_holdout_interactions``: repeats,
    rows without a table row) cannot move a figure (QA11 diffapi N4)."""
    fb, fn = ab.get(FINGERPRINT), an.get(FINGERPRINT)
    return isinstance(fb, str) and fb == fn


def same_split_by_another_route(ab: dict[str, Any], an: dict[str, Any]) -> bool:
    """Whether both reports evaluated one held-out set (their fingerprints agree) and one of
    them read it as a checkpoint's recorded split (QA11 diffapi F5): its stored pairs hold no
    repeat of a training pair, so neither how repeats count (``repeats``) nor the rows the
    split took out of training, repeats and duplicates included (``n_holdout_interactions``,
    against the file's rows) can move a figure, which averages over the distinct pairs."""
    return one_held_out_set(ab, an) and RECORDED_SPLIT_REPEATS in (ab.get("repeats"), an.get("repeats"))


def accuracy_flags(ab: dict[str, Any], an: dict[str, Any], differs: Differs, affects: Callable[[FlatEntry], bool]) -> None:
    """Flag the accuracy figures (``affects``) where the held-out set differs, or the
    protocol: who is evaluated and how (e.g. RecBole's test users with no training
    interaction evaluated since QA6 served F1, which moves every mean at the same K)."""
    routes, one_set = same_split_by_another_route(ab, an), one_held_out_set(ab, an)
    for key in HELD_OUT_SET:
        if (one_set and key == "n_holdout_interactions") or (routes and key == "repeats"):
            continue
        name, base, new = held_out_source(ab, an) if key == "holdout" else (f"accuracy.{key}", ab.get(key), an.get(key))
        differs(name, base, new, affects, "accuracy figures are not compared: they are measured on other held-out sets")
    # The served lists' clause concerns the served scoring alone, whose figures one report lacks where it differs;
    # the repeats' clause (the protocol's end) cannot matter on one split read by another route.
    dropped = [f"; {UNTRAINED_SERVED}", *([f"; {a.get('repeats')}" for a in (ab, an)] if routes else [])]
    pb, pn = (_without(p, dropped) if isinstance(p, str) else p for p in (ab.get("protocol"), an.get("protocol")))
    differs("accuracy.protocol", pb, pn, affects,
            "accuracy figures are not compared: they are measured under another protocol (other users evaluated, "
            "or otherwise ranked)")


def _without(text: str, clauses: list[str]) -> str:
    for clause in clauses:
        text = text.replace(clause, "")
    return text


def index_flags(rb: dict[str, Any], rn: dict[str, Any], differs: Differs) -> None:
    """Flag the model's own lists where the retrieval index differs (exact vs approximate)."""
    ib, in_ = rb.get("index"), rn.get("index")
    if _served_only(ib) or _served_only(in_):
        return  # a lists-only report retrieves nothing: the model's figures are one report's alone
    differs("retrieval.index", ib, in_, retrieved,
            "figures of the model's own lists are not compared: an approximate index misses candidates "
            "(its recall), which moves them as much as the model does")


def _sample(retrieval: dict[str, Any]) -> dict[str, Any] | None:
    """The report's query sample (``retrieval.population``: ``n_queries`` of ``n_eligible``,
    drawn with ``seed``); None where it queried every eligible query or records no sample."""
    population = retrieval.get("population")
    return population if isinstance(population, dict) and population.get("sampled") is True else None


def sample_flags(rb: dict[str, Any], rn: dict[str, Any], differs: Differs) -> None:
    """Flag the model's own lists where both reports sampled their queries and drew other
    samples (another ``--seed`` or ``--max-queries``, QA9 diff F3): the same model moves by
    sampling noise alone (50 of 600 users took the top-1% share from 5.4% to 4.2%, 4.1% over
    all), and the verdict graded on them with it, so a gate would trip on the draw."""
    sb, sn = _sample(rb), _sample(rn)
    if sb is None or sn is None:
        return  # one sample against every query: a note (sample_notes)
    for key in ("seed", "n_queries"):
        differs(f"retrieval.population.{key}", sb.get(key), sn.get(key), of_model_lists,
                "figures of the model's own lists are not compared: they are measured on other samples of queries, "
                "whose noise moves them (and the verdict) as a change of the model would")


RESAMPLED = ("spearman_ci_lo", "spearman_ci_hi")
"""Figures drawn by resampling with ``settings.seed`` and ``settings.bootstrap`` resamples."""


def resampling_flags(base: dict[str, Any], new: dict[str, Any], differs: Differs) -> None:
    """Flag spearman's interval bounds where the resampling differs (``settings.seed`` or
    ``settings.bootstrap``, QA9 diff N1): they are Monte Carlo draws, so one model's lower
    bound moved 0.9716 -> 0.9707 with the seed alone, read "less bias" and tripped a gate."""
    sb, sn = (_settings(r) for r in (base, new))
    if not all(isinstance(s.get("bootstrap"), int) and s["bootstrap"] > 0 for s in (sb, sn)):
        return  # one report drew no interval (--bootstrap 0, or none recorded): its bounds are null, nothing to flag
    for key in ("seed", "bootstrap"):
        if sb.get(key) is not None and sn.get(key) is not None:
            differs(f"settings.{key}", sb[key], sn[key], lambda e: e.measure in RESAMPLED,
                    "spearman's interval bounds are not compared: another resampling draws them elsewhere")


def _settings(report: dict[str, Any]) -> dict[str, Any]:
    settings = report.get("settings")
    return settings if isinstance(settings, dict) else {}


def _served_only(index: Any) -> bool:
    return isinstance(index, str) and index.startswith("none")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _popular_percent(report: dict[str, Any]) -> float | None:
    groups = (report.get("settings") or {}).get("groups") or {}
    value = groups.get("popular_percent")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

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
* notes: another declaration about training (``settings.declared``: :func:`declared_notes`), another accuracy tolerance (the recommended scoring's rule, not a figure), another model file, training popularity (log, count file given by
  ``--frequencies``, a checkpoint's recorded counts: :func:`popularity_notes`), served-lists
  file, catalogue size, log size or number of queries.
"""

from __future__ import annotations

import json
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


def sample_notes(base: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """A note where one report sampled its queries and the other queried them all: the
    figures are compared, but the sampled ones may move with the sample, the verdict too."""
    samples = [_sample(r.get("retrieval") or {}) for r in (base, new)]
    if (samples[0] is None) == (samples[1] is None) or not all(r.get("retrieval") for r in (base, new)):
        return []
    side, drawn = ("base", samples[0]) if samples[0] is not None else ("new", samples[1])
    assert drawn is not None
    return [f"only the {side} report sampled its queries ({drawn.get('n_queries')} of {drawn.get('n_eligible')}, "
            f"seed {drawn.get('seed')}): its figures of the model's own lists, and the verdict graded on them, "
            "may move with the sample"]


def comparable_notes(base: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Differences that leave the shared figures comparable, said once: cut-offs, sections
    only one report measured, and the inputs (:func:`input_notes`)."""
    rb, rn = base.get("retrieval") or {}, new.get("retrieval") or {}
    ab, an = base.get("accuracy") or {}, new.get("accuracy") or {}
    notes: list[str] = []
    kb, kn = set((rb.get("at") or {})), set((rn.get("at") or {}))
    if kb != kn:
        notes.append(f"cut-offs differ (base K = {_ks(kb)}, new K = {_ks(kn)}): figures at a K only one report "
                     f"measured are listed, not compared")  # fmt: skip
    if bool(rb) != bool(rn):
        notes.append(f"only the {'base' if rb else 'new'} report measured retrieval")
    if bool(ab) != bool(an):
        notes.append(f"only the {'base' if ab else 'new'} report measured accuracy (a holdout)")
    if ab and an and ab.get("tolerance") != an.get("tolerance"):  # QA9 diff F7: the choice moved, not the model
        notes.append(f"accuracy.tolerance differs ({_shown(ab.get('tolerance'))} vs {_shown(an.get('tolerance'))}): "
                     "the recommended scoring is chosen under another accuracy tolerance (the share of dot's NDCG "
                     "it must keep), so it may change while no figure does")
    if ab and an and same_split_by_another_route(ab, an):  # QA11 diffapi F5: compared, and said why
        notes.append(f"accuracy.holdout differs ({_shown(ab.get('holdout'))} vs {_shown(an.get('holdout'))}): one held-out "
                     f"set by its fingerprint, read by another route ({_shown(ab.get('n_holdout_interactions'))} vs "
                     f"{_shown(an.get('n_holdout_interactions'))} held-out rows); its pairs hold no repeat of a training "
                     "pair, so the accuracy figures are compared")
    elif ab and an and one_held_out_set(ab, an) and ab.get("n_holdout_interactions") != an.get("n_holdout_interactions"):
        notes.append(f"accuracy.n_holdout_interactions differs ({_shown(ab.get('n_holdout_interactions'))} vs "
                     f"{_shown(an.get('n_holdout_interactions'))}): one held-out set by its fingerprint, read from "
                     "rows that differ only in repeated pairs or rows left out (an empty id, an item without a table "
                     "row); the evaluation counts each distinct pair once, so the accuracy figures are compared")
    return notes + input_notes(base, new)


def _ks(keys: set[str]) -> str:
    return ", ".join(sorted(keys, key=int)) or "none"


def input_notes(base: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The inputs that differ but leave the figures comparable, one note each."""
    notes = _file_notes(base, new, (("inputs", "model", "another model"),))
    notes += popularity_notes(base, new)
    notes += _file_notes(base, new, (
        ("served", "source", "other served lists"),
        ("inputs", "n_items", "another catalogue size"),
        ("inputs", "n_interactions", "another training log size"),
        ("retrieval", "n_queries", "another number of queries"),
    ))  # fmt: skip
    notes += sample_notes(base, new) + declared_notes(base, new)
    rb, rn = base.get("retrieval") or {}, new.get("retrieval") or {}
    if rb.get("index") == rn.get("index") and rb.get("recall") != rn.get("recall"):
        notes.append(f"retrieval.recall differs ({rb.get('recall')} vs {rn.get('recall')}): the same approximate "
                     "index found other shares of the exact lists")
    return notes


def declared_notes(base: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """A note where what the user declared about training differs (``settings.declared``:
    the optimizer, momentum, weight decay, learning rate, loss; QA11 diffapi F4): the
    conditions that read a declaration (C1, C4, C5) may change with it, not with the model,
    and the figures are compared. A report that records none (an older one) says nothing."""
    db, dn = (_settings(r).get("declared") for r in (base, new))
    if not isinstance(db, dict) or not isinstance(dn, dict) or db == dn:
        return []
    shown = [json.dumps(d, ensure_ascii=False, default=str) if d else "none declared" for d in (db, dn)]
    moved = ", ".join(sorted(k for k in {*db, *dn} if db.get(k) != dn.get(k)))
    return [f"settings.declared differs ({shown[0]} vs {shown[1]}: {moved}): what was declared about the model's "
            "training changed, so the conditions that read it (C1 plain SGD, C4 cosine-based loss, C5 sufficiently large "
            "learning rate) may change with the declaration, "
            "not with the model"]


_COUNTED_ELSEWHERE = re.compile(r".*\(counted elsewhere: (.+)\)")
_RECORDED = "(as recorded in the checkpoint)"
_MAY_DIFFER = "popularity, the reference of most figures, may differ"


def popularity_source(report: dict[str, Any]) -> tuple[str, str] | None:
    """Where the report's training popularity came from: ("inputs.interactions", log),
    ("settings.frequencies", count file) or ("the counts recorded in", checkpoint); None if unsaid.
    A lists-only report files either file as ``inputs.interactions``; its ``frequency`` says which."""
    inputs, settings = report.get("inputs") or {}, report.get("settings") or {}
    said = str(settings.get("frequency") or "")
    elsewhere = _COUNTED_ELSEWHERE.fullmatch(said)
    counts = settings.get("frequencies") or (elsewhere.group(1) if elsewhere else None)
    if counts:
        return "settings.frequencies", str(counts)
    if inputs.get("interactions"):
        return "inputs.interactions", str(inputs["interactions"])
    if said.endswith(_RECORDED) and inputs.get("model"):
        return "the counts recorded in", str(inputs["model"])
    return None


def popularity_notes(base: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """A note where both reports read a training popularity from different sources (a log,
    a count file, a checkpoint's counts): every popularity-dependent figure is measured
    against it. One report without a source says nothing to compare."""
    sb, sn = popularity_source(base), popularity_source(new)
    if sb is None or sn is None or sb == sn:
        return []
    (kb, fb), (kn, fn) = sb, sn
    if kb == kn == "inputs.interactions":
        return [f"inputs.interactions differs ({fb} vs {fn}): another training log: {_MAY_DIFFER}"]
    if kb == kn == "settings.frequencies":
        return [f"settings.frequencies differs ({fb} vs {fn}): other training counts: {_MAY_DIFFER}"]
    if kb == kn:
        return []  # both counts recorded in a checkpoint: the inputs.model note says the checkpoints differ
    return [f"training popularity differs ({kb} {fb} vs {kn} {fn}): counted from another source: {_MAY_DIFFER}"]


def _file_notes(base: dict[str, Any], new: dict[str, Any], keys: tuple[tuple[str, str, str], ...]) -> list[str]:
    notes: list[str] = []
    for section, key, what in keys:
        a, b = ((r.get(section) or {}).get(key) for r in (base, new))
        # A file only one report read (a model, served lists): its figures are that report's alone, listed so.
        if a != b and (a not in (None, "") and b not in (None, "") or not isinstance(a or b, str)):
            notes.append(f"{section}.{key} differs ({_shown(a)} vs {_shown(b)}): {what}")
    return notes


def _shown(value: Any) -> str:
    return "none" if value in (None, "") else str(value)


def _served_only(index: Any) -> bool:
    return isinstance(index, str) and index.startswith("none")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _popular_percent(report: dict[str, Any]) -> float | None:
    groups = (report.get("settings") or {}).get("groups") or {}
    value = groups.get("popular_percent")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

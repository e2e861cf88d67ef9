"""The served lists in every report (docs/served-lists.md): the file as read, and for a
lists-only audit the measures of the served and most-popular lists per K, the headline's
evidence and where the lists-only severity rule is explained."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from auditor.report.document import Block, Heading, Paragraph, Section, Table
from auditor.report.formatting import fmt_num, fmt_pct, fmt_skew_pair, text_or_missing
from auditor.report.measure_rows import shown_rows
from auditor.result import AuditResult
from auditor.served_section import ServedCutoff, ServedSection

TITLE = "Served lists"
SERVED_NOTE = (
    "The lists the service served, measured as they are: each list measure of the served top-K slots beside the "
    "most-popular list (for each user, the K most popular items of the training log that the user did not train "
    "on; the same K items for every user only with keep_seen or a log without users), over the catalogue of the "
    "training log and the lists."
)
WITH_MODEL_NOTE = (
    "The served lists are the 'served' scoring of the retrieval section, measured over the queried users beside "
    "dot, cosine and popular (with their overlaps), and in the accuracy section when a holdout is given."
)
RETRIEVAL_NOTE = (
    "No model: the lists were not served by dot product or cosine here. The served lists and the most-popular list, "
    "measured at each K, are in the section \"Served lists\" (the JSON report's retrieval section)."
)
SEVERITY_POINTER = (
    "Without a model, severity grades how much more of the served top-K slots the top-1% items get than their "
    "share of the training interactions; the full rule: section \"Severity\" of popaudit's docs/served-lists.md."
)


GRADED_BESIDE_POINTER = (
    "Severity is the worse of the model's grade (how many more of the top-K slots the top-1% items get under dot "
    "product than under cosine) and the served lists' (how much more of the served top-K slots they get than their "
    "share of the training interactions); here the served lists graded it. The full rules: section \"Severity\" of "
    "popaudit's docs/report.md and docs/served-lists.md."
)


HEAD = "head_share_1pct"


def pointer(result: AuditResult) -> str | None:
    """Where the severity rule of an audit with served lists is explained (None: the model's pointer)."""
    if lists_only(result):
        return SEVERITY_POINTER
    return GRADED_BESIDE_POINTER if result.verdict.graded_by == "served" else None


def lists_only(result: AuditResult) -> bool:
    """True for a lists-only audit (served lists measured, no model)."""
    return result.served is not None and result.retrieval is None and bool(result.served.at)


def headline_evidence(result: AuditResult) -> str:
    """The numbers behind a lists-only verdict, for the headline."""
    served = result.served
    assert served is not None
    k = result.verdict.quoted_k
    cut = served.at.get(k) if k is not None else None
    if k is None or cut is None:
        return "served lists not measured"
    # The grade and its reference over the grade's head, as the verdict says them (QA "Served N4"); a report
    # written before they were recorded alone quotes the per-K figures.
    graded = served.head_share_every_list[k] if k in served.head_share_every_list else cut.served.get(HEAD)
    popular = served.head_share_popular[k] if k in served.head_share_popular else cut.popular.get(HEAD)
    shares = fmt_skew_pair(graded, served.head_share_log)
    return (f"top-1% items' share of the served top-{k} slots {shares[0]} vs {shares[1]} of the training "
            f"interactions (most-popular list {fmt_pct(popular)}); no model: norms and conditions not assessed")


def beside(result: AuditResult) -> list[str]:
    """Beside a model, the served lists' amplification at the K the verdict graded them
    (for the headline; empty without served lists measured beside a model)."""
    served, retrieval, k = result.served, result.retrieval, result.verdict.served_k
    if served is None or k is None:
        return []
    if k in served.head_share_every_list:  # every list (sampled queries, or nobody queried)
        share = served.head_share_every_list[k]
    elif retrieval is not None and k in retrieval.at and "served" in retrieval.at[k].norm_aware:
        share = retrieval.at[k].norm_aware["served"].get(HEAD)
    else:
        return []
    graded = ", which graded the severity" if result.verdict.graded_by == "served" else ""
    shares = fmt_skew_pair(share, served.head_share_log)  # as the verdict says them: never onto a band's edge
    return [f"served lists: top-1% items' share of the served top-{k} slots {shares[0]} vs {shares[1]} of the "
            f"training interactions{graded}"]


def summary_table(served: ServedSection) -> Table:
    """How the file was read and what was counted."""
    rows = [
        ("file", served.source),
        ("users with a list", fmt_num(served.n_users)),
        ("rows", fmt_num(served.n_rows)),
        ("list length (shortest to longest)", f"{fmt_num(served.shortest)} to {fmt_num(served.longest)}"),
        ("ordered by", served.order),
        ("items measured over", fmt_num(served.n_catalogue)),
        ("items served but never trained (kept, popularity 0)", fmt_num(served.n_cold_items)),
    ]
    if served.cold_slot_share is not None:
        rows.append(("share of served slots naming items never trained", fmt_pct(served.cold_slot_share)))
    if served.n_unknown_users is not None:
        rows.append(("users absent from the training log (kept)", fmt_num(served.n_unknown_users)))
    if served.n_unknown_items:
        rows.append(("items without a row in the item table (slot left empty)", fmt_num(served.n_unknown_items)))
    if served.n_queried_without_list is not None:
        rows.append(("queried users served an empty list", fmt_num(served.n_queried_without_list)))
    if served.head_share_log is not None:
        rows.append(("top-1% items' share of the training interactions", fmt_pct(served.head_share_log)))
    return Table(("served lists", "value"), tuple(rows), (False, False), wrap=(1,))


def cutoff_table(k: int, cut: ServedCutoff, served: ServedSection) -> Table:
    """One K: each list measure of the served lists and of the most-popular list."""
    rows: list[tuple[str, ...]] = []
    for metric, info in shown_rows((cut.served, cut.popular), served.list_measures).items():
        rows.append((info.label, *(_shown(listed.get(metric), info.display) for listed in (cut.served, cut.popular))))
    rows.append(("share of the popular list in the served lists", fmt_pct(cut.overlap_popular), ""))
    caption = f"Top-{k} lists" + (f"; {fmt_num(cut.n_short_lists)} lists hold fewer than {k} items." if cut.n_short_lists
                                  else ".")
    return Table(("measure", "served", "popular"), tuple(rows), (False, True, True), caption)


def _shown(value: float | None, display: str) -> str:
    return fmt_pct(value) if display == "pct" else fmt_num(value, int(display[3:]))


def served_section(result: AuditResult, figures: Sequence[object]) -> Section | None:
    """The served lists: the file as read, and (lists only) the measures per K."""
    served = result.served
    if served is None:
        return None
    blocks: list[Block] = [Paragraph(SERVED_NOTE if served.at else WITH_MODEL_NOTE, "note"), summary_table(served)]
    for k, cut in sorted(served.at.items()):
        blocks += [Heading(f"Top-{k}"), cutoff_table(k, cut, served)]
    if served.definitions:
        rows = tuple((name, text) for name, text in served.definitions.items())
        blocks += [Heading("Definitions used"), Table(("name", "definition"), rows, (False, False), wrap=(1,))]
    return Section("served", TITLE, tuple(blocks))


def brief(result: AuditResult) -> list[Block]:
    """The terminal's view of the served lists of a lists-only audit."""
    served = result.served
    if served is None or not served.at:
        return []
    k = result.verdict.quoted_k
    cut = served.at.get(k) if k is not None else None
    log_share = (fmt_skew_pair(cut.served.get(HEAD), served.head_share_log)[1] if cut is not None
                 else fmt_pct(served.head_share_log))  # with the verdict's digits: never the band's edge it is not on
    blocks: list[Block] = [Paragraph(
        f"Served lists: {fmt_num(served.n_users)} users of {served.source}, lists of {fmt_num(served.shortest)} to "
        f"{fmt_num(served.longest)} items by {text_or_missing(served.order)}; the top-1% items hold "
        f"{log_share} of the training interactions", "title")]
    for k, cut in sorted(served.at.items()):
        blocks.append(replace(cutoff_table(k, cut, served), title=f"Top-{k}", caption=""))
    return blocks

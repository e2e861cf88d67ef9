"""The terminal's short view of an audit: the verdict, the numbers, and what to do.

It says what the full report says, compactly and in its order: a panel with the verdict,
the recommendations, the warnings (before the figures they qualify), one line on the
inputs, a table per section (statistics by their measure names, every K's list
measures), and what was not measured. What to run next depends on
what the run wrote, so the CLI says it (``auditor/cli/check.py``).
"""

from __future__ import annotations

from dataclasses import replace

from auditor.report import accuracy as accuracy_view
from auditor.report import harms
from auditor.report.content import RATIO_HEADER, measures_table, quoted_cutoffs, shown_measures
from auditor.report import served_lists as lists_view
from auditor.report.document import Block, Bullets, Headline, KeyValues, Paragraph, Table
from auditor.report.formatting import fmt_interval, fmt_num, fmt_pct, fmt_range, fmt_ratio, fmt_value, text_or_missing
from auditor.report.measure_rows import measure_cells
from auditor.report.population import population_rows
from auditor.report.served_vectors import accuracy_caption, served_brief
from auditor.report.training import training_brief
from auditor.result import AuditResult
from auditor.sections import share_ratio


def audit_brief(result: AuditResult, headline: Headline) -> tuple[Block, ...]:
    """The blocks a terminal shows for ``result``, under ``headline``."""
    # The documented order of every format: the verdict and what to do, then the warnings a
    # reader must know before the figures (an approximate index's understated skew), then the figures.
    blocks: list[Block] = [headline]
    if result.verdict.recommendations:
        blocks += [Paragraph("What to do", "title"), Bullets(tuple(result.verdict.recommendations))]
    blocks += [Paragraph(f"Warning: {warning}", "warning") for warning in result.warnings]
    blocks.append(Paragraph(_inputs_line(result), "note"))
    if result.frequency_norm is not None:
        blocks += [_frequency_norm(result), _deciles(result)]
    blocks += served_brief(result)
    if result.retrieval is not None:
        blocks += _retrieval(result)
    blocks += lists_view.brief(result)
    if result.accuracy is not None:
        blocks += _accuracy(result)
    blocks += _harms(result)
    if result.conditions:
        blocks.append(_conditions(result))
    if result.probes is not None and result.probes.update is not None:
        angles = result.probes.update.angle_summary
        blocks.append(Paragraph(
            f"Update angles over {fmt_num(angles.n)} items: median {fmt_num(angles.median, 2)}°, "
            f"{fmt_pct(angles.share_90pm1)} within 90°±1°, {fmt_pct(angles.share_90pm10)} within 90°±10°"
        ))  # fmt: skip
    if result.training is not None:
        fn = result.frequency_norm
        blocks += training_brief(result.training, None if fn is None else fn.spearman)
    if result.measures:
        table = measures_table(result.measures, result.measure_descriptions,
                               lambda v: fmt_num(v) if isinstance(v, float) else fmt_value(v))
        blocks.append(replace(table, numeric=(False, True), title="Additional measures (built-in and plugins)"))
    blocks += [Paragraph(f"Not measured: {section}: {why}", "note") for section, why in result.not_measured.items()]
    return tuple(blocks)


def _harms(result: AuditResult) -> list[Block]:
    """Who pays and which items gain, at the quoted K (nothing when not measured)."""
    k = quoted_cutoffs(result)[0]
    if k is None or result.retrieval is None:
        return []
    blocks: list[Block] = []
    groups = harms.group_table(result.retrieval, k)
    if groups is not None:
        blocks.append(replace(groups, title=f"Who pays: users by profile popularity, top-{k}"))
    for table, title in zip(harms.shift_tables(result.retrieval, k), ("Items dot serving favours",
                                                                        "Items dot serving starves")):
        blocks.append(replace(table, title=f"{title}, top-{k}"))
    return blocks


def _inputs_line(result: AuditResult) -> str:
    i = result.inputs
    if lists_view.lists_only(result):
        return f"Served lists alone (no model): {fmt_num(i.n_items)} items; log {i.interactions}: " \
               f"{fmt_num(i.n_interactions)} interactions"
    line = f"Model {i.model} ({text_or_missing(i.format)}): {fmt_num(i.n_items)} items × {fmt_num(i.dim)} dims"
    if i.interactions:
        line += f"; log {i.interactions}: {fmt_num(i.n_interactions)} interactions"
    elif result.settings.get("frequencies") and i.n_interactions is not None:
        line += f"; counts {result.settings['frequencies']}: {fmt_num(i.n_interactions)} interactions"
    elif i.n_interactions is not None:
        line += f"; frequencies recorded in the checkpoint ({fmt_num(i.n_interactions)} interactions)"
    if i.split:
        line += f". Split: {i.split}"
    return line


def _frequency_norm(result: AuditResult) -> KeyValues:
    fn = result.frequency_norm
    assert fn is not None
    lo, hi = fn.spearman_ci
    return KeyValues(
        (
            ("Spearman ρ (95% CI)",
             f"{fmt_num(fn.spearman)} [{fmt_interval(lo, hi, ', ', resamples=fn.n_bootstrap)}]"),
            # A p-value of exactly 0 is a float underflow, not certainty (as in content.py).
            ("p-value", "< 1e-300" if fn.spearman_p == 0 else fmt_num(fn.spearman_p)),
            ("Pearson on log(1+freq)", fmt_num(fn.pearson_log)),
            ("Kendall τ", fmt_num(fn.kendall)),
            ("log–log slope (ideal ≈ 0.25)", fmt_num(fn.loglog_slope)),
            ("items / cold items", f"{fmt_num(fn.n_items)} / {fmt_num(fn.n_cold)}"),
        ),
        "Frequency–norm correlation",
    )


def _deciles(result: AuditResult) -> Table:
    fn = result.frequency_norm
    assert fn is not None
    rows = tuple(
        (str(r.decile), fmt_range(r.freq_min, r.freq_max), fmt_num(r.n), fmt_num(r.norm_median), fmt_num(r.norm_mean))
        for r in fn.deciles
    )
    headers = ("decile", "frequency", "items", "median norm", "mean norm")
    return Table(headers, rows, (True,) * len(headers), title="Item norm by popularity decile")


def _retrieval(result: AuditResult) -> list[Block]:
    retrieval = result.retrieval
    assert retrieval is not None
    blocks: list[Block] = [Paragraph(
        f"Retrieval skew: {fmt_num(retrieval.n_queries)} queries ({text_or_missing(retrieval.queries)}), "
        f"index {text_or_missing(retrieval.index)}, popularity by {text_or_missing(retrieval.popularity)}",
        "title",
    )]  # fmt: skip
    blocks += [Paragraph(f"{name}: {value}", "note") for name, value in population_rows(retrieval)[1:]]
    for k, cut in sorted(retrieval.at.items()):
        # dot, cosine and their ratio first (the headline's numbers), as in every format.
        scorings = {"dot": cut.dot, "cosine": cut.cosine, **cut.norm_aware, "popular": cut.popular}
        # Norm-aware scorings as the other formats name them (norm-aware α=0.5), shortened
        # to fit a terminal's width beside the measure names.
        names = [f"α={name[len('alpha_'):]}" if name.startswith("alpha_") else name for name in scorings]
        names.insert(2, RATIO_HEADER)
        rows = []
        for metric, info in shown_measures(cut, retrieval.list_measures).items():
            cells = measure_cells(metric, info.display, [listed.get(metric) for listed in scorings.values()])
            cells.insert(2, fmt_ratio(share_ratio(cut.dot.get(metric), cut.cosine.get(metric))))
            rows.append((metric, *cells))
        rows.append(("overlap dot∩cosine", fmt_pct(cut.overlap_dot_cosine), *[""] * len(scorings)))
        rows += [(f"{name} in served", fmt_pct(value), *[""] * len(scorings)) for name, value in cut.overlap_served.items()]
        # Measure names are the flat names gates use: left-aligned, folded rather than cut
        # where the terminal is narrow ("miscalibration…" cut short named three measures
        # alike); the narrower columns of numbers keep their width.
        numeric = (False, *(True,) * len(names))
        blocks.append(Table(("measure", *names), tuple(rows), numeric, title=harms.cutoff_title(retrieval, k, result.inputs.n_items), wrap=(0,)))
    if retrieval.recall:
        recall = ", ".join(f"@{k}: {fmt_num(v)}" for k, v in sorted(retrieval.recall.items()))
        blocks.append(Paragraph(f"Approximate-index recall vs exact search {recall}", "note"))
    return blocks


def _accuracy(result: AuditResult) -> list[Block]:
    accuracy = result.accuracy
    assert accuracy is not None
    blocks: list[Block] = [Paragraph(
        f"{accuracy_view.TITLE}: {fmt_num(accuracy.n_users_evaluated)} held-out users "
        f"({accuracy_view.dropped_words(accuracy)}" + (f"; {accuracy.repeats})" if accuracy.repeats else ")"),
        "title",
    )]  # fmt: skip
    if (caption := accuracy_caption(result)) is not None:
        blocks.append(caption)
    for k in sorted(accuracy.at):
        blocks.append(replace(accuracy_view.tradeoff_table(result, k), title=harms.cutoff_title(result.retrieval, k, result.inputs.n_items), caption=""))
    if accuracy.changes:
        title = f"Against dot at K={accuracy.quoted_k}"
        blocks.append(replace(accuracy_view.changes_table(accuracy), title=title, caption=""))
    if accuracy.recommendation:
        blocks.append(Paragraph(accuracy.recommendation))
    return blocks


def _conditions(result: AuditResult) -> Table:
    assert result.conditions is not None
    rows = tuple(
        (key, text_or_missing(cond.name), cond.status, text_or_missing(cond.evidence))
        for key, cond in sorted(result.conditions.items())
    )
    return Table(
        ("id", "condition", "status", "evidence"), rows, badge=2, wrap=(3,),
        title="Sufficient conditions (all holding = norms must grow with popularity)",
    )  # fmt: skip

"""What the model serves with, as every report states it (the result's ``served``).

A RecBole graph model trains its stored item table but serves propagated vectors (or the
checkpoint's cache of them), SimpleX scores aggregated users by cosine, and a model with an
item bias scores its factors plus that bias (served as one more column): retrieval,
accuracy and the verdict are measured on what is served. The frequency–norm statistics
are reported twice, labelled: the stored item table (the training mechanism: how norms
grow with training frequency) and the served item vectors (what dot serving sees).
"""

from __future__ import annotations

from auditor.report.document import Block, KeyValues, Paragraph, Table
from auditor.report.formatting import fmt_interval, fmt_num
from auditor.result import AuditResult, FrequencyNorm, ServedVectorsSection

TITLE = "Served vectors"
STORED = "stored item table (the training mechanism)"
SERVED = "served item vectors (what dot serving sees)"
SOURCES = {
    "tables": "the stored tables",
    "cache": "the checkpoint's cache (restore_user_e/restore_item_e)",
    "propagated": "propagated by popaudit from the stored tables",
    "simplex": "SimpleX's aggregated user vectors, the stored item table",
    "bias": "the item factors (L2-normalised where the model normalises them) with the model's item bias as one more "
            "column (queries with a 1 there)",
}


def served_rows(served: ServedVectorsSection) -> tuple[tuple[str, str], ...]:
    """What was served and how it was compared, in words."""
    used = "yes" if served.as_served else "no: the stored tables stand in (see the warnings)"
    return (
        ("model", served.model or "n/a"),
        ("vectors used", served.description if served.source == "tables" else SOURCES.get(served.source, served.source)),
        ("how they were obtained", served.description),
        ("the model's own scoring", served.scoring),
        ("the vectors the model serves", used),
    ) + ((("item bias: Spearman ρ with training frequency", fmt_num(served.item_bias_spearman)),)
         if served.source == "bias" else ())


def stand_in(result: AuditResult) -> ServedVectorsSection | None:
    """The served-vectors section when the stored tables stand in for what the model
    serves (None: the audited vectors are the served ones, or the model is not one that
    serves otherwise)."""
    served = result.served_vectors
    return served if served is not None and not served.as_served else None


def not_served_text(served: ServedVectorsSection) -> str:
    """The plain statement at the top of the section: these are not the served vectors."""
    why = f" Why, and what to give to audit the served vectors: {served.not_served}." if served.not_served else ""
    return (
        f"These are not the vectors {served.model} serves with: popaudit could not rebuild them, so this audit is of "
        f"{served.description}, and its frequency–norm, retrieval and accuracy figures describe those, not the "
        f"model as it serves.{why}"
    )


def accuracy_caption(result: AuditResult) -> Paragraph | None:
    """Above the accuracy section of a stand-in audit: whose accuracy it is."""
    served = stand_in(result)
    if served is None:
        return None
    return Paragraph(
        f"These figures are of {served.description} scored by dot product, not of the vectors {served.model} serves "
        f"with (see '{TITLE}'): they are not the model's own accuracy.", "warning",
    )  # fmt: skip


def stored_note(result: AuditResult) -> Paragraph | None:
    """Under the frequency–norm section: which table its statistics are of."""
    served = result.served_vectors
    if served is None or served.frequency_norm is None:
        return None
    return Paragraph(
        f"These are the statistics of the {STORED}; the model serves other vectors, whose statistics are in "
        f"'{TITLE}'.", "note",
    )  # fmt: skip


def comparison_table(stored: FrequencyNorm, served: FrequencyNorm) -> Table:
    """The frequency–norm statistics of the stored table and of the served vectors, side by side."""

    def rows(fn: FrequencyNorm) -> tuple[str, ...]:
        lo, hi = fn.spearman_ci
        return (fmt_num(fn.spearman), fmt_interval(lo, hi, resamples=fn.n_bootstrap), fmt_num(fn.pearson_log),
                fmt_num(fn.kendall), fmt_num(fn.loglog_slope), fmt_num(fn.warm_norm_median))  # fmt: skip

    names = ("Spearman ρ", "Spearman ρ, 95% CI", "Pearson r on log(1 + frequency)", "Kendall τ",
             "log–log slope (norm on frequency)", "median norm, items seen in training")  # fmt: skip
    table = tuple(zip(names, rows(stored), rows(served)))
    return Table(("statistic", STORED, SERVED), table, (False, True, True))


def served_blocks(result: AuditResult) -> list[Block]:
    """The served-vectors section's blocks (empty when the result has no ``served``)."""
    served = result.served_vectors
    if served is None:
        return []
    blocks: list[Block] = [KeyValues(served_rows(served))]
    if not served.as_served:
        blocks.insert(0, Paragraph(not_served_text(served), "warning"))
    if served.frequency_norm is not None and result.frequency_norm is not None:
        blocks.append(comparison_table(result.frequency_norm, served.frequency_norm))
    if served.source == "bias":
        blocks.append(Paragraph(
            "The model adds a per-item bias to every score: its served item vectors are its factors (L2-normalised "
            "where the model normalises them) with the bias as one more column, and each query has a 1 there, so the "
            f"'dot' lists rank {served.score or 'u·i + b_i'} as the model does (a user or global bias changes no "
            "user's ranking). The stored table's statistics, in the frequency–norm section, are of the factors alone "
            "(the training mechanism); the served vectors' include the bias, but a served norm grows with |b_i| "
            "whichever items the bias favours, so the gate figure served_spearman is null: item_bias_spearman "
            "gates the bias.", "note",
        ))  # fmt: skip
    elif served.scoring == "cosine" and served.as_served:
        blocks.append(Paragraph(
            "The served item vectors are the stored item table: its frequency–norm statistics are both. The model "
            "scores by cosine, so norms do not enter its own lists (the 'cosine' scoring); 'dot' shows what serving "
            "the same vectors by dot product would do.", "note",
        ))  # fmt: skip
    return blocks


def served_brief(result: AuditResult) -> list[Block]:
    """The terminal's lines: what was served and, when they differ, the served vectors' ρ."""
    served = result.served_vectors
    if served is None or (served.source == "tables" and served.as_served and served.scoring == "dot"):
        return []
    used = served.description if served.source == "tables" else SOURCES.get(served.source, served.source)
    rows = [("vectors used", used), ("model's own scoring", served.scoring)]
    if served.source == "bias":
        rows.append(("item bias: Spearman ρ with frequency", fmt_num(served.item_bias_spearman)))
    fn = served.frequency_norm
    if fn is not None:
        lo, hi = fn.spearman_ci
        interval = fmt_interval(lo, hi, ", ", resamples=fn.n_bootstrap)
        rows += [(f"Spearman ρ, {SERVED}", f"{fmt_num(fn.spearman)} [{interval}]"),
                 ("log–log slope, served", fmt_num(fn.loglog_slope))]  # fmt: skip
    note = f"; the correlation above is the {STORED}" if fn is not None else ""
    blocks: list[Block] = [KeyValues(tuple(rows), f"{TITLE} ({served.model}){note}")]
    if not served.as_served:
        blocks.insert(0, Paragraph(f"{TITLE} ({served.model}): {not_served_text(served)}", "warning"))
    return blocks

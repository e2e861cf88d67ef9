"""The fixes the verdict recommends, each with its caveat: what to change in training
(C1's optimizer, C5's learning rate or temperature; logQ correction only as what it is,
no cure, since it raises popular items' exposure) and in serving
(cosine or norm-aware scoring, with the measured trade-off when held-out accuracy was
measured). :mod:`auditor.verdict` decides when each applies."""

from __future__ import annotations

from auditor.alpha import ALPHA_PREFIX, scoring_alpha
from auditor.config import DEFAULT_ALPHAS
from auditor.errors import setting
from auditor.result import C1, C4, C5, Condition, MeasuredSections
from auditor.wording import export_served_vectors

_IN_BATCH_WORDS = ("infonce", "softmax", "in-batch", "inbatch", "sampled", "contrastive", "nce")


def training_recommendations(conditions: dict[str, Condition]) -> list[str]:
    """What to change in training (C1, C5), each with its caveat, and what logQ correction
    does to exposure where the loss has in-batch negatives."""
    recs: list[str] = []
    c1 = conditions.get(C1)
    if c1 is not None and c1.status in ("holds", "unknown"):
        recs.append(
            "Training the item table with an adaptive optimizer (Adam, Adagrad) breaks C1, "
            "the orthogonality of plain-SGD updates"
            + (" (C1 holds here: " + c1.evidence + ")" if c1.status == "holds" else "")
            + ". Caveat: this changes C1, not the popularity signal in the gradients; measure, do not assume, "
            "that the coupling goes away (popaudit experiment mitigations, or retrain, then check again). "
            "Weight decay is no such fix: it breaks C1 too (every step shrinks every norm), but popular items "
            "are pushed back up more often than rare ones, and in popaudit's own reference runs it raised the "
            "exposure skew (docs/theory.md §7)."
        )
    c5 = conditions.get(C5)
    # A probe step that shrank the norms measured no growth: the advice to shrink it stands
    # only where the trained table shows the growth (C5 holds from it).
    shrank = c5 is not None and c5.details.get("shrank") is True
    if c5 is not None and (c5.status == "holds" or (c5.status == "unknown" and not shrank)):
        g = c5.details.get("growth_per_update")
        # growth_per_update is at the probe's own rate, unless it was rescaled to the training
        # rate or came from a trace (then the probe's figure is kept apart, and lr is the rate)
        rescaled = "probe_growth_per_update" in c5.details
        lr = c5.details.get("lr") if rescaled else (c5.details.get("probe_lr") or c5.details.get("lr"))
        numbers = ""
        if shrank:  # no growth measured: the probe step shrank the norms (C5's evidence)
            numbers = (" (the probe step shrank the norms, so there is no measured growth per update to quote; "
                       "the trained table shows the growth, as C5 says)")
        elif isinstance(g, (int, float)) and g > 0:  # c/s² = ‖Δq‖²/‖q‖² is a growth, never negative
            numbers = f" (measured growth per update c/s² = {g:.3g}" + (f" at lr = {lr:g}" if lr else "") + ")"
        if _has_temperature(conditions.get(C4)):
            what, scales = "A lower learning rate on the item table, or a higher softmax temperature,", (
                "with η² and, for cosine logits, with 1/τ²")
        else:  # a pointwise loss (or another without a softmax): no temperature to raise
            what, scales = "A lower learning rate on the item table", "with η²"
        recs.append(
            f"{what} shrinks the per-update norm growth c/s², which scales {scales}{numbers}. Caveat: "
            "slower or softer training; the correlation weakens at low learning rates but need not vanish, "
            "so audit the retrained model."
        )
    logq_note = _logq_note(conditions.get(C4))
    if logq_note:
        recs.append(logq_note)
    return recs


def _has_temperature(c4: Condition | None) -> bool:
    """Whether the audited loss may have a softmax temperature to raise: a softmax over
    in-batch or sampled negatives (InfoNCE), or a loss not recorded. A known loss without
    a softmax (the pointwise ``cosine``, BPR) has none, and the advice does not name one."""
    loss = str((c4.details.get("loss") if c4 is not None else None) or "")
    return not loss or any(word in loss.lower() for word in _IN_BATCH_WORDS)


def _logq_note(c4: Condition | None) -> str:
    """What the report says of the logQ correction, for a loss with in-batch or sampled
    negatives: never a cure for popularity bias. logQ (Yi et al. 2019) removes the
    softmax's sampling bias *against* popular items, so it raises their exposure; popaudit's
    own mitigation runs measured that (docs/theory.md §7), so recommending it here would
    make the graded skew worse. A model trained with it is told what it did instead."""
    loss = str((c4.details.get("loss") if c4 is not None else None) or "")
    if c4 is None or not loss:
        return ""
    if c4.details.get("logq") is True:
        return (
            f"This model was trained with logQ correction (loss {loss!r}): it removes the in-batch softmax's "
            "sampling bias against popular items, so it raises their exposure rather than lowering it "
            "(docs/theory.md §7). Caveat: it corrects the loss's estimate, which may help accuracy; training "
            "without it is a change to measure on held-out data (popaudit experiment mitigations), not assume."
        )
    if not any(word in loss.lower() for word in _IN_BATCH_WORDS):
        return ""
    return (
        f"logQ correction is no cure here: the loss ({loss!r}) uses in-batch or sampled negatives, and logQ "
        "removes their sampling bias against popular items, so it raises popular items' exposure rather than "
        "lowering it (docs/theory.md §7; popaudit experiment mitigations measures both). Caveat: apply "
        "it for the loss's sake if at all, and audit again after retraining."
    )


def mitigate_suggestion() -> str:
    """The ``popaudit mitigate`` command the serving advice names, with placeholders for
    the model and the output (``check`` puts in the audit's own: ``cli/_next.py``)."""
    return f"popaudit mitigate MODEL {setting('alpha')} auto {setting('output')} OUT"


def _queried_by_history(result: MeasuredSections) -> bool:
    """Whether retrieval queried the model with history queries: means of the item rows a rescaling changes."""
    population = result.retrieval.population if result.retrieval is not None else None
    return population is not None and population.source == "history"


def rebuilt_history_queries(result: MeasuredSections) -> bool:
    """Whether ``popaudit mitigate --alpha auto`` judges this model as its audit did: with
    history queries rebuilt from each rescaled table. Its audit queries as ``check``'s
    default does, by history only where the model has no user table, so a ``--queries
    history`` audit of a model with one is judged with the user table instead
    (:func:`history_beside_user_table`)."""
    return _queried_by_history(result) and result.inputs.user_table is None


def history_mitigation(recommended: str | None) -> str:
    """What ``popaudit mitigate --alpha auto`` does for a model queried with history
    queries, beside a trade-off measured with the queries kept (``recommended``: the
    scoring it chose). The rescaled table changes the queries built from it, so the α it
    writes is chosen by dot serving of each rescaled table with its queries rebuilt (as
    ``check`` of the output measures it), which may differ from ``recommended``."""
    chosen = "keeps dot" if recommended in (None, "dot") else f"recommends {recommended}"
    return (
        "This model has no user table: each query is the mean of a user's training-item rows, which a rescaled "
        f"table changes too, so the trade-off above (which {chosen}, the queries kept from the original rows) is "
        f"not what a rescaled table serves. `{mitigate_suggestion()}` measures dot serving of each rescaled table "
        "with the queries rebuilt from it, as `popaudit check` of the output measures it, and writes the α that "
        "trade-off recommends (which may differ from the one above), or nothing when no table is clearly better "
        "than dot."
    )


def history_beside_user_table(result: MeasuredSections, recommended: str | None) -> str:
    """The serving fix for a model with a user table audited with ``--queries history``:
    ``mitigate`` has no ``--queries`` and judges with the user table, so ``--alpha auto``
    answers another question; the α this trade-off chose (``recommended``) is quoted as a
    number (``cli/_next.py`` fills in the command), and ``check`` of the output with
    ``--queries history`` measures it as these queries serve it, rebuilt from its rows."""
    queries = f"{setting('queries')} history"
    check = (f"`popaudit check` of the output with {queries} and this audit's {setting('interactions')} and "
             f"{setting('holdout')} measures it as history queries serve it (rebuilt from its rescaled rows, which the "
             "trade-off above kept from the original ones)")
    head = (f"This audit queried by history ({queries}) although the model has a user table "
            f"({result.inputs.user_table}): popaudit mitigate has no {setting('queries')} option and judges any α "
            f"with the user table's queries, so its {setting('alpha')} auto answers for user-table serving, not for "
            "this trade-off")
    if recommended in (None, "dot"):
        return (f"{head}, which keeps dot; no mitigate command measures the history-query trade-off of a rescaled "
                f"table. To try an α: `popaudit mitigate {result.inputs.model} {setting('alpha')} A "
                f"{setting('output')} OUT` writes the table rescaled by A, and {check}.")
    return (f"{head}. `{mitigate_suggestion()}` writes the table rescaled by the α above (k·‖k‖^(α−1)), and "
            f"{check}.")


def _not_written_back(model_format: str) -> str:
    """The serving fix for a model ``popaudit mitigate`` does not write back (a plugin's
    custom tower): what it serves are encoder outputs, so the rescaling applies to those."""
    return export_served_vectors(model_format) + "."


def _already_rescaled(result: MeasuredSections, recommended: str, tolerance: float | None) -> str:
    """The serving fix for a model that is a ``popaudit mitigate`` output: its trade-off is
    against its own (rescaled) dot, so a second rescaling compounds the first and the
    accuracy tolerance no longer holds against the original; the α to audit the original
    with, whose own audit (not this one) decides what to serve: the combined α may keep
    less than the tolerance of the original's accuracy, so it is never recommended here.
    That audit is quoted with the combined α beside the grid ``mitigate --alpha auto``
    chooses from (``--alpha`` replaces the grid, so all are passed), so the original's
    audit is one, and says which command writes each answer it may give."""
    carried = result.inputs.rescaled_alpha or 1.0
    more = scoring_alpha(recommended)
    more = 1.0 if more is None else more
    combined = carried * more
    original = result.inputs.rescaled_from
    table = f"the original table ({original})" if original else "the original table (the first of the chain)"
    same = f" and {setting('accuracy_tolerance')} {tolerance:g}" if tolerance is not None else ""
    grid, named = ", ".join(f"{a:g}" for a in DEFAULT_ALPHAS), "cosine" if combined == 0 else f"alpha {combined:g}"
    auto = (f"popaudit mitigate of the original with {setting('alpha')} auto, the same holdout{same} writes the "
            "alpha the original's audit recommends (or nothing, where no alpha is clearly better than dot)")
    if 0.0 < combined < 1.0 and combined not in DEFAULT_ALPHAS:
        alphas = " ".join(f"{setting('alphas')} {a:g}" for a in (combined, *DEFAULT_ALPHAS))
        audit = (f"audit {table} with {alphas} ({setting('alphas')} replaces the default grid {grid}, which "
                 f"mitigate {setting('alpha')} auto chooses from, so pass them all; the same holdout{same})")
        auto = (f"Write its answer once: popaudit mitigate of the original with {setting('alpha')} auto, the same "
                f"holdout{same}, where it recommends an alpha of the grid (or keeps dot: auto then writes nothing); "
                f"with {setting('alpha')} {combined:g} where it recommends alpha_{combined:g}, which auto's grid "
                "lacks (auto would choose another)")
    else:  # the default grid (or cosine) already holds the combined alpha: the audit auto repeats
        audit = f"audit {table} with the default α grid ({grid}, and cosine; the same holdout{same})"
    return (
        f"This model is already a popaudit mitigate output carrying alpha {carried:g}: the shares of dot's accuracy "
        f"above are of its own dot serving, not of {table}'s, and rescaling it again by {more:g} leaves the "
        f"original's norms raised to {combined:g} in all, which may keep less of the original's accuracy than the "
        f"tolerance asks. Rescale the original once instead: {audit}, which measures {named} against "
        f"the original's dot; that audit decides what to serve, not this one: {named} only where it "
        f"keeps the tolerance there and that audit recommends it. {auto}."
    )


def serving_recommendations(result: MeasuredSections, measured: str) -> list[str]:
    """Cosine and norm-aware serving: the measured trade-off when held-out accuracy was
    measured (:mod:`auditor.tradeoff`), else the advice and how to measure its cost."""
    accuracy = result.accuracy
    served = result.served_vectors
    if served is not None and served.as_served and served.scoring == "cosine":  # SimpleX, Dot(normalize=True), ...
        kept = [f"Keep serving by cosine: {served.model} already scores by cosine (its own lists are the 'cosine' "
                "scoring), and an inner-product index of the same vectors would serve as the 'dot' figures show: "
                + measured + "."]
        return kept + (["Held-out accuracy beside exposure: " + accuracy.recommendation]
                       if accuracy is not None and accuracy.recommendation else [])
    if accuracy is not None and accuracy.recommendation:
        fix = ""
        if result.inputs.written_back is False:  # a plugin's tower: no mitigate command would run
            fix = "" if accuracy.recommended in (None, "dot") else " " + _not_written_back(result.inputs.format)
        elif result.inputs.rescaled_alpha is not None and accuracy.picked_on_output not in (None, "dot"):
            # a mitigate output: its trade-off recommends nothing (auditor.tradeoff.judge_tradeoff); the
            # original's audit decides, at the combined alpha
            return ["Held-out accuracy beside exposure: " + accuracy.recommendation + " "
                    + _already_rescaled(result, accuracy.picked_on_output, accuracy.tolerance) + _alphas_left_out(result)]
        elif rebuilt_history_queries(result) and result.inputs.rescaled_alpha is None:  # auto refuses a mitigate output
            fix = " " + history_mitigation(accuracy.recommended)
        elif _queried_by_history(result) and result.inputs.rescaled_alpha is None:  # mitigate judges with the users
            fix = " " + history_beside_user_table(result, accuracy.recommended)
        elif accuracy.recommended not in (None, "dot"):
            fix = (
                f" `{mitigate_suggestion()}` writes the item table rescaled for it "
                "(k·‖k‖^(α−1)), so an existing inner-product index serves it unchanged."
            )
        return ["Held-out accuracy beside exposure: " + accuracy.recommendation + fix + _alphas_left_out(result)]
    how = f"measure it with {setting('holdout')} (held-out interactions): recall/NDCG of every scoring beside its exposure"
    unmeasured = result.not_measured.get("accuracy")
    if unmeasured and not unmeasured.startswith("no held-out interactions"):  # a holdout was given: say why it failed
        how = f"held-out accuracy, which measures that, was not measured here: {unmeasured}"
    return [
        "Serve with cosine similarity, or L2-normalise item vectors before indexing: " + measured + ". "
        "Caveat: norms may also carry useful signal (item quality, confidence); " + how + ".",
        "Norm-aware scoring keeps part of the norm signal: score with ‖q‖^α‖k‖^α·cos(q, k) for α in (0, 1) "
        "(α = 0 is cosine, α = 1 is dot product). Caveat: it trades accuracy against exposure; "
        + (f"{setting('holdout')} measures α = {', '.join(f'{a:g}' for a in DEFAULT_ALPHAS)} (or your "
           f"{setting('alphas')})." if not _alpha_reason(result) else
           f"this run did not measure it ({_alpha_reason(result)}).")
    ]


def _alpha_reason(result: MeasuredSections) -> str:
    """Why the norm-aware scorings were not measured ("" when they were, or none was asked)."""
    return next((why for key, why in result.not_measured.items() if key.startswith(ALPHA_PREFIX)), "")


def _alphas_left_out(result: MeasuredSections) -> str:
    """The sentence a trade-off needs when it compared no norm-aware scoring though some were asked."""
    why = _alpha_reason(result)
    return f" The comparison left out the norm-aware scorings, which were not measured: {why}." if why else ""

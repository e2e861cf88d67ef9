"""``popaudit mitigate --alpha auto``: the α the held-out accuracy trade-off of ``check``
recommends, and the trade-off figures the sidecar records for it."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import pluggy

from auditor.alpha import scoring_alpha
from auditor.audit import run_audit
from auditor.config import AuditConfig
from auditor.errors import InputError, NoClearGainError, setting
from auditor.loading.statistics import InputCache
from auditor.mitigation.history import QUERIES_REBUILT, output_tradeoff, written_tradeoff
from auditor.mitigation.sidecar import FULL_PRECISION
from auditor.plugins import get_plugin_manager
from auditor.progress import SILENT, Progress
from auditor.result import Accuracy, AuditResult, CutoffMeasures


def recommended_alpha(result: AuditResult) -> float:
    """The α of the scoring the accuracy trade-off of ``check`` recommends: cosine 0,
    ``alpha_<a>`` a. InputError when accuracy was not measured; NoClearGainError when the
    trade-off keeps dot (no scoring clearly better), naming the best α available."""
    return chosen_alpha(measured_accuracy(result))


def measured_accuracy(result: AuditResult) -> Accuracy:
    """The audit's accuracy section; InputError saying why when it was not measured, or
    when the model is a mitigate output, whose audit recommends no α (``picked_on_output``)."""
    accuracy = result.accuracy
    if result.inputs.rescaled_alpha is not None:  # auto would stack a second alpha on the first
        original = result.inputs.rescaled_from or "the first table of the chain"
        raise InputError(
            f"{setting('alpha')} auto: {result.inputs.model} is already a popaudit mitigate output carrying alpha "
            f"{result.inputs.rescaled_alpha:g}, whose audit recommends no α (its trade-off is against its own, "
            f"already rescaled dot): run {setting('alpha')} auto on the original table ({original}) once instead, "
            f"or give {setting('alpha')} a number in [0, 1]")
    if accuracy is None:
        reason = result.not_measured.get("accuracy", "no held-out log")
        raise InputError(
            f"{setting('alpha')} auto takes the α the accuracy trade-off recommends, but accuracy was not "
            f"measured ({reason}); pass {setting('interactions')} and {setting('holdout')}, or give "
            f"{setting('alpha')} a number in [0, 1]"
        )
    return accuracy


def chosen_alpha(accuracy: Accuracy) -> float:
    """The α of the scoring ``accuracy``'s trade-off recommends (errors: :func:`recommended_alpha`)."""
    alpha = scoring_alpha(accuracy.recommended) if accuracy.recommended is not None else None
    if alpha is None:
        said = accuracy.recommendation or "no scoring was recommended"
        raise InputError(f"{setting('alpha')} auto: the accuracy trade-off gives no α to serve with "
                         f"({said.rstrip('.')}); give {setting('alpha')} a number in [0, 1]")
    if alpha == 1.0:
        raise NoClearGainError(
            f"{setting('alpha')} auto wrote nothing: the trade-off keeps dot-product serving. "
            f"{accuracy.recommendation.rstrip('.')}{_remedies(accuracy)}"
        )
    return alpha


def _remedies(accuracy: Accuracy) -> str:
    """What may be done when the trade-off keeps dot, naming only what applies to its
    blocker: writing the best alternative anyway (when it lowers the head share at all),
    and a looser accuracy tolerance only when some scoring that clearly lowers the head
    share is held back by it (the value that admits it quoted)."""
    best = accuracy.best_alternative
    best_alpha = scoring_alpha(best) if best is not None else None
    offers = []
    change = accuracy.changes.get(best) if best is not None else None
    if best_alpha is not None and (change is None or change.head_share_delta < 0):
        offers.append(f"the best available is {setting('alpha')} {best_alpha:g} ({best}): pass it to write that "
                      "table anyway")
    k = accuracy.quoted_k
    at = accuracy.at.get(k, {}) if k is not None else {}
    dot = at["dot"].ndcg if "dot" in at else math.nan
    held_back = [(at[name].ndcg / dot, name) for name, c in accuracy.changes.items()
                 if c.clearly_less_head and scoring_alpha(name) is not None and name in at and dot > 0
                 and accuracy.tolerance is not None and at[name].ndcg < accuracy.tolerance * dot]
    if held_back:
        share, name = max(held_back)
        loosened = round(share, 3) if round(share, 3) * dot <= at[name].ndcg else round(share, 3) - 0.001
        offers.append(f"{setting('accuracy_tolerance')} {loosened:g} admits {name}, which "
                      f"clearly lowers the head share and keeps {share:.1%} of dot's NDCG")
    return "; " + ", or ".join(offers) if offers else ""


def tradeoff_figures(accuracy: Accuracy, cut: CutoffMeasures, scoring: str, queries: str) -> dict[str, Any]:
    """What dot serving of the rescaled table gives against the original's dot serving,
    at the trade-off's K (``cut``: the exposure measures there): the figures the rescaling
    changes, and how the ``queries`` were formed."""
    assert accuracy.quoted_k is not None
    k = accuracy.quoted_k
    exposure = cut.scorings()
    change = accuracy.changes.get(scoring)
    return {
        "k": k,
        "scoring": scoring,
        "queries": queries,
        "ndcg": {"before": accuracy.at[k]["dot"].ndcg, "after": accuracy.at[k][scoring].ndcg},
        # Every head share the trade-off may judge: head_percent names the one it did (the severity's).
        **{f"head_share_{head}pct": {"before": exposure["dot"].number(f"head_share_{head}pct"),
                                     "after": exposure[scoring].number(f"head_share_{head}pct")}
           for head in dict.fromkeys((1, accuracy.head_percent))},
        "head_percent": accuracy.head_percent,
        "ndcg_delta_ci": None if change is None else change.ndcg_delta_ci,
        "head_share_delta_ci": None if change is None else change.head_share_delta_ci,
        "n_bootstrap": accuracy.n_bootstrap,
        "recommendation": accuracy.recommendation,
        "read_back": False,
    }


def figures_as_written(config: AuditConfig, figures: dict[str, Any], output: Path, written: Path, dtype: str, *,
                       pm: pluggy.PluginManager, progress: Progress = SILENT,
                       cache: InputCache | None = None) -> tuple[dict[str, Any], list[str]]:
    """``figures`` (:func:`tradeoff_figures`) measured again on the output as written,
    where its dtype is not one of :data:`FULL_PRECISION`
    (``written``: the staged file, read as ``check`` reads ``output``, its table stored in
    ``dtype``), the α unchanged, with the sentence of that measurement (one "after" figure
    per output, the one ``check OUT`` gives); and a warning when, so rounded, the output no
    longer meets the rule the α was chosen by (the sentence is then the chooser's, labelled)."""
    k, scoring = int(figures["k"]), str(figures["scoring"])
    alpha = 0.0 if scoring == "cosine" else scoring_alpha(scoring)
    assert alpha is not None
    with tempfile.TemporaryDirectory(prefix="popaudit-written-") as folder:
        named = Path(folder) / output.name  # the name check OUT reads: its suffix says the format
        named.symlink_to(Path(written).resolve())
        accuracy, cut = written_tradeoff(config, k, scoring, alpha, named, pm=pm, progress=progress, cache=cache,
                                         head=int(figures.get("head_percent", 1)))
    measured = {**tradeoff_figures(accuracy, cut, scoring, str(figures["queries"])), "read_back": True}
    if accuracy.recommended == scoring:  # one measurement: the sentence quotes the figures beside it, as written
        return measured, []
    measured["recommendation"] = (f"{str(figures['recommendation']).rstrip('.')} (the figures of the rescaled table "
                                  f"before its {dtype} rounding, which the α was chosen by).")
    return measured, [f"stored as {dtype}, the output's table rounds the rescaled rows, and dot serving of it no longer "
                      f"meets the rule {scoring} was chosen by: {accuracy.recommendation.rstrip('.')} (the sidecar's "
                      "tradeoff holds the figures of the table as written)"]


def _beside(kept: Accuracy, rebuilt: Accuracy) -> str:
    """For a history-query model whose two trade-offs choose differently: check's, with
    its figures (the queries kept from the original rows, what ``check MODEL`` advises),
    beside the rebuilt one ``--alpha auto`` follows, so the two are never left to disagree
    unsaid. Empty when they agree."""
    if kept.recommended == rebuilt.recommended or not kept.recommendation:
        return ""
    return (" Check of the model chooses otherwise, its history queries kept from the original rows (not what a "
            f"rescaled table serves): {kept.recommendation}")


def auto_alpha(config: AuditConfig, *, pm: pluggy.PluginManager | None = None, progress: Progress = SILENT,
               cache: InputCache | None = None) -> tuple[float, str, dict[str, Any], tuple[str, ...]]:
    """Run the audit of ``config`` and take the α its accuracy trade-off recommends: (α,
    the recommendation's sentence, the trade-off figures of that scoring, the audit's
    warnings, which the sidecar carries: a holdout's ids that fit only shifted are warned of
    there, never refused, QA13 accuracy F1). The held-out
    interactions are ``holdout``, or the split a popaudit checkpoint stored, as for
    ``check``. For history queries (no user table) the trade-off is that of dot serving of
    each candidate output with its queries rebuilt from it (:mod:`auditor.mitigation.history`),
    what ``check OUT`` measures."""
    pm = pm if pm is not None else get_plugin_manager(config.plugins)
    cache = cache if cache is not None else InputCache()  # the log read once, for the audit and the outputs' trade-off
    result = run_audit(config, pm=pm, progress=progress, cache=cache)
    accuracy = measured_accuracy(result)
    population = result.retrieval.population if result.retrieval is not None else None
    history = population is not None and population.source == "history" and accuracy.quoted_k is not None
    cut: CutoffMeasures | None = None
    kept = accuracy  # check's trade-off of the model: its history queries kept from the original rows
    if history:
        assert accuracy.quoted_k is not None
        accuracy, cut = output_tradeoff(config, accuracy.quoted_k, pm=pm, progress=progress, cache=cache,
                                        head=accuracy.head_percent)
    try:
        alpha = chosen_alpha(accuracy)
    except NoClearGainError as exc:
        if not history:
            raise
        raise NoClearGainError(f"{exc} (the figures of dot serving of each candidate output, with each user's history "
                               f"query rebuilt from it as check of that output builds it).{_beside(kept, accuracy)}") from exc
    assert accuracy.recommended is not None and accuracy.quoted_k is not None and result.retrieval is not None
    if cut is None:
        cut = result.retrieval.at[accuracy.quoted_k]
    unchanged = f"{population.source if population else 'none'}: the audit's queries, which the rescaling leaves unchanged"
    sentence = f"auto: {accuracy.recommendation}".strip() + (_beside(kept, accuracy) if history else "")
    figures = tradeoff_figures(accuracy, cut, accuracy.recommended, QUERIES_REBUILT if history else unchanged)
    return alpha, sentence, figures, tuple(result.warnings)


__all__ = [
    "FULL_PRECISION", "auto_alpha", "chosen_alpha", "figures_as_written", "measured_accuracy", "recommended_alpha",
    "tradeoff_figures",
]

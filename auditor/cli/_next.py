"""What to run next: ``popaudit check`` (and the advice's ``popaudit mitigate``) command
lines that repeat an audit's inputs and options (ids, holdout, formats), quoted for a
POSIX shell so they run as printed."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from auditor.config import AuditConfig, DeclaredTraining
from auditor.cli._common import option_names

if TYPE_CHECKING:  # the report's types: not imported for --help
    from auditor.result import AuditResult

_NEGATED = {"retrieval": "--no-retrieval", "probes": "--no-probes"}
"""Settings whose flag turns them off."""


def check_command(model: Path | None, settings: Mapping[str, Any], extra: Sequence[str] = ()) -> str:
    """``popaudit check MODEL`` with every setting in ``settings`` (AuditConfig field ->
    value) that differs from its default, then ``extra`` words (no MODEL: a lists-only audit)."""
    return command_line(["popaudit", "check", *([] if model is None else [path_word(model)])], settings, extra)


def path_word(path: Path | str) -> str:
    """A path as an argument word that no command reads as an option: ``./-dash.pt`` for
    ``-dash.pt`` (quoting alone cannot stop a shell word from starting with ``-``)."""
    text = str(path)
    return f"./{text}" if text.startswith("-") else text


def command_line(words: Sequence[str], settings: Mapping[str, Any], extra: Sequence[str] = ()) -> str:
    """``words`` then every setting in ``settings`` (AuditConfig field -> value) that
    differs from its default, as its flag, then ``extra`` words, quoted to run as printed."""
    flags = option_names()
    defaults = AuditConfig(model=Path("MODEL"))
    words = list(words)
    for field in fields(AuditConfig):
        name = field.name
        if name == "model" or name not in settings:
            continue
        value, default = settings[name], getattr(defaults, name)
        if value is None or value == default:
            continue
        if name in _NEGATED:
            words.append(_NEGATED[name])
        elif isinstance(value, DeclaredTraining):
            for part in fields(DeclaredTraining):
                declared = getattr(value, part.name)
                if declared is not None:
                    words += [flags[part.name], _word(declared)]
        elif isinstance(value, bool):
            words.append(flags[name])
        elif isinstance(value, tuple):
            for item in value:
                words += [flags[name], _word(item)]
        else:
            words += [flags[name], _word(value)]
    return shlex.join([*words, *extra])


def _word(value: Any) -> str:
    """A setting's value as the option that repeats it: a float as ``g`` writes it where
    that is the same number (``0.3``, ``1e-05``), else exactly (``0.3000001``, which ``g``
    would print as 0.3: a command that audits another α, or repeats an option)."""
    if not isinstance(value, float):
        return str(value)
    text = f"{value:g}"
    return text if float(text) == value else repr(value)


SHAPES_THE_TRADEOFF = ("ks", "alphas", "queries", "max_queries", "keep_seen", "popularity", "bootstrap", "index",
                       "frequencies")
"""``check`` settings that shape its trade-off but that ``mitigate --alpha auto`` does not
take (its audit runs with their defaults): when one was changed, the advice names the α
``check`` recommended instead of ``auto``."""
MITIGATE_TAKES = ("interactions", "interactions_format", "user_col", "item_col", "item_ids", "user_ids", "id_offset",
                  "assume_row_ids", "item_key", "user_key", "holdout", "accuracy_tolerance", "seed", "max_memory",
                  "plugins")
"""The AuditConfig fields ``popaudit mitigate`` has an option for (a test holds it to the
command's options)."""
AUTO_ONLY = ("holdout", "user_ids", "accuracy_tolerance", "seed")
"""``mitigate`` settings read only with ``--alpha auto`` (a usage error with a number)."""


def mitigate_command(config: AuditConfig, result: AuditResult) -> str | None:
    """The ``popaudit mitigate`` command that writes the table the audit's trade-off
    recommends, to run as printed: the model, the run's log, holdout and id options (those
    ``mitigate`` takes), ``--alpha auto`` when its audit repeats this one (else the α
    recommended), and an output named after the model (``.npy`` for the served vectors of
    a RecBole graph model). A history-query model (no user table; ``--queries history``
    beside one is judged by mitigate with the table, so it gets the α) gets ``--alpha auto``
    whatever the settings, also when the trade-off keeps dot: its output's queries are
    rebuilt from the rescaled rows, which only ``auto`` measures. None without a model or
    a recommended α, and when the trade-off keeps dot for any other model."""
    from auditor.advice import rebuilt_history_queries
    from auditor.alpha import scoring_alpha

    accuracy = result.accuracy
    alpha = scoring_alpha(accuracy.recommended) if accuracy is not None and accuracy.recommended else None
    if config.model is None or alpha is None or result.inputs.written_back is False \
            or result.inputs.rescaled_alpha is not None:
        # nothing recommended, a model mitigate refuses, or a mitigate output (the advice says what to do instead)
        return None
    defaults = AuditConfig(model=config.model)
    repeats = all(getattr(config, name) == getattr(defaults, name) for name in SHAPES_THE_TRADEOFF)
    history = rebuilt_history_queries(result)  # --queries history beside a user table: mitigate judges with the table
    if alpha == 1.0 and not history:
        return None  # dot kept: only a history-query model's rebuilt trade-off (auto) may still find a table
    auto = repeats or history  # a history-query model: auto's rebuilt queries decide, whatever check's settings
    settings = {name: getattr(config, name) for name in MITIGATE_TAKES if auto or name not in AUTO_ONLY}
    model = Path(config.model)
    graph = result.served_vectors is not None and result.served_vectors.source in ("cache", "propagated")
    output = model.with_name(f"{model.stem}.mitigated{'.npy' if graph else model.suffix}")
    words = ["popaudit", "mitigate", path_word(model), "--alpha", "auto" if auto else _word(alpha), "-o", str(output)]
    return command_line(words, settings)


def runnable_advice(result: AuditResult, config: AuditConfig) -> AuditResult:
    """``result`` with the advice's placeholder ``mitigate`` command
    (:func:`~auditor.advice.mitigate_suggestion`) replaced by :func:`mitigate_command`."""
    from auditor.advice import mitigate_suggestion

    generic, recommendations = mitigate_suggestion(), result.verdict.recommendations
    command = mitigate_command(config, result) if any(generic in r for r in recommendations) else None
    if command is None:
        return result
    runnable = [r.replace(generic, command) for r in recommendations]
    return replace(result, verdict=replace(result.verdict, recommendations=runnable))

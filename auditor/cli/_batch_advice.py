"""What a batch gate needs from each manifest row, said before any row is audited.

A row's cell overrides the command's option for that row (``k`` over ``-k``, ``alpha``
over ``--alpha``), so a gate's K (or α) is asked for row by row: the rows whose effective
cut-offs lack it, and a served-lists gate's rows without a recommendations cell, are known
from the manifest alone. Such a gate is refused (exit 1) before any audit, naming the rows
and where the value goes (their cells, or the option for the rows without one), so that
the advice works as printed for that manifest. The same rewriting turns the advice of a
reason found after the audits (a K clamped to the catalogue) into the rows' own terms.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from auditor.errors import UnmeasuredGateError, setting
from auditor.gate_names import PerK, per_k_name
from auditor.gate_reasons import named_values, pass_them_all, why_not_asked
from auditor.sections import SERVED

if TYPE_CHECKING:
    from auditor.batch import Manifest
    from auditor.batch.manifest import ManifestRow
    from auditor.gate import Gate

_COLUMNS = {"ks": "k", "alphas": "alpha"}
"""The manifest column of each per-row setting the advice names, where the manifest has none."""


def refuse_unasked_rows(gates: Iterable[Gate], parsed: Manifest, defaults: Mapping[str, Any],
                        list_measures: Iterable[str] | None) -> None:
    """UnmeasuredGateError (exit 1) naming every gate that some row cannot measure by what
    the manifest says: a K or α its cells (else the options) do not ask for, served
    figures without served lists; each with advice that works for those rows."""
    said = []
    gates = list(dict.fromkeys(gates))
    named = gate_values(gates, list_measures)
    for gate in gates:
        name = per_k_name(gate.metric, list_measures)
        reasons = [] if name is None else _gate_problems(name, parsed, defaults, named)
        if reasons:
            said.append(f"{gate}: " + "; ".join(reasons))
    if said:
        raise UnmeasuredGateError(f"cannot evaluate {setting('fail_on')} {'; '.join(said)}")


def gate_values(gates: Iterable[Gate], list_measures: Iterable[str] | None) -> dict[str, list[float]]:
    """The cut-offs and α that ``gates`` name: an advice to pass an option names them all."""
    measures = None if list_measures is None else list(list_measures)
    return named_values(per_k_name(gate.metric, measures) for gate in gates)


def _gate_problems(name: PerK, parsed: Manifest, defaults: Mapping[str, Any],
                   named: Mapping[str, Sequence[float]]) -> list[str]:
    """Why rows of ``parsed`` cannot measure ``name`` (empty when every row can)."""
    rows: Sequence[ManifestRow] = parsed.rows
    said = []
    if name.scoring == SERVED or name.measure.startswith("overlap_served_"):
        bare = [row for row in rows if _effective(row, "recommendations", defaults) is None]
        if bare:  # no K can help a row without lists
            said.append(f"no served lists were given for {_where(bare)} (pass {setting('recommendations')})")
        rows = [row for row in rows if row not in bare]
    found: dict[str, None] = {}
    for row in rows:  # the K first, then the α: a row may lack both; the bare value, cell_advice says where
        ks, alphas = _effective(row, "ks", defaults) or (), _effective(row, "alphas", defaults) or ()
        found.update(dict.fromkeys((why_not_asked(name, ks, alphas, whole=False),
                                     why_not_asked(name, (name.k,), alphas, whole=False))))
    for reason in (reason for reason in found if reason):
        text = cell_advice(reason, parsed, rows, defaults, named)
        if name.scoring == SERVED or name.measure.startswith("overlap_served_"):
            if reason.startswith("K="):  # the lists' length is read only when a row is audited
                text += (f"; whether a row's served lists hold K={name.k} items is known when it is audited (a K "
                         "longer than its lists is not measured there)")
        said.append(text)
    return said


def cell_advice(text: str, parsed: Manifest, rows: Sequence[ManifestRow], defaults: Mapping[str, Any],
                named: Mapping[str, Sequence[float]]) -> str:
    """``text`` with its advice (``add -k 20``, ``add --alpha 0.3``, with or without its
    whole list) made to work in this batch: for those of ``rows`` whose effective setting
    lacks the value, the option for the rows without a cell (with the whole list to pass,
    the option's values and every value ``named`` by a gate: the option replaces them for
    every such row) and the cells of the others (a cell overrides the option), each group
    named unless the advice reaches every row of ``rows``."""
    from auditor.batch.manifest import column_spellings

    for name in ("ks", "alphas"):
        column = column_spellings(parsed).get(name, _COLUMNS[name])
        flag = re.escape(setting(name))
        whole = rf"(?:; {flag} replaces the [^()]*\([^()]*\), so pass them all:(?: {flag} [\d.e+-]+)+)?"
        text = re.sub(rf"add {flag} (\d[\d.]*\d|\d){whole}",
                      lambda m: _advice(m[0], m[1], name, column, rows, defaults, named.get(name, ())), text)
    return text


def _advice(said: str, value: str, name: str, column: str, rows: Sequence[ManifestRow],
            defaults: Mapping[str, Any], named: Sequence[float]) -> str:
    """The advice to add ``value`` to setting ``name`` for the rows that lack it ("add -k 20
    (row 1 has no k cell; -k replaces ... so pass them all: -k 10 -k 100 -k 20) and add 20
    to the k cells of row 0 (...)"); ``said`` unchanged when no row lacks it."""
    lacking = [row for row in rows if float(value) not in (_effective(row, name, defaults) or ())]
    celled = [row for row in lacking if name in row.settings]
    plain = [row for row in lacking if name not in row.settings]
    parts = []
    if plain:
        has = "has" if len(plain) == 1 else "have"
        where = f"{_where(plain)} {has} no {column} cell" if celled or len(lacking) < len(rows) else ""
        whole = pass_them_all(name, float(value), defaults.get(name) or (), named)
        add = f"add {setting(name)} {value}"
        if where:  # the rows named, then the list
            parts.append(f"{add} (" + "; ".join(part for part in (where, whole) if part) + ")")
        else:  # every row takes the option: as check says it
            parts.append(f"{add}; {whole}" if whole else add)
    if celled:
        parts.append(f"add {value} to the {column} cells of {_where(celled)} (a row's {column} cell overrides "
                     f"{setting(name)} for that row)")
    return " and ".join(parts) or said


def _effective(row: ManifestRow, name: str, defaults: Mapping[str, Any]) -> Any:
    """A row's setting: its cell, else the command's default."""
    return row.settings.get(name, defaults.get(name))


def _where(rows: Sequence[ManifestRow]) -> str:
    """``row 3`` or ``rows 0, 1, 2, 3, 4 ... (9 rows)``."""
    indices = [str(row.index) for row in rows]
    return ("row " if len(indices) == 1 else "rows ") + ", ".join(indices[:5]) + (
        f" ... ({len(indices)} rows)" if len(indices) > 5 else "")

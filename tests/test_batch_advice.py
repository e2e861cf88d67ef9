"""A batch gate's advice in the rows' own terms (QA batchlists F2b): each row's effective
K and α (its cell, else the option), only the rows that lack the value named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from auditor.batch.manifest import Manifest, ManifestRow
from auditor.cli._batch_advice import cell_advice, refuse_unasked_rows
from auditor.errors import UnmeasuredGateError
from auditor.gate import parse_run_gates

_DEFAULTS = {"ks": (10,), "alphas": (0.5,)}


def _manifest(*cells: dict[str, object]) -> Manifest:
    rows = [ManifestRow(i, "m.npy", None, dict(c)) for i, c in enumerate(cells)]
    return Manifest(Path("m.csv"), {"model": "model", "k": "ks", "alpha": "alphas"}, rows)


def test_only_the_rows_that_lack_the_k_are_named() -> None:
    parsed = _manifest({"ks": (10, 20)}, {"ks": (10,)}, {}, {"ks": (5,)})
    text = cell_advice("K=20 was not asked for (add ks 20)", parsed, parsed.rows, _DEFAULTS, {})
    assert text == ("K=20 was not asked for (add ks 20 (row 2 has no k cell; ks replaces the cut-offs measured now "
                    "(10), so pass them all: ks 10 ks 20) and add 20 to the k cells of rows 1, 3 "
                    "(a row's k cell overrides ks for that row))")


def test_no_row_named_where_the_option_reaches_every_row_that_lacks_it() -> None:
    parsed = _manifest({}, {})
    assert cell_advice("K=20 was not asked for (add ks 20)", parsed, parsed.rows, _DEFAULTS, {}) == (
        "K=20 was not asked for (add ks 20; ks replaces the cut-offs measured now (10), so pass them all: ks 10 ks 20)")


def test_a_whole_list_already_said_is_said_once() -> None:
    """The advice after the audits may carry check's whole list already: replaced, not repeated."""
    parsed = _manifest({}, {"ks": (5,)})
    said = "K=20 was not asked for (add ks 20; ks replaces the cut-offs measured now (10), so pass them all: ks 10 ks 20)"
    assert cell_advice(said, parsed, parsed.rows, _DEFAULTS, {"ks": [20.0]}) == (
        "K=20 was not asked for (add ks 20 (row 0 has no k cell; ks replaces the cut-offs measured now (10), so pass "
        "them all: ks 10 ks 20) and add 20 to the k cells of row 1 (a row's k cell overrides ks for that row))")


def test_a_row_without_a_cell_keeps_the_values_other_gates_read() -> None:
    """QA accuracy F2 (second round): a row without an alpha cell is told the whole list, its
    default grid and every α the gates name, so that following the advice keeps the gate at
    α 0.5 that row passed; the bare "add alphas 0.3" replaced its grid (0.25, 0.5, 0.75)."""
    defaults = {"ks": (10, 100), "alphas": (0.25, 0.5, 0.75)}
    parsed = _manifest({"alphas": (0.5,)}, {})
    gates = parse_run_gates(["ndcg_alpha_0.3@10<0.3", "ndcg_alpha_0.5@10<0.3", "ndcg_alpha_0.9@10<0.3"], (10, 100), (),
                            (0.25, 0.3, 0.5, 0.75, 0.9))
    with pytest.raises(UnmeasuredGateError) as caught:
        refuse_unasked_rows(gates, parsed, defaults, None)
    advice = re.findall(r"add alphas 0\.3 \(row 1 has no alpha cell; [^()]*\([^()]*\)[^()]*\)", str(caught.value))
    assert advice == ["add alphas 0.3 (row 1 has no alpha cell; alphas replaces the α measured now (0.25, 0.5, 0.75), "
                      "so pass them all: alphas 0.25 alphas 0.5 alphas 0.75 alphas 0.3 alphas 0.9)"]
    followed = re.findall(r"alphas (\d[\d.]*)", advice[0].split("pass them all:")[1])
    assert sorted(map(float, followed)) == [0.25, 0.3, 0.5, 0.75, 0.9]  # every α any gate reads, row 1's grid kept


def test_alpha_advice_names_the_alpha_column() -> None:
    parsed = _manifest({"alphas": (0.3,)}, {"alphas": (0.7,)})
    text = cell_advice("α=0.3 was not asked for (add alphas 0.3)", parsed, parsed.rows, _DEFAULTS, {})
    assert text == ("α=0.3 was not asked for (add 0.3 to the alpha cells of row 1 (a row's alpha cell overrides "
                    "alphas for that row))")


def test_a_row_lacking_k_and_alpha_is_told_both() -> None:
    parsed = _manifest({"ks": (10, 20), "alphas": (0.3,)}, {"ks": (10,)})
    gates = parse_run_gates(["gini_alpha_0.3@20>0.5"], (10, 20), (), (0.3, 0.5))
    with pytest.raises(UnmeasuredGateError) as caught:
        refuse_unasked_rows(gates, parsed, _DEFAULTS, None)
    assert str(caught.value) == (
        "cannot evaluate fail_on gini_alpha_0.3@20>0.5: K=20 was not asked for (add 20 to the k cells of row 1 (a "
        "row's k cell overrides ks for that row)); α=0.3 was not asked for (add alphas 0.3 (row 1 has no alpha "
        "cell; alphas replaces the α measured now (0.5), so pass them all: alphas 0.5 alphas 0.3))")


def test_every_row_asking_passes() -> None:
    parsed = _manifest({"ks": (10, 20)}, {})
    refuse_unasked_rows(parse_run_gates(["gini_dot@10>0.5"], (10, 20)), parsed, _DEFAULTS, None)

"""N5 (retrain QA, third round), with the one ranking of evidence (conditions QA11 F1): a C5
that popaudit measured, through the growth per update (the projection decided) or the
trained table's norms, outranks a plugin's declaration that contradicts it, warned; with
no basis the declaration is taken. One rule (:func:`auditor.conditions.ranking.verdict_basis`)
says what each verdict rests on."""

from __future__ import annotations

import pytest

from auditor.conditions.ranking import apply_plugin_evidence, verdict_basis
from auditor.plugins.contributions import DeclaredConditions
from auditor.result import Condition


@pytest.mark.parametrize(("decided_by", "stands"), [("projection and table", True), ("projection", True),
                                                    ("table", True), (None, False)])
def test_a_c5_measured_by_its_growth_or_table_outranks_a_declaration(decided_by: str | None, stands: bool) -> None:
    graded = Condition("growth", "violated", "measured growth per update", {"decided_by": decided_by})
    assert (verdict_basis("C5", graded) is not None) is stands
    conditions = {"C5": graded}
    declared = DeclaredConditions({"C5": Condition("growth", "holds", "says so", {"source": "file:p.py"})})
    warnings: list[str] = []
    apply_plugin_evidence(declared, conditions, ("C5",), warnings)
    # before N5: the declaration replaced the measured verdict in every case, unwarned;
    # before QA11 F1: a table-graded C5 was replaced too
    assert conditions["C5"].status == ("violated" if stands else "holds")
    assert len(warnings) == int(stands)
    assert conditions["C5"].details.get("declared", {}).get("status") == ("holds" if stands else None)
    assert verdict_basis("C5", Condition("growth", "unknown", "", {"decided_by": "projection"})) is None

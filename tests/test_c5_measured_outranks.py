"""N5 (retrain QA, third round): a C5 that popaudit measured through the growth per update
(the projection decided) outranks a plugin's declaration, as a probe-measured C2–C4 does;
one rule (``auditor.conditions.measured``) says what was measured."""

from __future__ import annotations

import pytest

from auditor.conditions import _apply_plugin_evidence, measured
from auditor.plugins.contributions import DeclaredConditions
from auditor.result import Condition



@pytest.mark.parametrize(("decided_by", "stands"), [("projection and table", True), ("projection", True),
                                                    ("table", False), (None, False)])
def test_a_c5_measured_by_its_growth_outranks_a_declaration(decided_by: str | None, stands: bool) -> None:
    graded = Condition("growth", "violated", "measured growth per update", {"decided_by": decided_by})
    assert measured("C5", graded) is stands
    conditions = {"C5": graded}
    declared = DeclaredConditions({"C5": Condition("growth", "holds", "says so", {"source": "file:p.py"})})
    warnings: list[str] = []
    _apply_plugin_evidence(declared, conditions, ("C5",), warnings)
    # before: the declaration replaced the measured verdict in every case, unwarned
    assert conditions["C5"].status == ("violated" if stands else "holds")
    assert len(warnings) == int(stands)
    assert not measured("C5", Condition("growth", "unknown", "", {"decided_by": "projection"}))

"""`popaudit diff` of one model audited without and with a declaration about its training
(``--optimizer adam --lr 0.01``, QA11 diffapi F4): the conditions that read it change, and
the diff says the declaration moved them, not "their settings agree"."""

from __future__ import annotations

import json
from pathlib import Path

from auditor import AuditConfig, run_audit
from auditor.config import DeclaredTraining
from auditor.diff import diff_reports
from auditor.report.diff_doc import diff_document
from diff_samples import biased_table_report


def test_another_declaration_is_named_and_the_figures_are_compared(tmp_path: Path) -> None:
    base = biased_table_report(tmp_path)
    config = AuditConfig(model=tmp_path / "items.npy", interactions=tmp_path / "log.parquet", ks=(10,), probes=False,
                         bootstrap=0, declared=DeclaredTraining(optimizer="adam", lr=0.01))
    new = json.loads(json.dumps(run_audit(config).to_dict()))
    assert (base["settings"]["declared"], new["settings"]["declared"]) == ({}, {"optimizer": "adam", "lr": 0.01})
    diff = diff_reports(base, new)
    c1 = next(c for c in diff.conditions if c.id == "C1")
    assert (c1.base, c1.new) == ("unknown", "violated")  # Adam is no plain SGD: the declaration says so
    assert diff.notes == ('settings.declared differs (none declared vs {"optimizer": "adam", "lr": 0.01}: lr, optimizer): '
                          "what was declared about the model's training changed, so the conditions that read it "
                          "(C1 plain SGD, C4 cosine-based loss, C5 sufficiently large learning rate) may change with "
                          "the declaration, not with the model",)
    assert not diff.settings and diff.metric("spearman").delta == 0.0  # the figures are compared, unchanged
    text = json.dumps(diff_document(diff.to_dict()).payload())
    assert "settings.declared differs" in text
    assert diff_reports(new, new).notes == ()

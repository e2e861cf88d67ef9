"""QA retrain F2/F3: a grid row grades C5 and names its violated conditions exactly as
``popaudit check`` does on the checkpoint ``retrain`` writes with the same settings."""

from __future__ import annotations

from pathlib import Path

from auditor.audit import run_audit
from auditor.config import AuditConfig
from auditor.result import ORTHOGONALITY_IDS
from auditor.train.data import synthetic_interactions
from auditor.train.experiments import ExperimentSizes, c5_label, condition_settings, reference_config, run_conditions
from auditor.train.loop import save_checkpoint, train

SIZES = ExperimentSizes(n_users=80, n_items=80, n_interactions=3000, epochs=2, n_bootstrap=200, k=8)
NAMES = [s.name for s in condition_settings(SIZES) if s.name != "asymmetric"]


def test_grid_c5_and_labels_equal_check_of_the_checkpoint(tmp_path: Path) -> None:
    grid = run_conditions(seeds=(0,), sizes=SIZES, settings=NAMES)
    data = synthetic_interactions(SIZES.n_users, SIZES.n_items, SIZES.n_interactions, SIZES.zipf, seed=0)
    overrides = {s.name: s.overrides for s in condition_settings(SIZES)}
    seen = set()
    for row in grid.rows:
        path = save_checkpoint(train(data, reference_config(SIZES, 0, **overrides[row["name"]])),
                               tmp_path / f"{row['name']}.pt")
        conditions = run_audit(AuditConfig(model=path, bootstrap=SIZES.n_bootstrap, ks=(8,), seed=0)).conditions
        assert conditions is not None
        c5 = conditions["C5"].status
        assert row["runs"][0]["c5"] == c5, (row["name"], conditions["C5"].evidence)
        broken = [k for k in ORTHOGONALITY_IDS if conditions[k].status == "violated"]
        label = c5_label([c5])
        expected = ", ".join(broken + ([label] if label.startswith("C5") else [])) or label
        assert row["violates"] == expected, row["name"]
        seen.add(c5)
    # the grid covers a C5 beside a violated C1-C4 (check: unknown) and a C5 that holds
    assert {"unknown", "holds"} <= seen

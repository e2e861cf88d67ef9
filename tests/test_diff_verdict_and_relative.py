"""`popaudit diff`: the verdict's grade is checked, relative changes from 0 or from
round-off of 0, and the verdict's grade in the JSON (QA report 5, Diff F4–F8)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from auditor.audit import run_audit
from auditor.config import AuditConfig
from auditor.diff import diff_reports
from auditor.errors import ReportError


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The JSON report of a small biased table (popular items longer), as written and read back."""
    folder = tmp_path_factory.mktemp("verdict")
    rng = np.random.default_rng(5)
    counts = (60 / np.arange(1, 201) ** 0.9).astype(np.int64) + 1
    directions = rng.standard_normal((200, 8))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    np.save(folder / "items.npy", (directions * np.log1p(counts)[:, None]).astype(np.float32))
    rows = np.repeat(np.arange(200), counts)
    pq.write_table(pa.table({"user_id": rng.integers(0, 40, rows.size), "item_id": rows}), folder / "log.parquet")
    result = run_audit(AuditConfig(model=folder / "items.npy", interactions=folder / "log.parquet", ks=(10,),
                                   probes=False, bootstrap=0))
    return json.loads(json.dumps(result.to_dict(), allow_nan=False))


@pytest.mark.parametrize("severity", ["catastrophic", None, "MODERATE"])
def test_an_unknown_or_missing_severity_is_a_corrupt_report(report: dict[str, Any], severity: str | None) -> None:
    """F4: read as "none", an edited grade made the verdict's change "less bias"."""
    edited = copy.deepcopy(report)
    if severity is None:
        del edited["verdict"]["severity"]
    else:
        edited["verdict"]["severity"] = severity
    found = "missing" if severity is None else repr(severity)
    with pytest.raises(ReportError, match=rf"after\.json: verdict\.severity is {found}, not one of none, low"):
        diff_reports(report, edited, base_name="before.json", new_name="after.json")
    with pytest.raises(ReportError, match=r"base report before\.json: verdict\.severity"):
        diff_reports(edited, report, base_name="before.json", new_name="after.json")

"""A real audit's JSON report for the diff tests: one small biased table, built and
audited the same way wherever a test needs a report to edit or compare."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from auditor import AuditConfig, run_audit


def biased_table_report(folder: Path, log_name: str = "log.parquet") -> dict[str, Any]:
    """The JSON report (as written and read back) of 200 items whose norms grow with
    log(1 + count), counts ~ 60 / rank^0.9 + 1, 40 users; exact search at K=10."""
    rng = np.random.default_rng(5)
    counts = (60 / np.arange(1, 201) ** 0.9).astype(np.int64) + 1
    directions = rng.standard_normal((200, 8))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    np.save(folder / "items.npy", (directions * np.log1p(counts)[:, None]).astype(np.float32))
    rows = np.repeat(np.arange(200), counts)
    pq.write_table(pa.table({"user_id": rng.integers(0, 40, rows.size), "item_id": rows}), folder / log_name)
    result = run_audit(AuditConfig(model=folder / "items.npy", interactions=folder / log_name, ks=(10,),
                                   probes=False, bootstrap=0))
    report: dict[str, Any] = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    return report

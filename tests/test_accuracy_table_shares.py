"""One head share reads alike in every table of a report (QA report F4): the accuracy
trade-off table's "head share 1%" column takes its cells from the K's retrieval row
(:func:`~auditor.report.measure_rows.scoring_cells`), dot's and cosine's pair as the
verdict quotes them and every other scoring to as many decimals; it printed each share to
its own precision (3.4% beside the retrieval table's 3.37%)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from auditor.audit import run_audit
from auditor.config import AuditConfig
from auditor.report import accuracy as accuracy_view
from auditor.report.content import cutoff_table
from auditor.sections import ListMeasures

SHARES = {"dot": 0.041333, "cosine": 0.004667, "alpha_0.75": 0.03367, "alpha_0.25": 0.01567, "popular": 0.2313}
"""The QA report's figures at K=10 (its F3/r.json)."""


def test_the_tradeoff_table_prints_each_head_share_as_the_retrieval_table(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    freqs = np.arange(1, 61)
    vectors = rng.normal(size=(60, 8)) * freqs[:, None] ** 0.25
    np.save(tmp_path / "items.npy", vectors.astype(np.float32))
    items = np.repeat(np.arange(60), freqs)
    users = rng.integers(0, 40, items.size)
    pq.write_table(pa.table({"user_id": users, "item_id": items}), tmp_path / "log.parquet")
    pq.write_table(pa.table({"user_id": np.arange(40), "item_id": rng.integers(0, 60, 40)}), tmp_path / "h.parquet")
    result = run_audit(AuditConfig(model=tmp_path / "items.npy", interactions=tmp_path / "log.parquet",
                                   holdout=tmp_path / "h.parquet", ks=(10,), alphas=(0.25, 0.75), probes=False,
                                   bootstrap=0))
    assert result.retrieval is not None and result.accuracy is not None
    cut = result.retrieval.at[10]
    cut.dot, cut.cosine, cut.popular = (ListMeasures({**getattr(cut, s).data, "head_share_1pct": SHARES[s]})
                                        for s in ("dot", "cosine", "popular"))
    cut.norm_aware = {a: ListMeasures({**cut.norm_aware[a].data, "head_share_1pct": SHARES[a]})
                      for a in ("alpha_0.25", "alpha_0.75")}
    # The retrieval row: dot and cosine as the verdict quotes them (4.1% vs 0.47%: two decimals
    # beside 0.47%), every other scoring to as many decimals.
    table = cutoff_table(10, cut, result.retrieval.list_measures)
    row = next(r for r in table.rows if r[0].startswith("head share, top 1%"))
    headers = dict(zip(table.headers, row))
    expected = {"dot product": "4.1%", "cosine": "0.47%", "norm-aware α=0.25": "1.57%", "norm-aware α=0.75": "3.37%",
                "most popular": "23.13%"}
    assert {name: headers[name] for name in expected} == expected
    tradeoff = accuracy_view.tradeoff_table(result, 10)
    column = tradeoff.headers.index("head share 1%")
    assert {r[0]: r[column] for r in tradeoff.rows if r[0] in expected} == expected

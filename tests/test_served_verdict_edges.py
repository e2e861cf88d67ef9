"""The served lists' verdict words its figures as the model's does (QA11 report F1): a pair
graded below a band never prints the band's edges, in the summary (lists alone and beside a
model) and in the Markdown/HTML headline (docs/report.md and docs/served-lists.md,
"Severity").

Known answer, the docs' example: 1,000 users with 10 training items each, item 0 among
them for 799 users (799 of 10,000 interactions, 7.99%; the top 1% of 100 items is item 0
alone) and first in the served top-10 list of 998 (998 of 10,000 slots, 9.98%): ratio
998/799 = 1.2491 and +1.99 points, under the moderate band (1.25× and +2 points), so
``low``. Rounded to one decimal the shares would read 10.0% vs 8.0% and the ratio 1.25×,
the moderate band's edges.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from auditor.audit import run_audit
from auditor.config import AuditConfig
from auditor.report.content import headline

N_USERS, N_ITEMS, LENGTH, LOGGED, SERVED = 1000, 100, 10, 799, 998


def _files(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The log, the served lists (module docstring) and a unit-norm item table."""
    rng = np.random.default_rng(5)
    rows = []
    for user in range(N_USERS):
        head = [0] if user < LOGGED else []
        rows += [(user, item) for item in head + list(rng.choice(np.arange(1, N_ITEMS), LENGTH - len(head), replace=False))]
    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": [u for u, _ in rows], "item_id": [int(i) for _, i in rows]}), log)
    users, items, ranks = [], [], []
    for user in range(N_USERS):
        head = [0] if user < SERVED else []
        listed = head + [int(i) for i in rng.choice(np.arange(1, N_ITEMS), LENGTH - len(head), replace=False)]
        users += [user] * LENGTH
        items += listed
        ranks += list(range(1, LENGTH + 1))
    lists = tmp_path / "lists.csv"
    pacsv.write_csv(pa.table({"user_id": users, "item_id": items, "rank": ranks}), lists)
    table = rng.standard_normal((N_ITEMS, 8))
    model = tmp_path / "items.npy"
    np.save(model, (table / np.linalg.norm(table, axis=1, keepdims=True)).astype(np.float32))
    return log, lists, model


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return _files(tmp_path_factory.mktemp("edges"))


def _expected(log: Path, lists: Path) -> tuple[float, float]:
    """Item 0's share of the served slots and of the log, counted here with numpy."""
    logged = pq.read_table(log).column("item_id").to_numpy()
    served = pacsv.read_csv(lists).column("item_id").to_numpy()
    return float(np.mean(served == 0)), float(np.mean(logged == 0))


def test_lists_alone_below_the_moderate_band_never_print_its_edges(files: tuple[Path, Path, Path]) -> None:
    log, lists, _model = files
    served, logged = _expected(log, lists)
    assert (served, logged) == (0.0998, 0.0799)
    assert 1.1 <= served / logged < 1.25 and 0.005 <= served - logged < 0.02  # low, just under moderate
    result = run_audit(AuditConfig(model=None, interactions=log, recommendations=lists, ks=(10,), bootstrap=0,
                                   probes=False))  # type: ignore[arg-type]
    assert result.verdict.severity == "low"
    summary = result.verdict.summary
    assert "give the top-1% most popular items 9.98% of their top-10 slots, against 7.99% of the training " \
           "interactions, 1.249×" in summary, summary
    assert "10.0%" not in summary and "8.0%" not in summary and "1.25×" not in summary
    evidence = headline(result)  # the Markdown and HTML headline
    assert "served top-10 slots 9.98% vs 7.99% of the training interactions" in evidence, evidence


def test_lists_beside_a_model_never_print_the_edges(files: tuple[Path, Path, Path]) -> None:
    log, lists, model = files
    result = run_audit(AuditConfig(model=model, interactions=log, recommendations=lists, ks=(10,), bootstrap=0,
                                   probes=False))
    assert result.verdict.severity == "low" and result.verdict.graded_by == "served"
    summary = result.verdict.summary
    assert "9.98% of their top-10 slots, against 7.99% of the training interactions, 1.249×" in summary, summary
    assert "1.25×" not in summary and "10.0% of their" not in summary
    assert "served top-10 slots 9.98% vs 7.99% of the training interactions" in headline(result)


def test_small_shares_keep_two_significant_digits() -> None:
    from auditor.lists_verdict import amplification_figures, share_text

    # 4 slots in 10,000 against 1 interaction in 10,000: 4×, +0.03 points (no band), never "0.0%".
    assert amplification_figures(0.0004, 0.0001, 4.0) == ("0.040%", "0.010%", ", 4.00×")
    assert share_text(0.00036) == "0.036%" and share_text(None) == "n/a"
    assert amplification_figures(0.25, 0.0, float("inf"))[2] == ", from none"

"""Every gateable figure has a range in the one table, or is documented as unbounded (QA11
report F3): ARP, novelty, ACLT and ``unsafe_globals`` are never below 0 and PopRSP/PopREO,
|a − b| / (a + b), lie in [0, 1], so a gate that could never trip on them (``arp_dot@10<0``,
``pop_rsp_dot@10>1``, ``unsafe_globals<0``, a slip for the security gate
``unsafe_globals>0``) is a usage error instead of a silent pass."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from auditor import AuditConfig, AuditResult, run_audit
from auditor.errors import GateError
from auditor.flat import gateable_names, metric_names
from auditor.gate import gates_for
from auditor.gate_names import FIGURE_RANGES, UNBOUNDED, figure_range
from auditor.sections import BUILTIN_LIST_MEASURES, GROUP_LIST_MEASURES

NEVER = "so the gate could never trip"


@pytest.mark.parametrize("expr, said", [
    ("arp_dot@10<0", f"arp_dot@10 is a mean training popularity (interactions or users per item), never below 0; it is "
                     f"never < 0, {NEVER}"),
    ("arp_popular@10<=-5", "the threshold -5 is outside that range"),
    ("novelty_dot@10<0", f"novelty_dot@10 is a mean self-information −log2(users(i)/n_users) in bits, never below 0; "
                         f"it is never < 0, {NEVER}"),
    ("aclt_served@10<0", f"aclt_served@10 is a mean number of long-tail items per 10-item list, 0–10; it is never < 0, "
                         f"{NEVER}"),
    # ACLT@K counts long-tail items in K-item lists: never above K (Harms F2; was taken at 5 and 6)
    ("aclt_dot@5>5", f"aclt_dot@5 is a mean number of long-tail items per 5-item list, 0–5; it is never > 5, {NEVER}"),
    ("aclt_dot@5>6", "aclt_dot@5 is a mean number of long-tail items per 5-item list, 0–5; the threshold 6 is outside "
                     "that range"),
    ("pop_rsp_dot@10>1", f"pop_rsp_dot@10 is a relative standard deviation of two rates, |a − b| / (a + b), 0–1; it is "
                         f"never > 1, {NEVER}"),
    ("pop_reo_alpha_0.5@10>1.5", "the threshold 1.5 is outside that range"),
    ("unsafe_globals<0", f"unsafe_globals is a count, never below 0; it is never < 0, {NEVER}"),
])
def test_a_gate_on_a_non_negative_or_parity_figure_that_could_never_trip_is_refused(expr: str, said: str) -> None:
    with pytest.raises(GateError) as caught:
        gates_for([expr], [5, 10], alphas=[0.5])
    assert said in str(caught.value)


@pytest.mark.parametrize("expr", [
    "arp_dot@10>0", "arp_dot@10<=0", "novelty_dot@10>=0", "aclt_dot@10<1", "aclt_dot@10>9.5", "aclt_dot@5>=5", "pop_rsp_dot@10>=1", "pop_reo_dot@10<0.1",
    "unsafe_globals>0", "unsafe_globals>=1", "arp_ratio@10>2", "loglog_slope<-3", "served_loglog_slope>5",
])
def test_a_gate_that_can_trip_on_them_is_taken(expr: str) -> None:
    assert len(gates_for([expr], [5, 10])) == 1


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> AuditResult:
    """A model audited with a holdout and served lists: most sections of a report filled."""
    folder = tmp_path_factory.mktemp("ranges")
    rng = np.random.default_rng(11)
    n_items, n_users = 60, 25
    counts = np.arange(1, n_items + 1)
    table = rng.normal(size=(n_items, 6)) * np.log1p(counts)[:, None]
    np.save(folder / "items.npy", table.astype(np.float32))
    items = rng.choice(n_items, size=600, p=counts / counts.sum())
    users = rng.integers(0, n_users, size=items.size)
    pq.write_table(pa.table({"user_id": users, "item_id": items}), folder / "log.parquet")
    pq.write_table(pa.table({"user_id": np.arange(n_users), "item_id": rng.integers(0, n_items, n_users)}),
                   folder / "holdout.parquet")
    listed = np.stack([rng.choice(n_items, 5, replace=False) for _ in range(n_users)])
    pq.write_table(pa.table({"user_id": np.repeat(np.arange(n_users), 5), "item_id": listed.ravel(),
                             "rank": np.tile(np.arange(1, 6), n_users)}), folder / "recs.parquet")
    config = AuditConfig(model=folder / "items.npy", interactions=folder / "log.parquet",
                         holdout=folder / "holdout.parquet", recommendations=folder / "recs.parquet", ks=(5, 10),
                         alphas=(0.5,), bootstrap=0, probes=False)
    return run_audit(config)


def _bounded(name: str) -> bool:
    return figure_range(name) is not None or name in UNBOUNDED


def test_every_gateable_name_of_a_real_report_has_a_range_or_is_unbounded(audited: AuditResult) -> None:
    names = set(audited.flat_metrics()) | set(gateable_names(audited.to_dict()))
    assert {"arp_dot@10", "novelty_served@5", "aclt_popular@10", "pop_rsp_dot@5", "pop_reo_alpha_0.5@10",
            "unsafe_globals", "loglog_slope"} <= names
    assert sorted(name for name in names if not _bounded(name)) == []


def test_every_built_in_name_kind_has_a_range_or_is_unbounded() -> None:
    names = metric_names((10,), ["item_bias_spearman"], (0.5,))  # the built-in audit measure too
    assert {f"{m}_dot@10" for m in [*BUILTIN_LIST_MEASURES, *GROUP_LIST_MEASURES]} <= set(names)
    assert len(names) > 100
    assert sorted(name for name in names if not _bounded(name)) == []
    assert UNBOUNDED == {"loglog_slope", "served_loglog_slope"}  # docs: only the slopes (and plugins') are unbounded


def test_every_measured_value_lies_in_its_range(audited: AuditResult) -> None:
    """The ranges are the definitions' (not a guess): every figure of the run lies in its own."""
    measured = {name: value for name, value in audited.flat_metrics().items()
                if value is not None and math.isfinite(value)}
    assert measured["arp_dot@10"] > 0 and 0 <= measured["pop_rsp_dot@10"] <= 1
    outside = {name: value for name, value in measured.items()
               if (bounds := figure_range(name)) is not None and not bounds[0] <= value <= bounds[1]}
    assert outside == {}
    assert FIGURE_RANGES["parity"][:2] == (0.0, 1.0) and FIGURE_RANGES["count"][:2] == (0.0, math.inf)

"""The monitor and the training grids keep the audit's policies (docs/monitor.md): the one
ratio policy (``sections.share_ratio``: dot/cosine is +inf when only cosine's head share
is 0, so an alert on it trips) and the one rounding rule of the frequency–norm ρ
(``NormPrecision``: norms equal to within the table dtype's rounding are constant)."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli
from auditor.monitor import TrainingAlertWarning, TrainingMonitor, read_trace
from auditor.monitor.sinks import scalar_names
from auditor.train.measures import rank_section, retrieval_head_share

N = 100
"""Items: the top 1% (the default head) is item 0 alone."""


def skewed_table() -> tuple[torch.Tensor, np.ndarray]:
    """Item 0, the most counted, is long and 45° off the query e_1; items 1..99 lie along
    e_1, short. For the query e_1 at K = 1, dot serves item 0 (score 10 against at most
    1.99): a head share of 1; cosine serves item 1 (cosine 1, ties by lower row): 0."""
    table = torch.zeros(N, 2, dtype=torch.float64)
    table[0] = torch.tensor([10.0, 10.0])
    table[1:, 0] = 1.0 + torch.arange(1, N, dtype=torch.float64) / N
    counts = np.arange(N, 0, -1).astype(np.float64)  # item 0: 100, item 99: 1
    return table, counts


def watch(table: torch.Tensor, counts: np.ndarray, trace: Path) -> TrainingMonitor:
    monitor = TrainingMonitor(table, counts=counts, interval=0, trace=trace, alerts=["head_share_ratio>2"],
                              queries=torch.tensor([[1.0, 0.0]], dtype=torch.float64), k=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        monitor.end_epoch(loss=0.5)
    monitor.close()
    monitor.caught = [str(w.message) for w in caught if issubclass(w.category, TrainingAlertWarning)]  # type: ignore[attr-defined]
    return monitor


def test_an_alert_on_the_ratio_trips_when_cosine_serves_no_head_item(tmp_path: Path) -> None:
    table, counts = skewed_table()
    monitor = watch(table, counts, tmp_path / "t.jsonl")
    record = monitor.records[0]
    assert (record.head_share_dot, record.head_share_cosine) == (1.0, 0.0)
    assert record.head_share_ratio == math.inf and record.figure("head_share_ratio") == math.inf
    assert [(e.alert, e.value) for e in monitor.fired] == [("head_share_ratio>2", math.inf)]
    assert monitor.caught == ["alert head_share_ratio>2 fired at step 0 (epoch 1): head_share_ratio = ∞"]  # type: ignore[attr-defined]

    lines = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]  # strict JSON: no inf
    epoch, alert = lines[1], lines[2]
    assert epoch["record"] == "epoch" and epoch["head_share_ratio"] is None and epoch["head_share_dot"] == 1.0
    assert alert == {"record": "alert", "step": 0, "epoch": 1, "alert": "head_share_ratio>2",
                     "metric": "head_share_ratio", "value": None, "action": "warn"}
    back = read_trace(tmp_path / "t.jsonl")  # the reader restores the +inf from the two shares
    assert back.records[0].figure("head_share_ratio") == math.inf and back.alerts[0].value == math.inf
    assert back.series("head_share_ratio", "epoch")[1].tolist() == [math.inf]
    # trackers plot numbers: the +inf is left out, the shares are logged
    names = scalar_names(record)
    assert "popaudit/epoch/head_share_ratio" not in names and names["popaudit/epoch/head_share_dot"] == 1.0


def test_a_ratio_with_no_head_item_served_is_undefined_and_never_fires(tmp_path: Path) -> None:
    table, counts = skewed_table()
    table[0] = torch.tensor([0.1, 0.1])  # now dot serves item 99 and cosine item 1: both shares 0
    monitor = watch(table, counts, tmp_path / "t.jsonl")
    record = monitor.records[0]
    assert (record.head_share_dot, record.head_share_cosine, record.head_share_ratio) == (0.0, 0.0, None)
    assert monitor.fired == [] and read_trace(tmp_path / "t.jsonl").records[0].figure("head_share_ratio") is None


def test_check_trace_renders_the_infinite_alert(tmp_path: Path) -> None:
    table, counts = skewed_table()
    watch(table, counts, tmp_path / "t.jsonl")
    np.save(tmp_path / "items.npy", table.numpy())
    (tmp_path / "counts.csv").write_text("item_id,count\n" + "".join(f"{i},{int(c)}\n" for i, c in enumerate(counts)))
    args = ["check", str(tmp_path / "items.npy"), "--frequencies", str(tmp_path / "counts.csv"), "--bootstrap", "0",
            "--no-probes", "--trace", str(tmp_path / "t.jsonl")]
    done = CliRunner().invoke(cli, [*args, "--json", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "r.md")])
    assert done.exit_code == 0, done.output
    assert "Alert head_share_ratio>2 fired at step 0: head_share_ratio = ∞× (warn)" in done.output
    assert "head\\_share\\_ratio\\>2 fired at step 0 (epoch 1): head\\_share\\_ratio = ∞×; action warn" in (
        tmp_path / "r.md").read_text()
    training = json.loads((tmp_path / "r.json").read_text())["training"]
    assert training["matches_model"] and training["point_kind"] == "epoch"
    assert [(a["metric"], a["value"]) for a in training["alerts"]] == [("head_share_ratio", None)]  # JSON: null


def unit_rows(n: int, dim: int, seed: int) -> torch.Tensor:
    """Random rows normalised in float32 (``F.normalize``): norms 1 up to rounding."""
    rows = torch.from_numpy(np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32))
    return torch.nn.functional.normalize(rows, dim=1)


def spread_rows(n: int, dim: int) -> tuple[torch.Tensor, np.ndarray, float]:
    """Unit rows scaled to norms 1 + 1e-3·p_i/n (a permutation p of 1..n), float32; the
    counts 1..n; and ρ by Spearman's formula 1 − 6Σd²/(n(n² − 1)), d = p − (1..n)."""
    perm = np.random.default_rng(7).permutation(n) + 1
    scale = torch.from_numpy(1.0 + 1e-3 * perm / n).to(torch.float32)[:, None]
    d = perm - np.arange(1, n + 1)
    return unit_rows(n, dim, 1) * scale, np.arange(1.0, n + 1), 1.0 - 6.0 * float((d**2).sum()) / (n * (n * n - 1))


def test_a_unit_normalised_float32_table_has_no_rho_in_the_monitor() -> None:
    table, counts = unit_rows(200, 16, 0), np.arange(1.0, 201)
    norms = table.double().norm(dim=1)
    assert 0 < float(norms.max() - norms.min()) < 1e-6  # not exactly equal: only rounding tells them apart
    assert TrainingMonitor(table, counts=counts, interval=0).end_epoch().spearman is None
    half = unit_rows(200, 16, 0).to(torch.bfloat16)  # bfloat16's rounding (2^-8) is the rule's too
    assert float(half.double().norm(dim=1).std()) > 0
    assert TrainingMonitor(half, counts=counts, interval=0).end_epoch().spearman is None

    table, counts, rho = spread_rows(200, 16)  # a real 1e-3 spread: ρ by the formula
    record = TrainingMonitor(table, counts=counts, interval=0).end_epoch()
    assert record.spearman == pytest.approx(rho, abs=1e-12) and abs(rho) < 0.5


def test_the_training_grids_rank_a_table_as_the_audit_does() -> None:
    section = rank_section(unit_rows(200, 16, 0).numpy(), np.arange(1.0, 201), n_bootstrap=0, seed=0)
    assert math.isnan(section.spearman) and "same norm to within float32 rounding" in (section.undefined_reason or "")
    table, counts, rho = spread_rows(200, 16)
    assert rank_section(table.numpy(), counts, n_bootstrap=0, seed=0).spearman == pytest.approx(rho, abs=1e-12)


def test_the_grids_ratio_is_the_audits_policy() -> None:
    # the head (item 0) served by neither: dot serves item 2 (score 2), cosine item 1 (a tie, lower row)
    out = retrieval_head_share(np.array([[0.0, 1.0]], np.float32), np.array([[0.1, 0.0], [0, 1.0], [0, 2.0]], np.float32),
                               np.array([10, 1, 2]), k=1)
    assert out["dot"] == out["cosine"] == 0.0 and math.isnan(out["ratio"])  # undefined, not +inf

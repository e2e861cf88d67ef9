"""A plugin's live model failing where the probes call it plainly (QA retrain N1): a loss that
is NaN on finite rows fails the contract call; a raise or non-finite rows in the C4/update
probes' own calls on the probe batch fail the run naming the plugin and the method (before:
exit 0, anonymous "probe c4/update could not run" warnings); and the contract reads every item
row a probe reads at the checkpoint's parameters, so a NaN row of a catalogue larger than the
update step's 1,024-row sample is not missed (before: only that sample was checked)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

import auditor.probes.run as probe_run
from auditor.errors import PluginError, ProbeError
from auditor.probe_results import ProbeFailure
from auditor.probes.live_contract import LiveCodeFailure, checked_live
from auditor.probes.numerics import gradient_alignment
from auditor.probes.sampling import ProbeBatch
from tests.live_tower import PROBE_BATCH, audit_tower, write_tower

N_USERS, DIM = 12, 4

def _tower(d: Path, n_items: int, log_items: int) -> Path:
    """A tower of ``n_items`` items whose log (600 pairs) reads only items below ``log_items``."""
    rng = np.random.default_rng(5)
    items = rng.normal(size=(n_items, DIM)).astype(np.float32)
    users = rng.normal(size=(N_USERS, DIM)).astype(np.float32)
    read = rng.integers(0, log_items, 600)
    return write_tower(d, items, users, rng.integers(0, N_USERS, read.size), read)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tower(tmp_path_factory.mktemp("small_tower"), 45, 45)


def _who(d: Path) -> str:
    return f"plugin 'file:{d / 'plug.py'}': its live model's "


def test_a_nan_loss_on_finite_rows_fails_the_contract_call(small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(PluginError) as caught:
        audit_tower(small, "loss_nan", monkeypatch)  # before: exit 0, C4 from the loss's name, "probe c4 could not run"
    users = len(np.unique(pq.read_table(small / "log.parquet").column("user_id").to_numpy()))
    assert str(caught.value) == (  # the contract pairs min(users, items) rows: the 12 users beside 45 items
        _who(small) + f"loss returned a non-finite value (nan) on {min(users, 45)} finite user and item rows, which no "
        "probe can measure")


def test_nan_rows_only_on_the_probe_batch_fail_naming_the_plugin(small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(PluginError) as caught:
        result = audit_tower(small, "nan_on_batch", monkeypatch)  # before: exit 0 with two anonymous probe warnings
        pytest.fail(f"ran: {result.warnings}")
    said = str(caught.value)
    assert said.startswith(_who(small) + "encode_items returned non-finite values (NaN or infinite) for 1 of "
                           f"{PROBE_BATCH} item rows of the probe batch (item row "), said
    assert said.endswith(" first), which no probe can measure")


def test_a_raise_only_on_the_probe_batch_fails_naming_the_plugin(small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(PluginError) as caught:
        audit_tower(small, "raise_on_batch", monkeypatch)  # before: "probe c4 could not run: RuntimeError: ..."
    assert str(caught.value) == (
        _who(small) + "encode_items on the probe batch raised RuntimeError: encoder exploded on the batch")


def test_the_tower_unbroken_runs(small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = audit_tower(small, "none", monkeypatch)
    assert result.probes is not None and not result.probes.errors
    assert result.probes.gradient_alignment is not None and result.probes.gradient_alignment.n > 0


def test_rows_a_diverging_probe_step_leaves_non_finite_are_counted_and_said(
    small: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """QA12 retrain verify-2 N2: rows NaN or infinite after the probe step were dropped from the
    angles and the growth unsaid, and C5 said "no item moved in the probe step"."""
    result = audit_tower(small, "diverge", monkeypatch)
    update = result.probes.update
    assert update is not None and update.growth.size == 0
    assert 0 < update.n_nonfinite <= update.n_evaluated
    said = [w for w in result.warnings if "NaN or infinite after it" in w]
    assert said == [f"{update.n_nonfinite:,} of the {update.n_evaluated:,} item rows compared around the probe step "
                    "were NaN or infinite after it (the step diverged there): they are left out of the update angles "
                    "and the measured growth"]
    assert "went NaN or infinite" in result.conditions["C5"].evidence
    assert "no item moved" not in result.conditions["C5"].evidence
    calm = audit_tower(small, "none", monkeypatch)
    assert calm.probes.update.n_nonfinite == 0 and not [w for w in calm.warnings if "NaN or infinite after it" in w]


def test_a_nan_row_beyond_the_update_sample_that_the_batch_reads_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    d = _tower(tmp_path, 20_000, 5)  # the log reads items 0-4 only; item 0 is NaN
    with pytest.raises(PluginError) as caught:
        audit_tower(d, "nan_item_0", monkeypatch)  # before: item 0 outside the 1,024-row sample: exit 0
    assert str(caught.value).startswith(_who(d) + "encode_items returned non-finite values (NaN or infinite) for 1 of ")
    assert str(caught.value).endswith(" item rows probed (item row 0 first), which no probe can measure")


def test_the_contract_reads_every_item_row_the_probes_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """C2's rows and the probe batch are drawn apart from the update step's 1,024-row sample:
    in a catalogue larger than it, the contract (and the table comparison) must read them too."""
    d = _tower(tmp_path, 20_000, 20_000)
    seen: dict[str, np.ndarray] = {}
    real_checked, real_second, real_alignment = probe_run.checked_live, probe_run.second_difference, \
        probe_run.gradient_alignment

    def checked(live: Any, module: Any, items: np.ndarray, *args: Any) -> Any:
        seen["contract"] = np.asarray(items)
        return real_checked(live, module, items, *args)

    def second(live: Any, module: Any, rows: torch.Tensor, **kw: Any) -> Any:
        seen["c2"] = rows.numpy()
        return real_second(live, module, rows, **kw)

    def alignment(live: Any, module: Any, batch: ProbeBatch) -> Any:
        seen["c4"] = batch.items
        return real_alignment(live, module, batch)

    monkeypatch.setattr(probe_run, "checked_live", checked)
    monkeypatch.setattr(probe_run, "second_difference", second)
    monkeypatch.setattr(probe_run, "gradient_alignment", alignment)
    audit_tower(d, "none", monkeypatch)
    for probe in ("c2", "c4"):  # before: 0.95 of C2's 64 rows and of the batch lay outside the 1,024 checked
        outside = np.setdiff1d(seen[probe], seen["contract"])
        assert outside.size == 0, (probe, outside[:5])


def test_popaudits_own_live_model_failing_in_a_probe_is_that_probes_warning() -> None:
    """No plugin: the live model's failure in a probe's plain call is that probe's ProbeError
    (recorded, the other probes run), as before; with a plugin it is the plugin's."""
    class Live:
        loss_name = "dot"

        def encode_items(self, module: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
            return module(rows)  # type: ignore[no-any-return]

        def encode_users(self, module: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
            return module(rows)  # type: ignore[no-any-return]

        def loss(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
            return (users * items).sum() * float("inf")

    module = torch.nn.Embedding(6, 3)
    batch = ProbeBatch(np.arange(4), np.arange(4), "test")
    errors: dict[Any, ProbeFailure] = {}
    assert probe_run._attempt(errors, "c4", lambda: gradient_alignment(Live(), module, batch)) is None  # type: ignore[arg-type]
    assert errors["c4"].message.startswith("the live model's loss returned a non-finite value (")
    with pytest.raises(PluginError, match=r"^plugin 'x': its live model's loss returned a non-finite value \("):
        probe_run._attempt(errors, "c4", lambda: gradient_alignment(Live(), module, batch), "plugin 'x'")  # type: ignore[arg-type]
    with pytest.raises(ProbeError) as caught:
        checked_live(Live(), module, np.arange(6), np.arange(4), 3, None)  # type: ignore[arg-type]
    assert isinstance(caught.value, LiveCodeFailure)

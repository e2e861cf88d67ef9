"""Non-finite outputs of a plugin's live model (QA retrain F2): NaN rows from ``encode_items``
fail the run naming the plugin (before, ``difference > tolerance`` is False for NaN, so the
documented table-vs-encoder warning never fired and the probes measured nothing silently);
the table comparison is NaN-safe; and C4, falling back to the loss's name where its
gradient-alignment probe did not measure, says so (before, it fell back silently)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from auditor.errors import PluginError
from auditor.model import ModelBundle
from auditor.probes.live_contract import CheckedLive
from auditor.probes.table_agreement import table_disagreement
from tests.live_tower import audit_tower, write_tower

N_ITEMS, N_USERS, DIM = 45, 12, 5

@pytest.fixture(scope="module")
def tower(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(5)
    items = rng.normal(size=(N_ITEMS, DIM)).astype(np.float32)
    users = rng.normal(size=(N_USERS, DIM)).astype(np.float32)
    p = 1.0 / np.arange(1, N_ITEMS + 1)
    log_items = rng.choice(N_ITEMS, size=600, p=p / p.sum())
    log_users = rng.integers(0, N_USERS, log_items.size)
    return write_tower(tmp_path_factory.mktemp("nan_tower"), items, users, log_users, log_items)


def test_nan_rows_from_encode_items_fail_the_run_naming_the_plugin(
    tower: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    nan_rows = np.arange(N_ITEMS)[np.arange(N_ITEMS) % 3 == 0]  # every probed row (the catalogue, < 1,024) % 3 == 0
    with pytest.raises(PluginError) as caught:
        audit_tower(tower, "nan", monkeypatch)  # before: exit 0, no warning naming the plugin
    assert str(caught.value) == (
        f"plugin 'file:{tower / 'plug.py'}': its live model's encode_items returned non-finite values "
        "(NaN or infinite) for "
        f"{len(nan_rows)} of {N_ITEMS} item rows probed (item row {nan_rows[0]} first), which no probe can measure"
    )


def test_the_table_comparison_counts_a_nan_row_as_differing() -> None:
    rng = np.random.default_rng(0)
    table = rng.normal(size=(6, 3)).astype(np.float32)
    bundle = ModelBundle(source=Path("t.npy"), format="npy", item_table=table, loader="the built-in loader")
    encoded = table.astype(np.float64)
    encoded[4] = np.nan
    rows = np.arange(6)
    said = table_disagreement(CheckedLive(encoded), bundle, rows)
    assert said is not None  # before: NaN > tolerance is False, so no row differed
    assert "differs from its live model's encode_items on 1 of the 6 probed items (row 4:" in said
    assert table_disagreement(CheckedLive(table.astype(np.float64)), bundle, rows) is None


def test_c4_says_its_probe_did_not_measure_a_non_finite_gradient(tower: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = audit_tower(tower, "nan_gradient", monkeypatch)
    assert result.probes is not None
    c4 = result.conditions["C4"]
    slots = result.probes.batch_size  # every slot of the batch has a NaN gradient
    # before: the probe graded n = 0 slots and C4 read the loss's name without a word of it
    assert c4.evidence == (
        "the live model's loss 'infonce-cos': scores items by cosine (direction only) (numeric check failed: the "
        f"loss's gradient is not finite in any of the {slots} item slots of the probe batch)"
    )
    assert c4.details["probe_error"].startswith("the loss's gradient is not finite")


def test_a_loss_raising_in_the_c4_probes_call_is_the_plugins_failure(
    tower: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # retrain N1: plugin code raising in a probe's plain call fails the run naming the plugin
    # (before: "probe c4 could not run: RuntimeError: ..." and C4 from the loss's name)
    with pytest.raises(PluginError) as caught:
        audit_tower(tower, "no_grad", monkeypatch)
    assert str(caught.value) == (f"plugin 'file:{tower / 'plug.py'}': its live model's loss on the probe batch "
                                 "raised RuntimeError: this loss cannot be differentiated")

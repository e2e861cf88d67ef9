"""C5's table rule needs no learning rate (docs/theory.md §5: "the same rule grades C5
without a probe step, from the table alone"), so the same weights get the same C5 whether
the file records a rate, the user declares any rate, or none is known; a rate nothing
measured is quoted, never credited with the growth ("materialised at it")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from auditor.conditions.c5_growth import assess_c5
from auditor.conditions.facts import Fact, Origin
from auditor.metrics.frequency_norm import frequency_norm_stats
from auditor.model import ItemStats, ModelBundle
from auditor.result import CONDITION_NAMES, Condition, Status

DIM = 16
FREQ = np.arange(1, 301, dtype=np.int64)


def _table(grown: bool) -> np.ndarray:
    rng = np.random.default_rng(0)
    table = rng.normal(0.0, 0.1, (FREQ.size, DIM))
    if grown:  # norms ∝ sqrt(1 + 0.1·frequency): the growth s ← s + c/s over the appearances
        table *= np.sqrt(1 + 0.1 * FREQ)[:, None] / np.linalg.norm(table, axis=1, keepdims=True)
    return table


def _c5(table: np.ndarray, lr: Fact[float] | None, c1: Status = "unknown") -> Condition:
    bundle = ModelBundle(source=Path("model.safetensors"), format="safetensors", item_table=table,
                         item_key="item_emb.weight")
    others = {k: Condition(CONDITION_NAMES[k], "holds", "test") for k in ("C2", "C3", "C4")}
    others["C1"] = Condition(CONDITION_NAMES["C1"], c1, "test")
    fn, _ = frequency_norm_stats(np.linalg.norm(table, axis=1), FREQ, n_bootstrap=0)
    return assess_c5(bundle, ItemStats(frequencies=FREQ, n_interactions=int(FREQ.sum())), None, lr, None, others, fn)


@pytest.mark.parametrize("lr", [None, Fact(10.0, Origin.STATE), Fact(1e-6, Origin.DECLARED, "lr")])
def test_a_grown_table_holds_c5_with_any_rate_or_none(lr: Fact[float] | None) -> None:
    table = _table(grown=True)
    norms = np.linalg.norm(table, axis=1)
    rho, p = stats.spearmanr(FREQ, norms)
    assert rho > 0.99 and p < 1e-50  # independent: the growth materialised
    c5 = _c5(table, lr)
    assert c5.status == "holds" and c5.details["decided_by"] == "table", c5.evidence
    assert c5.details["table_spearman"] == pytest.approx(rho)
    assert "materialised at it" not in c5.evidence
    if lr is None:
        assert c5.evidence.startswith("no learning rate known and no probe step ran")
    else:
        assert f"lr={lr.value:g} ({lr.source}) is not tested" in c5.evidence


def test_a_flat_table_under_c1_c4_is_a_rate_too_small_without_knowing_the_rate() -> None:
    c5 = _c5(_table(grown=False), None, c1="holds")
    assert c5.status == "violated" and "too small" in c5.evidence, c5.evidence
    assert _c5(_table(grown=False), None).status == "unknown"  # C1 not known to hold: no proof


def test_a_grown_table_beside_an_unknown_c1_names_it() -> None:
    """Conditions QA round 2, N4: a momentum-trained state dict (no optimizer state: C1 unknown)
    held C5 from the table with nothing said of C1; it still holds (docs/theory.md) and now names
    the unknown condition, while the same table beside a violated C1 is unknown."""
    table = _table(grown=True)
    unknown_c1 = _c5(table, None)
    assert unknown_c1.status == "holds", unknown_c1.evidence
    assert "C1 is unknown, so part of this growth may come from a step that is not orthogonal" in unknown_c1.evidence
    known_c1 = _c5(table, None, c1="holds")
    assert known_c1.status == "holds" and "unknown" not in known_c1.evidence.split("decided by the table")[1]
    violated_c1 = _c5(table, None, c1="violated")
    assert violated_c1.status == "unknown" and "C1 is violated" in violated_c1.evidence, violated_c1.evidence

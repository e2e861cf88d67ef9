"""`popaudit diff` of one model audited with another ``--seed`` or ``--bootstrap`` (QA9 diff
N1): spearman's interval bounds are drawn by resampling, so they moved (0.9716 -> 0.9707
for the lower bound) with no change of the model, read "less bias" and tripped a gate. They
are not comparable, and the setting is named; ρ itself, which no resampling draws, is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from auditor import AuditConfig, run_audit
from auditor.diff import diff_reports, evaluate_diff_gates, parse_diff_gates
from auditor.errors import UnmeasuredGateError

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data"


def _audit(**settings: Any) -> dict[str, Any]:
    config = AuditConfig(model=SAMPLE / "biased.pt", interactions=SAMPLE / "interactions.parquet", retrieval=False,
                         probes=False, **settings)
    return json.loads(json.dumps(run_audit(config).to_dict()))


@pytest.fixture(scope="module")
def seeds() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    return _audit(seed=0, bootstrap=200), _audit(seed=1, bootstrap=200), _audit(seed=0, bootstrap=100)


@pytest.mark.parametrize(("new_at", "setting", "shown"), [(1, "settings.seed", "0 vs 1"),
                                                           (2, "settings.bootstrap", "200 vs 100")])
def test_interval_bounds_of_another_resampling_are_not_compared(
        seeds: tuple[dict[str, Any], ...], new_at: int, setting: str, shown: str) -> None:
    base, new = seeds[0], seeds[new_at]
    assert base["frequency_norm"]["spearman_ci"] != new["frequency_norm"]["spearman_ci"]  # the draw moved them
    diff = diff_reports(base, new)
    for end in ("lo", "hi"):
        bound = diff.metric(f"spearman_ci_{end}")
        assert (bound.status, bound.delta, bound.reason) == ("incomparable", None, f"{setting} differs ({shown})")
    rho = diff.metric("spearman")
    assert (rho.status, rho.delta) == ("compared", 0.0)
    assert [s.setting for s in diff.settings] == [setting]
    with pytest.raises(UnmeasuredGateError, match=f"not comparable: {setting} differs"):
        evaluate_diff_gates(parse_diff_gates(["spearman_ci_lo.delta<0"], diff.flat()), diff, (base, new))


def test_the_same_resampling_compares_the_bounds(seeds: tuple[dict[str, Any], ...]) -> None:
    again = _audit(seed=0, bootstrap=200)
    bound = diff_reports(seeds[0], again).metric("spearman_ci_lo")
    assert (bound.status, bound.delta) == ("compared", 0.0)  # one seed, one draw: the same interval

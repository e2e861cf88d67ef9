"""QA retrain F9, F6: the seeds and list options of an experiment, checked before any run trains."""

from __future__ import annotations

import pytest

from auditor.errors import InputError
from auditor.ranges import seed_run
from auditor.train.experiments import ExperimentSizes, run_lr_sweep

TOP = 2**64 - 1


def test_seed_run_by_hand() -> None:
    assert seed_run(5, 3) == [5, 6, 7]
    assert seed_run(TOP, 1) == [TOP] and seed_run(TOP - 1, 2) == [TOP - 1, TOP]
    with pytest.raises(InputError, match=r"seed 18446744073709551615 with seeds 2 would run seeds up to "
                                         r"18,446,744,073,709,551,616.* at most 18,446,744,073,709,551,614"):
        seed_run(TOP, 2)
    with pytest.raises(InputError, match="seeds must be an integer from 1 to 1,000"):
        seed_run(0, 0)


def test_a_library_grid_refuses_a_seed_past_the_range_before_training() -> None:
    sizes = ExperimentSizes(n_users=20, n_items=10, n_interactions=100, epochs=1)
    with pytest.raises(InputError, match="seed must be an integer from 0 to 18,446,744,073,709,551,615"):
        run_lr_sweep([1.0], [TOP, TOP + 1], sizes)


def test_the_cli_knows_every_grid_setting_by_name() -> None:
    """QA retrain F6: --settings and --mitigations are checked when the command line is parsed,
    against names listed without torch; they are the grids' own."""
    from auditor.mitigation.experiment import mitigation_settings
    from auditor.train import CONDITION_SETTINGS, MITIGATION_SETTINGS
    from auditor.train.experiments import condition_settings

    sizes = ExperimentSizes()
    assert tuple(s.name for s in condition_settings(sizes)) == CONDITION_SETTINGS
    assert tuple(s.name for s in mitigation_settings(sizes)) == MITIGATION_SETTINGS


def test_a_library_sweep_checks_each_rate_against_the_lr_range() -> None:
    with pytest.raises(InputError, match=r"lrs must be a number > 0 and <= 1e\+30, got nan"):
        run_lr_sweep([1.0, float("nan")], [0])
    with pytest.raises(InputError, match=r"lrs must be a number > 0 and <= 1e\+30, got 1e\+31"):
        run_lr_sweep([1e31], [0])

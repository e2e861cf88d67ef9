"""QA retrain F9: the seeds an experiment runs stay within the seed range torch takes."""

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

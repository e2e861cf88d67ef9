"""QA N2: every bracketed interval follows the one rule (wording.interval_decimals): the
trade-off's "Against dot" table printed a change's intervals at fixed decimals and the
experiment grid's ρ 95% CI at three, so bounds that differ read as one value ("[-0.0001,
-0.0001]", "[0.996, 0.996]") where the recommendation sentence prints them apart."""

from __future__ import annotations

from typing import Any

import numpy as np

from auditor.report.accuracy import changes_table
from auditor.report.experiment_summary import grid_table
from auditor.sections import Accuracy, ScoringChange
from auditor.summaries import ExperimentResult, ExperimentSizes
from auditor.wording import interval


def test_the_changes_table_prints_intervals_as_the_sentence_does() -> None:
    tight = ScoringChange(ndcg_delta=-0.000119, head_share_delta=-0.0000333,
                          ndcg_delta_ci=(-0.000121, -0.000117), head_share_delta_ci=(-0.0000412, -0.0000251))
    wide = ScoringChange(ndcg_delta=-0.004, head_share_delta=-0.0123,
                         ndcg_delta_ci=(-0.01234, 0.00451), head_share_delta_ci=(-0.01456, -0.01012))
    accuracy = Accuracy(protocol="x", n_users_evaluated=281, n_dropped=0, at={},
                        changes={"alpha_0.99": tight, "alpha_0.5": wide}, n_bootstrap=1000)
    rows = {row[0]: row for row in changes_table(accuracy).rows}
    # Bounds 4e-6 apart need six decimals; head-share points -0.00412 and -0.00251 need three.
    assert rows["norm-aware α=0.99"][2] == "[-0.000121, -0.000117]"
    assert rows["norm-aware α=0.99"][4] == "[-0.004, -0.003]"
    # Bounds that print apart keep the table's decimals (4 for NDCG, 2 for points).
    assert rows["norm-aware α=0.5"][2] == "[-0.0123, +0.0045]"
    assert rows["norm-aware α=0.5"][4] == "[-1.46, -1.01]"
    for name, change in (("norm-aware α=0.99", tight), ("norm-aware α=0.5", wide)):  # the sentence's figures
        assert interval(change.ndcg_delta_ci) == ", 95% CI " + rows[name][2]
        assert interval(change.head_share_delta_ci, 100, 2) == ", 95% CI " + rows[name][4]


def test_the_experiment_grid_prints_its_rho_interval_apart() -> None:
    seeds = [[0.99612, 0.99641], [0.99602, 0.99645]]
    low, high = np.mean(seeds, axis=0)  # 0.99607, 0.99643: "0.996" both at three decimals
    assert f"{low:.3f}" == f"{high:.3f}" and (f"{low:.4f}", f"{high:.4f}") == ("0.9961", "0.9964")
    config = {"optimizer": "sgd", "lr": 10.0, "user_lr": 10.0, "user_optimizer": "sgd", "momentum": 0.0,
              "weight_decay": 0.0, "item_encoder": "embedding", "user_encoder": "embedding", "loss": "infonce-cos"}
    runs: list[dict[str, Any]] = [{"seed": s, "spearman_ci": ci, "k": 100} for s, ci in enumerate(seeds)]
    row = {"name": "r", "label": "reference", "violates": "none", "config": config, "kind": "reference",
           "model": "reference", "runs": runs, "summary": {}}
    data = {"kind": "synthetic", "n_users": 4, "n_items": 5, "n_interactions": 9, "zipf": 1.0}
    header, table = grid_table(ExperimentResult("conditions", ExperimentSizes(epochs=1), [0, 1], [row], data))
    assert table[0][header.index("ρ 95% CI")] == "[0.9961, 0.9964]"
    runs[1]["spearman_ci"] = [0.41, 0.62]  # apart at three decimals: three stay
    header, table = grid_table(ExperimentResult("conditions", ExperimentSizes(epochs=1), [0, 1], [row], data))
    assert table[0][header.index("ρ 95% CI")] == f"[{(0.99612 + 0.41) / 2:.3f}, {(0.99641 + 0.62) / 2:.3f}]"

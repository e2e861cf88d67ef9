"""`experiment` tables print head shares as `check` does (percentages with the decimals a
share needs), so the dot/cosine ratio beside them can be read from them: the figures of a
conditions run the QA recorded (results.json), where 3-decimal fractions printed "0.001 vs
0.001" beside a ratio of 1.31 and "0.003 vs 0.001" beside 2.21."""

from __future__ import annotations

from typing import Any

import pytest

from auditor.report.experiment_summary import grid_table
from auditor.report.mitigation_summary import mitigation_table
from auditor.summaries import ExperimentResult, ExperimentSizes, MitigationResult

RUNS = {  # label: (dot, cosine) head_share_1pct@100 of one seed, from results.json
    "low learning rate": (0.0026754, 0.0012124),
    "linear over dense features": (0.0010521, 0.0008016),
    "InfoNCE over dot products": (0.0007014, 0.0007114),
}
DATA = {"kind": "synthetic", "n_users": 4, "n_items": 5, "n_interactions": 9, "zipf": 1.0}


def _row(label: str, summary: dict[str, Any]) -> dict[str, Any]:
    config = {"optimizer": "sgd", "lr": 10.0, "user_lr": 10.0, "user_optimizer": "sgd", "momentum": 0.0,
              "weight_decay": 0.0, "item_encoder": "embedding", "user_encoder": "embedding", "loss": "infonce-cos"}
    return {"name": label, "label": label, "violates": "none", "config": config, "kind": "reference",
            "model": "reference", "runs": [{"seed": 1, "spearman_ci": [0.9, 0.95], "k": 100}], "summary": summary}


def test_condition_tables_print_head_shares_as_check_does() -> None:
    rows = []
    for label, (dot, cosine) in RUNS.items():
        rows.append(_row(label, {"head_share_1pct_dot@100": {"mean": dot, "std": None},
                                 "head_share_1pct_cosine@100": {"mean": cosine, "std": None},
                                 "head_share_1pct_ratio@100": {"mean": dot / cosine, "std": None}}))
    result = ExperimentResult("conditions", ExperimentSizes(epochs=1), [1], rows, DATA)
    header, table = grid_table(result)
    shown = {row[0]: row[-3:] for row in table}
    assert header[-3:] == ["head@100 dot, seen excluded", "head@100 cos, seen excluded", "ratio"]
    assert shown == {
        "low learning rate": ["0.27%", "0.12%", "2.21"],
        "linear over dense features": ["0.11%", "0.080%", "1.31"],
        "InfoNCE over dot products": ["0.070%", "0.071%", "0.99"],
    }


def test_seeds_show_the_share_and_its_spread_in_percent() -> None:
    row = _row("reference", {"head_share_1pct_dot@100": {"mean": 0.0412, "std": 0.0031},
                             "head_share_1pct_cosine@100": {"mean": 0.005, "std": 0.0004},
                             "head_share_1pct_ratio@100": {"mean": 8.24, "std": 0.5}})
    header, table = grid_table(ExperimentResult("conditions", ExperimentSizes(epochs=1), [1, 2], [row], DATA))
    assert table[0][-3:] == ["4.1% ± 0.31%", "0.50% ± 0.040%", "8.24 ± 0.50"]


def test_the_mitigations_table_prints_head_shares_as_check_does() -> None:
    one = {"mean": 0.25, "std": None}
    summary = {"ndcg": one, "recall": one, "gini": one, "spearman": one, "head_share_1pct": {"mean": 0.0026754,
                                                                                              "std": None}}
    result = MitigationResult(ExperimentSizes(epochs=1), [1], 0.4, "random", (0.5,), [_row("reference", summary)],
                              DATA)
    header, table = mitigation_table(result)
    assert table[0][header.index(f"head share 1%@{result.k}")] == "0.27%"

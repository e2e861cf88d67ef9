"""QA accuracy F3: results.json's ``sizes`` gives the synthetic data's sizes only for
synthetic runs; for a log they are null (the log's sizes are ``data``'s)."""

from __future__ import annotations

from auditor.summaries import ExperimentResult, ExperimentSizes, MitigationResult

SIZES = ExperimentSizes(n_users=50, n_items=70, n_interactions=900, zipf=1.2, epochs=2, k=10)
LOG = {"kind": "file", "path": "train.parquet", "n_users": 300, "n_items": 394, "n_interactions": 5257}
SYNTHETIC = {"kind": "synthetic", "n_users": 50, "n_items": 70, "n_interactions": 900, "zipf": 1.2}


def _mitigations(data: dict[str, object]) -> MitigationResult:
    return MitigationResult(sizes=SIZES, seeds=[0], fraction=0.2, split="random", alphas=(0.5,), rows=[], data=data)


def test_a_log_leaves_the_synthetic_sizes_null_and_keeps_the_training_config() -> None:
    for doc in (_mitigations(LOG).to_dict(), ExperimentResult("conditions", SIZES, [0], [], LOG).to_dict()):
        assert [doc["sizes"][k] for k in ("n_users", "n_items", "n_interactions", "zipf")] == [None] * 4
        assert doc["sizes"]["epochs"] == 2 and doc["sizes"]["k"] == 10 and doc["sizes"]["dim"] == 32
        assert doc["data"]["n_items"] == 394


def test_synthetic_runs_and_older_results_without_data_keep_the_sizes() -> None:
    for data in (SYNTHETIC, {}):
        doc = _mitigations(data).to_dict()
        assert [doc["sizes"][k] for k in ("n_users", "n_items", "n_interactions", "zipf")] == [50, 70, 900, 1.2]

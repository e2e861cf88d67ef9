"""Make ``BPR-tiny.trace.jsonl``: a real RecBole training run under the training monitor.

Run with the RecBole virtual environment (README.md here), from the repository root, with
popaudit's own dependencies installed there too (numpy kept at 1.26.4):

    /work/venvs/recbole/bin/pip install faiss-cpu "pyarrow<21" pluggy rich safetensors \
        scikit-learn matplotlib "numpy==1.26.4" "pandas<3" "torch==2.13.0"
    PYTHONPATH=. /work/venvs/recbole/bin/python tests/data/recbole/make_trace.py

It trains BPR on ``tiny.inter`` (made by make_checkpoint.py) for 3 epochs with RecBole's
own ``Trainer`` wrapped by :func:`auditor.monitor.recbole.monitored`, a step record every
2 optimizer steps, plain SGD (BPR scores by dot product, so C4 fails and the update
angles spread), and an alert on the spread angles that fires. The tests read the trace with popaudit only;
RecBole is never imported by the tests.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATASET = "tiny"
TRACE = HERE / "BPR-tiny.trace.jsonl"


def main() -> int:
    import recbole
    import torch
    from recbole.config import Config
    from recbole.data import create_dataset, data_preparation
    from recbole.model.general_recommender import BPR
    from recbole.trainer import Trainer
    from recbole.utils import init_seed

    from auditor.monitor import TrainingAlertWarning, read_trace
    from auditor.monitor.recbole import monitored

    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # RecBole's trainer writes log_tensorboard/ into the working directory
        data_root = Path(tmp) / "dataset"
        (data_root / DATASET).mkdir(parents=True)
        shutil.copyfile(HERE / f"{DATASET}.inter", data_root / DATASET / f"{DATASET}.inter")
        settings: dict[str, object] = {
            "data_path": str(data_root), "checkpoint_dir": str(Path(tmp) / "saved"), "use_gpu": False,
            "device": "cpu", "seed": 2020, "reproducibility": True, "show_progress": False, "state": "WARNING",
            "embedding_size": 16, "epochs": 3, "train_batch_size": 128, "eval_step": 0, "learner": "sgd",
            "learning_rate": 5.0, "weight_decay": 0.0,
            "load_col": {"inter": ["user_id", "item_id", "rating", "timestamp"]},
        }
        config = Config(model="BPR", dataset=DATASET, config_dict=settings)
        init_seed(config["seed"], config["reproducibility"])
        dataset = create_dataset(config)
        train_data, _valid, _test = data_preparation(config, dataset)
        model = BPR(config, train_data.dataset).to(config["device"])
        trainer = monitored(Trainer)(config, model, trace=TRACE, interval=2, alerts=["angle_share_90_1<0.5"], fsync=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", TrainingAlertWarning)
            trainer.fit(train_data, saved=False, show_progress=False, verbose=False)
        trace = read_trace(TRACE)
        fired = [str(w.message) for w in caught if issubclass(w.category, TrainingAlertWarning)]
        print(f"{TRACE.name}: {len(trace.steps)} step and {len(trace.epochs)} epoch records, "
              f"{trace.header.n_items} items, alerts {fired} (recbole {recbole.__version__}, torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

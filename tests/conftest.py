"""Shared test setup: headless plots and one thread per worker (pytest -n 2 on 2 cores)."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402  (after the thread settings)

import auditor.cli  # noqa: E402,F401  messages name settings by their flags in every test, as on the CLI

torch.set_num_threads(1)

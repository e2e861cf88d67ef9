"""The probe's J·v products are safe in threads (QA Api F2): they were forward-mode
passes, and torch's forward-AD level is one per process, so two audits in a
ThreadPoolExecutor nested it and one lost its C3 probe ("Nested forward mode AD is not
supported"), at random. Both threads' kernels must be the known answer: for the identity item function f(t) = t, J Jᵀ = I, so the
kernel's column (item i, coordinate c) is 1 at (item i, coordinate c) and 0 elsewhere."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from auditor.probes.jacobian import kernel_columns

M, DIM = 3, 4


def _slow_identity(params: dict[str, torch.Tensor]) -> torch.Tensor:
    time.sleep(0.05)  # hold the forward pass long enough for the other thread to start its own
    return params["table"] * 1.0


def test_two_threads_get_exact_kernels() -> None:
    columns = torch.tensor([0, 2])
    start = threading.Barrier(2)

    def one(seed: int) -> torch.Tensor:
        table = torch.randn(M, DIM, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        start.wait()
        return kernel_columns(_slow_identity, {"table": table}, columns)

    with ThreadPoolExecutor(2) as pool:
        kernels = list(pool.map(one, (0, 1)))
    # (j, i, s, t): B_ji[s, c_t] = [i == j][s == c_t]
    expected = torch.zeros(M, M, DIM, 2, dtype=torch.float64)
    for i in range(M):
        for t, c in enumerate(columns.tolist()):
            expected[i, i, c, t] = 1.0
    for kernel in kernels:
        assert torch.equal(kernel, expected)

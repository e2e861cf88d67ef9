"""QA13 accuracy F2: ``mitigate --alpha A`` (a given α) writing a table stored in float8
served 173 of 200 users another top-10 than check's ``alpha_A`` lists, which the README
promises, with nothing said in the console or the sidecar. A given α now warns whenever the
written dtype is narrower than float32 (the rule ``--alpha auto`` measures the output as
written by, ``sidecar.FULL_PRECISION``), with how far the rounding moved the rows' norms from
‖k‖^α (largest, median), pointing to ``check OUT`` and ``--alpha auto``
(mitigation/written_notes.py ``rounding_note``).

Known answer: the QA's world (tests/test_holdout_churn_not_shift.py ``_world``) with its item
table cast to float8_e4m3fn; the rescaled rows are computed and rounded here (numpy, torch's
float8 cast), their norms' deviation from ‖k‖^0.5 and the top-10 lists compared in numpy.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli
from tests.test_holdout_churn_not_shift import _world


def _top(users: np.ndarray, items: np.ndarray, train: np.ndarray) -> np.ndarray:
    scores = users @ items.T
    scores[train[:, 0], train[:, 1]] = -np.inf
    return np.argsort(-scores, axis=1, kind="stable")[:, :10]


def _mitigate(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["mitigate", *args])
    return result.exit_code, " ".join(result.output.split())


def test_a_given_alpha_on_a_float8_table_warns_that_the_rounding_moves_the_ranking(tmp_path: Path) -> None:
    train, _, users, items = _world()
    items8 = torch.tensor(items).to(torch.float8_e4m3fn)
    model, log, out = tmp_path / "m8.pt", tmp_path / "train.parquet", tmp_path / "out8.pt"
    torch.save({"user_embedding.weight": torch.tensor(users), "item_embedding.weight": items8}, model)
    pq.write_table(pa.table({"user_id": train[:, 0], "item_id": train[:, 1]}), log)

    source = items8.to(torch.float64).numpy()
    norms = np.linalg.norm(source, axis=1)
    promised = source * norms[:, None] ** (0.5 - 1.0)  # k·||k||^(α−1): what alpha_0.5 ranks by
    written = torch.tensor(promised).to(torch.float8_e4m3fn).to(torch.float64).numpy()
    moved = np.abs(np.linalg.norm(written, axis=1) - norms ** 0.5) / norms ** 0.5
    queries = users.astype(np.float64)
    differ = int(np.count_nonzero((_top(queries, promised, train) != _top(queries, written, train)).any(axis=1)))
    assert differ == 173  # the QA's count: the lists dot serving of OUT gives are not alpha_0.5's

    code, output = _mitigate(str(model), "--alpha", "0.5", "-o", str(out), "--interactions", str(log))
    assert code == 0, output
    said = (f"stored as float8_e4m3fn, the output's table rounds the rescaled rows, so dot serving of it may not rank "
            f"as check's alpha_0.5 of the input does (the rounding moves the rows' norms from ||k||^0.5 by up to "
            f"{moved.max():.2%} (median {np.median(moved):.2%}), and their directions too); measure it as written "
            f"with popaudit check {out}, or write it with --alpha auto, which does")
    assert (f"{moved.max():.2%}", f"{np.median(moved):.2%}") == ("4.52%", "0.90%")
    warnings = json.loads((tmp_path / "out8.pt.popaudit.json").read_text())["warnings"]
    assert said in warnings, warnings  # was []: nothing said
    assert "note: stored as float8_e4m3fn, the output's table rounds the rescaled rows" in output  # the console's
    assert f"by up to {moved.max():.2%} (median {np.median(moved):.2%})" in output


@pytest.mark.parametrize("alpha", ["0.5", "1"])
def test_a_float32_table_or_a_copy_says_nothing_of_rounding(tmp_path: Path, alpha: str) -> None:
    _, _, _, items = _world()
    np.save(tmp_path / "items.npy", items)
    np.save(tmp_path / "items16.npy", items.astype(np.float16))
    for name, rounded in (("items", False), ("items16", alpha != "1")):
        code, _ = _mitigate(str(tmp_path / f"{name}.npy"), "--alpha", alpha, "-o", str(tmp_path / f"o_{name}.npy"), "-q")
        assert code == 0
        warnings = json.loads((tmp_path / f"o_{name}.npy.popaudit.json").read_text())["warnings"]
        assert any("rounds the rescaled rows" in w for w in warnings) is rounded, warnings

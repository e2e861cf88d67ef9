"""A gate line never contradicts itself at the precision it prints: the value gets the
digits the comparison needs (`spearman<0.977695: 0.97769 (TRIPPED)`, where 4 significant
digits printed `0.9777 (TRIPPED)`), and the threshold is echoed as given."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.gate import Gate, GateOutcome, threshold_text, value_text

RHO = 0.97769365  # the sample model's Spearman rho, as the QA measured it


@pytest.mark.parametrize(("op", "threshold", "tripped", "line"), [
    ("<", 0.977695, True, "spearman<0.977695: 0.97769 (TRIPPED)"),
    (">=", 0.977695, False, "spearman>=0.977695: 0.97769 (ok)"),
    (">", 0.9776936, True, "spearman>0.9776936: 0.9777 (TRIPPED)"),  # 4 digits suffice; the threshold kept whole
    (">", 0.3, True, "spearman>0.3: 0.9777 (TRIPPED)"),
    ("==", 0.9777, False, "spearman==0.9777: 0.97769 (ok)"),  # never printed equal to a threshold it is not
])
def test_the_value_has_the_digits_its_comparison_needs(op: str, threshold: float, tripped: bool, line: str) -> None:
    assert GateOutcome(Gate("spearman", op, threshold), RHO, tripped).describe() == line


def test_round_values_and_thresholds_print_as_before() -> None:
    assert str(Gate("severity_level", ">=", 1.0)) == "severity_level>=1"
    assert GateOutcome(Gate("head_share_1pct_ratio@10", ">", 1.12), 1.125, True).describe() == \
        "head_share_1pct_ratio@10>1.12: 1.125 (TRIPPED)"
    assert value_text(math.inf, Gate("head_share_1pct_ratio@10", ">", 1000.0)) == "inf"
    assert threshold_text(0.9776936) == "0.9776936" and threshold_text(1e-5) == "1e-05"


def test_check_prints_gate_lines_that_agree_with_their_outcome(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    counts = rng.integers(1, 60, 120)
    norms = np.log1p(counts) + rng.normal(0, 0.4, 120)  # a rho below 1, with digits beyond 4
    directions = rng.standard_normal((120, 8))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    np.save(tmp_path / "items.npy", (directions * np.abs(norms)[:, None]).astype(np.float32))
    rows = np.repeat(np.arange(120), counts)
    pq.write_table(pa.table({"user_id": rng.integers(0, 30, rows.size), "item_id": rows}), tmp_path / "log.parquet")
    base = ["check", str(tmp_path / "items.npy"), "--interactions", str(tmp_path / "log.parquet"), "--no-probes",
            "--no-retrieval", "--bootstrap", "0", "--json", str(tmp_path / "r.json")]
    first = CliRunner().invoke(cli, base, catch_exceptions=False)
    assert first.exit_code == 0, first.output
    rho = float(re.search(r'"spearman": ([0-9.e-]+)', (tmp_path / "r.json").read_text()).group(1))  # type: ignore[union-attr]
    four = float(f"{rho:.4g}")
    assert four != rho
    threshold = (rho + four) / 2  # between rho and its 4 digits: they fall on either side of it
    run = CliRunner().invoke(cli, [*base, "--fail-on", f"spearman>={threshold!r}", "--fail-on", f"spearman<{threshold!r}"])
    for op in (">=", "<"):
        line = re.search(rf"gate spearman{re.escape(op)}{re.escape(repr(threshold))}: (\S+) \((TRIPPED|ok)\)",
                         run.stderr)
        assert line is not None, run.stderr
        shown, state = float(line.group(1)), line.group(2)
        assert (shown >= threshold if op == ">=" else shown < threshold) == (state == "TRIPPED"), line.group(0)

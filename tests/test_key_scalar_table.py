"""Loaders QA12 F4: a ``--user-key``/``--item-key`` that leaves (or names) the (n, 1) item bias
as one side's table beside a wider table on the other is refused naming both tensors and
what the one-column one is (it was "user table ... has dimension 8 but the item table has
1", naming neither, the bias silently chosen as the item table). A model of dimension 1 on
both sides is still read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli


def _files(tmp_path: Path, dim: int = 8) -> tuple[Path, Path]:
    g = np.random.default_rng(0)
    model = tmp_path / "bias.pt"
    torch.save({"user_embedding.weight": torch.from_numpy(g.normal(size=(40, dim)).astype(np.float32)),
                "item_embedding.weight": torch.from_numpy(g.normal(size=(60, dim)).astype(np.float32)),
                "item_bias.weight": torch.from_numpy(g.normal(size=(60, 1)).astype(np.float32))}, model)
    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": pa.array(np.arange(120) % 40), "item_id": pa.array(np.arange(120) % 60)}), log)
    return model, log


def _check(model: Path, log: Path, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["check", str(model), "--interactions", str(log), "-q", "--no-probes",
                                      "--bootstrap", "0", *extra], catch_exceptions=False)
    return result.exit_code, " ".join(result.output.split())


@pytest.mark.parametrize(("extra", "how", "beside"), [
    (("--user-key", "item_embedding.weight"), "the best candidate left once --user-key took 'item_embedding.weight'",
     "item_embedding.weight [60, 8] (--user-key)"),
    (("--item-key", "item_bias.weight"), "named by --item-key", "user_embedding.weight [40, 8]"),
])  # fmt: skip
def test_a_bias_left_or_named_as_a_table_is_refused_naming_both(
    tmp_path: Path, extra: tuple[str, str], how: str, beside: str,
) -> None:
    model, log = _files(tmp_path)
    code, output = _check(model, log, *extra)
    assert code == 1, output
    assert (f"Error: the item table of {model} would be item_bias.weight [60, 1] ({how}): one value per row, a "
            f"per-row scalar such as an item bias, not an embedding table, beside the user table {beside}. Pass "
            "--item-key with the item table; 2-D tensors available: user_embedding.weight [40, 8]; "
            "item_embedding.weight [60, 8]; item_bias.weight [60, 1]") in output, output
    assert "Traceback" not in output


def test_one_dimensional_tables_are_still_read(tmp_path: Path) -> None:
    model, log = _files(tmp_path, dim=1)
    code, output = _check(model, log, "--item-key", "item_embedding.weight")
    assert code == 0, output

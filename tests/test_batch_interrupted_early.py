"""A batch run interrupted before its first row finishes leaves an earlier results file as
it was (QA batchlists F6): the file is replaced only once a row is recorded, so the
``--resume`` printed keeps the earlier run's rows. Without a file there, an empty (valid)
results table is written, as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from auditor.batch import BatchInterrupted, read_results, run_batch
from auditor.config import AuditConfig
from auditor.io import file_sha256


def _interrupting_audit(config: AuditConfig, *, pm: Any = None, progress: Any = None, cache: Any = None) -> Any:
    raise KeyboardInterrupt  # Ctrl-C while the first row is audited


def _manifest(tmp_path: Path) -> Path:
    np.save(tmp_path / "m0.npy", np.eye(4, dtype=np.float32))
    path = tmp_path / "m.csv"
    pacsv.write_csv(pa.table({"model": ["m0.npy", "m0.npy"]}), path)
    return path


def test_an_earlier_results_file_is_left_as_it_was(tmp_path: Path) -> None:
    manifest, out = _manifest(tmp_path), tmp_path / "r.parquet"
    out.write_bytes(b"an earlier run's results")  # whatever it holds, this run did not make it
    before = file_sha256(out)
    with pytest.raises(BatchInterrupted) as caught:
        run_batch(manifest, out, audit_fn=_interrupting_audit, inline=True)
    assert caught.value.n_saved == 0 and caught.value.untouched
    assert file_sha256(out) == before


def test_without_a_file_there_an_empty_results_table_is_written(tmp_path: Path) -> None:
    manifest, out = _manifest(tmp_path), tmp_path / "r.parquet"
    with pytest.raises(BatchInterrupted) as caught:
        run_batch(manifest, out, audit_fn=_interrupting_audit, inline=True)
    assert not caught.value.untouched
    assert read_results(out).num_rows == 0


def test_a_row_that_fails_before_any_audit_replaces_the_file(tmp_path: Path) -> None:
    """A row recorded (here: a missing model, failed before any audit) is this run's result:
    the file is rewritten with it, as a run that finishes rows always did."""
    manifest, out = _manifest(tmp_path), tmp_path / "r.parquet"
    pacsv.write_csv(pa.table({"model": ["missing.npy", "m0.npy"]}), manifest)
    out.write_bytes(b"an earlier run's results")
    with pytest.raises(BatchInterrupted) as caught:
        run_batch(manifest, out, audit_fn=_interrupting_audit, inline=True)
    assert caught.value.n_saved == 1 and not caught.value.untouched
    assert read_results(out).column("status").to_pylist() == ["error"]

"""The results journal (auditor/batch/journal.py): each finished row appended as it comes,
the results file rewritten rarely, nothing lost to a crash that ``resume`` cannot read back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from auditor.batch import ResultsWriter, build_jobs, read_manifest, run_batch
from auditor.batch.journal import journal_path, read_journal
from auditor.batch.run import Provenances
from auditor.batch.provenance import encode
from auditor.batch.workers import audit_job
from test_batch_core import calls, fake_audit, workspace, write_manifest  # noqa: F401


def _rows(n: int) -> list[dict[str, Any]]:
    return [{"row": r, "model": f"m{r}", "status": "ok", "spearman": r / 10} for r in range(n)]


def test_save_appends_rows_and_a_rewrite_removes_the_journal(tmp_path: Path) -> None:
    out = tmp_path / "r.parquet"
    writer = ResultsWriter(out, (10,))
    writer.flush()  # the initial, empty file
    journal = journal_path(out)
    assert journal == tmp_path / ".r.parquet.journal" and not journal.exists()
    sizes = []
    for record in _rows(3):
        writer.add([record])
        writer.save()
        sizes.append(journal.stat().st_size)
        assert [r["row"] for r in read_journal(journal)] == list(range(record["row"] + 1))
    assert pq.read_table(out).num_rows == 0  # not rewritten: the rows are in the journal
    assert sizes[2] - sizes[1] == sizes[1] - sizes[0]  # a row costs a line
    assert read_journal(journal)[2] == _rows(3)[2]
    table = writer.flush()
    assert table.column("spearman").to_pylist() == [0.0, 0.1, 0.2] and not journal.exists()
    assert pq.read_table(out).column("row").to_pylist() == [0, 1, 2]


def test_a_line_cut_mid_write_is_dropped(tmp_path: Path) -> None:
    out = tmp_path / "r.parquet"
    writer = ResultsWriter(out, (10,))
    for record in _rows(3):
        writer.add([record])
        writer.save()
    journal = journal_path(out)
    assert journal is not None
    data = journal.read_bytes()
    journal.write_bytes(data[:-5])  # the last append cut by a crash
    assert [r["row"] for r in read_journal(journal)] == [0, 1]
    journal.write_bytes(b'garbage\n[1, 2]\n{"row": "x"}\n' + data)  # lines that are no record are skipped
    assert [r["row"] for r in read_journal(journal)] == [0, 1, 2]
    assert read_journal(tmp_path / "absent.journal") == [] and journal_path(Path("/dev/null")) is None


def test_resume_after_a_crash_keeps_the_rows_only_the_journal_holds(workspace: dict[str, Any]) -> None:  # noqa: F811
    d = workspace["dir"]
    manifest = write_manifest(d / "m.csv", {"model": ["m0.npy", "m1.npy", "m2.npy", "m3.npy"]})
    out = d / "r.parquet"
    defaults = {"interactions": d / "log_a.parquet", "ks": (10,)}
    # A run that dies after two rows: the results file holds none, its journal both.
    parsed = read_manifest(manifest)
    jobs = build_jobs(parsed, defaults)
    writer = ResultsWriter(out, (10,), parsed.path.resolve(), parsed.sha256)
    writer.flush()
    provenance = Provenances(jobs)
    for job in jobs[:2]:
        record = audit_job(job, fake_audit)
        record["provenance"] = encode(provenance.of(job.row))  # type: ignore[arg-type]
        writer.add([record])
        writer.save()
    del writer  # killed: no last rewrite
    assert pq.read_table(out).num_rows == 0
    (d / "calls.log").unlink()
    outcome = run_batch(manifest, out, defaults=defaults, audit_fn=fake_audit, inline=True, resume=True)
    assert outcome.n_resumed == 2 and outcome.n_ok == 4
    assert calls(d) == ["m2", "m3"]  # rows 0 and 1 came from the journal
    assert pq.read_table(out).column("row").to_pylist() == [0, 1, 2, 3]
    assert not (d / ".r.parquet.journal").exists()


def test_a_run_without_resume_replaces_a_stale_journal(workspace: dict[str, Any]) -> None:  # noqa: F811
    d = workspace["dir"]
    manifest = write_manifest(d / "m.csv", {"model": ["m0.npy"]})
    out = d / "r.parquet"
    stale = ResultsWriter(out, (10,))
    stale.add(_rows(5))
    stale.save()
    assert (d / ".r.parquet.journal").exists()
    outcome = run_batch(manifest, out, defaults={"interactions": d / "log_a.parquet", "ks": (10,)},
                        audit_fn=fake_audit, inline=True)
    assert outcome.n_ok == 1 and pq.read_table(out).num_rows == 1
    assert not (d / ".r.parquet.journal").exists()

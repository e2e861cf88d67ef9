"""Batch library: manifests, per-row settings, results schema, flushing, resume, summary.

Audits here use ``fake_audit``, a small real computation (Spearman ρ of norms vs
counted frequencies, exact top-K head share) built into a genuine AuditResult, so the
batch machinery is tested on known answers without the full audit's cost. The same
function serves the worker-process tests (it must be importable by name).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from scipy import stats

from auditor.batch import (
    BatchJob,
    ResultsWriter,
    build_jobs,
    parse_memory_size,
    read_manifest,
    result_schema,
    run_batch,
)
from auditor.batch.dispatch import _group_order
from auditor.config import AuditConfig
from auditor.errors import InputError, ManifestError
from auditor.progress import Progress
from auditor.batch.summary import summarise
from auditor.report.batch_summary import summary_html
from auditor.result import (
    AuditResult,
    Condition,
    CutoffMeasures,
    FrequencyNorm,
    Inputs,
    Retrieval,
    Verdict,
)
from report_samples import builtin_measures


# ---------------------------------------------------------------- the fake audit


def _log(folder: Path, line: str) -> None:
    # O_APPEND writes of one short line are atomic enough for several processes.
    with open(folder / "calls.log", "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def fake_audit(config: AuditConfig, *, pm: Any = None, progress: Any = None, cache: Any = None) -> AuditResult:
    """A small real audit: ρ(norm, frequency) and exact dot/cosine top-K head share."""
    folder = Path(config.model).parent
    name = Path(config.model).stem
    _log(folder, f"audit {os.getpid()} {name}")
    if name.startswith("kill") and (folder / "kill.flag").exists():
        os.kill(os.getpid(), signal.SIGKILL)
    if name.startswith("slow"):
        time.sleep(0.6)
    table = np.load(config.model)  # a broken file raises here, as a real loader would
    key = ("fake-counts", str(config.interactions))
    if key not in cache.counts:
        _log(folder, f"read {os.getpid()} {Path(config.interactions).name}")
        items = pq.read_table(config.interactions, columns=["item_id"]).column(0).to_numpy()
        cache.counts[key] = np.bincount(items, minlength=table.shape[0])
    freqs = cache.counts[key][: table.shape[0]]
    norms = np.linalg.norm(table, axis=1)
    rho = float(stats.spearmanr(norms, freqs).statistic)
    rng = np.random.default_rng(config.seed)
    queries = rng.standard_normal((50, table.shape[1]))
    head = freqs >= np.sort(freqs)[::-1][max(1, table.shape[0] // 100) - 1]
    at = {}
    for k in config.ks:
        shares = {}
        for scoring, items in (("dot", table), ("cosine", table / norms[:, None])):
            top = np.argsort(-(queries @ items.T), axis=1)[:, :k]
            shares[scoring] = float(head[top].mean())
        shares["popular"] = float(head[np.argsort(-freqs)[:k]].mean())
        measures = {
            s: builtin_measures(v, v, v, float(k), 0.5, 0.1, 0.2, None) for s, v in shares.items()
        }
        at[k] = CutoffMeasures(measures["dot"], measures["cosine"], measures["popular"], 0.5)
    conditions = {
        c: Condition(c, "holds" if (c == "C1") == (rho > 0) else "unknown", "fake") for c in ("C1", "C2", "C3", "C4", "C5")
    }
    severity = "high" if rho > 0.5 else "low" if rho > 0.1 else "none"
    return AuditResult(
        inputs=Inputs(str(config.model), str(config.interactions), None, None, table.shape[0], table.shape[1], int(freqs.sum())),
        frequency_norm=FrequencyNorm(rho, (rho - 0.1, rho + 0.1), 0.01, rho, rho / 2, 1.0, table.shape[0], int((freqs == 0).sum()), []),
        verdict=Verdict(rho > 0.1, severity, f"rho={rho:.3f}"),  # type: ignore[arg-type]
        retrieval=Retrieval(50, "exact", at),
        conditions=conditions,  # type: ignore[arg-type]
        settings={"ks": list(config.ks), "seed": config.seed, "max_memory": config.max_memory},
    )


def swapping_audit(config: AuditConfig, *, pm: Any = None, progress: Any = None, cache: Any = None) -> AuditResult:
    """fake_audit of a model file that a trainer overwrites while the batch runs: the
    audit reads other content (``other.npy``), and the original is put back with its old
    modification time before the row's record reaches the results."""
    model = Path(config.model)
    if model.name == "swap.npy":
        kept, times = model.read_bytes(), os.stat(model)
        model.write_bytes((model.parent / "other.npy").read_bytes())
        try:
            return fake_audit(config, pm=pm, progress=progress, cache=cache)
        finally:
            model.write_bytes(kept)
            os.utime(model, ns=(times.st_atime_ns, times.st_mtime_ns))
    return fake_audit(config, pm=pm, progress=progress, cache=cache)


# ---------------------------------------------------------------- data helpers


def make_log(path: Path, n_items: int, seed: int) -> np.ndarray:
    """A Parquet log with Zipf-ish item counts; returns the counts per item."""
    rng = np.random.default_rng(seed)
    counts = np.maximum(1, (2000 / np.arange(1, n_items + 1) ** 1.1).astype(np.int64))
    rng.shuffle(counts)
    items = np.repeat(np.arange(n_items), counts)
    users = rng.integers(0, 100, items.shape[0])
    pq.write_table(pa.table({"user_id": users, "item_id": items}), path)
    return counts


def make_table(path: Path, freqs: np.ndarray, strength: float, seed: int, dim: int = 8) -> np.ndarray:
    """An item table whose norms grow with log-frequency by ``strength`` (plus noise)."""
    rng = np.random.default_rng(seed)
    directions = rng.standard_normal((freqs.shape[0], dim))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    norms = 1.0 + strength * np.log1p(freqs) + rng.uniform(0, 1, freqs.shape[0])
    table = (directions * norms[:, None]).astype(np.float32)
    np.save(path, table)
    return table


def expected_rho(table_path: Path, freqs: np.ndarray) -> float:
    table = np.load(table_path)
    return float(stats.spearmanr(np.linalg.norm(table, axis=1), freqs).statistic)


@pytest.fixture()
def workspace(tmp_path: Path) -> dict[str, Any]:
    """Two logs, four good tables (bias rising along the manifest order), one broken file."""
    freqs_a = make_log(tmp_path / "log_a.parquet", 200, seed=1)
    freqs_b = make_log(tmp_path / "log_b.parquet", 200, seed=2)
    for i, strength in enumerate((0.0, 0.3, 1.0, 3.0)):
        make_table(tmp_path / f"m{i}.npy", freqs_a if i % 2 == 0 else freqs_b, strength, seed=10 + i)
    (tmp_path / "broken.npy").write_bytes(b"not a numpy file")
    return {"dir": tmp_path, "freqs": {"log_a.parquet": freqs_a, "log_b.parquet": freqs_b}}


def write_manifest(path: Path, columns: dict[str, list[Any]]) -> Path:
    table = pa.table(columns)
    if path.suffix == ".csv":
        pacsv.write_csv(table, path)
    else:
        pq.write_table(table, path)
    return path


def calls(folder: Path, kind: str = "audit") -> list[str]:
    """Models audited (kind audit) or logs read (kind read), in call order."""
    return [name for _, name in calls_by_pid(folder, kind)]


def calls_by_pid(folder: Path, kind: str = "audit") -> list[tuple[int, str]]:
    log = folder / "calls.log"
    if not log.exists():
        return []
    lines = [line.split() for line in log.read_text().splitlines()]
    return [(int(pid), name) for k, pid, name in lines if k == kind]


# ---------------------------------------------------------------- manifests


def test_manifest_aliases_paths_and_values(tmp_path: Path) -> None:
    sub = tmp_path / "runs"
    sub.mkdir()
    path = write_manifest(
        sub / "manifest.csv",
        {
            "model": ["a.npy", "/abs/b.npy"],
            "Item-Key": ["items", None],
            "k": ["10,100", "5"],
            "--max-queries": [20, None],
            "interactions": ["../log.parquet", None],
            "max_memory": ["2G", "1048576"],
            "declared_lr": [0.5, None],
            "queries": ["history", "q.npy"],
            "no-probes": ["true", None],
        },
    )
    manifest = read_manifest(path)
    first, second = manifest.rows
    assert first.model == "a.npy" and second.model == "/abs/b.npy"
    assert first.settings == {
        "item_key": "items",
        "ks": (10, 100),
        "max_queries": 20,
        "interactions": sub / "../log.parquet",
        "max_memory": 2 * 1024**3,
        "lr": 0.5,
        "queries": "history",
        "probes": False,
    }
    # Empty cells keep the defaults; relative paths resolve against the manifest folder.
    assert second.settings == {
        "ks": (5,),
        "max_memory": 1048576,
        "queries": str(sub.resolve() / "q.npy"),
    }
    jobs = build_jobs(manifest, {"seed": 7, "ks": (20,)})
    assert jobs[0].config is not None and jobs[0].config.model == sub.resolve() / "a.npy"
    assert jobs[0].config.declared.lr == 0.5 and jobs[0].config.seed == 7
    assert jobs[1].config is not None and jobs[1].config.model == Path("/abs/b.npy")
    assert jobs[1].config.ks == (5,) and jobs[1].config.max_queries == 10_000
    assert jobs[0].config.probes is False and jobs[1].config.probes is True


def test_parquet_manifest_typed_columns(tmp_path: Path) -> None:
    path = write_manifest(
        tmp_path / "m.parquet",
        {
            "model": ["a.npy", "b.npy"],
            "k": pa.array([[10, 50], None], pa.list_(pa.int64())),
            "retrieval": pa.array([False, None]),
            "max_memory": pa.array([1 << 30, None], pa.int64()),
            "item_key": pa.array([None, "emb.weight"]),
        },
    )
    first, second = read_manifest(path).rows
    assert first.settings == {"ks": (10, 50), "retrieval": False, "max_memory": 1 << 30}
    assert second.settings == {"item_key": "emb.weight"}


def test_manifest_without_model_column_names_the_columns(tmp_path: Path) -> None:
    path = write_manifest(tmp_path / "m.parquet", {"checkpoint": ["a.npy"], "seed": [1]})
    with pytest.raises(ManifestError, match=r"no 'model' column; columns found: checkpoint, seed"):
        read_manifest(path)


def test_manifest_unknown_column_lists_valid_names(tmp_path: Path) -> None:
    path = write_manifest(tmp_path / "m.csv", {"model": ["a.npy"], "itemkey": ["x"]})
    with pytest.raises(ManifestError) as info:
        read_manifest(path)
    message = str(info.value)
    assert "'itemkey'" in message and "item_key" in message and "max_queries" in message


def test_manifest_duplicate_setting_empty_and_unreadable(tmp_path: Path) -> None:
    dup = write_manifest(tmp_path / "dup.csv", {"model": ["a"], "k": ["1"], "ks": ["2"]})
    with pytest.raises(ManifestError, match="both set 'ks'"):
        read_manifest(dup)
    dup = write_manifest(tmp_path / "dup2.csv", {"model": ["a"], "retrieval": [True], "no_retrieval": [False]})
    with pytest.raises(ManifestError, match="both set 'retrieval'"):
        read_manifest(dup)
    empty = write_manifest(tmp_path / "empty.parquet", {"model": pa.array([], pa.string())})
    with pytest.raises(ManifestError, match="has no rows"):
        read_manifest(empty)
    junk = tmp_path / "junk.parquet"
    junk.write_text("model\nx\n")
    with pytest.raises(ManifestError, match="cannot read manifest .*junk.parquet as Parquet"):
        read_manifest(junk)
    with pytest.raises(ManifestError, match="not found"):
        read_manifest(tmp_path / "missing.csv")


def test_bad_cells_fail_only_their_row(tmp_path: Path) -> None:
    path = write_manifest(
        tmp_path / "m.csv",
        {"model": ["a.npy", "b.npy", None, "d.npy"], "k": ["10", "ten", "10", "0"]},
    )
    jobs = build_jobs(read_manifest(path))
    assert jobs[0].config is not None and jobs[0].error is None
    assert jobs[1].config is None and "column 'k'" in (jobs[1].error or "") and "'ten'" in (jobs[1].error or "")
    assert jobs[2].config is None and "model cell is empty" in (jobs[2].error or "")
    # A value outside the setting's range (auditor/ranges.py) also fails just that row.
    assert jobs[3].config is None and "column 'k': must be an integer from 1 to 10,000, got 0" in (jobs[3].error or "")


def test_cell_errors_name_the_column_as_the_manifest_spells_it(tmp_path: Path) -> None:
    """A bad cell names its column as written (``k``, ``Alpha``, ``--max-queries``,
    ``no-retrieval``, ``--index``), not the setting it maps to (``ks``, ``alphas``, ...)."""
    path = write_manifest(tmp_path / "m.csv", {
        "model": ["a.npy"] * 5,
        "k": ["10,abc", None, None, None, None],
        "Alpha": [None, "2", None, None, None],
        "--max-queries": [None, None, "-3", None, None],
        "no-retrieval": [None, None, None, "maybe", None],
        "--index": [None, None, None, None, "bogus"],
    })
    errors = [job.error or "" for job in build_jobs(read_manifest(path))]
    assert errors[0] == "InputError: column 'k': expected an integer, got 'abc'"
    assert errors[1] == "InputError: column 'Alpha': must be a number >= 0 and <= 1, got 2.0"
    assert errors[2] == "InputError: column '--max-queries': must be an integer from 1 to 10,000,000, got -3"
    assert errors[3] == "InputError: column 'no-retrieval': expected true or false, got 'maybe'"
    # Refused by the config rather than the cell's conversion: the same column name.
    assert errors[4].startswith("InputError: column '--index': index must be one of ")


def test_parse_memory_size() -> None:
    assert parse_memory_size(1000) == 1000
    assert parse_memory_size("512MiB") == 512 * 2**20
    assert parse_memory_size("1.5g") == int(1.5 * 2**30)
    assert parse_memory_size("3k") == 3072
    for bad in ("lots", "-1", "0"):
        with pytest.raises(ValueError):
            parse_memory_size(bad)


def test_invalid_defaults_raise(tmp_path: Path) -> None:
    path = write_manifest(tmp_path / "m.csv", {"model": ["a.npy"]})
    with pytest.raises(InputError, match="cut-offs"):
        run_batch(path, tmp_path / "r.parquet", defaults={"ks": (0,)}, audit_fn=fake_audit)
    with pytest.raises(InputError, match="unexpected keyword|invalid batch defaults"):
        run_batch(path, tmp_path / "r.parquet", defaults={"colour": "red"}, audit_fn=fake_audit)
    with pytest.raises(InputError, match="would overwrite the manifest"):
        run_batch(path, tmp_path / "m.csv", audit_fn=fake_audit)
    assert path.read_text().splitlines() == ['"model"', '"a.npy"']


# ---------------------------------------------------------------- running


def test_good_and_broken_rows(workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    manifest = write_manifest(
        d / "manifest.csv",
        {
            "model": ["m0.npy", "broken.npy", "m1.npy", "missing.npy", "m2.npy"],
            "interactions": ["log_a.parquet", "log_a.parquet", "log_b.parquet", None, None],
            "k": [None, None, "5,10", None, None],
            "label": ["day1", "day2", "day3", "day4", "day5"],
            "seed": [None, None, None, None, 3],
        },
    )
    outcome = run_batch(
        manifest,
        d / "out" / "results.parquet",
        defaults={"interactions": d / "log_a.parquet", "ks": (10,), "max_memory": 123456},
        audit_fn=fake_audit,
    )
    table = pq.read_table(d / "out" / "results.parquet")
    assert table.num_rows == 5 and outcome.n_ok == 3 and outcome.n_error == 2
    # Stable, typed schema: cut-offs 5 and 10 both have columns, in result_schema order.
    assert table.schema.names == result_schema((5, 10)).names
    assert table.schema.field("spearman").type == pa.float64()
    assert table.schema.field("row").type == pa.int64()
    rows = table.to_pylist()
    assert [r["row"] for r in rows] == [0, 1, 2, 3, 4]
    assert [r["status"] for r in rows] == ["ok", "error", "ok", "error", "ok"]
    assert [r["label"] for r in rows] == ["day1", "day2", "day3", "day4", "day5"]
    assert rows[1]["error"].startswith(("ValueError", "UnpicklingError", "OSError"))
    # A missing model is found before the row is sent to a worker (run.py _missing_inputs).
    assert rows[3]["error"].startswith("InputError: model file not found") and "missing.npy" in rows[3]["error"]
    assert rows[1]["spearman"] is None and rows[1]["report_json"] is None
    freqs = workspace["freqs"]
    for r, model, log in ((rows[0], "m0.npy", "log_a.parquet"), (rows[2], "m1.npy", "log_b.parquet"), (rows[4], "m2.npy", "log_a.parquet")):
        assert r["spearman"] == pytest.approx(expected_rho(d / model, freqs[log]), abs=1e-12)
        assert r["interactions"] == str((d / log).resolve())
        assert r["n_items"] == 200 and r["dim"] == 8 and r["n_interactions"] == int(freqs[log].sum())
        report = json.loads(r["report_json"])
        assert report["schema_version"] == 1 and report["frequency_norm"]["spearman"] == r["spearman"]
        assert report["settings"]["max_memory"] == 123456  # --max-memory reaches AuditConfig
        assert r["C1_status"] in ("holds", "unknown") and r["verdict_severity"] in ("none", "low", "high")
        dot, cosine = r["head_share_1pct_dot@10"], r["head_share_1pct_cosine@10"]
        assert r["head_share_1pct_ratio@10"] == (pytest.approx(dot / cosine) if cosine else None)
    # Per-row overrides: only row 2 asked for K=5; row 4's seed reached its config.
    assert rows[2]["head_share_1pct_dot@5"] is not None and rows[0]["head_share_1pct_dot@5"] is None
    assert json.loads(rows[4]["report_json"])["settings"]["seed"] == 3
    assert json.loads(rows[0]["report_json"])["settings"]["seed"] == 0
    # Rising bias strength along the manifest gives rising rho on the good rows.
    assert rows[0]["spearman"] < rows[2]["spearman"] < rows[4]["spearman"]
    assert outcome.failures[0][:2] == (1, "broken.npy")


class CheckingProgress(Progress):
    """Reads the results file at every advance: it must always be a valid, growing Parquet."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sizes: list[int] = []
        self.done: list[int] = []
        """Rows reported finished by each advance, counted up (rows finishing together advance once)."""
        self.notes: list[str] = []

    def _advance(self, n: int = 1) -> None:
        self.sizes.append(pq.read_table(self.path).num_rows)
        self.done.append((self.done[-1] if self.done else 0) + n)

    def track(self, description: str, total: float | None = None):  # type: ignore[no-untyped-def]
        from contextlib import contextmanager

        @contextmanager
        def tracker():  # type: ignore[no-untyped-def]
            yield self._advance

        return tracker()

    def note(self, message: str) -> None:
        self.notes.append(message)


def test_results_flushed_as_rows_finish_and_failures_noted(
    workspace: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import auditor.batch.run

    monkeypatch.setattr(auditor.batch.run, "FLUSH_SHARE", 0.0)  # no spacing: a flush per finished row
    d = workspace["dir"]
    manifest = write_manifest(d / "m.parquet", {"model": ["m0.npy", "broken.npy", "m2.npy", "m3.npy"]})
    out = d / "r.parquet"
    progress = CheckingProgress(out)
    run_batch(manifest, out, defaults={"interactions": d / "log_a.parquet", "ks": (10,)}, audit_fn=fake_audit, progress=progress)
    assert progress.sizes == progress.done and progress.done[-1] == 4  # every finished row in the file at once
    assert len(progress.notes) == 1 and "row 1 (broken.npy) failed [1 failed so far]" in progress.notes[0]
    assert not [p for p in d.iterdir() if p.name.startswith(".r.parquet")]  # no temp files left


def test_quick_rows_are_flushed_together_so_rewriting_stays_a_fraction_of_the_run(
    workspace: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows finishing faster than a flush takes are saved together: a flood of quick rows
    costs far fewer rewrites than rows (each rewrite is of the whole table), and the
    file holds every row at the end."""
    from auditor.batch import results

    flushes: list[int] = []
    real = results.ResultsWriter.flush

    def counted(self: results.ResultsWriter) -> Any:
        table = real(self)
        flushes.append(table.num_rows)
        self.last_cost = max(self.last_cost, 0.2)  # as a large table's rewrite would take
        return table

    monkeypatch.setattr(results.ResultsWriter, "flush", counted)
    d = workspace["dir"]
    manifest = write_manifest(d / "m.csv", {"model": ["m0.npy"] * 60})
    out = d / "r.parquet"
    outcome = run_batch(manifest, out, defaults={"interactions": d / "log_a.parquet", "ks": (10,)},
                        audit_fn=fake_audit, inline=True)
    assert outcome.n_ok == 60 and pq.read_table(out).num_rows == 60
    assert len(flushes) <= 4, flushes  # the initial empty file, the end, and few in between
    assert flushes[0] == 0 and flushes[-1] == 60


def test_flush_interval_spaces_rewrites_but_the_end_is_complete(workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    manifest = write_manifest(d / "m.parquet", {"model": ["m0.npy", "broken.npy", "m2.npy", "m3.npy"]})
    out = d / "r.parquet"
    progress = CheckingProgress(out)
    outcome = run_batch(
        manifest, out, defaults={"interactions": d / "log_a.parquet", "ks": (10,)},
        audit_fn=fake_audit, progress=progress, flush_interval=3600,
    )
    assert set(progress.sizes) == {0} and progress.done[-1] == 4  # only the initial (empty, valid) file so far
    assert pq.read_table(out).num_rows == 4 and outcome.n_ok == 3
    with pytest.raises(InputError, match="flush_interval"):
        run_batch(manifest, out, audit_fn=fake_audit, flush_interval=-1)


def test_writer_appends_widens_and_replaces(tmp_path: Path) -> None:
    writer = ResultsWriter(tmp_path / "r.parquet", (10,))
    writer.add([{"row": 2, "model": "b", "status": "ok", "spearman": 0.5}, {"row": 0, "model": "a", "status": "error", "error": "x"}])
    first = writer.flush()
    assert first.column("row").to_pylist() == [0, 2] and first.schema.names == result_schema((10,)).names
    # A plugin metric appears in a later record: the column is added, earlier rows null.
    writer.add([{"row": 1, "model": "c", "status": "ok", "my_measure": 3.0}, {"row": 0, "model": "a", "status": "ok", "spearman": 0.1}])
    table = pq.read_table(writer.output) if writer.flush() is not None else None
    assert table is not None and table.schema.names == result_schema((10,), ["my_measure"]).names
    assert table.column("row").to_pylist() == [0, 1, 2]
    assert table.column("my_measure").to_pylist() == [None, 3.0, None]
    assert table.column("status").to_pylist() == ["ok", "ok", "ok"]  # row 0 replaced
    assert table.column("spearman").to_pylist() == [0.1, None, 0.5]


def test_resume_skips_ok_rows_and_reruns_failed(workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    manifest = write_manifest(d / "m.csv", {"model": ["m0.npy", "broken.npy", "m1.npy", "m3.npy"]})
    out = d / "r.parquet"
    defaults = {"interactions": d / "log_b.parquet", "ks": (10,)}
    first = run_batch(manifest, out, defaults=defaults, audit_fn=fake_audit)
    assert first.n_ok == 3
    before = pq.read_table(out).to_pylist()
    # Fix the broken file; add a row; resume must audit only rows 1 and 4.
    np.save(d / "broken.npy", np.load(d / "m2.npy"))
    manifest = write_manifest(d / "m.csv", {"model": ["m0.npy", "broken.npy", "m1.npy", "m3.npy", "m2.npy"]})
    (d / "calls.log").unlink()
    second = run_batch(manifest, out, defaults=defaults, audit_fn=fake_audit, resume=True)
    assert calls(d) == ["broken", "m2"]
    assert second.n_resumed == 3 and second.n_ok == 5 and second.n_error == 0
    after = pq.read_table(out).to_pylist()
    for old in (0, 2, 3):
        assert after[old] == before[old]  # kept as written, seconds included
    # A changed model at a row index is not "already done".
    manifest = write_manifest(d / "m.csv", {"model": ["m0.npy", "broken.npy", "m1.npy", "m3.npy", "m0.npy"]})
    (d / "calls.log").unlink()
    third = run_batch(manifest, out, defaults=defaults, audit_fn=fake_audit, resume=True)
    assert calls(d) == ["m0"] and third.n_resumed == 4


def test_a_row_whose_input_changed_while_it_was_audited_is_never_kept(workspace: dict[str, Any]) -> None:
    """The provenance is taken before the audits run; a model overwritten after that and
    put back (same bytes, same mtime) before the record is saved gave figures of other
    content: the row is an error saying so, and a resume audits it again (it used to be
    kept, its provenance naming the original, its ρ the other file's)."""
    d = workspace["dir"]
    (d / "swap.npy").write_bytes((d / "m0.npy").read_bytes())
    (d / "other.npy").write_bytes((d / "m3.npy").read_bytes())
    manifest = write_manifest(d / "m.csv", {"model": ["swap.npy", "m1.npy"]})
    out, defaults = d / "r.parquet", {"interactions": d / "log_a.parquet", "ks": (10,)}
    first = run_batch(manifest, out, defaults=defaults, audit_fn=swapping_audit)
    assert (first.n_ok, first.n_error) == (1, 1)
    assert first.failures == [(0, "swap.npy", f"InputError: its model file {d / 'swap.npy'} changed while it was "
                                             "audited; audit it again")]
    second = run_batch(manifest, out, defaults=defaults, audit_fn=fake_audit, resume=True)
    assert (second.n_resumed, second.n_ok) == (1, 2)
    rows = pq.read_table(out).to_pylist()
    expected = fake_audit(AuditConfig(model=d / "m0.npy", interactions=d / "log_a.parquet", ks=(10,)),
                          cache=type("Cache", (), {"counts": {}})())
    assert rows[0]["spearman"] == pytest.approx(expected.frequency_norm.spearman)


def test_resume_rejects_a_file_that_is_not_results(workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    manifest = write_manifest(d / "m.csv", {"model": ["m0.npy"]})
    pq.write_table(pa.table({"x": [1]}), d / "other.parquet")
    with pytest.raises(InputError, match="not a popaudit batch results file"):
        run_batch(manifest, d / "other.parquet", resume=True, audit_fn=fake_audit)


def test_rows_dispatched_grouped_by_log() -> None:
    def job(row: int, log: str | None) -> BatchJob:
        return BatchJob(row, f"m{row}", None, AuditConfig(model=Path("m"), interactions=Path(log) if log else None))

    jobs = [job(0, "b"), job(1, "a"), job(2, "b"), job(3, None), job(4, "a"), job(5, "b")]
    assert [j.row for j in _group_order(jobs)] == [0, 2, 5, 1, 4, 3]


def test_shared_log_read_once_inline(workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    manifest = write_manifest(
        d / "m.csv",
        {"model": ["m0.npy", "m1.npy", "m2.npy", "m3.npy"], "interactions": ["log_a.parquet", "log_b.parquet", "log_a.parquet", "log_b.parquet"]},
    )
    run_batch(manifest, d / "r.parquet", defaults={"ks": (10,)}, audit_fn=fake_audit, inline=True)
    # One read per log, not per model, in this process (inline=True audits here).
    assert calls_by_pid(d, "read") == [(os.getpid(), "log_a.parquet"), (os.getpid(), "log_b.parquet")]
    assert calls(d) == ["m0", "m2", "m1", "m3"]  # grouped by log


def test_a_rewritten_log_is_counted_again(workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    manifest = write_manifest(d / "m.csv", {"model": ["m0.npy"], "interactions": ["log_a.parquet"]})
    first = run_batch(manifest, d / "r1.parquet", defaults={"ks": (10,)}, audit_fn=fake_audit)
    # Same path, new content (the counts of log_b): the process-wide cache must not reuse log_a's.
    os.replace(d / "log_b.parquet", d / "log_a.parquet")
    second = run_batch(manifest, d / "r2.parquet", defaults={"ks": (10,)}, audit_fn=fake_audit)
    assert len(calls(d, "read")) == 2
    expected = expected_rho(d / "m0.npy", workspace["freqs"]["log_b.parquet"])
    assert second.table.column("spearman")[0].as_py() == pytest.approx(expected, abs=1e-12)
    assert first.table.column("spearman")[0].as_py() != second.table.column("spearman")[0].as_py()


# ---------------------------------------------------------------- schema and summary


def test_result_schema_documented_and_ordered() -> None:
    schema = result_schema((10, 100))
    names = schema.names
    assert names[:6] == ["row", "model", "label", "interactions", "status", "error"]
    assert names[-1] == "report_json"
    assert names.index("C5_status") < names.index("spearman") < names.index("head_share_1pct_dot@10")
    assert names.index("recall@10") < names.index("head_share_1pct_dot@100")
    assert all(schema.field(n).metadata[b"description"] for n in names)
    with_plugin = result_schema((100, 10), ["my_measure", "spearman"])
    assert with_plugin.names == names[:-2] + ["my_measure", "provenance", "report_json"]


def _summary_table(values: list[tuple[str, float | None, float | None, str]]) -> pa.Table:
    writer = ResultsWriter(Path("unused.parquet"), (100,))
    writer.add(
        {"row": i, "model": m, "status": status, "error": None if status == "ok" else "ValueError: x",
         "spearman": rho, "head_share_1pct_ratio@100": share}
        for i, (m, rho, share, status) in enumerate(values)
    )
    return writer.table()


def test_summary_ranks_and_follows_the_manifest_order() -> None:
    table = _summary_table(
        [("a", 0.10, 1.1, "ok"), ("b", 0.30, 1.4, "ok"), ("bad", None, None, "error"),
         ("c", 0.55, 2.0, "ok"), ("d", 0.50, 2.5, "ok"), ("e", 0.80, 3.0, "ok")]
    )
    summary = summarise(table)
    assert (summary.n_rows, summary.n_ok, summary.n_error) == (6, 5, 1)
    assert [s.model for s in summary.ranking] == ["e", "c", "d", "b", "a"]
    assert summary.head_share_metric == "head_share_1pct_ratio@100"
    assert [s.row for s in summary.order] == [0, 1, 3, 4, 5]
    assert summary.order[0].delta_spearman is None
    assert summary.order[2].delta_spearman == pytest.approx(0.25)  # row 3 vs row 1 (row 2 failed)
    assert summary.order[3].delta_head_share == pytest.approx(0.5)
    rho_trend = summary.trends[0]
    expected = stats.kendalltau([0, 1, 3, 4, 5], [0.10, 0.30, 0.55, 0.50, 0.80])
    assert rho_trend.metric == "spearman" and rho_trend.kendall_tau == pytest.approx(expected.statistic)
    assert rho_trend.change == pytest.approx(0.70) and rho_trend.max_row == 5 and rho_trend.min_row == 0
    share_trend = summary.trends[1]
    assert share_trend.kendall_tau == pytest.approx(1.0) and share_trend.direction == "rising"
    by_share = summarise(table, rank_by="head_share_1pct_ratio@100")
    assert [s.model for s in by_share.ranking] == ["e", "d", "c", "b", "a"]
    with pytest.raises(InputError, match="cannot rank by 'nope'"):
        summarise(table, rank_by="nope")
    html = summary_html(summary)
    assert html.startswith("<!DOCTYPE html>") and "data:image/png;base64," in html
    assert "ValueError: x" in html and "rising" in html and ">e</td>" in html
    assert html.index(">e</td>") < html.index(">c</td>") < html.index(">a</td>")  # ranking first


def test_summary_falling_and_flat() -> None:
    falling = summarise(_summary_table([(f"m{i}", 0.9 - 0.1 * i, None, "ok") for i in range(6)]))
    assert falling.trends[0].direction == "falling" and falling.head_share_metric is None
    flat = summarise(_summary_table([(f"m{i}", 0.2, None, "ok") for i in range(4)]))
    assert flat.trends[0].direction == "no clear trend" and flat.trends[0].kendall_tau is None


# ---------------------------------------------------------------- hostile cells and provenance


def test_nul_byte_in_a_path_cell_is_a_manifest_error(tmp_path: Path) -> None:
    for column in ("model", "item_ids", "interactions", "--item-ids"):
        cells = {"model": ["a.npy", "b.npy"], column: ["ids.npy", "ids\x00.npy"]}
        if column == "model":
            cells = {"model": ["a.npy", "b\x00.npy"]}
        manifest = write_manifest(tmp_path / "m.parquet", cells)
        with pytest.raises(ManifestError, match=rf"manifest .*m\.parquet: column '{column}', row 1: .*NUL byte"):
            read_manifest(manifest)
    # Free text may hold anything: a label is no path.
    manifest = write_manifest(tmp_path / "m.parquet", {"model": ["a.npy"], "label": ["x\x00y"]})
    assert read_manifest(manifest).rows[0].label == "x\x00y"


def test_results_record_the_manifest_path_and_hash(workspace: dict[str, Any]) -> None:
    import hashlib

    from auditor.batch.results import results_manifest

    d = workspace["dir"]
    manifest = write_manifest(d / "m.csv", {"model": ["m0.npy"]})
    run_batch(manifest, d / "r.parquet", defaults={"interactions": d / "log_a.parquet", "ks": (10,)}, audit_fn=fake_audit)
    recorded = results_manifest(pq.read_table(d / "r.parquet"))
    assert recorded == (str(manifest.resolve()), hashlib.sha256(manifest.read_bytes()).hexdigest())
    assert read_manifest(manifest).sha256 == recorded[1]
    assert results_manifest(pa.table({"row": [0]})) == (None, None)  # a file that records nothing


def test_resume_refuses_results_of_another_manifest(workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    defaults = {"interactions": d / "log_a.parquet", "ks": (10,)}
    (d / "b").mkdir()
    np.save(d / "b" / "m0.npy", np.load(d / "m2.npy"))
    first = write_manifest(d / "m.csv", {"model": ["m0.npy"]})
    other = write_manifest(d / "b" / "m.csv", {"model": ["m0.npy"]})  # same bytes, another m0.npy
    out = d / "r.parquet"
    run_batch(first, out, defaults=defaults, audit_fn=fake_audit)
    before = out.read_bytes()
    (d / "calls.log").unlink()
    with pytest.raises(ManifestError, match=r"r\.parquet was written for manifest .*m\.csv, not for .*b/m\.csv.*same content"):
        run_batch(other, out, defaults=defaults, audit_fn=fake_audit, resume=True)
    assert out.read_bytes() == before and calls(d / "b") == []  # untouched, nothing audited
    # Without --resume the file is replaced; the same manifest edited in place still resumes.
    assert run_batch(other, out, defaults=defaults, audit_fn=fake_audit).n_ok == 1
    write_manifest(d / "b" / "m.csv", {"model": ["m0.npy", "m0.npy"]})
    assert run_batch(other, out, defaults=defaults, audit_fn=fake_audit, resume=True).n_resumed == 1


def test_console_summary_prints_cells_literally() -> None:
    from rich.console import Console

    from auditor.report.batch_summary import summary_console

    table = _summary_table([("[/bold]", 0.1, 1.0, "ok"), ("[bold red]x[/]", 0.2, 1.5, "ok"), ("[link=y]z", None, None, "error")])
    console = Console(width=200, record=True, color_system=None)
    for part in summary_console(summarise(table), n_resumed=0, output=Path("[/r].parquet")):
        console.print(part)
    text = console.export_text()
    assert "[/bold]" in text and "[bold red]x[/]" in text and "[/r].parquet" in text

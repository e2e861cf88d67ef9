"""``popaudit batch`` over manifests the user did not write.

A manifest cannot grant trust or pick a cluster, its paths resolve against its own
folder, no file it names gets its content into the results or the console, no output
overwrites an input, and a bad cell fails only its row. Every test checks the exit
code, the ``Error:`` message and that no input file changed (sha256 before and after).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner
from test_batch_cli import runner  # noqa: F401
from test_batch_core import fake_audit, make_log, make_table, workspace, write_manifest  # noqa: F401

from auditor.batch import Manifest, ManifestRow, build_jobs, read_manifest, run_batch
from auditor.cli import cli
from auditor.errors import InputError, ManifestError


def snapshot(*folders: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """sha256 of every file under ``folders`` (names in ``skip`` left out)."""
    digests = {}
    for folder in folders:
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file() and not path.is_symlink() and path.name not in skip:
                digests[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


# ---------------------------------------------------------------- 1. trust and the cluster


REFUSED = [
    ("trust_pickle", "true", "--trust-pickle"),
    ("trust-pickle", "yes", "--trust-pickle"),
    ("Trust_Pickle", "1", "--trust-pickle"),
    ("--trust-pickle", "false", "--trust-pickle"),  # refused even when it asks for less
    ("scheduler", "tcp://attacker.example:8786", "--scheduler"),
    ("Scheduler", "tcp://10.0.0.1:8786", "--scheduler"),
    ("plugins", "evil.py", "--plugin"),
    ("plugin", "evil.py", "--plugin"),
]


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize(("column", "value", "flag"), REFUSED)
def test_manifest_cannot_grant_trust_pick_a_cluster_or_load_plugins(
    runner: CliRunner, workspace: dict[str, Any], column: str, value: str, flag: str, suffix: str
) -> None:
    d = workspace["dir"]
    (d / "evil.py").write_text("raise SystemExit('plugin code ran')\n")
    manifest = write_manifest(d / f"m{suffix}", {"model": ["m0.npy", "m1.npy"], column: [value, None]})
    before = snapshot(d)
    result = runner.invoke(cli, ["batch", str(manifest), "-o", str(d / "r.parquet"), "--interactions", str(d / "log_a.parquet")])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"Error: manifest {manifest}: column {column!r} is not allowed: ")
    assert flag in result.stderr and "for the whole run" in result.stderr
    assert "Traceback" not in result.output
    assert not (d / "r.parquet").exists() and not (d / "calls.log").exists()  # nothing ran
    assert snapshot(d) == before


def test_refusals_are_listed_together_and_not_valid_column_names(tmp_path: Path) -> None:
    path = write_manifest(tmp_path / "m.csv", {"model": ["a.npy"], "trust_pickle": ["true"], "scheduler": ["tcp://x:1"]})
    with pytest.raises(ManifestError) as info:
        read_manifest(path)
    message = str(info.value)
    assert "'trust_pickle' is not allowed" in message and "'scheduler' is not allowed" in message
    # A library caller reads the settings' own names (the CLI's flags: test above).
    assert "runs code" in message and "with trust_pickle for" in message and "with scheduler for" in message
    # The list of valid columns shown for an unknown column does not offer them either.
    unknown = write_manifest(tmp_path / "u.csv", {"model": ["a.npy"], "colour": ["red"]})
    with pytest.raises(ManifestError) as info:
        read_manifest(unknown)
    valid = str(info.value).split("valid columns: ")[1]
    assert "trust_pickle" not in valid and "scheduler" not in valid and "plugins" not in valid


def test_a_hand_built_manifest_cannot_grant_trust_either(tmp_path: Path) -> None:
    row = ManifestRow(0, "a.npy", None, {"trust_pickle": True})
    with pytest.raises(ManifestError, match="row 0: 'trust_pickle' is not allowed"):
        build_jobs(Manifest(tmp_path / "m.csv", {"model": "model"}, [row]))
    with pytest.raises(ManifestError, match="'scheduler' is not allowed"):
        run_batch(Manifest(tmp_path / "m.csv", {}, [ManifestRow(0, "a.npy", None, {"scheduler": "tcp://x:1"})]), tmp_path / "r.parquet")
    assert not (tmp_path / "r.parquet").exists()


class Tripwire(torch.nn.Module):
    """A pickled module that records every full unpickling (which runs code from the file)."""

    def __init__(self, marker: Path) -> None:
        super().__init__()
        self.items = torch.nn.Embedding(40, 8)
        self.marker = str(marker)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        with open(self.marker, "a", encoding="utf-8") as fh:
            fh.write(f"unpickled in {os.getpid()}\n")


def test_trust_pickle_flag_applies_to_every_row(tmp_path: Path) -> None:
    """Real audits of pickled modules: without --trust-pickle no code from the files runs;
    with it, every row's file is fully unpickled (in the workers)."""
    marker = tmp_path / "unpickled.log"
    for name in ("pickled_a.pt", "pickled_b.pt"):
        torch.save(Tripwire(marker), tmp_path / name)
    np.save(tmp_path / "table.npy", np.random.default_rng(0).standard_normal((40, 8)).astype(np.float32))
    manifest = write_manifest(tmp_path / "m.csv", {"model": ["pickled_a.pt", "table.npy", "pickled_b.pt"]})
    before = snapshot(tmp_path)
    args = ["batch", str(manifest), "--bootstrap", "0", "--no-probes", "--no-retrieval", "-q"]
    plain = CliRunner().invoke(cli, [*args, "-o", str(tmp_path / "plain.parquet")])
    assert plain.exit_code == 0, plain.output
    assert not marker.exists()  # no code from the files ran
    rows = pq.read_table(tmp_path / "plain.parquet").to_pylist()
    assert [r["status"] for r in rows] == ["ok", "ok", "ok"]
    assert not any("fully unpickled" in r["report_json"] for r in rows)
    trusted = CliRunner().invoke(cli, [*args, "--trust-pickle", "-o", str(tmp_path / "trusted.parquet")])
    assert trusted.exit_code == 0, trusted.output
    assert len(marker.read_text().splitlines()) == 2  # both pickled rows, in worker processes
    assert str(os.getpid()) not in marker.read_text()
    rows = pq.read_table(tmp_path / "trusted.parquet").to_pylist()
    assert [r["status"] for r in rows] == ["ok", "ok", "ok"]
    assert ["fully unpickled (trust_pickle)" in r["report_json"] for r in rows] == [True, False, True]
    assert snapshot(tmp_path, skip=("plain.parquet", "trusted.parquet", "unpickled.log")) == before


# ---------------------------------------------------------------- 2. paths and file content


def test_paths_resolve_against_the_manifest_not_the_cwd(
    runner: CliRunner, workspace: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = workspace["dir"]
    (d / "manifests").mkdir()
    elsewhere = d / "elsewhere"
    elsewhere.mkdir()
    # Decoys where the cwd would find them: a broken model and the other log.
    (elsewhere / "m0.npy").write_bytes(b"decoy")
    np.save(elsewhere / "m1.npy", np.zeros((3, 2), dtype=np.float32))
    manifest = write_manifest(
        d / "manifests" / "m.csv",
        {"model": ["../m0.npy", "../m1.npy", str(d / "m2.npy")], "interactions": ["../log_a.parquet", "../log_b.parquet", None]},
    )
    monkeypatch.chdir(elsewhere)
    before = snapshot(d)
    result = runner.invoke(cli, ["batch", str(manifest), "-o", "r.parquet", "--interactions", "../log_a.parquet"])
    assert result.exit_code == 0, result.output
    rows = pq.read_table(elsewhere / "r.parquet").to_pylist()
    assert [r["status"] for r in rows] == ["ok", "ok", "ok"]
    # Cells against the manifest's folder, the --interactions default against the cwd.
    assert [Path(r["interactions"]).resolve() for r in rows] == [(d / name).resolve() for name in ("log_a.parquet", "log_b.parquet", "log_a.parquet")]
    assert [r["n_items"] for r in rows] == [200, 200, 200]
    assert snapshot(d, skip=("r.parquet", "calls.log")) == before


SECRET = "TOPSECRET"


@pytest.fixture(scope="module")
def leak_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real batch whose rows name files that are no model or log, in every path column."""
    root = tmp_path_factory.mktemp("leak")
    secret = root / "secret"
    secret.mkdir()
    (secret / "passwd").write_text("".join(f"user{i}:x:{i}:{i}:{SECRET}_{i}:/home/u{i}:/bin/sh\n" for i in range(5)))
    pq.write_table(pa.table({f"{SECRET}_COLUMN": [f"{SECRET}_VALUE"]}), secret / "table.parquet")
    n_items = 60
    (secret / "ids.txt").write_text("".join(f"{SECRET}_{i % 30}\n" for i in range(n_items)))  # n_items ids, repeated
    (secret / "pairs.txt").write_text("".join(f"{SECRET}_A{i},{SECRET}_B{i}\n" for i in range(5)))  # two columns
    (secret / "log.csv").write_text(f"user_id,item_id\n{SECRET}_USER,{SECRET}_ITEM\n")  # a log's header, secret values
    proj = root / "proj"
    (proj / "manifests").mkdir(parents=True)
    make_table(proj / "m.npy", make_log(proj / "log.parquet", n_items, seed=1), 1.0, seed=2)
    etc = Path("/etc/passwd")
    cells: dict[str, str] = {
        "abs": str(secret / "passwd"),
        "rel": "../../secret/passwd",  # from proj/manifests
        "parquet": str(secret / "table.parquet"),
        "ids": str(secret / "ids.txt"),
        "pairs": str(secret / "pairs.txt"),
        "csv": str(secret / "log.csv"),
    }
    if etc.is_file() and etc.read_text(errors="replace").strip():
        cells["etc"] = str(etc)
    cases = [(column, kind) for column in ("model", "interactions", "item_ids", "queries") for kind in cells]
    rows: dict[str, list[Any]] = {"model": [], "interactions": [], "item_ids": [], "queries": []}
    for column, kind in cases:
        row = {"model": "../m.npy", "interactions": None, "item_ids": None, "queries": None, column: cells[kind]}
        for name in rows:
            rows[name].append(row[name])
    manifest = write_manifest(proj / "manifests" / "m.csv", rows)
    before = snapshot(root)
    out = root / "out" / "r.parquet"
    result = CliRunner().invoke(
        cli,
        ["batch", str(manifest), "-o", str(out), "--interactions", str(proj / "log.parquet"),
         "-k", "10", "--bootstrap", "0", "--max-queries", "20", "--no-probes", "-j", "2"],
    )
    markers = [SECRET]
    if "etc" in cells:  # a line of the real /etc/passwd: name:x:uid:...
        first = etc.read_text(errors="replace").strip().splitlines()[0]
        markers += [first, first.split(":")[0] + ":x:"] if ":" in first else [first]
    return {
        "result": result,
        "rows": pq.read_table(out).to_pylist() if out.exists() else [],
        "cases": cases,
        "markers": markers,
        "changed": snapshot(root, skip=("r.parquet",)) != before,
    }


def _leaks(text: str, markers: list[str]) -> list[str]:
    return [m for m in markers if m in text]


def _leak_cases() -> list[Any]:
    return [
        pytest.param(column, kind, id=f"{column}-{kind}")
        for column in ("model", "interactions", "item_ids", "queries")
        for kind in ("abs", "rel", "parquet", "ids", "pairs", "csv", "etc")
    ]


@pytest.mark.slow
@pytest.mark.parametrize(("column", "kind"), _leak_cases())
def test_no_content_of_a_named_file_reaches_the_results_or_the_console(leak_run: dict[str, Any], column: str, kind: str) -> None:
    if (column, kind) not in leak_run["cases"]:
        pytest.skip("no readable /etc/passwd here")
    result = leak_run["result"]
    assert result.exit_code == 0, result.output
    index = leak_run["cases"].index((column, kind))
    row = leak_run["rows"][index]
    assert row["status"] == "error" and row["error"], row
    console = [line for line in result.stderr.splitlines() if line.startswith(f"row {index} (")]
    assert console, result.stderr  # the failure is reported ...
    assert not _leaks(row["error"], leak_run["markers"]), row["error"]  # ... without the file's content
    assert not _leaks("\n".join(console), leak_run["markers"]), console


@pytest.mark.slow
def test_the_batch_layer_adds_no_content_and_changes_no_input(leak_run: dict[str, Any]) -> None:
    result = leak_run["result"]
    assert result.exit_code == 0 and not leak_run["changed"]
    assert not _leaks(result.stdout, leak_run["markers"])  # the summary names ok rows only
    for (column, kind), row in zip(leak_run["cases"], leak_run["rows"]):
        # Every message is the loader's own, once: the batch adds only "Type: " before it.
        assert row["error"].split(": ", 1)[0].isidentifier(), row["error"]
        assert not _leaks(row["error"], leak_run["markers"]), (column, kind, row["error"])


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("env.csv", f"API_KEY={SECRET}_KEY\nDB_PASSWORD={SECRET}_PW\n"),  # a .env file as the manifest
        ("ragged.csv", f"model,k\na.npy,10\nb.npy,10,{SECRET}_EXTRA\n"),  # Arrow quotes the bad line
        ("key.csv", f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SECRET}AAAAB3NzaC1yc2E\n"),
    ],
)
def test_a_manifest_that_is_no_manifest_is_not_echoed(runner: CliRunner, tmp_path: Path, name: str, content: str) -> None:
    """The manifest may be a link (committed to a repository) to a file that is no
    manifest: the batch layer's own messages never quote its lines."""
    (tmp_path / "secret").mkdir()
    target = tmp_path / "secret" / "data"
    target.write_text(content)
    manifest = tmp_path / name
    os.symlink(target, manifest)
    before = snapshot(tmp_path)
    result = runner.invoke(cli, ["batch", str(manifest), "-o", str(tmp_path / "r.parquet")])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("Error: ") and "manifest" in result.stderr
    assert SECRET not in result.output, result.output
    assert snapshot(tmp_path) == before and not (tmp_path / "r.parquet").exists()


# ---------------------------------------------------------------- 3. outputs never overwrite inputs


def _clash_workspace(d: Path) -> Path:
    (d / "runs").mkdir()
    np.save(d / "queries.npy", np.ones((4, 8), dtype=np.float32))
    (d / "ids.txt").write_text("".join(f"{i}\n" for i in range(200)))
    os.symlink(d / "log_b.parquet", d / "link_to_log_b.parquet")
    return write_manifest(
        d / "runs" / "m.csv",
        {
            "model": ["../m0.npy", "../m1.npy", "../m2.npy"],
            "interactions": [None, "../log_b.parquet", None],
            "queries": [None, None, "../queries.npy"],
            "k": [None, None, "0"],  # row 2 is bad: its files are still inputs
        },
    )


CLASHES = [
    (["-o", "{d}/m1.npy"], ["-o", "the model of manifest row 1"]),
    (["-o", "{d}/runs/../m0.npy"], ["-o", "the model of manifest row 0"]),
    (["-o", "{d}/link_to_log_b.parquet"], ["-o", "the interactions of manifest row 1"]),
    (["-o", "{d}/queries.npy"], ["-o", "the queries of manifest row 2"]),
    (["-o", "{d}/ids.txt", "--item-ids", "{d}/ids.txt"], ["-o", "--item-ids"]),
    (["-o", "{d}/r.parquet", "--html", "{d}/runs/m.csv"], ["--html", "manifest"]),
    (["-o", "{d}/r.parquet", "--html", "{d}/log_a.parquet"], ["--html", "--interactions"]),
    (["-o", "{d}/r.parquet", "--html", "{d}/link_to_log_b.parquet"], ["--html", "row 1"]),
]


@pytest.mark.parametrize(("args", "named"), CLASHES, ids=[" ".join(a).replace("{d}/", "") for a, _ in CLASHES])
def test_no_output_may_overwrite_an_input(
    runner: CliRunner, workspace: dict[str, Any], args: list[str], named: list[str]
) -> None:
    d = workspace["dir"]
    manifest = _clash_workspace(d)
    before = snapshot(d)
    argv = ["batch", str(manifest), "--interactions", str(d / "log_a.parquet"), *(a.format(d=d) for a in args)]
    result = runner.invoke(cli, argv)
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("Error: ") and "never overwrites an input" in result.stderr
    for text in named:
        assert text in result.stderr, result.stderr
    assert "Traceback" not in result.output
    assert snapshot(d) == before  # no input changed ...
    assert not (d / "r.parquet").exists() and not (d / "calls.log").exists()  # ... and nothing ran


def test_outputs_that_name_no_input_run(runner: CliRunner, workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    manifest = _clash_workspace(d)
    before = snapshot(d)
    result = runner.invoke(
        cli, ["batch", str(manifest), "-o", str(d / "r.parquet"), "--html", str(d / "s.html"), "--interactions", str(d / "log_a.parquet")]
    )
    assert result.exit_code == 0, result.output
    assert (d / "s.html").exists() and pq.read_table(d / "r.parquet").column("status").to_pylist() == ["ok", "ok", "error"]
    assert snapshot(d, skip=("r.parquet", "s.html", "calls.log")) == before


def test_the_same_file_for_two_outputs_is_refused(runner: CliRunner, workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    manifest = _clash_workspace(d)
    before = snapshot(d)
    result = runner.invoke(cli, ["batch", str(manifest), "-o", str(d / "r.parquet"), "--html", str(d / "r.parquet")])
    assert result.exit_code == 1 and result.stderr.startswith("Error: ") and "--html" in result.stderr
    assert snapshot(d) == before and not (d / "r.parquet").exists()


def test_library_checks_other_outputs_before_running(workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    manifest = write_manifest(d / "m.csv", {"model": ["m0.npy", "m1.npy"]})
    before = snapshot(d)
    with pytest.raises(InputError, match="the model of manifest row 1"):
        run_batch(manifest, d / "r.parquet", audit_fn=fake_audit, other_outputs={"--html": d / "m1.npy"})
    assert snapshot(d) == before and not (d / "r.parquet").exists()


# ---------------------------------------------------------------- 7. bad values


def test_bad_cells_fail_only_their_row_naming_the_column(runner: CliRunner, workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    cells = [
        ("seed", "-1"), ("seed", "abc"), ("seed", str(2**64)), ("k", "0"), ("lr", "-1"), ("index", "bogus"),
        ("interactions_format", "xml"), ("max_memory", "lots"), ("bootstrap", "-5"), ("retrieval", "maybe"),
        ("max_queries", "0"), ("momentum", "inf"),
    ]
    columns: dict[str, list[Any]] = {"model": ["m0.npy"] * (len(cells) + 2)}
    for name, _ in cells:
        columns.setdefault(name, [None] * (len(cells) + 2))
    for i, (name, value) in enumerate(cells, 1):  # row 0 and the last row are good
        columns[name][i] = value
    columns["seed"][-1] = "7"
    manifest = write_manifest(d / "m.csv", columns)
    before = snapshot(d)
    result = runner.invoke(cli, ["batch", str(manifest), "-o", str(d / "r.parquet"), "--interactions", str(d / "log_a.parquet")])
    assert result.exit_code == 0, result.output
    rows = pq.read_table(d / "r.parquet").to_pylist()
    assert [r["status"] for r in rows] == ["ok"] + ["error"] * len(cells) + ["ok"]
    for (name, value), row in zip(cells, rows[1:]):  # the column as the manifest spells it ('k', not 'ks')
        assert f"column {name!r}" in row["error"], (name, row["error"])
        assert f"row {row['row']} (m0.npy) failed: " in result.stderr
    assert "-1" in rows[1]["error"] and "from 0 to" in rows[1]["error"]
    assert json.loads(rows[-1]["report_json"])["settings"]["seed"] == 7
    assert calls_of(d) == ["m0", "m0"]  # the bad rows never reached the audit
    assert snapshot(d, skip=("r.parquet", "calls.log")) == before


def calls_of(d: Path) -> list[str]:
    log = d / "calls.log"
    return [line.split()[2] for line in log.read_text().splitlines() if line.startswith("audit")] if log.exists() else []


def test_a_negative_seed_on_the_command_line_never_runs(runner: CliRunner, workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    manifest = write_manifest(d / "m.csv", {"model": ["m0.npy", "m1.npy"]})
    before = snapshot(d)
    result = runner.invoke(cli, ["batch", str(manifest), "-o", str(d / "r.parquet"), "--seed", "-1"])
    assert result.exit_code in (1, 2), result.output  # 2: a usage error (click), 1: the library's own check
    assert "Error" in result.stderr and "seed" in result.stderr and "-1" in result.stderr
    assert not (d / "r.parquet").exists() and calls_of(d) == []
    assert snapshot(d) == before


def test_a_negative_seed_is_a_usage_error(runner: CliRunner, workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    manifest = write_manifest(d / "m.csv", {"model": ["m0.npy"]})
    result = runner.invoke(cli, ["batch", str(manifest), "-o", str(d / "r.parquet"), "--seed", "-1"])
    assert result.exit_code == 2 and "--seed" in result.stderr
    assert not (d / "r.parquet").exists() and calls_of(d) == []


def test_every_row_failing_still_exits_0_as_documented(runner: CliRunner, workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    manifest = write_manifest(d / "m.csv", {"model": ["broken.npy", "missing.npy"]})
    result = runner.invoke(cli, ["batch", str(manifest), "-o", str(d / "r.parquet"), "--interactions", str(d / "log_a.parquet")])
    assert result.exit_code == 0 and "2 rows: 0 ok, 2 failed" in result.stdout
    assert "row 0 (broken.npy) failed" in result.stderr and "row 1 (missing.npy) failed" in result.stderr
    help_text = " ".join(runner.invoke(cli, ["batch", "--help"]).output.split())
    assert "never stops the others; the command still exits 0" in help_text

"""Bad input on the command line: a clear ``Error:`` naming the file, the documented exit
code, no traceback, no input file modified and no temp file left behind."""

import collections
import gzip
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli


class NotATensor:
    """A foreign class: unpickling it for real would call ``__setstate__`` and write a marker."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __setstate__(self, state: dict) -> None:
        Path(state["marker"]).write_text("ran")


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def assert_error(result, code, *words):
    """Exit ``code``, an ``Error:`` line holding every word, and no traceback."""
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    if result.exception is not None:
        assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Error:" in result.output
    for word in words:
        assert word in result.output, (word, result.output)


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def ok(tmp_path):
    """A valid 10 x 4 item table and its interaction log (item i seen i + 1 times)."""
    rng = np.random.default_rng(0)
    np.save(tmp_path / "items.npy", rng.normal(size=(10, 4)).astype(np.float32))
    items = np.repeat(np.arange(10), np.arange(1, 11))
    users = rng.integers(0, 5, items.size)
    pq.write_table(pa.table({"user_id": users, "item_id": items}), tmp_path / "log.parquet")
    return tmp_path


# ------------------------------------------------------------------ model files


@pytest.mark.parametrize("content", [b"\x93NUMP", bytes(range(7, 256)) * 8], ids=["truncated", "random"])
def test_corrupt_pt_is_not_called_a_pickle(tmp_path, content):
    path = tmp_path / "model.pt"
    path.write_bytes(content)
    result = run("check", path)
    assert_error(result, 1, str(path), "neither a torch.save zip archive nor a complete pickle")
    assert "--trust-pickle" not in result.output  # it would not help: the file is no pickle


def test_foreign_objects_beside_tensors_are_read_without_running_them(tmp_path):
    path, marker = tmp_path / "model.pt", tmp_path / "ran"
    torch.save({"item.weight": torch.arange(6.0).view(3, 2), "extra": NotATensor(marker)}, path)
    result = run("check", path, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["inputs"]["n_items"] == 3
    assert not marker.exists()  # the object's class was never imported or called


def test_a_pickle_of_only_foreign_objects_asks_for_trust_pickle(tmp_path):
    path, marker = tmp_path / "model.pt", tmp_path / "ran"
    torch.save(NotATensor(marker), path)
    assert_error(run("check", path), 1, str(path), "NotATensor", "--trust-pickle")
    assert not marker.exists()


@pytest.mark.parametrize("name", ["model.pt", "items.npy", "items.parquet", "model.safetensors", "model"])
def test_empty_model_file_says_empty(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"")
    result = run("check", path)
    assert_error(result, 1, str(path), "the file is empty (0 bytes)")
    assert "plugin" not in result.output


def test_integer_table_listing_says_not_floating_point(tmp_path):
    path = tmp_path / "model.pt"
    torch.save({"item.weight": torch.zeros(10, 4, dtype=torch.int64)}, path)
    assert_error(run("check", path), 1, str(path), "item.weight [10, 4] (not floating-point)")


def test_parquet_table_null_id_names_the_row(tmp_path):
    path = tmp_path / "items.parquet"
    pq.write_table(pa.table({"id": [0, None, 1], "v": [[1.0, 2.0], [1.0, 2.0], [1.0, 3.0]]}), path)
    assert_error(run("check", path), 1, str(path), "column 'id'", "1 empty id (row 1)")


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: np.save(p / "t.npy", np.arange(10.0)), ["must be 2-D", "shape [10]"]),
        (lambda p: np.save(p / "t.npy", np.zeros((5, 4), np.complex64)), ["complex64"]),
        (lambda p: np.save(p / "t.npy", np.where(np.eye(5, 4) > 0, np.nan, 1.0)), ["NaN or infinite", "rows 0, 1, 2, 3"]),
        (
            lambda p: pq.write_table(pa.table({"id": [0, 1], "v": [[1.0, 2.0], [1.0]]}), p / "t.parquet"),
            ["column 'v'", "different lengths", "row 1 has 1"],
        ),
        (
            lambda p: pq.write_table(pa.table({"id": [0, 1], "v": [[1.0], [2.0]], "w": [[1.0], [2.0]]}), p / "t.parquet"),
            ["v, w", "--item-key"],
        ),
        (lambda p: (p / "t.safetensors").write_text("not safetensors\n"), ["as safetensors"]),
    ],
    ids=["1-D npy", "complex npy", "NaN rows", "ragged parquet", "two vector columns", "text safetensors"],
)
def test_bad_tables_name_file_and_fault(tmp_path, make, words):
    make(tmp_path)
    (path,) = tmp_path.glob("t.*")
    assert_error(run("check", path), 1, str(path), *words)


# ------------------------------------------------------------------ logs, ids, queries


def test_non_utf8_item_ids_in_log(ok):
    log = ok / "latin1.csv"
    log.write_bytes("user_id,item_id\n1,caf\xe9\n2,th\xe9\n".encode("latin-1"))
    before = digest(log)
    result = run("check", ok / "items.npy", "--interactions", log)
    assert_error(result, 1, str(log), "'item_id'", "not valid UTF-8")
    assert "caf" not in result.output  # values of a file are never quoted
    assert digest(log) == before


def test_non_utf8_item_ids_file(ok):
    ids = ok / "ids.txt"
    ids.write_bytes(b"\n".join(b"caf\xe9%d" % i for i in range(10)) + b"\n")
    assert_error(run("check", ok / "items.npy", "--item-ids", ids), 1, str(ids), "not valid UTF-8")


def test_gzip_log_and_malformed_ratings_dat(ok):
    gz = ok / "log.csv.gz"
    with gzip.open(gz, "wt") as fh:
        fh.write("user_id,item_id\n1,2\n2,3\n")
    assert run("check", ok / "items.npy", "--interactions", gz, "--no-probes", "--bootstrap", "0").exit_code == 0
    dat = ok / "ratings.dat"
    dat.write_text("1::2::5::978300760\ngarbage line\n")
    assert_error(run("check", ok / "items.npy", "--interactions", dat), 1, str(dat), "line 2")


def test_empty_query_file(ok):
    queries = ok / "q.npy"
    queries.write_bytes(b"")
    result = run("check", ok / "items.npy", "--interactions", ok / "log.parquet", "--queries", queries, "--no-probes")
    assert_error(result, 1, str(queries), "the file is empty")
    assert "Aborted" not in result.output


def test_query_file_of_wrong_dimension(ok):
    queries = ok / "q.npy"
    np.save(queries, np.zeros((3, 7), np.float32))
    result = run("check", ok / "items.npy", "--interactions", ok / "log.parquet", "--queries", queries, "--no-probes")
    assert_error(result, 1, str(queries), "dimension 7", "dimension 4")


# ------------------------------------------------------------------ outputs


@pytest.mark.parametrize("flag", ["-o", "--json"])
@pytest.mark.parametrize("target", ["items.npy", "log.parquet"])
def test_report_never_overwrites_an_input(ok, flag, target):
    before = {p.name: digest(p) for p in ok.iterdir()}
    result = run("check", ok / "items.npy", "--interactions", ok / "log.parquet", flag, ok / target, "--no-probes")
    assert_error(result, 1, f"{flag} {ok / target}", "never overwrites an input")
    assert {p.name: digest(p) for p in ok.iterdir()} == before


def test_output_under_a_file_names_the_blocking_file(ok):
    blocker = ok / "afile"
    blocker.write_text("x")
    for flag, name in (("-o", "x/report.txt"), ("--html", "r.html"), ("--markdown", "r.md")):
        result = run("check", ok / "items.npy", "--interactions", ok / "log.parquet", flag, blocker / name,
                     "--no-probes", "--bootstrap", "0")
        assert_error(result, 1, f"{blocker} is a file, not a folder")
    assert blocker.read_text() == "x"
    assert not [p for p in ok.rglob("*") if p.name.endswith(".tmp")]


def test_unwritable_output_folder_names_the_target_not_the_temp_file(ok, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("auditor.io.tempfile.mkstemp", refuse)
    out = ok / "report.json"
    result = run("check", ok / "items.npy", "--interactions", ok / "log.parquet", "--json", out,
                 "--no-probes", "--bootstrap", "0")
    assert_error(result, 1, f"cannot write {out}: Permission denied")
    assert ".tmp" not in result.output


# ------------------------------------------------------------------ retrain


def test_retrain_never_overwrites_its_data(tmp_path):
    data = tmp_path / "log.csv"
    data.write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u in range(4) for i in range(5)))
    before = digest(data)
    assert_error(run("retrain", "--data", data, "-o", data, "--epochs", "1"), 1, "--data", "never overwrites an input")
    assert digest(data) == before


def test_retrain_divergence_is_an_error_and_writes_nothing(tmp_path):
    out = tmp_path / "m.pt"
    result = run("retrain", "--n-users", 20, "--n-items", 10, "--n-interactions", 200, "--epochs", 2,
                 "--lr", "1e30", "-o", out)
    assert_error(result, 1, "diverged", "lower --lr")
    assert "RuntimeWarning" not in result.output
    assert not out.exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize(("flag", "value", "why"), [
    ("--lr", "nan", "not a finite number"), ("--momentum", "nan", "not a finite number"),
    ("--temperature", "nan", "not a finite number"), ("--momentum", "-1", "'-1' must be > 0"),
    ("--momentum", "1", "'1' must be < 1"), ("--lr", "0", "'0' must be > 0"),
    ("--weight-decay", "inf", "not a finite number"),
])
def test_retrain_rejects_impossible_settings_as_usage_errors(tmp_path, flag, value, why):
    out = tmp_path / "m.pt"
    result = run("retrain", "--optimizer", "momentum", flag, value, "-o", out)
    assert_error(result, 2, f"Invalid value for '{flag}'", why)
    assert not out.exists()


def test_retrain_one_interaction_log(tmp_path):
    data = tmp_path / "one.csv"
    data.write_text("user_id,item_id\n1,2\n")
    assert_error(run("retrain", "--data", data, "-o", tmp_path / "m.pt"), 1, str(data), "at least 2 distinct items")


# ------------------------------------------------------------------ usage errors, batch, plugins


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["-k", "0"], ["-k", "0 is not in the range"]),
        (["--max-queries", "0"], ["--max-queries"]),
        (["--fail-on", "spearmn>0.5"], ["unknown metric 'spearmn'"]),
        (["--format", "pdf"], ["'pdf' is not a report format"]),
    ],
)
def test_usage_errors_exit_2(ok, args, words):
    assert_error(run("check", ok / "items.npy", *args), 2, *words)


def test_directory_as_model_is_usage_error(tmp_path):
    assert_error(run("check", tmp_path), 2, "is a directory")


def test_batch_manifest_without_model_column(tmp_path):
    manifest = tmp_path / "m.csv"
    manifest.write_text("foo\nbar\n")
    assert_error(run("batch", manifest, "-o", tmp_path / "r.parquet"), 1, str(manifest), "no 'model' column", "foo")


def test_plugin_with_syntax_error(tmp_path):
    plugin = tmp_path / "broken.py"
    plugin.write_text("def broken(:\n")
    assert_error(run("plugins", "--plugin", plugin), 1, str(plugin), "SyntaxError", "line 1")


def test_no_input_modified_by_a_run_of_failures(ok):
    """Every failing command above leaves its inputs byte-for-byte and mtime unchanged."""
    before = {p: (digest(p), os.stat(p).st_mtime_ns) for p in ok.iterdir()}
    run("check", ok / "items.npy", "--interactions", ok / "items.npy")
    run("check", ok / "log.parquet")
    run("retrain", "--data", ok / "items.npy", "-o", ok / "m.pt")
    assert {p: (digest(p), os.stat(p).st_mtime_ns) for p in ok.iterdir()} == before
    assert collections.Counter(p.suffix for p in ok.iterdir()) == {".npy": 1, ".parquet": 1}


@pytest.mark.parametrize(
    ("args", "word"),
    [(["lr-sweep", "--settings", "adam"], "--settings applies to 'conditions' only"),
     (["conditions", "--lrs", "0.1,1"], "--lrs applies to 'lr-sweep' only")],
)
def test_experiment_option_of_the_other_experiment_is_usage_error(tmp_path, args, word):
    result = run("experiment", *args, "-o", tmp_path / "out")
    assert_error(result, 2, word)
    assert not (tmp_path / "out").exists()


def test_experiment_unknown_setting(tmp_path):
    result = run("experiment", "conditions", "--settings", "frobnicate", "-o", tmp_path / "out")
    assert_error(result, 2, "unknown 'frobnicate'", "reference")  # a usage error (QA retrain F6)
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def popaudit_checkpoint(tmp_path_factory):
    """A small checkpoint written by ``popaudit retrain``, loaded back as a dict."""
    path = tmp_path_factory.mktemp("ckpt") / "model.pt"
    result = run("retrain", "--n-users", 20, "--n-items", 10, "--n-interactions", 100, "--epochs", 1, "-o", path)
    assert result.exit_code == 0, result.output
    return torch.load(path, weights_only=True)


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [("item_embeddings", "hello", ["'item_embeddings' is a str, not a tensor"]),
     ("config", "notadict", ["'config' is a str, not a mapping"])],
)
def test_hand_edited_popaudit_checkpoint(tmp_path, popaudit_checkpoint, key, value, words):
    path = tmp_path / "edited.pt"
    torch.save({**popaudit_checkpoint, key: value}, path)
    result = run("check", path, "--bootstrap", "0")
    assert_error(result, 1, str(path), *words)
    assert "plugin" not in result.output


@pytest.mark.parametrize(
    ("content", "words"),
    [(b"model,model\na.npy,b.npy\n", ["column(s) 'model' appear more than once"]),
     (b"model,label\n/tmp/caf\xe9.npy,x\n", ["column 'model' is not valid UTF-8"])],
    ids=["duplicate column", "latin-1 cell"],
)
def test_batch_manifest_unusable_columns(tmp_path, content, words):
    manifest = tmp_path / "m.csv"
    manifest.write_bytes(content)
    out = tmp_path / "r.parquet"
    assert_error(run("batch", manifest, "-o", out), 1, str(manifest), *words)
    assert not out.exists()

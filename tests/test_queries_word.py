"""A mistyped ``--queries`` word is a usage error (Logs F4 of QA round 10).

Before, ``--queries user`` (or ``histroy``) said "query file not found: user" with exit 1,
so a CI typo read as a missing artefact.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.errors import QueryError
from auditor.loading.queries import load_query_file


def _model(d: Path) -> None:
    rng = np.random.default_rng(0)
    np.save(d / "items.npy", rng.normal(size=(10, 4)).astype(np.float32))


@pytest.mark.parametrize("word", ["user", "User", "histroy"])
def test_a_mistyped_word_is_a_usage_error_listing_the_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            word: str) -> None:
    monkeypatch.chdir(tmp_path)
    _model(tmp_path)
    out = CliRunner().invoke(cli, ["check", "items.npy", "--queries", word, "--no-probes", "--bootstrap", "0", "-q"])
    assert out.exit_code == 2, out.output  # was 1: "query file not found: user"
    assert "must be one of the words auto, users, history, or a path to a .npy or .parquet file" in out.output
    assert "not found" not in out.output


def test_a_missing_query_file_is_still_a_missing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _model(tmp_path)
    out = CliRunner().invoke(cli, ["check", "items.npy", "--queries", "q.npy", "--no-probes", "--bootstrap", "0", "-q"])
    assert out.exit_code == 1 and "not found" in out.output


def test_the_library_names_the_words_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(QueryError, match=r"queries must be one of the words auto, users, history.*got 'user'"):
        load_query_file(Path("user"))


@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_value_is_the_same_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    # Logs N2 (QA round 10 verification): '' exited 1 with the Python API's "(a str or pathlib.Path)" wording.
    monkeypatch.chdir(tmp_path)
    _model(tmp_path)
    out = CliRunner().invoke(cli, ["check", "items.npy", "--queries", value, "--no-probes", "--bootstrap", "0", "-q"])
    assert out.exit_code == 2, out.output
    assert "Invalid value for '--queries': must be one of the words auto, users, history, or a path" in out.output
    assert "pathlib" not in out.output


def test_a_file_of_another_kind_lists_every_word(tmp_path: Path) -> None:
    (tmp_path / "q.txt").write_text("hello\n")  # a file: its reader refuses it (the CLI's hostile case: exit 1)
    with pytest.raises(QueryError) as err:
        load_query_file(tmp_path / "q.txt")
    assert (" must be one of the words auto, users, history, or a path to a .npy or .parquet file of query vectors; "
            f"got '{tmp_path / 'q.txt'}', a .txt file") in str(err.value)  # was "must be users, history, or ...": no auto

"""CSV manifest cells as written (QA F2, F4, F5) and default files resolved against the
caller's folder (F9), through ``popaudit batch`` with real audits.

Arrow inferred a CSV column's type: a ``seed`` column holding one integer above 2^63 was
float64, so every cell of it above 2^53 ran another seed; a label ``1.10`` came back as
``1.1`` and ``007`` as ``7.0``; the text ``nan``, ``NA`` or ``null`` was an empty cell
(the batch default used without a word, a model file called ``null`` unlistable). A
relative ``--holdout`` stayed relative, so a worker in another folder (a Dask worker)
read another file, and the provenance named it by a relative path.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from auditor.batch.cells import convert_setting
from auditor.cli import cli

from hostile.corpus import log, table

MANIFEST = (
    "model,seed,lr,label\n"
    "items.npy,18446744073709551615,,max\n"
    "items.npy,9007199254740993,,2^53+1\n"
    "items.npy,,nan,lrnan\n"
    "null,,,007\n"
    "items.npy,,,1.10\n"
    "items.npy,,,NA\n"
    "items.npy,,,2024-01-05T10:00\n"
)


@pytest.fixture()
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    caller, manifests = tmp_path / "caller", tmp_path / "manifests"
    caller.mkdir()
    manifests.mkdir()
    table(manifests)
    shutil.copy(manifests / "items.npy", manifests / "null")  # a model file may be called null
    log(caller)
    log(caller, "ho.parquet")
    (manifests / "m.csv").write_text(MANIFEST)
    monkeypatch.chdir(caller)
    done = CliRunner().invoke(cli, ["batch", "../manifests/m.csv", "-o", "r.parquet", "--interactions", "log.parquet",
                                    "--holdout", "ho.parquet", "--lr", "0.5", "--bootstrap", "0", "--no-probes", "-q"])
    assert done.exit_code == 0, done.output
    return pq.read_table(caller / "r.parquet").to_pylist()


def _settings(row: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(row["provenance"])["settings"])


def test_integer_cells_are_exact_and_labels_are_the_text_written(results: list[dict[str, Any]]) -> None:
    assert [r["label"] for r in results] == ["max", "2^53+1", "lrnan", "007", "1.10", "NA", "2024-01-05T10:00"]
    assert _settings(results[0])["seed"] == 18446744073709551615  # was refused as ...616
    assert _settings(results[1])["seed"] == 9007199254740993  # was run with ...992
    assert results[3]["model"] == "null" and results[3]["status"] == "ok", results[3]["error"]


def test_a_nan_cell_fails_its_row_instead_of_keeping_the_default(results: list[dict[str, Any]]) -> None:
    row = results[2]
    assert row["status"] == "error"
    assert "column 'lr'" in row["error"] and "got nan" in row["error"]


def test_a_relative_holdout_default_is_the_callers_file(results: list[dict[str, Any]], tmp_path: Path) -> None:
    expected = str((tmp_path / "caller" / "ho.parquet").resolve())
    assert {_settings(r)["holdout"] for r in results if r["provenance"]} == {expected}


@pytest.mark.parametrize(("kind", "cell", "value"), [
    ("int", "18446744073709551615", 18446744073709551615),
    ("int", "1e3", 1000),
    ("int", " 10.0 ", 10),
    ("ints", "[5; 7]", (5, 7)),
    ("str", "007", "007"),
    ("str", 0.0, "0"),  # a Parquet float column's item key
])
def test_cells_convert_by_their_settings_kind(kind: str, cell: Any, value: Any, tmp_path: Path) -> None:
    assert convert_setting(kind, cell, tmp_path) == value


@pytest.mark.parametrize("cell", ["nan", "inf", "1.5", "seven"])
def test_an_integer_cell_that_names_no_integer_is_refused(cell: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=rf"expected an integer, got '{cell}'"):
        convert_setting("int", cell, tmp_path)

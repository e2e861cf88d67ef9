"""The batch results are Parquet: an output named like text (``results.csv``) is refused
before anything runs, by the CLI (exit 2) and by the library (InputError), and a file
already there is left as it was (QA8 scale F2: exit 0 and Parquet bytes under .csv)."""

from __future__ import annotations

from pathlib import Path

import pytest

from auditor.output_guard import parquet_name_problem


@pytest.mark.parametrize(("name", "suggested"), [
    ("results.csv", "results.parquet"), ("out/r.TSV", "out/r.parquet"), ("r.csv.gz", "r.parquet"),
    ("r.json", "r.parquet"), ("a.b/r.txt", "a.b/r.parquet"), ("r.jsonl.zst", "r.parquet"),
])  # fmt: skip
def test_text_names_are_refused_with_a_parquet_name(name: str, suggested: str) -> None:
    said = parquet_name_problem(Path(name), "-o", "the batch results")
    assert said is not None and said.startswith(f"-o {name}: the batch results are a Parquet file")
    assert f"name it {suggested} " in said


@pytest.mark.parametrize(("name", "suggested", "promised"), [
    ("r.parquet.csv", "r.parquet", "CSV text"), ("R.Parquet.TSV.gz", "R.Parquet", "TSV text"),
    ("r.pq.jsonl", "r.pq", "JSON Lines text"), ("r.txt", "r.parquet", "plain text"), ("r.json", "r.parquet", "JSON text"),
    ("parquet.csv", "parquet.parquet", "CSV text"),  # "parquet" is the stem here, not a suffix
])  # fmt: skip
def test_the_suggested_name_ends_in_parquet_once_and_the_text_is_named(name: str, suggested: str, promised: str) -> None:
    """QA8 scale F2 (second round): r.parquet.csv suggested r.parquet.parquet, and .txt read
    'not TXT text'."""
    said = parquet_name_problem(Path(name), "-o", "the batch results")
    assert said is not None and f"a Parquet file, not {promised}, so a " in said
    assert f"name it {suggested} (" in said


@pytest.mark.parametrize("name", ["results.parquet", "results", "r.pq", "/dev/stdout", "r.gz", "csv"])
def test_other_names_are_the_user_s(name: str) -> None:
    assert parquet_name_problem(Path(name), "-o", "the batch results") is None


def test_run_batch_refuses_a_csv_name_before_reading_anything(tmp_path: Path) -> None:
    from auditor.batch import run_batch
    from auditor.errors import InputError

    out = tmp_path / "results.csv"
    out.write_text("row,model\n0,a.npy\n")
    (tmp_path / "m.csv").write_text("model\na.npy\n")
    calls: list[object] = []
    with pytest.raises(InputError, match=r"output .*results\.csv: the batch results are a Parquet file, not CSV"):
        run_batch(tmp_path / "m.csv", out, inline=True, audit_fn=lambda *a: calls.append(a))
    assert out.read_text() == "row,model\n0,a.npy\n" and not calls


def test_the_manifest_guard_speaks_first(tmp_path: Path) -> None:
    """-o naming the manifest (a .csv): "would overwrite the manifest", the more telling refusal."""
    from auditor.batch import run_batch
    from auditor.errors import InputError

    (tmp_path / "m.csv").write_text("model\na.npy\n")
    with pytest.raises(InputError, match="would overwrite the manifest"):
        run_batch(tmp_path / "m.csv", tmp_path / "m.csv", inline=True)
    assert (tmp_path / "m.csv").read_text() == "model\na.npy\n"

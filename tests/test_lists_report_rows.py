"""A lists-only report leaves out the rows of the measures it could not measure, as a
model's report does (docs/measures.md, "In the report": such a measure "is null in the
JSON, never 0, and its row is left out of the tables"), in the console, Markdown and HTML
alike; with a holdout the same rows are measured and shown."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
from click.testing import CliRunner

from auditor.cli import cli

DATA = Path(__file__).resolve().parent / "data" / "served_lists"
UNMEASURED = ("NDCG, niche users", "NDCG, diverse users", "NDCG, blockbuster users", "PopREO")


def _reports(tmp_path: Path, *extra: str) -> tuple[dict[str, object], dict[str, str]]:
    """The JSON report and the console, Markdown and HTML text of one lists-only audit at K=3."""
    out = {fmt: tmp_path / f"r.{fmt}" for fmt in ("json", "md", "html")}
    run = CliRunner().invoke(cli, [
        "check", "--recommendations", str(DATA / "recs.csv"), "--interactions", str(DATA / "train.csv"), "-k", "3",
        "--json", str(out["json"]), "--markdown", str(out["md"]), "--html", str(out["html"]), *extra,
    ], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    texts = {"console": run.stdout, "markdown": out["md"].read_text(), "html": out["html"].read_text()}
    return json.loads(out["json"].read_text()), texts


def _rows(text: str, label: str) -> int:
    """How many table rows of ``text`` (any format) start with ``label``."""
    return len(re.findall(rf"(?:│ |\| |<td>){re.escape(label)}\b", text))


def test_lists_alone_leave_out_the_rows_they_cannot_measure(tmp_path: Path) -> None:
    report, texts = _reports(tmp_path)
    served = report["retrieval"]["at"]["3"]["served"]  # type: ignore[index]
    assert served["pop_reo"] is None and served["ndcg_niche"] is None  # null, never 0
    for fmt, text in texts.items():
        for label in UNMEASURED:
            assert _rows(text, label) == 0, (fmt, label)
        # The measured rows stay, with the same figure in every format.
        assert _rows(text, "ΔGAP, niche users") == 1, fmt
        assert "-63.0%" in text and "150.9%" in text, fmt


def test_lists_alone_with_a_holdout_show_the_rows_they_measure(tmp_path: Path) -> None:
    holdout = tmp_path / "holdout.csv"
    recs = pacsv.read_csv(DATA / "recs.csv")
    users = sorted(set(recs.column("user_id").to_pylist()))
    first = {u: recs.filter(pa.compute.equal(recs.column("user_id"), u)).column("item_id")[0].as_py() for u in users}
    pacsv.write_csv(pa.table({"user_id": list(first), "item_id": list(first.values())}), holdout)
    report, texts = _reports(tmp_path, "--holdout", str(holdout))
    served = report["retrieval"]["at"]["3"]["served"]  # type: ignore[index]
    assert served["pop_reo"] is not None
    for fmt, text in texts.items():
        assert _rows(text, "PopREO") == 1, fmt

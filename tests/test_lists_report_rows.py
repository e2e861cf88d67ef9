"""A lists-only report leaves out the rows of the measures it could not measure, as a
model's report does (docs/measures.md, "In the report": such a measure "is null in the
JSON, never 0, and its row is left out of the tables"), in the console, Markdown and HTML
alike; with a holdout the same rows are measured and shown."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
from click.testing import CliRunner

from auditor.cli import cli

DATA = Path(__file__).resolve().parent / "data" / "served_lists"
UNMEASURED = ("NDCG, niche users", "NDCG, diverse users", "NDCG, blockbuster users", "PopREO")


def _reports(tmp_path: Path, *extra: str) -> tuple[dict[str, Any], dict[str, str]]:
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
    served = report["retrieval"]["at"]["3"]["served"]
    assert served["pop_reo"] is None and served["ndcg_niche"] is None  # null, never 0
    for fmt, text in texts.items():
        for label in UNMEASURED:
            assert _rows(text, label) == 0, (fmt, label)
        # The measured rows stay, with the same figure in every format.
        assert _rows(text, "ΔGAP, niche users") == 1, fmt
        # served -53.8%; popular 4.9% (its list skips each user's training items, as a model's does); the 8 niche
        # users drawn among the log's 40 users, 4 of them with a list (QA harms F1; -63.0% and 21.1% among the
        # 15 listed users only)
        assert "-53.8%" in text and "4.9%" in text, fmt


def test_lists_alone_with_a_holdout_show_the_rows_they_measure(tmp_path: Path) -> None:
    holdout = tmp_path / "holdout.csv"
    recs = pacsv.read_csv(DATA / "recs.csv")
    users = sorted(set(recs.column("user_id").to_pylist()))
    first = {u: recs.filter(pa.compute.equal(recs.column("user_id"), u)).column("item_id")[0].as_py() for u in users}
    pacsv.write_csv(pa.table({"user_id": list(first), "item_id": list(first.values())}), holdout)
    report, texts = _reports(tmp_path, "--holdout", str(holdout))
    served = report["retrieval"]["at"]["3"]["served"]
    assert served["pop_reo"] is not None
    for fmt, text in texts.items():
        assert _rows(text, "PopREO") == 1, fmt


def test_lists_alone_say_why_who_pays_and_which_items_gain_are_absent(tmp_path: Path) -> None:
    """Both sections set a model's dot lists beside its cosine lists: a lists-only report
    names them with their reason (JSON `not_measured.user_groups` and `.exposure_shift`) in
    every format, where it left them out with no word; the served lists' own per-group
    figures are the rows of the Served lists tables."""
    report, texts = _reports(tmp_path)
    reasons = report["not_measured"]
    assert reasons["user_groups"].startswith("no model: served lists alone have no item vectors to serve by dot")
    assert reasons["user_groups"].endswith("the served lists' ΔGAP and popularity miscalibration per user group are "
                                           "rows of each K's table of the served lists")
    assert "items dot serving raises or lowers over cosine" in reasons["exposure_shift"]
    for fmt, text in texts.items():
        flat = " ".join(text.replace("&#x27;", "'").replace("│", " ").split())
        for key, title in (("user_groups", "Who pays: users by profile popularity"), ("exposure_shift", "Which items gain")):
            assert reasons[key] in flat, (fmt, key)
            if fmt != "console":  # the terminal lists every reason by its key instead of a section per reason
                assert title in text, (fmt, title)


def test_lists_alone_without_profiles_say_the_group_figures_are_not_measured(tmp_path: Path) -> None:
    counts = tmp_path / "counts.csv"
    log = pacsv.read_csv(DATA / "train.csv").column("item_id").to_pylist()
    counts.write_text("item_id,count\n" + "".join(f"{i},{log.count(i)}\n" for i in sorted(set(log))))
    run = CliRunner().invoke(cli, ["check", "--recommendations", str(DATA / "recs.csv"), "--frequencies", str(counts),
                                   "-k", "3", "--json", str(tmp_path / "r.json")], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    reasons = json.loads((tmp_path / "r.json").read_text())["not_measured"]
    assert reasons["user_groups"].endswith("the served lists' figures per user group are not measured either (who_pays)")
    assert "who_pays" in reasons

"""The batch summary carries diff's notes for the row pairs it compares (QA12 scale N1): one
model audited against another training log moved Spearman's rho by -0.33 and the row-by-row
table showed the change bare, while ``popaudit diff`` of the two reports notes "another
training log: popularity, the reference of most figures, may differ". The change is still
stated (diff compares it); the caption now says diff's notes, in diff's words, with the pairs
they concern (QA12 scale N4: each note once, on a change the table states)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from auditor import AuditConfig, run_audit
from summary_pages import summary_pages

from auditor.summaries import STATUS_ERROR, STATUS_OK

N_ITEMS = 200


def _audit(model: Path, log: Path) -> dict[str, Any]:
    result = run_audit(AuditConfig(model=model, interactions=log, ks=(10,), probes=False, bootstrap=0))
    report: dict[str, Any] = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    return report


@pytest.fixture(scope="module")
def three_rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One model audited against log A, log A again, then log B (other counts); a failed row
    between the last two. rho of each computed here with scipy."""
    d = tmp_path_factory.mktemp("batch_notes")
    rng = np.random.default_rng(5)
    counts_a = (60 / np.arange(1, N_ITEMS + 1) ** 0.9).astype(np.int64) + 1
    counts_b = rng.permutation(counts_a)  # the same sizes, other items popular
    directions = rng.standard_normal((N_ITEMS, 8))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    np.save(d / "items.npy", (directions * np.log1p(counts_a)[:, None]).astype(np.float32))
    for name, counts in (("a.parquet", counts_a), ("b.parquet", counts_b)):
        items = np.repeat(np.arange(N_ITEMS), counts)
        pq.write_table(pa.table({"user_id": rng.integers(0, 40, items.size), "item_id": items}), d / name)
    reports = [_audit(d / "items.npy", d / log) for log in ("a.parquet", "a.parquet", "b.parquet")]
    norms = np.log1p(counts_a)  # exact norms: rows of equal counts tie, as popaudit reads float32 rounding
    rho = [float(stats.spearmanr(norms, c).statistic) for c in (counts_a, counts_a, counts_b)]
    rows = [0, 1, 3]
    table = pa.table({
        "row": [0, 1, 2, 3], "status": [STATUS_OK, STATUS_OK, STATUS_ERROR, STATUS_OK],
        "model": [str(d / "items.npy")] * 4, "error": [None, None, "InputError: no such file", None],
        "spearman": [reports[0]["frequency_norm"]["spearman"], reports[1]["frequency_norm"]["spearman"], None,
                     reports[2]["frequency_norm"]["spearman"]],
        "report_json": [json.dumps(reports[0]), json.dumps(reports[1]), None, json.dumps(reports[2])],
    })  # fmt: skip
    return {"table": table, "reports": reports, "rho": rho, "rows": rows}


def test_a_pair_across_training_logs_carries_diffs_note(three_rows: dict[str, Any]) -> None:
    from auditor.batch.summary import summarise
    from auditor.diff import diff_reports

    rho, reports = three_rows["rho"], three_rows["reports"]
    assert [r["frequency_norm"]["spearman"] for r in reports] == pytest.approx(rho, abs=1e-5)
    assert rho[0] > 0.9 and rho[2] < 0.3  # another log, not another model, moved rho
    summary = summarise(three_rows["table"])
    by_diff = diff_reports(reports[1], reports[2])
    assert by_diff.metric("spearman").status == "compared"
    training_log = [n for n in by_diff.notes if n.startswith("inputs.interactions differs (")]
    assert len(training_log) == 1 and "another training log" in training_log[0]
    assert not diff_reports(reports[0], reports[1]).notes
    first, second, third = summary.order
    assert (first.pair_notes, second.pair_notes) == ((), ())
    assert third.pair_notes == by_diff.notes  # diff's own notes, in its words (no model note: one model)
    assert third.delta_spearman == pytest.approx(rho[2] - rho[1], abs=1e-5)  # still stated: diff compares it
    assert third.spearman_apart is None


def test_every_format_says_the_note_once_for_its_pair(three_rows: dict[str, Any]) -> None:
    from auditor.batch.summary import summarise

    summary = summarise(three_rows["table"])
    note = next(n for n in summary.order[2].caption_notes if n.subject == "inputs.interactions differs")
    said = f"{note.subject} in row 1 vs row 3 ({note.values}): {note.effect}."
    assert f"{note.subject} ({note.values}): {note.effect}" in summary.order[2].pair_notes  # diff's words
    pages = summary_pages(summary)
    for where, text in pages.items():
        flat = " ".join(text.split())
        assert flat.count(said) == 1, where  # before: no note at all
        assert "row 0 vs row 1:" not in flat, where  # one log: diff notes nothing


def test_the_models_note_is_left_to_the_rows_model_column(tmp_path: Path) -> None:
    """Two models against one log: diff's "inputs.model differs: another model" is what each
    row's model cell says already; the caption does not repeat it on every pair (the JSON
    keeps it, as diff's notes)."""
    from auditor.batch.summary import summarise
    from auditor.diff import diff_reports
    from diff_samples import biased_table_report

    base = biased_table_report(tmp_path)
    new = json.loads(json.dumps(base))
    new["inputs"]["model"] = "other.npy"
    assert any(n.startswith("inputs.model differs (") for n in diff_reports(base, new).notes)
    table = pa.table({"row": [0, 1], "status": [STATUS_OK] * 2, "model": ["items.npy", "other.npy"],
                      "error": [None, None], "spearman": [base["frequency_norm"]["spearman"]] * 2,
                      "report_json": [json.dumps(base), json.dumps(new)]})
    pair = summarise(table).order[1]
    assert pair.caption_notes == () and pair.pair_notes == diff_reports(base, new).notes

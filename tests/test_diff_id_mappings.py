"""`popaudit diff` of one model and log read through other raw id → row mappings (QA11
diffapi F1): another item mapping gives every item row another popularity, another user
mapping every query another user's seen items, so those figures and the verdict graded on
them are not compared, and a gate on them cannot pass or trip on the mapping alone."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import spearmanr

from auditor import AuditConfig, run_audit
from auditor.diff import diff_reports, evaluate_diff_gates, parse_diff_gates
from auditor.errors import UnmeasuredGateError
from diff_samples import biased_table_report


def _with_inputs(report: dict[str, Any], **inputs: Any) -> dict[str, Any]:
    out = copy.deepcopy(report)
    out["inputs"].update(inputs)
    return out


def test_another_item_mapping_makes_the_models_figures_and_the_verdict_incomparable(tmp_path: Path) -> None:
    base = biased_table_report(tmp_path)
    permutation = np.random.default_rng(7).permutation(200)
    (tmp_path / "ids.txt").write_text("\n".join(map(str, permutation)) + "\n")
    result = run_audit(AuditConfig(model=tmp_path / "items.npy", interactions=tmp_path / "log.parquet", ks=(10,),
                                   probes=False, bootstrap=0, item_ids=tmp_path / "ids.txt"))
    new = json.loads(json.dumps(result.to_dict()))
    # The figures are right for each mapping (scipy): row r holds raw item permutation[r]; its
    # norm is log(1 + count of item r) (diff_samples), ties of counts tied norms.
    counts_by_row = np.bincount(pq.read_table(tmp_path / "log.parquet")["item_id"].to_numpy(), minlength=200)
    norms = np.log1p(counts_by_row)
    counts = np.bincount(pq.read_table(tmp_path / "log.parquet")["item_id"].to_numpy(), minlength=200)
    assert base["frequency_norm"]["spearman"] == pytest.approx(spearmanr(norms, counts)[0], abs=1e-5)
    assert new["frequency_norm"]["spearman"] == pytest.approx(spearmanr(norms, counts[permutation])[0], abs=1e-3)
    assert base["frequency_norm"]["spearman"] > 0.9 > 0.3 > new["frequency_norm"]["spearman"]
    diff = diff_reports(base, new)
    assert [s.setting for s in diff.settings] == ["inputs.item_id_mapping"]
    for name in ("spearman", "loglog_slope", "head_share_1pct_dot@10", "coverage_cosine@10", "gini_alpha_0.5@10"):
        change = diff.metric(name)
        assert (change.status, change.delta) == ("incomparable", None), name
        assert "inputs.item_id_mapping differs" in (change.reason or "")
    assert diff.metric("head_share_1pct_popular@10").status == "compared"  # counted by raw id: no row read
    assert diff.verdict.direction == "not comparable" and "inputs.item_id_mapping" in (diff.verdict.reason or "")
    assert diff.graded is not None and diff.graded.status == "incomparable"
    for gate in ("severity_level.delta!=0", "spearman.delta<-0.1"):
        with pytest.raises(UnmeasuredGateError, match="inputs.item_id_mapping differs"):
            evaluate_diff_gates(parse_diff_gates([gate], [*(m.name for m in diff.metrics), "severity_level"]), diff)


def test_another_user_mapping_makes_the_lists_incomparable_not_the_correlation(tmp_path: Path) -> None:
    base = biased_table_report(tmp_path)
    base["inputs"]["user_id_mapping"] = "user table row = raw user id (assumed: no user_ids given)"
    new = _with_inputs(base, user_id_mapping="user rows mapped through user_ids users.txt", user_ids="users.txt")
    diff = diff_reports(base, new)
    assert [s.setting for s in diff.settings] == ["inputs.user_id_mapping"]
    assert diff.metric("head_share_1pct_dot@10").status == "incomparable"
    assert diff.metric("spearman").status == "compared"  # no user row is read
    assert diff.verdict.direction == "not comparable"


@pytest.mark.parametrize(("base_rule", "new_rule", "models"), [
    # The CLI's and the API's spellings of one setting, and --assume-row-ids (rows as ids either way).
    ("item table row = raw item id (assumed: no --item-ids given)",
     "item table row = raw item id (assumed: no item_ids given, assume_row_ids)", ("a.npy", "a.npy")),
    ("item rows mapped through --item-ids ids.txt", "item rows mapped through item_ids ids.txt", ("a.npy", "b.npy")),
    # The ids each checkpoint stores: one rule, whichever checkpoint stored them.
    ("item rows mapped through the item ids stored in a.pt (`item_ids`)",
     "item rows mapped through the item ids stored in b.pt (`item_ids`)", ("a.pt", "b.pt")),
])
def test_one_mapping_rule_spelled_otherwise_is_compared(tmp_path: Path, base_rule: str, new_rule: str,
                                                         models: tuple[str, str]) -> None:
    report = biased_table_report(tmp_path)
    base = _with_inputs(report, item_id_mapping=base_rule, model=models[0])
    diff = diff_reports(base, _with_inputs(report, item_id_mapping=new_rule, model=models[1]))
    assert not diff.settings and diff.metric("spearman").status == "compared"
    assert diff.verdict.direction == "unchanged"


@pytest.mark.parametrize(("base_rule", "new_rule"), [
    # A file against the ids stored in the checkpoint: nothing shows they map alike.
    ("item rows mapped through the item ids stored in a.pt (`item_ids`)", "item rows mapped through --item-ids ids.txt"),
    ("item table row = raw item id (assumed: no --item-ids given)", "item table row = raw item id − 1 (--id-offset 1)"),
])
def test_mappings_not_shown_to_agree_differ(tmp_path: Path, base_rule: str, new_rule: str) -> None:
    report = _with_inputs(biased_table_report(tmp_path), item_id_fingerprint=None)  # written before the fingerprint
    base = _with_inputs(report, item_id_mapping=base_rule, model="a.pt")
    diff = diff_reports(base, _with_inputs(report, item_id_mapping=new_rule, model="a.pt"))
    assert [(s.setting, s.base, s.new) for s in diff.settings] == [("inputs.item_id_mapping", base_rule, new_rule)]
    assert diff.metric("spearman").status == "incomparable"


def _audit(folder: Path, **options: Any) -> dict[str, Any]:
    result = run_audit(AuditConfig(model=folder / "items.npy", interactions=folder / "log.parquet", ks=(10,),
                                   probes=False, bootstrap=0, **options))
    report: dict[str, Any] = json.loads(json.dumps(result.to_dict()))
    return report


def _ids_sha256(ids: list[str]) -> str:
    """docs/report.md's recipe, independently: each id's UTF-8 byte length (int64 little-endian), then the bytes."""
    encoded = [i.encode() for i in ids]
    lengths = np.array([len(e) for e in encoded], dtype="<i8").tobytes()
    return "sha256:" + hashlib.sha256(lengths + b"".join(encoded)).hexdigest()


def test_the_mapping_is_recorded_by_content_rows_as_ids_as_the_ids_in_row_order(tmp_path: Path) -> None:
    rows_as_ids = biased_table_report(tmp_path)
    permutation = [str(i) for i in np.random.default_rng(7).permutation(200)]
    (tmp_path / "ids.txt").write_text("\n".join(permutation) + "\n")
    mapped = _audit(tmp_path, item_ids=tmp_path / "ids.txt")
    assert mapped["inputs"]["item_id_fingerprint"] == _ids_sha256(permutation)
    assert mapped["inputs"]["user_id_fingerprint"] is None  # no user table
    in_order = _ids_sha256([str(i) for i in range(200)])  # QA12 scale N2: was null
    assert rows_as_ids["inputs"]["item_id_fingerprint"] == in_order
    assert _audit(tmp_path, id_offset=0)["inputs"]["item_id_fingerprint"] == in_order


def _summary_spearman(reports: list[dict[str, Any]]) -> list[tuple[float | None, str | None]]:
    """The batch summary's Δ spearman and its reason for rows holding ``reports``."""
    from auditor.batch.summary import summarise
    from auditor.summaries import STATUS_OK

    table = pa.table({"row": list(range(len(reports))), "status": [STATUS_OK] * len(reports),
                      "model": ["items.npy"] * len(reports), "error": [None] * len(reports),
                      "spearman": [r["frequency_norm"]["spearman"] for r in reports],
                      "report_json": [json.dumps(r) for r in reports]})
    return [(row.delta_spearman, row.spearman_apart) for row in summarise(table).order]


def test_an_in_order_id_file_is_the_mapping_of_rows_as_ids(tmp_path: Path) -> None:
    """QA12 scale N2: an id file listing 0..n-1 maps each row to the id rows as ids give it:
    one mapping, compared by diff and the batch summary (was "inputs.item_id_mapping differs",
    not comparable); a permuted file stays another mapping."""
    rows_as_ids = biased_table_report(tmp_path)
    (tmp_path / "ids.txt").write_text("\n".join(map(str, range(200))) + "\n")
    in_order = _audit(tmp_path, item_ids=tmp_path / "ids.txt")
    assert in_order["frequency_norm"]["spearman"] == rows_as_ids["frequency_norm"]["spearman"]
    for base, new in ((rows_as_ids, in_order), (in_order, rows_as_ids)):
        diff = diff_reports(base, new)
        assert not diff.settings and (diff.metric("spearman").status, diff.metric("spearman").delta) == ("compared", 0.0)
        assert diff.verdict.direction == "unchanged"
    assert _summary_spearman([rows_as_ids, in_order]) == [(None, None), (0.0, None)]
    (tmp_path / "perm.txt").write_text("\n".join(map(str, np.random.default_rng(7).permutation(200))) + "\n")
    permuted = _audit(tmp_path, item_ids=tmp_path / "perm.txt")
    assert [s.setting for s in diff_reports(rows_as_ids, permuted).settings] == ["inputs.item_id_mapping"]
    (delta, why), = _summary_spearman([rows_as_ids, permuted])[1:]
    assert delta is None and why is not None and "inputs.item_id_mapping differs" in why


def test_an_offset_is_the_id_file_listing_its_ids(tmp_path: Path) -> None:
    """--id-offset 3 maps row r to id r + 3: the fingerprint of the ids 3..202, as an id file listing them."""
    biased_table_report(tmp_path)
    log = pq.read_table(tmp_path / "log.parquet")
    pq.write_table(log.set_column(1, "item_id", pa.array(log["item_id"].to_numpy() + 3)), tmp_path / "log.parquet")
    shifted = _audit(tmp_path, id_offset=3)
    (tmp_path / "ids.txt").write_text("\n".join(map(str, range(3, 203))) + "\n")
    listed = _audit(tmp_path, item_ids=tmp_path / "ids.txt")
    assert shifted["inputs"]["item_id_fingerprint"] == listed["inputs"]["item_id_fingerprint"] == \
        _ids_sha256([str(i) for i in range(3, 203)])
    diff = diff_reports(shifted, listed)
    assert not diff.settings and diff.metric("spearman").status == "compared"


def test_rows_as_ids_over_tables_of_other_sizes_are_one_mapping(tmp_path: Path) -> None:
    """Row = id on both sides maps every id alike: a grown catalogue is no other mapping
    (its fingerprint differs; the head's size is inputs.n_items's rule), as before the fingerprint."""
    base = biased_table_report(tmp_path)
    grown = _with_inputs(base, n_items=250, item_id_fingerprint=_ids_sha256([str(i) for i in range(250)]))
    assert not [s for s in diff_reports(base, grown).settings if "id_" in s.setting]
    assert diff_reports(base, grown).metric("spearman").status == "compared"


def test_a_mapping_file_rewritten_in_place_is_another_mapping(tmp_path: Path) -> None:
    """QA11 diffapi N2: one wording ("item rows mapped through --item-ids ids.txt") over other
    ids read "none → moderate (more bias)", "settings agree", and a gate tripped."""
    biased_table_report(tmp_path)
    permutation = np.random.default_rng(7).permutation(200)
    (tmp_path / "ids.txt").write_text("\n".join(map(str, permutation)) + "\n")
    night1 = _audit(tmp_path, item_ids=tmp_path / "ids.txt")
    corrected = np.r_[np.arange(198), 199, 198]  # corrected in place but two rows (all in order: QA12 scale N3's rule)
    (tmp_path / "ids.txt").write_text("\n".join(map(str, corrected)) + "\n")
    night2 = _audit(tmp_path, item_ids=tmp_path / "ids.txt")
    assert night1["inputs"]["item_id_mapping"] == night2["inputs"]["item_id_mapping"]
    counts = np.bincount(pq.read_table(tmp_path / "log.parquet")["item_id"].to_numpy(), minlength=200)
    norms = np.log1p(counts)
    assert night1["frequency_norm"]["spearman"] == pytest.approx(spearmanr(norms, counts[permutation])[0], abs=1e-3)
    assert night2["frequency_norm"]["spearman"] == pytest.approx(spearmanr(norms, counts[corrected])[0], abs=1e-5)
    diff = diff_reports(night1, night2)
    assert [s.setting for s in diff.settings] == ["inputs.item_id_fingerprint"]
    assert (diff.metric("spearman").status, diff.metric("spearman").delta) == ("incomparable", None)
    assert diff.verdict.direction == "not comparable"
    with pytest.raises(UnmeasuredGateError, match="inputs.item_id_fingerprint differs"):
        evaluate_diff_gates(parse_diff_gates(["severity_level.delta!=0"], ["severity_level"]), diff)


def test_one_mapping_under_two_file_names_is_compared(tmp_path: Path) -> None:
    """The same ids in two files (or a file and a checkpoint's stored ids) are one mapping."""
    biased_table_report(tmp_path)
    permutation = "\n".join(map(str, np.random.default_rng(7).permutation(200))) + "\n"
    for name in ("ids.txt", "copy.txt"):
        (tmp_path / name).write_text(permutation)
    base, new = (_audit(tmp_path, item_ids=tmp_path / name) for name in ("ids.txt", "copy.txt"))
    diff = diff_reports(base, new)
    assert not diff.settings
    assert (diff.metric("spearman").status, diff.metric("spearman").delta) == ("compared", 0.0)
    assert diff.verdict.direction == "unchanged"


def test_offset_zero_is_rows_as_ids(tmp_path: Path) -> None:
    """QA11 diffapi N3: row = id − 0 is rows as ids, so the same figures are compared (was a
    false "not comparable", exit 1); an offset of 1 stays another rule."""
    rows = biased_table_report(tmp_path)
    offset0 = _audit(tmp_path, id_offset=0)
    assert offset0["inputs"]["item_id_mapping"] != rows["inputs"]["item_id_mapping"]
    assert offset0["frequency_norm"]["spearman"] == rows["frequency_norm"]["spearman"]
    for base, new in ((rows, offset0), (offset0, rows)):
        diff = diff_reports(base, new)
        assert not diff.settings and diff.metric("spearman").status == "compared"
        assert diff.verdict.direction == "unchanged"
    shifted = _with_inputs(rows, item_id_mapping="item table row = raw item id − 1 (--id-offset 1)",
                           item_id_fingerprint=_ids_sha256([str(i) for i in range(1, 201)]))
    assert [s.setting for s in diff_reports(offset0, shifted).settings] == ["inputs.item_id_mapping"]

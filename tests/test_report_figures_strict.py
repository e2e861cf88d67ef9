"""One reader of a report's figures (auditor.report_reader.ReportReader, QA diffapi F1/F2): a figure is a
finite float64 or null, a section an object or null; anything else is a ReportError naming the
report and the field, for ``diff_reports`` and ``flat_metrics_from_report`` alike (never an
OverflowError, never read as "not measured")."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import numpy as np
import pytest

from auditor.diff import diff_reports, flat_metrics_from_report
from auditor.errors import AuditError, ReportError


def report() -> dict[str, Any]:
    return {"schema_version": 1, "tool": {"name": "popaudit", "version": "0.1.0"}, "inputs": {},
            "frequency_norm": {"spearman": 0.5, "pearson_log": 0.4, "kendall": 0.3, "loglog_slope": 0.2},
            "served_vectors": {"as_served": True, "frequency_norm": {"spearman": 0.125, "loglog_slope": 0.0625}},
            "retrieval": {"at": {"10": {"dot": {"arp": 4.0}, "cosine": {"arp": 2.0}, "overlap_dot_cosine": 0.75}},
                          "recall": {"10": 0.875}},
            "training": {"points": [{"spearman": 0.25}, {"spearman": 0.375}], "angles": {"share_90_1": 0.5}},
            "verdict": {"severity": "low", "bias_detected": True}}  # fmt: skip


def edited(path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(report())
    *parents, last = path.split(".")
    holder = out
    for key in parents:
        holder = holder[key]
    holder[last] = value
    return out


def test_every_figure_is_read_as_written() -> None:
    flat = flat_metrics_from_report(report())
    expected = {"spearman": 0.5, "served_spearman": 0.125, "served_loglog_slope": 0.0625, "arp_dot@10": 4.0,
                "arp_ratio@10": 4.0 / 2.0, "overlap_dot_cosine@10": 0.75, "recall@10": 0.875,
                "training_spearman": 0.375, "training_angle_share_90_1": 0.5}  # fmt: skip
    assert {name: flat[name] for name in expected} == expected
    assert diff_reports(report(), report()).metric("recall@10").status == "compared"
    built = report()
    built["retrieval"]["at"] = {10: built["retrieval"]["at"]["10"]}  # a dict built in Python: int keys read as JSON's
    assert flat_metrics_from_report(built)["arp_dot@10"] == 4.0


OUT_OF_RANGE = [
    ("retrieval.at.10.dot.arp", 10**400, r"retrieval\.at\.10\.dot\.arp is an integer of about 401 digits, beyond float"),
    ("frequency_norm.spearman", json.loads("1e400"), r"frequency_norm\.spearman is a number beyond float range"),
    ("retrieval.recall.10", -math.inf, r"retrieval\.recall\.10 is a number beyond float range"),
    ("training.angles.share_90_1", math.nan, r"training\.angles\.share_90_1 is NaN, not a finite number or null"),
    ("retrieval.at.10.overlap_dot_cosine", np.float64(np.inf), r"retrieval\.at\.10\.overlap_dot_cosine is a number beyond float range"),
]


@pytest.mark.parametrize(("path", "value", "message"), OUT_OF_RANGE, ids=[c[0] for c in OUT_OF_RANGE])
def test_a_figure_beyond_float_range_is_refused_with_its_field(path: str, value: Any, message: str) -> None:
    with pytest.raises(ReportError, match=r"^the new report: " + message):
        diff_reports(report(), edited(path, value))
    with pytest.raises(ReportError, match=r"^the report: " + message):
        flat_metrics_from_report(edited(path, value))


CORRUPT = [
    ("served_vectors.frequency_norm.spearman", "0.1", r"served_vectors\.frequency_norm\.spearman is \"0\.1\", not a number"),
    ("retrieval.recall", {"10": "0.9"}, r"retrieval\.recall\.10 is \"0\.9\", not a number or null"),
    ("frequency_norm", [], r"frequency_norm is \[\], not an object or null: not a section"),
    ("retrieval", [], r"retrieval is \[\], not an object or null"),
    ("served_vectors", "x", r"served_vectors is \"x\", not an object or null"),
    ("training.points", [{"spearman": True}], r"training\.points\.0\.spearman is true, not a number or null"),
    ("training.points", {"a": 1}, r"training\.points is \{\"a\": 1\}, not a list or null"),
    ("retrieval.at.10.cosine", [], r"retrieval\.at\.10\.cosine is \[\], not a number or null"),
    ("replaced_globals", [1], r"replaced_globals\.0 is 1, not an object or null"),
    ("measures", [0.5], r"measures is \[0\.5\], not an object or null"),
]


@pytest.mark.parametrize(("path", "value", "message"), CORRUPT, ids=[c[0] for c in CORRUPT])
def test_a_corrupt_figure_or_section_is_refused_not_read_as_not_measured(path: str, value: Any, message: str) -> None:
    with pytest.raises(ReportError, match=r"^base report before\.json: " + message):
        diff_reports(edited(path, value), report(), base_name="before.json", new_name="after.json")
    with pytest.raises(AuditError, match=message):
        flat_metrics_from_report(edited(path, value))


@pytest.mark.parametrize(("version", "shown"), [(True, "true"), ("1", '"1"'), (1.0, "1.0"), (None, "null")])
def test_a_schema_version_of_another_kind_is_quoted_not_read_as_one(version: Any, shown: str) -> None:
    """QA diffapi F5: ``true`` was compared as schema 1 (True == 1); "1" and 1.0 read as "no
    schema_version" though the field is there."""
    with pytest.raises(ReportError, match=rf"^new report after\.json: schema_version is {shown}, not an integer such as 1"):
        diff_reports(report(), {**report(), "schema_version": version}, base_name="before.json", new_name="after.json")
    with pytest.raises(ReportError, match=r"^the base report is not a popaudit JSON report \(no schema_version\)$"):
        diff_reports({k: v for k, v in report().items() if k != "schema_version"}, report())


def test_a_cut_off_spelled_10_or_10_as_text_is_one_k_for_every_reader() -> None:
    """QA diffapi N1: a report dict built in Python (int keys) against one read from JSON
    ("10") raised ReportError (TypeError in the cut-off note) and the note called {10} and
    {"10"} other cut-offs; now both read as one K, normalised once where the report is read."""
    built = report()
    built["retrieval"]["at"] = {10: {"dot": {"arp": 5.0}, "cosine": {"arp": 2.0}, "overlap_dot_cosine": 0.75}}
    built["retrieval"]["recall"] = {10: 0.5}
    for base, new, delta in ((report(), built, 1.0), (built, report(), -1.0)):
        diff = diff_reports(base, new)
        assert diff.metric("arp_dot@10").delta == pytest.approx(delta)
        assert diff.metric("recall@10").delta == pytest.approx(-delta * 0.375)
        assert not any(note.startswith("cut-offs differ") for note in diff.notes)
    assert built["retrieval"]["at"].keys() == {10}  # the caller's dict is left as given


BAD_CUTOFF_KEYS = [
    # QA diffapi N4: "010" was K=10, and of "10" and "010" the later one won silently.
    ({"10": {"dot": {"arp": 4.0}}, "010": {"dot": {"arp": 9.0}}}, r"retrieval\.at\.010 is \"010\", a key that is not a cut-off K"),
    ({"010": {"dot": {"arp": 9.0}}}, r"retrieval\.at\.010 is \"010\", a key that is not a cut-off K"),
    ({10: {"dot": {"arp": 9.0}}, "10": {"dot": {"arp": 4.0}}}, r"retrieval\.at\.10 is \"10\" \(str\), a second key for K=10"),
    ({"0": {"dot": {"arp": 9.0}}}, r"retrieval\.at\.0 is \"0\", a key that is not a cut-off K"),
]


@pytest.mark.parametrize(("at", "message"), BAD_CUTOFF_KEYS, ids=["010-and-10", "010", "int-and-str-10", "zero"])
def test_a_cut_off_has_one_spelling_and_one_key(at: dict[Any, Any], message: str) -> None:
    bad = report()
    bad["retrieval"]["at"] = at
    with pytest.raises(ReportError, match=r"^new report after\.json: " + message):
        diff_reports(report(), bad, base_name="before.json", new_name="after.json")
    with pytest.raises(ReportError, match=r"^the report: " + message):
        flat_metrics_from_report(bad)


BAD_SECTIONS = [
    # QA diffapi N3: [] read as empty (rc 0, "n_items differs (800 vs none)"); text gave a field-less AttributeError.
    ("inputs", [], r"inputs is \[\], not an object or null"),
    ("conditions", [], r"conditions is \[\], not an object or null"),
    ("conditions", {"C1": "holds"}, r"conditions\.C1 is \"holds\", not an object or null"),
    ("retrieval.population", "x", r"retrieval\.population is \"x\", not an object or null"),
    ("retrieval.definitions", [], r"retrieval\.definitions is \[\], not an object or null"),
    ("settings", "x", r"settings is \"x\", not an object or null"),
    ("settings", {"ks": 10}, r"settings\.ks is 10, not a list or null"),
    ("settings", {"groups": "x"}, r"settings\.groups is \"x\", not an object or null"),
]


@pytest.mark.parametrize(("path", "value", "message"), BAD_SECTIONS, ids=[f"{c[0]}-{i}" for i, c in enumerate(BAD_SECTIONS)])
def test_a_section_of_the_wrong_kind_is_refused_naming_its_field(path: str, value: Any, message: str) -> None:
    with pytest.raises(ReportError, match=r"^base report before\.json: " + message + r": not a section popaudit writes"):
        diff_reports(edited(path, value), report(), base_name="before.json", new_name="after.json")
    with pytest.raises(ReportError, match=r"^the report: " + message):
        flat_metrics_from_report(edited(path, value))


def catalogue(n_items: Any) -> dict[str, Any]:
    """report() of a catalogue of ``n_items`` with a top-1% head share at K=10."""
    out = edited("inputs.n_items", n_items)
    out["retrieval"]["at"]["10"]["dot"]["head_share_1pct"] = 0.1
    return out


@pytest.mark.parametrize(("value", "said"), [
    (10**400, r"inputs\.n_items is an integer of about 401 digits, beyond float range, not a count or null"),
    ("800", r"inputs\.n_items is \"800\", not a count \(a whole number from 0\) or null"),
    (-800, r"inputs\.n_items is -800, not a count"),
    (800.0, r"inputs\.n_items is 800\.0, not a count"),
    (True, r"inputs\.n_items is true, not a count"),
], ids=["400-digits", "text", "negative", "float", "bool"])
def test_a_catalogue_size_not_a_count_is_a_report_error_both_ways(value: Any, said: str) -> None:
    # QA13 diffapi F2: a 400-digit n_items reached the head's c = max(1, floor(p/100 · n)) as an OverflowError.
    for base, new in ((catalogue(500), catalogue(value)), (catalogue(value), catalogue(500))):
        with pytest.raises(ReportError, match=said):
            diff_reports(base, new)


def test_a_catalogue_size_that_is_a_count_moves_the_head_as_before() -> None:
    # 500 → 800 items: the top 1% holds c = 5 → 8 items, so the head share is not compared.
    result = diff_reports(catalogue(500), catalogue(800))
    assert result.metric("head_share_1pct_dot@10").status == "incomparable"
    assert diff_reports(catalogue(500), catalogue(None)).metric("head_share_1pct_dot@10").status == "compared"

"""Hostile inputs of ``popaudit diff``: files that are not JSON, JSON that is not a popaudit
report (another tool's, another schema, a tagged object of the wrong structure), special
files, bombs of nesting, outputs over an input, and malformed gates. Each is one Error:
line naming the file or option, the documented exit code, and nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .corpus import EXIT_ERROR, EXIT_GATE, EXIT_OK, EXIT_USAGE, Built, Case, fifo, params, run_case, write


def report(spearman: float = 0.5, **extra: Any) -> str:
    """A minimal popaudit JSON report (what diff reads of it)."""
    body = {"schema_version": 1, "tool": {"name": "popaudit", "version": "0.1.0"}, "inputs": {},
            "frequency_norm": {"spearman": spearman, "pearson_log": 0.4, "kendall": 0.3, "loglog_slope": 0.2},
            "retrieval": None, "verdict": {"severity": "low", "bias_detected": True}, **extra}  # fmt: skip
    return json.dumps(body)


def headed(n_items: Any, **extra: Any) -> str:
    """A report of a catalogue of ``n_items`` with a top-1% head share (base: 500 items)."""
    return report(inputs={"n_items": n_items}, retrieval={"at": {"10": {"dot": {"head_share_1pct": 0.1}}}}, **extra)


def held_out(digit: str, ndcg: float) -> str:
    """A report whose accuracy was measured on ``holdout.parquet`` with the fingerprint of 64 ``digit``s."""
    accuracy = {"holdout": "holdout.parquet", "holdout_fingerprint": "sha256:" + digit * 64, "n_holdout_interactions": 300,
                "at": {"10": {"dot": {"ndcg": ndcg}}}}
    return report(accuracy=accuracy)


def mapped(digit: str) -> str:
    """A report whose items were mapped through ``ids.txt`` holding the ids fingerprinted by 64 ``digit``s."""
    return report(0.5 + 0.1 * int(digit), inputs={"item_id_mapping": "item rows mapped through --item-ids ids.txt",
                                                  "item_id_fingerprint": "sha256:" + digit * 64})


def resampled(seed: int, low: float) -> str:
    """A report whose spearman interval was drawn with ``seed``."""
    norm = {"spearman": 0.5, "spearman_ci": [low, 0.6], "pearson_log": 0.4, "kendall": 0.3, "loglog_slope": 0.2}
    return report(frequency_norm=norm, settings={"seed": seed, "bootstrap": 1000})


def served_over(apart: Any, share: float) -> str:
    """A report of served lists whose served figures leave out ``apart`` of its 75 lists (0: every list)."""
    retrieval = {"at": {"5": {"served": {"head_share_1pct": share}}}, "popularity": "interactions", "population": None}
    return report(retrieval=retrieval, served={"n_users": 75, "n_graded_apart": apart})


def pair(new: str | bytes, *extra: str, base: str | bytes | None = None, outputs: tuple[str, ...] = ()) -> Any:
    def build(d: Path) -> Built:
        write(d, "base.json", report() if base is None else base)
        write(d, "new.json", new)
        return Built(["diff", "base.json", "new.json", *extra], outputs=outputs)

    return build


def special(*extra: str) -> Any:
    def build(d: Path) -> Built:
        write(d, "base.json", report())
        fifo(d, "new.json")
        return Built(["diff", "base.json", "new.json", *extra])

    return build


CASES = [
    Case("not-json", pair("spearman,0.5\n"), EXIT_ERROR, r"new report new\.json is not JSON"),
    Case("binary", pair(b"\x89PNG\r\n\x1a\n\x00\xff\xfe"), EXIT_ERROR, r"new report new\.json is not UTF-8 text"),
    Case("empty-file", pair(""), EXIT_ERROR, r"new report new\.json is not JSON"),
    Case("json-array", pair("[1, 2, 3]"), EXIT_ERROR, r"new report new\.json is JSON but not an object"),
    Case("nan-constant", pair('{"schema_version": 1, "x": NaN}'), EXIT_ERROR, r"new\.json is not JSON: NaN"),
    Case("deep-nesting", pair("[" * 200_000 + "]" * 200_000), EXIT_ERROR, r"new\.json (nests too deeply|is not JSON)"),
    Case("no-schema", pair('{"tool": {"name": "popaudit"}}'), EXIT_ERROR,
         r"^Error: new report new\.json is not a popaudit JSON report \(no schema_version\)"),
    Case("no-schema-base", pair(report(), base='{"a": 1}'), EXIT_ERROR,
         r"^Error: base report base\.json is not a popaudit JSON report \(no schema_version\)"),
    # A schema_version of another kind: true was read as schema 1, "1" and 1.0 as "no schema_version" (QA diffapi F5).
    Case("bool-schema", pair(json.dumps({**json.loads(report()), "schema_version": True})), EXIT_ERROR,
         r"^Error: new report new\.json: schema_version is true, not an integer such as 1: not a popaudit JSON report"),
    Case("text-schema-base", pair(report(), base=json.dumps({**json.loads(report()), "schema_version": "1"})),
         EXIT_ERROR, r"^Error: base report base\.json: schema_version is \x221\x22, not an integer such as 1"),
    Case("float-schema", pair(json.dumps({**json.loads(report()), "schema_version": 1.0})), EXIT_ERROR,
         r"^Error: new report new\.json: schema_version is 1\.0, not an integer such as 1"),
    Case("null-schema", pair(json.dumps({**json.loads(report()), "schema_version": None})), EXIT_ERROR,
         r"^Error: new report new\.json: schema_version is null, not an integer such as 1"),
    Case("another-tool", pair(json.dumps({"schema_version": 1, "tool": {"name": "evidently"}, "metrics": []})),
         EXIT_ERROR, r"^Error: new report new\.json was not written by popaudit"),
    Case("another-tool-base", pair(report(), base=json.dumps({"schema_version": 1, "tool": {"name": "evidently"}})),
         EXIT_ERROR, r"^Error: base report base\.json was not written by popaudit"),
    Case("other-schema", pair(json.dumps({**json.loads(report()), "schema_version": 2})), EXIT_ERROR,
         r"schema versions 1 \(base, base\.json\) and 2 \(new, new\.json\)"),
    # A figure popaudit writes as a number or null, holding anything else, is a corrupt report (QA F8).
    Case("text-figure", pair(report(retrieval={"at": {"10": {"served": {"arp": "x"}}}})), EXIT_ERROR,
         r"^Error: new report new\.json: retrieval\.at\.10\.served\.arp is \x22x\x22, not a number or null"),
    Case("bool-figure-base", pair(report(), base=report(frequency_norm={"spearman": True})), EXIT_ERROR,
         r"^Error: base report base\.json: frequency_norm\.spearman is true, not a number or null"),
    Case("list-overlap", pair(report(retrieval={"at": {"5": {"overlap_dot_cosine": [1]}}})), EXIT_ERROR,
         r"^Error: new report new\.json: retrieval\.at\.5\.overlap_dot_cosine is \[1\], not a number or null"),
    Case("text-accuracy", pair(report(accuracy={"at": {"5": {"dot": {"ndcg": "0.3"}}}})), EXIT_ERROR,
         r"^Error: new report new\.json: accuracy\.at\.5\.dot\.ndcg is \x220\.3\x22, not a number or null"),
    Case("no-retrieval-section", pair(json.dumps({k: v for k, v in json.loads(report()).items() if k != "retrieval"})),
         EXIT_ERROR, r"^Error: new report new\.json has no 'retrieval' section, which every popaudit JSON report holds"),
    # The verdict's grade popaudit writes is one of none/low/moderate/high: an unknown or missing
    # one read as "none" made the verdict's change "less bias" (QA report 5, Diff F4).
    Case("unknown-severity", pair(report(verdict={"severity": "catastrophic", "bias_detected": True})), EXIT_ERROR,
         r"^Error: new report new\.json: verdict\.severity is \x22catastrophic\x22, not one of none, low, moderate, high"),
    Case("missing-severity-base", pair(report(), base=report(verdict={"bias_detected": True})), EXIT_ERROR,
         r"^Error: base report base\.json: verdict\.severity is missing"),
    # verdict.assessed "false" (text) read as assessed, so a gate read a "less bias" change from an
    # unassessed verdict; quoted_k "ten" read as no K, so the cut-off rule skipped it (QA9 diff F5).
    Case("text-assessed", pair(report(verdict={"severity": "none", "assessed": "false"})), EXIT_ERROR,
         r"^Error: new report new\.json: verdict\.assessed is \x22false\x22, not true or false: not a verdict popaudit "
         r"writes"),
    Case("null-assessed-base", pair(report(), base=report(verdict={"severity": "low", "assessed": None})), EXIT_ERROR,
         r"^Error: base report base\.json: verdict\.assessed is null, not true or false"),
    Case("text-quoted-k", pair(report(verdict={"severity": "low", "quoted_k": "ten"})), EXIT_ERROR,
         r"^Error: new report new\.json: verdict\.quoted_k is \x22ten\x22, not a cut-off K \(a whole number such as "
         r"10\) or null"),
    Case("float-quoted-k", pair(report(verdict={"severity": "low", "quoted_k": 10.0})), EXIT_ERROR,
         r"new\.json: verdict\.quoted_k is 10\.0, not a cut-off K"),
    Case("zero-quoted-k", pair(report(verdict={"severity": "low", "quoted_k": 0})), EXIT_ERROR,
         r"new\.json: verdict\.quoted_k is 0, not a cut-off K"),
    Case("bool-quoted-k", pair(report(verdict={"severity": "low", "quoted_k": True})), EXIT_ERROR,
         r"new\.json: verdict\.quoted_k is true, not a cut-off K"),
    Case("null-verdict", pair(report(verdict=None)), EXIT_ERROR,
         r"new\.json: verdict is null, not an object holding verdict\.severity"),
    Case("list-verdict", pair(report(verdict=["high"])), EXIT_ERROR,
         r"new\.json: verdict is \[\x22high\x22\], not an object holding verdict\.severity"),
    # JSON null is written as the file spells it, not as Python's None (QA round 5 verification).
    Case("null-severity", pair(report(verdict={"severity": None})), EXIT_ERROR,
         r"new\.json: verdict\.severity is null, not one of none, low", absent=r"None"),
    Case("numeric-severity", pair(report(verdict={"severity": 2})), EXIT_ERROR, r"verdict\.severity is 2, not one of"),
    # A section of the wrong kind is named where the flat names read it (QA diffapi F2).
    Case("tagged-wrong-structure", pair(report(retrieval={"at": ["10"]})), EXIT_ERROR,
         r"^Error: new report new\.json: retrieval\.at is \[\x2210\x22\], not an object or null: not a section"),
    # A figure beyond float range: a traceback (a 401-digit integer) or read as "no value" (1e400) (QA diffapi F1).
    Case("huge-int-figure", pair(report().replace('"spearman": 0.5', '"spearman": 1' + "0" * 400)), EXIT_ERROR,
         r"^Error: new report new\.json: frequency_norm\.spearman is an integer of about 401 digits, beyond float range",
         absent=r"Traceback|OverflowError"),
    Case("1e400-figure", pair(report(retrieval={"at": {"10": {"dot": {"arp": 1.0}}}}).replace("1.0", "1e400")),
         EXIT_ERROR, r"^Error: new report new\.json: retrieval\.at\.10\.dot\.arp is a number beyond float range, "
         r"not a finite number or null", absent=r"only the base"),
    Case("-1e400-figure-base", pair(report(), base=report(frequency_norm={"spearman": 0.25}).replace("0.25", "-1e400")),
         EXIT_ERROR, r"^Error: base report base\.json: frequency_norm\.spearman is a number beyond float range"),
    # A count the comparability rules compute with (the head's c from inputs.n_items): a 401-digit
    # integer was an OverflowError traceback (QA13 diffapi F2); now refused like a figure, naming the field.
    Case("huge-int-n-items", pair(headed(10**400), base=headed(500)), EXIT_ERROR,
         r"^Error: new report new\.json: inputs\.n_items is an integer of about 401 digits, beyond float range, not a "
         r"count or null", absent=r"Traceback|OverflowError"),
    Case("huge-int-n-items-base", pair(headed(800), base=headed(10**400)), EXIT_ERROR,
         r"^Error: base report base\.json: inputs\.n_items is an integer of about 401 digits", absent=r"Traceback"),
    Case("text-n-items", pair(headed("800"), base=headed(500)), EXIT_ERROR,
         r"^Error: new report new\.json: inputs\.n_items is \x22800\x22, not a count \(a whole number from 0\) or null"),
    Case("negative-n-items", pair(headed(-800), base=headed(500)), EXIT_ERROR, r"inputs\.n_items is -800, not a count"),
    Case("float-n-items", pair(headed(800.0), base=headed(500)), EXIT_ERROR, r"inputs\.n_items is 800\.0, not a count"),
    Case("bool-n-interactions", pair(report(inputs={"n_interactions": True})), EXIT_ERROR,
         r"inputs\.n_interactions is true, not a count"),
    Case("huge-int-n-queries", pair(report(retrieval={"n_queries": 10**400})), EXIT_ERROR,
         r"retrieval\.n_queries is an integer of about 401 digits, beyond float range, not a count"),
    Case("huge-int-popular-percent", pair(headed(800, settings={"groups": {"popular_percent": 10**400}}),
                                          base=headed(500, settings={"groups": {"popular_percent": 20.0}})),
         EXIT_ERROR, r"^Error: new report new\.json: settings\.groups\.popular_percent is an integer of about 401 "
         r"digits, beyond float range", absent=r"Traceback|OverflowError"),
    # Figures and sections the old walk skipped were read as "not measured" (QA diffapi F2).
    Case("text-served-vectors-figure", pair(report(served_vectors={"frequency_norm": {"spearman": "0.1"}})), EXIT_ERROR,
         r"^Error: new report new\.json: served_vectors\.frequency_norm\.spearman is \x220\.1\x22, not a number"),
    Case("text-index-recall", pair(report(retrieval={"recall": {"10": "0.9"}})), EXIT_ERROR,
         r"^Error: new report new\.json: retrieval\.recall\.10 is \x220\.9\x22, not a number or null"),
    Case("list-frequency-norm", pair(report(frequency_norm=[])), EXIT_ERROR,
         r"^Error: new report new\.json: frequency_norm is \[\], not an object or null: not a section"),
    Case("list-retrieval-base", pair(report(), base=report(retrieval=[])), EXIT_ERROR,
         r"^Error: base report base\.json: retrieval is \[\], not an object or null"),
    Case("text-training-point", pair(report(training={"points": [{"spearman": "0.3"}]})), EXIT_ERROR,
         r"^Error: new report new\.json: training\.points\.0\.spearman is \x220\.3\x22, not a number or null"),
    Case("text-training-angles", pair(report(training={"angles": "x"})), EXIT_ERROR,
         r"^Error: new report new\.json: training\.angles is \x22x\x22, not an object or null"),
    Case("huge-measure", pair(report(measures={"item_bias_spearman": 1e300}).replace("1e+300", "1e999")), EXIT_ERROR,
         r"^Error: new report new\.json: measures\.item_bias_spearman is a number beyond float range"),
    Case("text-cutoff-key", pair(report(retrieval={"at": {"ten": {}}})), EXIT_ERROR,
         r"^Error: new report new\.json: retrieval\.at\.ten is \x22ten\x22, a key that is not a cut-off K"),
    Case("short-spearman-ci", pair(report(frequency_norm={"spearman": 0.5, "spearman_ci": [0.1]})), EXIT_ERROR,
         r"^Error: new report new\.json: frequency_norm\.spearman_ci is \[0\.1\], not a list of 2 or null"),
    Case("fifo-input", special(), EXIT_ERROR, r"new report new\.json is a FIFO"),
    Case("missing-base", lambda d: (write(d, "new.json", report()), Built(["diff", "gone.json", "new.json"]))[1],
         EXIT_ERROR, r"base report not found: gone\.json"),
    Case("output-over-input", pair(report(0.6), "-o", "base.json", "--format", "json"), EXIT_ERROR,
         r"base\.json"),
    Case("json-and-markdown-same-descriptor", pair(report(0.6), "-q", "--json", "/dev/stdout", "--markdown",
                                                    "/dev/stdout"), EXIT_ERROR,
         r"^Error: --json /dev/stdout and --markdown /dev/stdout both name descriptor 1; two reports on one stream"),
    # The console diff goes to stdout too: a JSON report there would be mixed into it.
    Case("json-on-stdout-beside-console", pair(report(0.6), "--json", "/dev/stdout"), EXIT_USAGE,
         r"--json /dev/stdout is standard output, where the console report is printed too; pass -q",
         process=True, timeout=60),
    Case("json-dash", pair(report(0.6), "--json", "-"), EXIT_USAGE, r"'--json': '-' is not stdin or stdout here",
         absent=r"leave out -o"),
    Case("markdown-on-stderr-beside-messages", pair(report(0.6), "--markdown", "/dev/stderr"), EXIT_USAGE,
         r"--markdown /dev/stderr is standard error, where progress and messages are printed too; pass -q",
         process=True),
    Case("unknown-gate-name", pair(report(0.6), "--fail-on", "spearmann.delta>0"), EXIT_USAGE, r"spearmann"),
    Case("bad-gate-suffix", pair(report(0.6), "--fail-on", "spearman.change>0"), EXIT_USAGE, r"spearman\.change"),
    Case("gate-overflowing-threshold", pair(report(0.6), "--fail-on", "spearman.rel>-1e400"), EXIT_USAGE,
         r"invalid --fail-on: 'spearman\.rel>-1e400': the threshold -1e400 is not a finite number \(it overflows to -inf\)"),
    Case("unknown-format", pair(report(0.6), "--format", "pdf"), EXIT_USAGE, r"'pdf' is not a report format"),
    # A well-formed figure neither report measured is "not measured" (exit 1) with why, as in check; a typo stays exit 2
    Case("gate-on-figure-neither-measured", pair(report(0.6), "--fail-on", "gini_dot@10.delta>0"), EXIT_ERROR,
         r"^Error: cannot evaluate --fail-on gini_dot@10\.delta>0: neither report has it: retrieval not measured: no such "
         r"section in the report$"),
    Case("gate-on-k-neither-measured", pair(report(0.6, settings={"ks": [5]}, retrieval={"at": {"5": {}}}), "--fail-on",
                                            "gini_dot@10.delta>0", base=report(settings={"ks": [5]}, retrieval={"at": {"5": {}}})),
         EXIT_ERROR, r"^Error: cannot evaluate --fail-on gini_dot@10\.delta>0: neither report has it: K=10 was not asked for "
         r"\(add -k 10; -k replaces the cut-offs measured now \(5\), so pass them all: -k 5 -k 10\)$"),
    Case("gate-on-accuracy-without-holdout", pair(report(0.6, not_measured={"accuracy": "no held-out interactions"}),
                                                  "--fail-on", "ndcg_dot@10.rel<-0.02"), EXIT_ERROR,
         r"ndcg_dot@10\.rel<-0\.02: neither report has it \(base: accuracy not measured: no such section in the report; "
         r"new: accuracy not measured: no held-out interactions\)$"),
    Case("gate-on-unknown-figure", pair(report(0.6), "--fail-on", "gini_dot@1O.delta>0"), EXIT_USAGE,
         r"unknown metric 'gini_dot@1O\.delta'"),
    Case("gate-on-one-sided-figure", pair(report(0.6), "--fail-on", "gini_dot@10.delta>0", base=report(
        retrieval={"at": {"10": {"dot": {"gini": 0.5}, "cosine": {"gini": 0.2}}}})), EXIT_ERROR,
        r"gini_dot@10\.delta.*cannot be evaluated|gini_dot@10\.delta.*not measured|gini_dot@10\.delta"),
    # One model read through another id mapping: the verdict graded on it is not compared (QA11 diffapi F1).
    Case("gate-on-another-item-mapping", pair(report(0.6, inputs={"item_id_mapping": "item rows mapped through --item-ids "
                                                                  "ids.txt"}), "--fail-on", "severity_level.delta!=0",
                                              base=report(inputs={"item_id_mapping": "item table row = raw item id"})),
         EXIT_ERROR, r"^Error: cannot evaluate --fail-on severity_level\.delta!=0: not comparable: the verdicts: .*"
         r"inputs\.item_id_mapping differs"),
    # QA11 diffapi N2: a mapping file rewritten in place (one wording, other ids) was compared and tripped (exit 3).
    Case("gate-on-a-mapping-file-rewritten-in-place", pair(mapped("1"), "--fail-on", "spearman.delta!=0",
                                                           base=mapped("0")), EXIT_ERROR,
         r"^Error: cannot evaluate --fail-on spearman\.delta!=0: not comparable: inputs\.item_id_fingerprint differs",
         absent=r"TRIPPED"),
    Case("mapping-fingerprint-a-number", pair(mapped("1").replace('"sha256:' + "1" * 64 + '"', "7")), EXIT_ERROR,
         r"^Error: new report new\.json: inputs\.item_id_fingerprint is 7, not sha256: and 64 hex digits or null"),
    Case("user-mapping-fingerprint-short", pair(report(inputs={"user_id_fingerprint": "sha256:abc"})), EXIT_ERROR,
         r"new\.json: inputs\.user_id_fingerprint is \"sha256:abc\", not sha256: and 64 hex digits or null"),
    # QA11 diffapi N3: --id-offset 0 is rows as ids; a gate on the model's figures is evaluated (was exit 1).
    Case("gate-across-offset-zero-and-rows-as-ids", pair(report(0.5, inputs={
        "item_id_mapping": "item table row = raw item id − 0 (--id-offset 0)"}), "--fail-on", "spearman.delta<-0.1",
        base=report(inputs={"item_id_mapping": "item table row = raw item id (assumed: no --item-ids given)"})),
         EXIT_OK, None),
    # A severity the served lists graded beside a model against the model's own (QA11 diffapi F2).
    Case("gate-on-severity-graded-by-served-lists", pair(report(0.6, verdict={"severity": "high", "graded_by": "served"},
                                                                served={"source": "recs.parquet"}),
                                                         "--fail-on", "severity_level.delta>0"),
         EXIT_ERROR, r"^Error: cannot evaluate --fail-on severity_level\.delta>0: not comparable: the verdicts: the base's "
         r"severity was graded by the model's own serving .*, the new one's by the served lists"),
    # check's range check: a change beyond its figure's range, a share given as a percentage (QA11 diffapi F3).
    Case("gate-delta-beyond-range", pair(report(0.6), "--fail-on", "spearman.delta>2.5"), EXIT_USAGE,
         r"invalid --fail-on: 'spearman\.delta>2\.5': spearman\.delta is a change of a correlation from -1 to 1, so "
         r"from -2 to 2; the threshold 2\.5 is outside that range"),
    Case("gate-delta-as-points", pair(report(0.6), "--fail-on", "coverage_dot@10.delta<-5"), EXIT_USAGE,
         r"coverage_dot@10\.delta is a change of a fraction 0–1, so from -1 to 1: -5% is -0\.05"),
    Case("gate-share-as-percent", pair(report(0.6), "--fail-on", "head_share_1pct_dot@10>3"), EXIT_USAGE,
         r"head_share_1pct_dot@10 is a fraction 0–1: 3% is 0\.03; the threshold 3 is outside that range"),
    Case("gate-rel-below-minus-one", pair(report(0.6), "--fail-on", "ndcg_dot@10.rel<-2"), EXIT_USAGE,
         r"ndcg_dot@10\.rel is the relative change of a figure never below 0 \(a fraction 0–1\), so never below -1 "
         r"\(-100%\): -2% is -0\.02"),
    Case("gate-rel-from-zero", pair(report(0.6), "--fail-on", "spearman.rel>0.1", base=report(0.0)), EXIT_ERROR,
         r"cannot evaluate --fail-on spearman\.rel>0\.1: relative change undefined: the base value is 0"),
    Case("gate-tripped", pair(report(0.6), "--fail-on", "spearman.delta>0.05", "--json", "d.json",
                              outputs=("d.json",)), EXIT_GATE, None, stderr=r"gate spearman\.delta>0\.05"),
    # QA plugins F5: a plugin measure the base run did not load is absent, not a null it returned.
    Case("gate-on-a-measure-absent-from-base", pair(report(0.6, measures={"norm_gini": 0.2}), "--fail-on",
                                                     "norm_gini.delta>0", base=report(measures={})), EXIT_ERROR,
         r"cannot evaluate --fail-on norm_gini\.delta>0: only the new report measured it.*\(the base report: no "
         r"measure named norm_gini was registered in its audit", absent=r"returned no finite number"),
    # QA diffapi N3: a section of the wrong kind was read as empty (rc 0) or gave a field-less AttributeError.
    Case("inputs-a-list", pair(report(0.6, inputs=[])), EXIT_ERROR,
         r"^Error: new report new\.json: inputs is \[\], not an object or null: not a section popaudit writes"),
    Case("conditions-a-list", pair(report(0.6, conditions=[])), EXIT_ERROR, r"new\.json: conditions is \[\], not an object"),
    Case("condition-a-text", pair(report(0.6, conditions={"C1": "holds"})), EXIT_ERROR,
         r"new\.json: conditions\.C1 is \"holds\", not an object or null", absent=r"AttributeError"),
    Case("population-a-text", pair(report(0.6, retrieval={"at": {}, "population": "x"})), EXIT_ERROR,
         r"new\.json: retrieval\.population is \"x\", not an object or null", absent=r"AttributeError"),
    Case("settings-a-text", pair(report(0.6, settings="x")), EXIT_ERROR, r"new\.json: settings is \"x\", not an object"),
    # QA diffapi N4: "010" was K=10 (beside "10", whichever came later won).
    Case("cutoff-with-a-leading-zero", pair(report(0.6, retrieval={"at": {"10": {"dot": {"arp": 4.0}}, "010": {
        "dot": {"arp": 9.0}}}})), EXIT_ERROR, r"new\.json: retrieval\.at\.010 is \"010\", a key that is not a cut-off K"),
    # QA9 diff N2: a holdout regenerated in place (one path, other pairs) was compared, and a gate tripped (exit 3).
    Case("holdout-regenerated-in-place", pair(held_out("1", 0.1), "--fail-on", "ndcg_dot@10.rel<-0.02",
                                              base=held_out("0", 0.3)), EXIT_ERROR,
         r"cannot evaluate --fail-on ndcg_dot@10\.rel<-0\.02: not comparable: accuracy\.holdout_fingerprint differs",
         absent=r"TRIPPED"),
    # QA11 diffapi N4: one held-out set (one fingerprint) read from a file with repeated rows: compared (was exit 1).
    Case("gate-across-repeated-held-out-rows", pair(held_out("1", 0.3).replace('"n_holdout_interactions": 300',
                                                                            '"n_holdout_interactions": 340'),
                                                    "--fail-on", "ndcg_dot@10.rel<-0.02", base=held_out("1", 0.3)),
         EXIT_OK, None),
    Case("fingerprint-a-number", pair(held_out("1", 0.3).replace('"sha256:' + "1" * 64 + '"', "5")), EXIT_ERROR,
         r"^Error: new report new\.json: accuracy\.holdout_fingerprint is 5, not sha256: and 64 hex digits or null"),
    Case("fingerprint-not-hex", pair(held_out("x", 0.3)), EXIT_ERROR,
         r"new\.json: accuracy\.holdout_fingerprint is \"sha256:x+\.\.\., not sha256: and 64 hex"),
    # QA9 diff N1: spearman's interval bounds of another --seed read "less bias", and a gate on them tripped (exit 3).
    # The same served lists alone (every list) and beside a model (the queried users' only): not compared (Served F3).
    Case("served-figures-over-other-lists", pair(served_over(45, 0.0), "--fail-on", "head_share_1pct_served@5.delta<0",
                                                  base=served_over(0, 0.12)), EXIT_ERROR,
         r"cannot evaluate --fail-on head_share_1pct_served@5\.delta<0: not comparable: served\.n_graded_apart differs "
         r"\(\"every list of the file\" vs \"45 of the 75 lists left out \(users not queried\)\"\)"),
    Case("served-lists-left-out-not-a-count", pair(served_over("many", 0.0), "--fail-on",
                                                    "head_share_1pct_served@5.delta<0", base=served_over(0, 0.12)),
         EXIT_ERROR, r"not comparable: served\.n_graded_apart differs \(\"every list of the file\" vs \"not a count of "
         r"lists \(\\\"many\\\"\)\"\)"),
    Case("ci-bound-of-another-seed", pair(resampled(1, 0.39), "--fail-on", "spearman_ci_lo.delta<0",
                                          base=resampled(0, 0.40)), EXIT_ERROR,
         r"cannot evaluate --fail-on spearman_ci_lo\.delta<0: not comparable: settings\.seed differs \(0 vs 1\)",
         absent=r"TRIPPED"),
    Case("compared", pair(report(0.6), "--format", "markdown"), EXIT_OK, None,
         stdout=r"\| spearman \| 0\.5000 \| 0\.6000 \| \+0\.1000 \| \+20\.0% \| more bias \|"),
]


@pytest.mark.parametrize("case", params(CASES))
def test_hostile_diff(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)

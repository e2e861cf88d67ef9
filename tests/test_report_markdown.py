"""The Markdown report: relative image links that resolve, GFM tables, content vs result."""

from __future__ import annotations

import dataclasses

import io
import re
from pathlib import Path
from urllib.parse import unquote

import pluggy
import pytest
from PIL import Image

from auditor import hookspecs
from auditor.plugins.renderers import RenderContext, render_to
from auditor.report import content as c
from auditor.report import formatting as f
from auditor.report.markdown import MarkdownRenderer, md_escape, md_table
from auditor.result import AuditResult, Condition, CutoffMeasures, Inputs, Retrieval, Verdict
from report_samples import bare_result, builtin_measures, full_result

IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)]+)\)")


class _Builtins:
    @hookspecs.hookimpl
    def popaudit_renderers(self) -> list[object]:
        return [MarkdownRenderer()]


def _pm() -> pluggy.PluginManager:
    pm = pluggy.PluginManager("popaudit")
    pm.add_hookspecs(hookspecs)
    pm.register(_Builtins(), name="md")
    return pm


def _cells(line: str) -> list[str]:
    """Split a GFM table row on unescaped pipes."""
    inner = line.strip()[1:-1]
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", inner)]


def _tables(text: str) -> list[list[list[str]]]:
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append(_cells(line))
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    target = tmp_path_factory.mktemp("md") / "audit report.md"
    render_to(full_result(), "markdown", target, _pm())
    return target, target.read_text(encoding="utf-8")


def test_image_links_resolve_to_pngs_beside_the_report(written: tuple[Path, str]) -> None:
    target, text = written
    links = IMAGE.findall(text)
    assert len(links) == 5
    for alt, link in links:
        assert alt and not link.startswith(("/", "http:", "https:"))
        path = target.parent / unquote(link)
        assert path.is_file(), link
        assert path.parent.name == "audit report_files"
        with Image.open(io.BytesIO(path.read_bytes())) as image:
            image.load()
            assert image.format == "PNG"
    names = sorted(p.name for p in (target.parent / "audit report_files").iterdir())
    assert names == sorted(f"{n}.png" for n in
                           ("norm_vs_frequency", "norm_by_decile", "exposure_lorenz", "head_share", "update_angles"))


def test_atomic_writing_leaves_no_temp_files(written: tuple[Path, str]) -> None:
    target, _ = written
    render_to(full_result(), "markdown", target, _pm())  # overwrite in place
    leftovers = [p for p in target.parent.rglob("*") if p.name.startswith(".") or p.suffix == ".tmp"]
    assert leftovers == []
    assert sorted(p.name for p in target.parent.iterdir()) == ["audit report.md", "audit report_files"]


def test_tables_are_well_formed_and_match_the_result(written: tuple[Path, str]) -> None:
    _, text = written
    result = full_result()
    tables = _tables(text)
    for table in tables:
        widths = {len(row) for row in table}
        assert len(widths) == 1, table[0]
        assert all(re.fullmatch(r":?-+:?", cell) for cell in table[1])
    by_header: dict[tuple[str, ...], list[list[str]]] = {}
    for t in tables:
        by_header.setdefault(tuple(t[0]), t[2:])  # the first table with that header
    conditions = by_header[("id", "condition", "status", "evidence")]
    assert {row[0]: row[2] for row in conditions} == {k: v.status for k, v in result.conditions.items()}
    c4 = next(row for row in conditions if row[0] == "C4")
    assert c4[3] == r"config loss = infonce-dot \| dot logits"
    c3 = next(row for row in conditions if row[0] == "C3")
    assert r"\<script\>alert(1)\</script\>" in c3[3]
    fn = result.frequency_norm
    stats = dict(by_header[("statistic", "value")])
    assert stats["Spearman ρ"] == f"{fn.spearman:.3f}"
    assert stats["Spearman ρ, 95% bootstrap CI (200 resamples)"] == (
        f"{fn.spearman_ci[0]:.3f} to {fn.spearman_ci[1]:.3f}"
    )
    deciles = by_header[("decile", "frequency range", "items", "median norm", "mean norm")]
    assert [int(row[0]) for row in deciles] == [d.decile for d in fn.deciles]
    per_k = [t[2:] for t in tables if t[0][0] == "measure" and len(t[0]) == 5]
    assert len(per_k) == 2
    cut = result.retrieval.at[100]
    overlap = per_k[1][-1]
    assert overlap[0] == "overlap of dot and cosine lists" and overlap[1] == f"{100 * cut.overlap_dot_cosine:.1f}%"


def test_headline_recommendations_and_footer(written: tuple[Path, str]) -> None:
    _, text = written
    result = full_result()
    phrase, evidence = c.headline_parts(result)
    assert f"> **{phrase}**: {md_escape(evidence)}." in text
    assert text.startswith("# popaudit report: model with spaces.pt\n")
    for recommendation in result.verdict.recommendations:
        assert f"- {md_escape(recommendation)}" in text
    assert "## Warnings" in text and "Generated by popaudit" in text
    assert "- probes.growth: the checkpoint has no optimizer state" in text


def test_stdout_rendering_omits_images_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    text = MarkdownRenderer().render(full_result(), RenderContext(destination=None))
    assert IMAGE.findall(text) == []
    assert "Plots omitted: this report went to standard output" in text
    assert list(tmp_path.iterdir()) == []


def test_bare_result_says_what_was_not_measured(tmp_path: Path) -> None:
    target = tmp_path / "bare.md"
    render_to(bare_result(), "markdown", target, _pm())
    text = target.read_text(encoding="utf-8")
    result = bare_result()
    for section in ("frequency_norm", "retrieval", "conditions"):
        assert f"_Not measured: {md_escape(result.not_measured[section])}._" in text
    assert "_Not measured: no reason was recorded by the audit._" in text
    assert "Plots omitted" not in text and IMAGE.findall(text) == []
    assert not (tmp_path / "bare_files").exists()


def _small_result(**changes: object) -> AuditResult:
    lm = builtin_measures(0.3, 0.5, 0.6, 10.0, 0.2, 0.8, 0.3, 5.0)
    lc = builtin_measures(0.1, 0.3, 0.4, 5.0, 0.4, 0.5, 0.6, 6.0)
    result = full_result()
    result.frequency_norm.spearman = 0.5
    result.frequency_norm.spearman_ci = (0.4, 0.6)
    fields = {
        "retrieval": Retrieval(20, "exact", {10: CutoffMeasures(lc, lc, lc, 1.0), 100: CutoffMeasures(lm, lc, lm, 0.4)}),
        "conditions": {"C2": Condition("linear", "violated", "mlp"), "C1": Condition("sgd", "holds", "sgd")},
        "verdict": Verdict(True, "moderate", "", []),
    }
    return dataclasses.replace(result, **{**fields, **changes})


def test_headline_known_sentence() -> None:
    assert c.headline(_small_result()) == (
        "Popularity bias detected (severity moderate): item norm vs training frequency Spearman "
        "ρ = 0.50, 95% CI 0.40 to 0.60; at K=100 the top-1% items fill 30.0% of dot-product slots "
        "vs 10.0% under cosine (3.00×); at K=10, the first slots a user sees: 10.0% vs 10.0% (1.00×); "
        "conditions: C1 holds, C2 violated."
    )
    none = _small_result(frequency_norm=None, retrieval=None, conditions=None,
                         verdict=Verdict(False, "none", "", [], assessed=False))
    assert c.headline(none) == (
        "Popularity bias not assessed: frequency–norm correlation not measured; "
        "retrieval not measured; conditions not assessed."
    )


def test_number_formatting() -> None:
    assert f.fmt_num(1234567) == "1,234,567"
    assert f.fmt_num(0.12345) == "0.123"
    assert f.fmt_num(3.2e-12) == "3.20e-12"
    assert f.fmt_num(float("nan")) == "n/a" and f.fmt_num(None) == "n/a"
    assert f.fmt_num(12345.678) == "12,345.7"
    assert f.fmt_pct(0.341) == "34.1%" and f.fmt_pct(0.0042) == "0.42%"
    assert f.fmt_ratio(4.1558) == "4.16×" and f.fmt_ratio(None) == "n/a"
    assert f.fmt_ratio(float("inf")) == "∞×"
    assert f.fmt_range(3, 3) == "3" and f.fmt_range(1, 2000) == "1–2,000"
    assert f.fmt_scalar(10.0) == "10" and f.fmt_scalar(0.0070352) == "0.007035" and f.fmt_scalar(True) == "yes"
    assert f.fmt_value({"a": [1, 2]}) == '{"a": [1, 2]}'
    assert f.fmt_value({"a": "x" * 200}, limit=10) == '{"a": "xx' + "…"
    assert f.fmt_value("x" * 200, limit=10) == "x" * 200  # a sentence's point may come last: never cut
    assert f.flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == [("a.b", 1), ("a.c.d", 2), ("e", 3)]


def test_md_helpers_escape() -> None:
    assert md_escape("a|b *c* <d>\nnext") == r"a\|b \*c\* \<d\> next"
    table = f.Table(("k", "v"), (("x|y", "1"),), (False, True), caption="note_1")
    assert md_table(table) == "| k | v |\n|:---|---:|\n| x\\|y | 1 |\n\n_note\\_1_\n\n"


def test_inputs_round_trip_into_the_inputs_table() -> None:
    inputs = Inputs("m.pt", "log.csv", "item", None, 10, 4, 99)
    rows = dict(c.inputs_table(inputs).rows)
    assert rows["model file"] == "m.pt" and rows["user table"] == "n/a" and rows["interactions"] == "99"
    assert rows["model format"] == "n/a"


def test_settings_say_what_auto_ran_and_inputs_have_readers_labels() -> None:
    """"index auto" beside a retrieval section that says exact: the settings say what ran."""
    table = c.settings_table({"ks": [10], "index": "auto", "queries": "auto", "seed": 0},
                             {"index": "exact", "queries": "users"})
    assert dict(table.rows) == {"ks": "10", "index": "auto (ran: exact)", "queries": "auto (ran: users)", "seed": "0"}
    asked = c.settings_table({"index": "ivf", "queries": "q.npy"}, {"index": "ivf", "queries": "file"})
    assert dict(asked.rows) == {"index": "ivf", "queries": "q.npy"}  # what was asked is what ran
    result = full_result()
    assert result.retrieval is not None
    ran = c.settings_ran(result)
    assert ran["index"] == result.retrieval.index
    rows = dict(c.inputs_table(Inputs("m.pt", "log.csv", "item", None, 10, 4, 99, n_untrained_user_rows=2)).rows)
    assert rows["user-table rows never in the training log (not queried)"] == "2"
    assert not [label for label in rows if "_" in label]  # no raw key


def test_probe_tables_group_setup_and_flatten_details() -> None:
    probes = {
        "update_angles": {"n": 3, "median": 90.0, "share_90pm1": 1.0, "share_90pm10": 1.0, "mean": 90.0,
                          "histogram": {"edges": [0, 90, 180], "counts": [0, 3]}},
        "dtype": "float64",
        "seed": 7,
        "c3_cross_jacobian": {"n_pairs": 28, "shared": False, "inner": {"max": 5.684e-14}},
    }
    tables = c.probes_tables(probes)
    assert [(key, title) for key, title, _ in tables] == [
        ("update_angles", "Update angles (one probe step)"),
        ("setup", "Probe setup"),
        ("c3_cross_jacobian", "C3 no sharing: Jacobians of distinct items"),
    ]
    # Reader labels and units (auditor/report/labels.py), not the JSON keys.
    angles = dict(tables[0][2].rows)
    assert angles["median angle"] == "90.00°" and angles["mean angle"] == "90.00°"
    assert not any("histogram" in label for label in angles)
    assert dict(tables[1][2].rows) == {"numeric precision of the probe copy": "float64", "random seed": "7"}
    assert dict(tables[2][2].rows) == {
        "pairs of distinct items": "28", "parameters shared between items (C3 violated)": "no", "inner.max": "5.684e-14"
    }


def test_definitions_drop_a_repeated_term_prefix() -> None:
    table = c.definitions_table({"gini": "gini: Gini index of exposure", "ties": "higher score first: then row"})
    assert dict(table.rows) == {"gini": "Gini index of exposure", "ties": "higher score first: then row"}


def test_the_interval_counts_resamples_left_out_and_reads_undefined_when_null() -> None:
    from auditor.report.audit_brief import _frequency_norm as brief_rows

    result = full_result()
    some = dataclasses.replace(result.frequency_norm, spearman_ci=(0.2220409, 0.6216701), n_bootstrap=1000,
                               n_bootstrap_undefined=6)
    assert dict(c.frequency_norm_table(some).rows)[
        "Spearman ρ, 95% bootstrap CI (1,000 resamples; 6 with an undefined ρ left out)"] == "0.222 to 0.622"
    null = dataclasses.replace(some, spearman=0.243, spearman_ci=(float("nan"), float("nan")),
                               n_bootstrap_undefined=129)
    assert dict(c.frequency_norm_table(null).rows)[
        "Spearman ρ, 95% bootstrap CI (1,000 resamples; 129 with an undefined ρ left out)"] == "undefined"
    brief = dict(brief_rows(dataclasses.replace(result, frequency_norm=null)).rows)
    assert brief["Spearman ρ (95% CI)"] == "0.243 [undefined]"
    assert "95% CI" not in c.headline(dataclasses.replace(result, frequency_norm=null))


def test_a_group_measure_undefined_under_every_scoring_has_no_row() -> None:
    # PopRSP NaN everywhere (a probability 0/0), ΔGAP niche NaN (an empty group): no row of n/a;
    # a group measure measured under one scoring keeps its row; novelty (not a group measure) stays.
    from auditor.result import ListMeasureInfo, ListMeasures

    nan = float("nan")

    def listed(rsp: float, gap: float) -> ListMeasures:
        return ListMeasures(dict(head_share_1pct=0.1, novelty=None, pop_rsp=rsp, gap_delta_niche=gap,
                                 gap_delta_diverse=0.2))

    cut = CutoffMeasures(dot=listed(nan, nan), cosine=listed(nan, nan), popular=listed(nan, nan),
                         overlap_dot_cosine=1.0, norm_aware={"alpha_0.5": listed(nan, 0.1)})
    measures = {name: ListMeasureInfo(name, "num3")
                for name in ("head_share_1pct", "novelty", "pop_rsp", "gap_delta_niche", "gap_delta_diverse")}
    rows = [row[0] for row in c.cutoff_table(10, cut, measures).rows]
    assert rows[:4] == ["head_share_1pct", "novelty", "gap_delta_niche", "gap_delta_diverse"] and "pop_rsp" not in rows

"""Text on the figures: bar labels show small percentages with the decimals they need,
titles fit their figure and wrap only between phrases."""

from __future__ import annotations

import dataclasses

import pytest
from matplotlib.figure import Figure
from matplotlib.text import Text

from auditor.report import plots
from auditor.report.formatting import fmt_pct, fmt_share_row, percent_text
from auditor.report.plot_text import PHRASE_BREAK, fit_title
from auditor.result import CutoffMeasures, Retrieval
from report_samples import builtin_measures, full_result


def _measures(head1: float):  # type: ignore[no-untyped-def]
    return builtin_measures(head1, 0.2, 0.3, 10.0, 0.5, 0.4, 0.6, 5.0)


def test_percent_decimals_follow_the_magnitude() -> None:
    assert [percent_text(p) for p in (54.6, 3.04, 0.4, 0.036, 0.0042, 0.0)] == [
        "54.6%", "3.0%", "0.40%", "0.036%", "0.0042%", "0.0%"]
    assert fmt_pct(0.004) == "0.40%" and fmt_pct(0.00036) == "0.036%" and fmt_pct(None) == "n/a"


def test_small_head_shares_are_labelled_as_measured_never_as_zero() -> None:
    cut = CutoffMeasures(_measures(0.0312), _measures(0.004), _measures(0.546), 0.5)
    small = CutoffMeasures(_measures(0.012), _measures(0.00036), _measures(0.055), 0.8)
    fig = plots.head_share_figure(Retrieval(n_queries=10, index="exact", at={10: cut, 100: small}))
    labels = [t.get_text() for t in fig.axes[0].texts]
    # dot, cosine, popular bars, each at K=10 then K=100: the tables' cells, one row rule per K
    assert labels == ["3.1%", "1.2%", "0.40%", "0.036%", "54.60%", "5.500%"]
    assert labels[::2] == fmt_share_row([0.0312, 0.004, 0.546]) and labels[1::2] == fmt_share_row([0.012, 0.00036, 0.055])
    assert all(t.get_rotation() == 0 for t in fig.axes[0].texts)
    crowded = plots.head_share_figure(Retrieval(n_queries=10, index="exact", at={5: cut, 10: cut, 100: small}))
    assert {t.get_rotation() for t in crowded.axes[0].texts} == {90.0}  # three K: upright labels


def test_bar_labels_read_as_the_table_cells_they_illustrate() -> None:
    # QA report F3 (in1): most popular 0.1795 at K=10 and 0.01795 at K=100 beside dot/cosine pairs
    # the table prints with 2 decimals: 17.95% and 1.80% there, the bars read 17.9% and 1.8%.
    at = {10: CutoffMeasures(_measures(0.036), _measures(0.0025), _measures(0.1795), 0.5),
          100: CutoffMeasures(_measures(0.0067), _measures(0.00375), _measures(0.01795), 0.5)}
    fig = plots.head_share_figure(Retrieval(n_queries=10, index="exact", at=at))
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert labels == ["3.6%", "0.67%", "0.25%", "0.38%", "17.95%", "1.80%"]  # was 17.9% and 1.8%
    assert labels[::2] == fmt_share_row([0.036, 0.0025, 0.1795])


def _title_texts(fig: Figure) -> list[Text]:
    texts = [ax.title for ax in fig.axes if ax.get_title()]
    suptitle = getattr(fig, "_suptitle", None)
    return texts + ([suptitle] if suptitle is not None else [])


def _assert_fits_and_wraps_between_phrases(fig: Figure) -> None:
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    fig.draw(renderer)
    box = fig.bbox
    for text in _title_texts(fig):
        extent = text.get_window_extent(renderer)
        assert extent.x0 >= box.x0 - 0.5 and extent.x1 <= box.x1 + 0.5, (text.get_text(), extent, box)
        lines = text.get_text().split("\n")
        for before, after in zip(lines, lines[1:]):
            # every break is one a phrase boundary allows: after ':', ';' or ',', or before '('
            assert before.endswith((":", ";", ",")) or after.startswith("("), lines


def test_a_long_suptitle_on_one_panel_wraps_at_its_comma_and_colon() -> None:
    result = full_result()
    exposure = {s: {10: per_k[10]} for s, per_k in result.plot_data.exposure.items()}
    fig = plots.exposure_lorenz_figure(exposure)
    title = fig._suptitle.get_text()  # type: ignore[union-attr]
    assert title == "Exposure Lorenz curves: the further below the diagonal,\nthe more concentrated"
    _assert_fits_and_wraps_between_phrases(fig)


def test_a_phrase_wider_than_the_room_is_set_smaller_not_split() -> None:
    fig = plots.new_figure(4.0, 2.0)
    ax = fig.add_subplot()
    fit_title(ax, "an unbreakable phrase wider than the panel")
    assert "\n" not in ax.get_title() and 6 <= ax.title.get_fontsize() < 12
    _assert_fits_and_wraps_between_phrases(fig)
    # Too wide even at the smallest size: between words, as a last resort, still inside.
    fig = plots.new_figure(2.0, 2.0)
    ax = fig.add_subplot()
    fit_title(ax, "an unbreakable phrase much wider than two inches")
    assert ax.title.get_fontsize() == 6 and ax.get_title().count("\n") >= 1
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    fig.draw(renderer)
    extent = ax.title.get_window_extent(renderer)
    assert extent.x0 >= 0 and extent.x1 <= fig.bbox.x1


@pytest.mark.parametrize("ks", [(10,), (5, 10, 50, 200)])  # the narrowest Lorenz figure; the most crowded bars
def test_every_audit_figure_title_fits_and_wraps_between_phrases(ks: tuple[int, ...]) -> None:
    result = full_result()
    cut = result.retrieval.at[10]
    at = {k: dataclasses.replace(cut) for k in ks}
    exposure = {s: {k: per_k[10] for k in ks} for s, per_k in result.plot_data.exposure.items()}
    result = dataclasses.replace(result, retrieval=dataclasses.replace(result.retrieval, at=at),
                                 plot_data=dataclasses.replace(result.plot_data, exposure=exposure))
    for spec in plots.plot_specs(result):
        _assert_fits_and_wraps_between_phrases(spec.draw())


def test_phrase_breaks() -> None:
    assert PHRASE_BREAK.split("A: b, c (d; e) f 1,847") == ["A:", "b,", "c", "(d;", "e) f 1,847"]

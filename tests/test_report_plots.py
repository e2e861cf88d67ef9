"""Report figures: known-answer helpers, figure contents, PNG encoding, no display."""

from __future__ import annotations

import dataclasses

import base64
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from auditor.report import plot_data, plots
from auditor.result import DecileRow, PlotData
from report_samples import bare_result, full_result


def _png_size(png: bytes) -> tuple[int, int]:
    with Image.open(io.BytesIO(png)) as image:
        image.load()
        return image.size


def test_lorenz_curve_known_points() -> None:
    x, y = plot_data.lorenz_curve(np.array([3, 0, 1, 0]))
    np.testing.assert_allclose(x, [0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(y, [0, 0, 0, 0.25, 1.0])


def test_lorenz_curve_resamples_large_catalogues_and_handles_zero() -> None:
    counts = np.arange(10_000, dtype=np.float64)
    x, y = plot_data.lorenz_curve(counts, n_points=101)
    assert x.size == 101 and y[0] == 0 and y[-1] == pytest.approx(1.0)
    # For counts 0..n-1 the Lorenz curve is y = x² (up to 1/n).
    np.testing.assert_allclose(y, x**2, atol=2e-4)
    x0, y0 = plot_data.lorenz_curve(np.zeros(5))
    np.testing.assert_allclose(x0, y0)


def test_popularity_groups_follow_the_table_sizes() -> None:
    freq = np.array([0, 5, 1, 3, 0, 2])
    rows = [DecileRow(1, 1, 2, 2, 0.0, 0.0), DecileRow(2, 3, 5, 2, 0.0, 0.0)]
    groups, labels = plot_data.popularity_groups(freq, rows)
    assert groups.tolist() == [-1, 1, 0, 1, -1, 0]
    assert labels == ["1\n1–2", "2\n3–5"]
    # A table covering every item (cold ones included) puts the cold items in decile 1.
    # (Deciles keep the table's numbers, which skip empty ones; one value needs no range.)
    rows_all = [DecileRow(1, 0, 1, 3, 0.0, 0.0), DecileRow(3, 2, 5, 3, 0.0, 0.0)]
    groups_all, labels_all = plot_data.popularity_groups(freq, rows_all)
    assert groups_all.tolist() == [0, 1, 0, 1, 0, 1]
    assert labels_all == ["1\n0–1", "3\n2–5"]
    _, single = plot_data.popularity_groups(np.array([4, 4, 9]), [DecileRow(1, 4, 4, 2, 0, 0), DecileRow(2, 9, 9, 1, 0, 0)])
    assert single == ["1\n4", "2\n9"]


def test_popularity_groups_fall_back_to_equal_ranks() -> None:
    freq = np.arange(1, 21)
    groups, labels = plot_data.popularity_groups(freq, [DecileRow(1, 1, 1, 7, 0, 0)], n_groups=4)
    assert np.bincount(groups).tolist() == [5, 5, 5, 5]
    assert groups[0] == 0 and groups[-1] == 3 and labels[3] == "4\n16–20"


def test_png_and_data_uri_round_trip() -> None:
    fig = plots.new_figure(4.0, 3.0)
    fig.add_subplot().plot([0, 1], [1, 0])
    png = plots.figure_png(fig, dpi=50)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert _png_size(png) == (200, 150)
    uri = plots.png_data_uri(png)
    assert uri.startswith("data:image/png;base64,")
    assert base64.b64decode(uri.split(",", 1)[1]) == png


def _line(fig, label_start: str):  # type: ignore[no-untyped-def]
    for line in fig.axes[0].get_lines():
        if str(line.get_label()).startswith(label_start):
            return line
    raise AssertionError(f"no line labelled {label_start!r}")


def test_norm_vs_frequency_fit_medians_and_cold_line() -> None:
    freq = np.repeat(np.array([0.0, 1, 4, 16, 64, 256]), 20)
    norms = np.where(freq > 0, 2.0 * np.sqrt(np.maximum(freq, 1)), 0.5)
    fig = plots.norm_vs_frequency_figure(norms, freq)
    fit = _line(fig, "log–log fit")
    assert "slope 0.500" in fit.get_label()
    np.testing.assert_allclose(fit.get_ydata(), 2.0 * np.sqrt(fit.get_xdata()), rtol=1e-9)
    medians = _line(fig, "decile medians")
    # 100 warm items in 10 rank groups of 10: each group is one frequency level (two per level).
    np.testing.assert_allclose(medians.get_xdata(), np.repeat([1, 4, 16, 64, 256], 2))
    np.testing.assert_allclose(medians.get_ydata(), 2.0 * np.sqrt(medians.get_xdata()))
    cold = _line(fig, "median of 20 cold items")
    assert cold.get_ydata()[0] == pytest.approx(0.5)
    assert fig.axes[0].get_xscale() == "log"


def test_norm_vs_frequency_uses_the_reported_slope_and_samples_points() -> None:
    rng = np.random.default_rng(0)
    freq = rng.integers(1, 1000, 5000).astype(np.float64)
    norms = freq**0.25
    fig = plots.norm_vs_frequency_figure(norms, freq, slope=0.25, max_points=1000)
    fit = _line(fig, "log–log fit")
    np.testing.assert_allclose(fit.get_ydata(), fit.get_xdata() ** 0.25, rtol=1e-9)
    scatter = fig.axes[0].collections[0]
    assert scatter.get_offsets().shape[0] == 1000
    assert "1,000 of 5,000 shown" in scatter.get_label()


def test_norm_by_decile_boxes_match_group_medians() -> None:
    freq = np.arange(1, 101, dtype=np.float64)
    norms = freq / 10.0
    fig = plots.norm_by_decile_figure(norms, freq)
    ax = fig.axes[0]
    medians = [line for line in ax.get_lines() if line.get_color() == plots.COLORS["dot"]]
    assert len(medians) == 10
    np.testing.assert_allclose([m.get_ydata()[0] for m in medians], [np.median(np.arange(10 * g + 1, 10 * g + 11)) / 10 for g in range(10)])


def _fliers(ax) -> np.ndarray:
    """Every point drawn beyond a box's whiskers (markers without a line)."""
    drawn = [line.get_ydata() for line in ax.get_lines() if line.get_linestyle() in ("None", "none", "")]
    return np.sort(np.concatenate(drawn)) if drawn else np.empty(0)


def test_norm_by_decile_draws_the_head_items_beyond_the_whiskers() -> None:
    """QA F4: the three most frequent items, norms far above decile 10's other items, were
    left out (fliers off); they are drawn, and the axis reads norms, not an offset."""
    freq = np.arange(1, 1001, dtype=np.float64)
    norms = 1.0 + (np.arange(1000) % 10) * 0.01  # every decile: 1.00 ... 1.09, whiskers inside
    norms[[997, 998, 999]] = [6.4, 6.85, 7.82]  # decile 10's three most frequent items
    fig = plots.norm_by_decile_figure(norms, freq)
    ax = fig.axes[0]
    np.testing.assert_allclose(_fliers(ax), [6.4, 6.85, 7.82])
    assert ax.get_yscale() == "linear" and ax.get_ylim()[1] >= 7.82
    assert "points: items beyond the whiskers" in ax.get_title().replace("\n", " ")


def test_norm_by_decile_spanning_orders_of_magnitude_is_log_and_noise_is_not_magnified() -> None:
    # Two head items of norm 100 over a body of norm 1 (float32 noise): both drawn, log axis.
    freq = np.arange(1, 201, dtype=np.float64)
    norms = (1 + np.float32(3e-8) * np.sign(np.sin(freq))).astype(np.float32).astype(np.float64)
    norms[[198, 199]] = 100.0
    ax = plots.norm_by_decile_figure(norms, freq).axes[0]
    assert ax.get_yscale() == "log"
    np.testing.assert_allclose(_fliers(ax)[-2:], [100.0, 100.0])
    # Every norm one value up to float32 rounding: an axis ±5% around it, no "1e-8+1" offset.
    ax = plots.norm_by_decile_figure(np.float32(1) + np.zeros(100), freq[:100]).axes[0]
    low, high = ax.get_ylim()
    assert low == pytest.approx(0.95) and high == pytest.approx(1.05)
    ax.figure.canvas.draw()
    assert ax.yaxis.get_offset_text().get_text() == ""


def test_head_share_bars_are_the_measured_percentages() -> None:
    result = full_result()
    fig = plots.head_share_figure(result.retrieval)
    heights = [round(p.get_height(), 6) for p in fig.axes[0].patches]
    expected = [
        round(100 * getattr(result.retrieval.at[k], s)["head_share_1pct"], 6)
        for s in ("dot", "cosine", "popular")
        for k in (10, 100)
    ]
    assert heights == expected


def test_update_angle_histogram_counts_and_share() -> None:
    angles = np.array([90.2] * 10 + [45.5])
    fig = plots.update_angle_figure(angles)
    ax = fig.axes[0]
    stairs = ax.patches[0]
    counts = stairs.get_data().values
    assert counts[90] == 10 and counts[45] == 1 and counts.sum() == 11
    assert "90.9% within 90° ± 1°" in ax.get_title()
    hist_fig = plots.update_angle_figure(histogram={"edges": [0, 60, 120, 180], "counts": [1, 2000, 3]})
    assert hist_fig.axes[0].get_yscale() == "log"
    with pytest.raises(ValueError):
        plots.update_angle_figure()


def test_audit_plots_follow_what_the_result_holds() -> None:
    result = full_result()
    specs = plots.plot_specs(result)
    assert [s.name for s in specs] == [
        "norm_vs_frequency", "norm_by_decile", "exposure_lorenz", "head_share", "update_angles",
    ]
    drawn = plots.audit_plots(result)
    for plot in drawn:
        width, height = _png_size(plot.png)
        assert width > 300 and height > 200
    assert plots.audit_plots(bare_result()) == []
    # Re-read from JSON: no arrays, so only the head-share bars and the reported histogram.
    result = dataclasses.replace(result, plot_data=PlotData())
    assert [s.name for s in plots.plot_specs(result)] == ["head_share", "update_angles"]


def test_rendering_never_imports_pyplot(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from report_samples import full_result\n"
        "from auditor.report.html import HtmlRenderer\n"
        "from auditor.report import RenderContext\n"
        "HtmlRenderer().render(full_result(), RenderContext())\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
    )
    # A GUI backend that cannot start here: rendering must not care.
    env = {"MPLBACKEND": "TkAgg", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_norm_vs_frequency_follows_the_norm_axis_rule_of_the_boxes() -> None:
    """QA F1: the scatter kept matplotlib's own axis: on a table of unit norms it zoomed to
    the float32 rounding (an axis "1e-8+1"), and over a 1000× span it stayed linear while
    the boxes beside it were on a log axis. Both plots now share one axis rule."""
    rng = np.random.default_rng(3)
    freq = rng.integers(0, 500, 400).astype(np.float64)
    vectors = rng.normal(size=(400, 16)).astype(np.float32)
    unit = np.linalg.norm(vectors / np.linalg.norm(vectors, axis=1, keepdims=True), axis=1).astype(np.float64)
    assert 0 < unit.max() / unit.min() - 1 < 1e-6  # float32 rounding noise only
    for figure in (plots.norm_vs_frequency_figure, plots.norm_by_decile_figure):
        ax = figure(unit, freq).axes[0]
        low, high = ax.get_ylim()
        assert ax.get_yscale() == "linear"
        assert low == pytest.approx(unit.min() - 0.05 * unit.max()) and high == pytest.approx(unit.max() * 1.05)
        ax.figure.canvas.draw()
        assert ax.yaxis.get_offset_text().get_text() == ""
        assert ax.get_ylabel() == "item embedding norm ‖q‖"
    span = np.geomspace(0.01, 10.0, 400)[np.argsort(np.argsort(freq, kind="stable"))]  # grows with frequency
    assert span.max() / span.min() == pytest.approx(1000.0)
    for figure in (plots.norm_vs_frequency_figure, plots.norm_by_decile_figure):
        ax = figure(span, freq).axes[0]
        assert ax.get_yscale() == "log"
        assert ax.get_ylabel() == "item embedding norm ‖q‖ (log scale)"
    # Under the 100× span, a linear axis on both.
    narrow = np.linspace(1.0, 50.0, 400)
    assert {figure(narrow, freq).axes[0].get_yscale()
            for figure in (plots.norm_vs_frequency_figure, plots.norm_by_decile_figure)} == {"linear"}


def test_a_zero_norm_row_keeps_the_log_norm_axis_and_sits_on_its_floor() -> None:
    """QA N1: one all-zero item row (a padding row) made the smallest norm 0, so a 1000×
    span of the positive norms went back to a linear axis on both plots (9 deciles flat on
    0). The log decision is now the positive norms'; the zero row is drawn on a floor half a
    decade below the smallest positive norm, and a legend line and the caption say so."""
    from auditor.report import figures

    rng = np.random.default_rng(3)
    freq = rng.integers(0, 500, 400).astype(np.float64)
    norms = np.geomspace(0.01, 10.0, 400)[np.argsort(np.argsort(freq, kind="stable"))]
    padding = int(np.flatnonzero(freq == 0)[0])
    norms[padding] = 0.0
    positive = norms[norms > 0]
    assert positive.max() / positive.min() > 900  # far over the 100× of a log axis
    floor = positive.min() / np.sqrt(10.0)  # half a decade below the smallest positive norm
    legend = "1 zero-norm item (‖q‖ = 0), drawn on this floor"
    scatter = plots.norm_vs_frequency_figure(norms, freq).axes[0]
    boxes = plots.norm_by_decile_figure(norms, freq).axes[0]
    for ax in (scatter, boxes):
        assert ax.get_yscale() == "log"
        assert ax.get_ylabel() == "item embedding norm ‖q‖ (log scale)"
        assert legend in [t.get_text() for t in ax.get_legend().get_texts()]
        low, high = ax.get_ylim()
        assert low < floor < positive.min() and high >= 10.0
        floor_lines = [line for line in ax.get_lines() if line.get_label() == legend]
        assert floor_lines and np.allclose(floor_lines[0].get_ydata(), floor)
    # The padding row is cold: the boxes' cold group reaches down to the floor (its whisker).
    cold = norms[freq == 0]
    assert cold.size == 2 and np.median(np.where(cold > 0, cold, floor)) == pytest.approx((floor + cold.max()) / 2)
    whisker_ends = [float(np.min(line.get_ydata())) for line in boxes.get_lines() if len(line.get_ydata())]
    assert min(whisker_ends) == pytest.approx(floor)
    # The caption (the figure's text alternative) says the same.
    result = dataclasses.replace(full_result(), plot_data=PlotData(norms=norms, frequencies=freq))
    alts = {f.name: f.alt for f in figures.audit_figures(result)}
    for name in ("norm_vs_frequency", "norm_by_decile"):
        assert alts[name].endswith("Norm axis: log scale over the positive norms; 1 zero-norm item "
                                   "drawn on a dotted floor line below them.")
    # Without the zero row: log, no floor line; on a linear axis a zero norm stays at 0.
    norms[padding] = positive.min()
    ax = plots.norm_by_decile_figure(norms, freq).axes[0]
    assert ax.get_yscale() == "log" and ax.get_legend() is None
    narrow = np.linspace(1.0, 50.0, 400)
    narrow[padding] = 0.0
    ax = plots.norm_by_decile_figure(narrow, freq).axes[0]
    assert ax.get_yscale() == "linear" and ax.get_ylim()[0] <= 0.0 and ax.get_legend() is None

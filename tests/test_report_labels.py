"""Every probe field reaches a reader under a label and unit (auditor/report/labels.py),
in the HTML and Markdown reports alike; JSON keeps the keys."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from auditor.probe_results import (
    CrossJacobian,
    GradientAlignment,
    ProbeFailure,
    ProbeOutcome,
    SecondDifference,
    TowerLayers,
    UpdateProbe,
    UserCoupling,
)
from auditor.report import RenderContext
from auditor.report import content as c
from auditor.report.formatting import flatten
from auditor.report.html import HtmlRenderer
from auditor.report.labels import PROBE_FIELDS, PROBE_TITLES
from auditor.report.markdown import MarkdownRenderer
from report_samples import full_result


def every_probe() -> ProbeOutcome:
    """A probe outcome with every block filled (and every probe's failure recorded)."""
    angles = np.array([89.5, 90.0, 90.0, 120.0])
    return ProbeOutcome(
        dtype="float64", seed=3, batch_source="interaction log", batch_size=256,
        layers=TowerLayers("item_tower.table", ("Embedding",), True, "embedding", 960),
        second_difference=SecondDifference((0.1, 0.01), (1e-18, 0.0), 3, 30, 1e-9, True),
        cross_jacobian=CrossJacobian((1, 2, 3), 3, 3, 0.0, 0.0, 0.0, 0, 1e-9, False, True),
        user_coupling=UserCoupling(8, 120, 0.447, True, 4, 0, 1e-9, 16),
        gradient_alignment=GradientAlignment(256, 2e-17, 1e-16, 1e-9, True),
        update=UpdateProbe(
            angles=angles, residuals=np.zeros(4), growth=np.full(4, 0.02), growth_per_appearance=np.full(4, 0.01),
            relative_change=np.full(4, 0.02), n_evaluated=800, optimizer="SGD", optimizer_restored=True, lr=1.0,
            steps=1,
        ),
        errors={key: ProbeFailure("example") for key in ("item_tower", "c2", "c3", "c3_user", "c4", "update")},
    )


def test_every_probe_field_has_a_reader_label() -> None:
    keys = [k for k, _ in flatten(every_probe().to_dict()) if not k.startswith("update_angles.histogram")]
    assert [k for k in keys if k not in PROBE_FIELDS] == []
    assert [k for k in PROBE_FIELDS if k not in keys] == []  # no stale label either
    blocks = {k.split(".")[0] for k, v in every_probe().to_dict().items() if isinstance(v, dict)}
    assert blocks <= set(PROBE_TITLES)
    # A label is words, not an identifier: no snake_case left.
    assert [label for label, _ in PROBE_FIELDS.values() if re.search(r"[a-z]_[a-z]", label)] == []


def test_probe_tables_show_labels_units_and_the_two_item_counts_apart() -> None:
    tables = {key: dict(table.rows) for key, _title, table in c.probes_tables(every_probe().to_dict())}
    angles = tables["update_angles"]
    # n = 4 items moved, n_evaluated = 800 compared: both named for what they count.
    moved = ("items whose embedding moved (the angles are over these: the batch's items and any the optimizer "
             "state or weight decay moved; experiment results count the batch's only)")
    assert angles[moved] == "4"  # QA conditions F10: which items, unlike the experiment grids'
    # (and the grids' results.md says so too: tests/test_experiment_serving.py)
    assert angles["items compared before and after the step (batch items and a sample of others)"] == "800"
    assert angles["median angle"] == "90.00°"  # median of 89.5, 90, 90, 120
    assert angles["largest distance from 90°, |angle − 90°|"] == "30.00°"
    assert angles["share within 90° ± 1°"] == "75.0%"
    growth = tables["growth_per_update"]
    assert growth["median, c/s² per step"] == "0.02"
    assert growth["median, measured change of s = ‖q‖², (s′ − s)/s"] == "0.02"
    assert tables["optimizer"]["optimizer state restored from the file"] == "yes"
    assert tables["item_tower"]["parameters of the item tower"] == "960"
    assert tables["errors"]["C4 gradient alignment"] == "example"


def test_html_and_markdown_show_no_internal_probe_names() -> None:
    result = replace(full_result(), probes=every_probe())
    html = HtmlRenderer().render(result, RenderContext())
    markdown = MarkdownRenderer().render(result, RenderContext())
    for text in (html, markdown):
        section = text[text.index("Probes"):]
        for internal in ("max_abs_deviation_from_90", "n_evaluated", "relative_change_of_s", "share_90pm1",
                         "per_appearance", "n_parameters"):
            assert internal not in section, internal
        assert "items compared before and after the step" in section

"""The Who-pays table reads ΔGAP beside cosine's for the same group (QA harms F5): training
items are never served, so even lists blind to popularity have a ΔGAP far below 0 for
head-heavy profiles, and a group's distance from 0 alone blames them under any scoring.

Known answer: the QA's figures at K=5 (dot +0.138 / −0.283 / −0.466, cosine −0.022 /
−0.431 / −0.562; a uniformly random list −0.134 / −0.444 / −0.562): dot's lift over cosine
is +16.0, +14.8 and +9.5 points (exactly +9.530: the blockbuster figures to five places,
−0.46603 and −0.56133; the rounded ones would read +9.6), largest for the niche users."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

from auditor.report.harms import GROUPS_NOTE, group_table

DOT = (0.138, -0.283, -0.46603)
COSINE = (-0.022, -0.431, -0.56133)


def _rows(deltas: tuple[float, ...]) -> list[dict[str, Any]]:
    return [{"group": g, "n_users": n, "gap_profile": 10.0, "gap_delta": d, "miscalibration": 0.3, "ndcg": None}
            for g, n, d in zip(("niche", "diverse", "blockbuster"), (11, 17, 9), deltas)]


def test_the_table_states_dots_lift_over_cosine_per_group() -> None:
    retrieval = SimpleNamespace(user_groups={5: {"dot": _rows(DOT), "cosine": _rows(COSINE)}}, tied_ratio=None,
                                approximate=lambda k: "", saturated={}, n_saturated={})
    table = group_table(retrieval, 5)  # type: ignore[arg-type]
    assert table is not None and table.headers[-1] == "ΔGAP dot − cosine"
    assert [row[-1] for row in table.rows] == ["+16.0%", "+14.8%", "+9.5%"]
    assert "serves worst" not in GROUPS_NOTE and "further off than the others" not in GROUPS_NOTE
    assert "beside cosine's for the same group" in GROUPS_NOTE


def test_an_empty_groups_lift_reads_n_a_without_a_sign() -> None:
    """QA harms N3: a group with no user (``--niche-fraction 0.01``) has a NaN or null ΔGAP
    under both scorings; its lift is "n/a", never "+n/a"."""
    for empty in (math.nan, None):
        dot, cosine = _rows((empty, -0.283, -0.46603)), _rows((empty, -0.431, -0.56133))  # type: ignore[arg-type]
        dot[0]["n_users"] = cosine[0]["n_users"] = 0
        retrieval = SimpleNamespace(user_groups={5: {"dot": dot, "cosine": cosine}}, tied_ratio=None,
                                    approximate=lambda k: "", saturated={}, n_saturated={})
        table = group_table(retrieval, 5)  # type: ignore[arg-type]
        assert table is not None
        assert [row[-1] for row in table.rows] == ["n/a", "+14.8%", "+9.5%"]

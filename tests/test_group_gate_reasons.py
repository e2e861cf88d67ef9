"""A gate on a user group's null figure says the real reason (QA harms F4): the report's tie
warning, the group empty under the cut-offs, or none of its users served a list; never
"without each user's training items" when the training log named them."""

from __future__ import annotations

from typing import Any

from auditor.gate_reasons import why_unmeasured

DRAWN = ("user groups drawn: {niche} niche (20.0%), 12 diverse (60.0%), 4 blockbuster (20.0%) of 20 users with "
         "training items (asked: 20% / 60% / 20%; users tied at a cut join its group)")


def _report(niche: int = 4, warnings: tuple[str, ...] = ()) -> dict[str, Any]:
    served = {"gap_delta_niche": None, "gap_delta_blockbuster": None, "miscalibration_blockbuster": None}
    return {"settings": {"ks": [3]}, "not_measured": {}, "warnings": list(warnings),
            "retrieval": {"at": {"3": {"served": served}},
                          "definitions": {"user_group_sizes": DRAWN.format(niche=niche)}}}


def test_a_group_without_a_served_list_says_so() -> None:
    why = why_unmeasured("gap_delta_blockbuster_served@3", _report())
    assert why == "gap_delta_blockbuster: none of the 4 blockbuster users has a non-empty served list at K=3"


def test_an_empty_group_says_the_cut_offs_leave_it_empty() -> None:
    why = why_unmeasured("gap_delta_niche_served@3", _report(niche=0))
    assert why.startswith("gap_delta_niche: the niche group is empty under the cut-offs (user groups drawn: 0 niche")
    assert why.endswith("a larger niche_fraction draws users into it")  # --niche-fraction on the command line


def test_tied_users_quote_the_reports_warning() -> None:
    tie = ("all 20 users with training items share one popular ratio (0.50 of their items popular): no user is more "
           "niche or more blockbuster than another, so the user groups are undefined: all count as diverse, and the "
           "niche and blockbuster figures are null")
    assert why_unmeasured("miscalibration_blockbuster_served@3", _report(warnings=(tie,))) == (
        f"miscalibration_blockbuster: {tie}")

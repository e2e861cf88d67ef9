"""Users tied at the user groups' cuts (QA finding F4 of the harms review): the tie rule
of docs/measures.md stays (every user tied with a cut user joins its group), and the
report says the sizes drawn and warns when ties move them far from the sizes by position.

Known answer: 10 users, 6 who trained on popular items only (ratio 1) and 4 on unpopular
ones only (ratio 0). By position 2 niche and 2 blockbuster; with ties, the 2nd lowest
ratio (0) takes all 4 ratio-0 users into niche, the 9th (1) all 6 ratio-1 users into
blockbuster: 4 / 0 / 6."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from auditor.audit import run_audit
from auditor.config import AuditConfig
from auditor.result import AuditResult


def _audit(tmp_path: Path, trained: list[int]) -> AuditResult:
    """Lists-only audit of lists that serve items of the log (lists naming none of its items are refused)."""
    log = tmp_path / "log.csv"
    log.write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in enumerate(trained)))
    recs = tmp_path / "recs.csv"
    recs.write_text("user_id,item_id,rank\n" + "".join(f"{u},{i},{r}\n" for u in range(len(trained))
                                                       for r, i in enumerate((3, 4, 5), start=1)))
    return run_audit(AuditConfig(model=None, interactions=log, recommendations=recs, ks=(3,)))


def test_ties_that_move_the_groups_are_said_with_the_sizes_drawn(tmp_path: Path) -> None:
    # Items 0 and 1 (3 users each) are the top 20% of the 10 items; items 2-5 once each.
    result = _audit(tmp_path, [0, 0, 0, 1, 1, 1, 2, 3, 4, 5])
    assert result.served is not None
    sizes = result.served.definitions["user_group_sizes"]
    assert sizes.startswith("user groups drawn: 4 niche (40.0%), 0 diverse (0.0%), 6 blockbuster (60.0%) of 10 users")
    assert "asked: 20% / 60% / 20%" in sizes
    warned = [w for w in result.warnings if "tied at the user groups' cuts" in w]
    assert len(warned) == 1
    assert "niche 40%, diverse 0%, blockbuster 60% of the 10 users" in warned[0]
    assert "(niche 20%, diverse 60%, blockbuster 20%)" in warned[0]
    assert math.isnan(float(result.served.at[3].served["gap_delta_diverse"] or 0.0))  # the empty group: no figure


@pytest.mark.parametrize("n_users", [10, 12])
def test_the_sizes_without_ties_are_the_sizes_by_position(tmp_path: Path, n_users: int) -> None:
    """Every served user has a popular ratio of its own (no ties): the sizes by position, no warning."""
    lines = ["user_id,item_id"]
    for u in range(n_users):  # user u: item 0 (the most popular) five times, and items 10 .. 10 + u
        lines += [f"{u},0"] * 5 + [f"{u},{10 + j}" for j in range(u + 1)]
    # The groups are drawn among every user of the log (all served here): popular items 0 and 10, ratio 2 / (u + 2)
    log = tmp_path / "log.csv"
    log.write_text("\n".join(lines) + "\n")
    recs = tmp_path / "recs.csv"
    recs.write_text("user_id,item_id,rank\n" + "".join(f"{u},{i},{r}\n" for u in range(n_users)
                                                       for r, i in enumerate((10, 11), start=1)))
    result = run_audit(AuditConfig(model=None, interactions=log, recommendations=recs, ks=(2,)))
    assert result.served is not None
    # The served users are the rows, each with its own ratio (u + 2 items, of which u + 1 vary); by position
    # ⌊0.2 n⌋ niche and n − ⌊0.8 n⌋ blockbuster.
    niche, block = n_users // 5, n_users - (4 * n_users) // 5
    assert result.served.definitions["user_group_sizes"].startswith(
        f"user groups drawn: {niche} niche ({niche / n_users:.1%}), {n_users - niche - block} diverse "
        f"({(n_users - niche - block) / n_users:.1%}), {block} blockbuster ({block / n_users:.1%}) of {n_users} users")
    assert not any("tied at the user groups' cuts" in w for w in result.warnings)

"""The console's scope line of a lists-only audit quotes the log's top-1% share with the
verdict's digits (QA11 report F1, left over): 7.99% beside a verdict of "9.98% vs 7.99%,
1.249×", never the "8.0%" of the moderate band's edge the pair is not on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from click.testing import CliRunner

from auditor.cli import cli


def test_the_scope_line_quotes_the_log_share_as_the_verdict_does(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    n_users, n_items = 1000, 100
    log, recs = [], []
    for user in range(n_users):  # item 0 in 799 of the 1000 ten-item histories, in 998 of the ten-item lists
        held = [0] if user < 799 else []
        log += [(user, item) for item in held + [int(i) for i in rng.choice(np.arange(1, n_items), 10 - len(held), False)]]
        served = [0] if user < 998 else []
        served += [int(i) for i in rng.choice(np.arange(1, n_items), 10 - len(served), False)]
        recs += [(user, item, rank + 1) for rank, item in enumerate(served)]
    log_share = sum(item == 0 for _user, item in log) / len(log)
    assert log_share == 0.0799  # the top 1% of 100 items is item 0 (its count, 799, is the largest)
    (tmp_path / "train.csv").write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in log))
    (tmp_path / "recs.csv").write_text("user_id,item_id,rank\n" + "".join(f"{u},{i},{r}\n" for u, i, r in recs))
    result = CliRunner().invoke(cli, ["check", "--recommendations", str(tmp_path / "recs.csv"), "--interactions",
                                      str(tmp_path / "train.csv"), "-k", "10"])
    assert result.exit_code == 0, result.output
    assert "the top-1% items hold 7.99% of the training interactions" in result.stdout  # before: "hold 8.0%"

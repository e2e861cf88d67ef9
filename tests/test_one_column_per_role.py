"""One policy for every role's column detection (Logs 2: N2).

Before, two user columns (``user_id`` beside ``userId``) were refused while two count
columns (``count`` beside ``frequency``) or two item columns (``item_id`` beside
``movie_id``) were resolved silently by the order of a name list: in the QA's counts
file ``frequency`` was ``count`` reversed, so the choice decided the sign of ρ (0.8455
vs −0.3527) and whether a ``spearman>0.5`` gate tripped. Now any two columns with common
names of one role are refused naming both and the option that picks one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from auditor.errors import InteractionsError
from auditor.loading import count_item_ids
from auditor.loading.frequencies import read_frequencies
from auditor.loading.logs import open_log
from auditor.train.timestamps import find_time_column
from auditor.values import LogSpec

N = 12
COUNTS = np.arange(1, N + 1) ** 2  # item i seen (i + 1)² times
NORMS = np.linspace(1.0, 2.0, N)


def _counts_file(tmp_path: Path) -> Path:
    path = tmp_path / "counts.csv"
    reverse = COUNTS[::-1]
    path.write_text("item_id,frequency,count\n" + "".join(f"{i},{r},{c}\n" for i, (r, c) in enumerate(zip(reverse, COUNTS))))
    return path


def test_two_count_columns_are_refused_and_the_option_picks_one(tmp_path):
    path = _counts_file(tmp_path)
    with pytest.raises(InteractionsError, match=r"several columns of .*counts\.csv could be the count column "
                                                r"\('frequency', 'count'\); pass count_col NAME"):
        read_frequencies(path)  # was: 'count' taken silently
    picked = read_frequencies(path, count_col="count")
    assert picked.counts.tolist() == COUNTS.tolist()
    assert spearmanr(picked.counts, NORMS).statistic == pytest.approx(1.0)
    other = read_frequencies(path, count_col="frequency")
    assert spearmanr(other.counts, NORMS).statistic == pytest.approx(-1.0)  # the choice flips ρ


def _log(tmp_path: Path, header: str) -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(5)
    items = rng.integers(0, N, 200)
    path = tmp_path / "log.csv"
    path.write_text(header + "\n" + "".join(f"{k % 7},{N - 1 - i},{i},{k}\n" for k, i in enumerate(items)))
    return path, items


def test_two_item_columns_are_refused_and_the_option_picks_one(tmp_path):
    path, items = _log(tmp_path, "user_id,movie_id,item_id,timestamp")
    with pytest.raises(InteractionsError, match=r"could be the item id column \('movie_id', 'item_id'\); "
                                                r"pass item_col NAME"):
        open_log(LogSpec(path))  # was: 'item_id' taken silently
    counts = count_item_ids(LogSpec(path, item_col="item_id"))
    assert counts.counts.tolist() == np.bincount(items, minlength=N).tolist()
    flipped = count_item_ids(LogSpec(path, item_col="movie_id"))
    assert flipped.counts.tolist() == np.bincount(N - 1 - items, minlength=N).tolist()


def test_two_user_columns_of_different_names_are_refused(tmp_path):
    path, _ = _log(tmp_path, "customer_id,item_id,session_id,timestamp")
    with pytest.raises(InteractionsError, match=r"could be the user id column \('customer_id', 'session_id'\)"):
        open_log(LogSpec(path))  # was: 'customer_id' taken silently
    assert open_log(LogSpec(path, user_col="session_id")).user_col == "session_id"


def test_two_time_columns_are_refused(tmp_path):
    path, _ = _log(tmp_path, "user_id,item_id,date,timestamp")
    log = open_log(LogSpec(path))
    with pytest.raises(InteractionsError, match=r"could be the time column \('date', 'timestamp'\); pass time_col NAME"):
        find_time_column(log)  # was: 'timestamp' taken silently
    assert find_time_column(log, "date") == "date"

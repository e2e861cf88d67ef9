"""Experiment list options (retrain QA F6): an empty entry or a repeated value (rates
compared as numbers) is a usage error before any training, where it used to be dropped or
trained twice."""

from __future__ import annotations

import click
import pytest

from auditor.cli._common import ranged
from auditor.cli.experiment import CommaList


@pytest.mark.parametrize(("value", "message"), [
    ("1,,3", "has an empty entry (entry 2)"), (",1", "has an empty entry (entry 1)"),
    ("1,1.0", "repeats '1' (entries 1 and 2, '1.0')"), ("3,0.3,3e0", "repeats '3' (entries 1 and 3, '3e0')"),
    (",", "names nothing"),
])
def test_bad_rate_lists(value: str, message: str) -> None:
    with pytest.raises(click.BadParameter, match=message.replace("(", r"\(").replace(")", r"\)")):
        CommaList(ranged("train_lr")).convert(value, None, None)


def test_good_lists() -> None:
    assert CommaList(ranged("train_lr")).convert(" 0.3 , 1,3", None, None) == [0.3, 1.0, 3.0]
    with pytest.raises(click.BadParameter, match="repeats 'a'"):
        CommaList(choices=("a", "b")).convert("a,b,a", None, None)

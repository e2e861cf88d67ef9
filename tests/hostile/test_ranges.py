"""Unbounded work from an option or a manifest cell: every numeric setting has one range
(auditor/ranges.py) enforced for options (usage error) and cells (that row fails, naming
the column) alike, and ``batch --row-timeout`` stops a row that runs too long by killing
its worker, records it as an error and goes on (issue #23, item 4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from .corpus import (
    EXIT_OK,
    EXIT_USAGE,
    FAST,
    Built,
    Case,
    Outcome,
    check_args,
    params,
    run_case,
    standard,
    table,
    log,
    write,
)


def _check(*extra: str) -> Any:
    def build(d: Path) -> Built:
        standard(d)
        return Built([*check_args("items.npy"), *extra])

    return build


def _batch(header: str, cell: str, *extra: str) -> Any:
    """A manifest of one row with ``header`` = ``cell`` beside a valid row: the bad row
    fails naming its column, the other is audited."""

    def build(d: Path) -> Built:
        standard(d)
        write(d, "m.csv", f"model,{header}\nitems.npy,\"{cell}\"\nitems.npy,\n")

        def check(folder: Path, outcome: Outcome) -> None:
            rows = pq.read_table(folder / "r.parquet").to_pylist()
            assert [r["status"] for r in rows] == ["error", "ok"], rows

        return Built(["batch", "m.csv", "-o", "r.parquet", "--interactions", "log.parquet", *FAST, *extra],
                     outputs=("r.parquet",), check=check)

    return build


def _command(*args: str) -> Any:
    def build(d: Path) -> Built:
        standard(d)
        write(d, "m.csv", "model\nitems.npy\n")
        return Built(list(args))

    return build


def _row(column: str, text: str) -> str:
    return rf"row 0 \(items\.npy\) failed: InputError: column '{column}': {text}"


SLEEPER = '''from auditor.hookspecs import hookimpl


class Measure:
    name = "slow"
    description = "sleeps on the second table"

    def compute(self, bundle, stats, result):
        if bundle.n_items == 12:
            __import__("time").sleep(600)
        return 1.0


@hookimpl
def popaudit_measures():
    return [Measure()]
'''


def _row_timeout(d: Path) -> Built:
    log(d)
    table(d, "items.npy")
    table(d, "slow.npy", rows=12)
    write(d, "slow.py", SLEEPER)
    write(d, "m.csv", "model\nitems.npy\nslow.npy\nitems.npy\n")

    def check(folder: Path, outcome: Outcome) -> None:
        rows = pq.read_table(folder / "r.parquet").to_pylist()
        assert [r["status"] for r in rows] == ["ok", "error", "ok"], rows
        assert rows[1]["error"].startswith("RowTimeout: the audit ran longer than --row-timeout 3 s"), rows[1]
        assert 3 <= rows[1]["seconds"] < 30, rows[1]

    return Built(["batch", "m.csv", "-o", "r.parquet", "--interactions", "log.parquet", *FAST, "--plugin", "slow.py",
                  "--row-timeout", "3", "-j", "2"], outputs=("r.parquet",), check=check)


def _streamed_row_timeout(d: Path) -> Built:
    """A row whose table is streamed to $TMPDIR (float64, converted; 80,000 bytes over a
    40K ceiling) and then runs past --row-timeout: its killed worker's file must not stay
    (the corpus checks that $TMPDIR is empty)."""
    log(d)
    table(d, "items.npy")
    np.save(d / "big.npy", np.random.default_rng(1).normal(size=(5000, 4)))
    write(d, "slow.py", SLEEPER.replace("bundle.n_items == 12", "bundle.n_items == 5000"))
    write(d, "m.csv", "model,max_memory\nbig.npy,40K\nitems.npy,\n")

    def check(folder: Path, outcome: Outcome) -> None:
        rows = pq.read_table(folder / "r.parquet").to_pylist()
        assert [r["status"] for r in rows] == ["error", "ok"], rows

    return Built(["batch", "m.csv", "-o", "r.parquet", "--interactions", "log.parquet", *FAST, "--plugin", "slow.py",
                  "--row-timeout", "2"], outputs=("r.parquet",), check=check)


RETRAIN = ("retrain", "--n-users", "20", "--n-items", "10", "--n-interactions", "100", "--epochs", "1", "-o", "m.pt")
CASES = [
    Case("bootstrap-option-1e8", _check("--bootstrap", "100000000"), EXIT_USAGE,
         r"'--bootstrap': 100000000 is not in the range x=0 or 100<=x<=100000"),
    # A percentile 95% interval from 1 or 2 resamples is those resamples (it excluded its own
    # estimate): 0 means no interval, and a bootstrap starts at 100 resamples.
    Case("bootstrap-option-1", _check("--bootstrap", "1"), EXIT_USAGE,
         r"'--bootstrap': 1 is not 0 or an integer from 100 to 100,000 \(resamples of the 95% intervals.*below 100 "
         r"they mean nothing\)"),
    Case("bootstrap-option-99", _check("--bootstrap", "99"), EXIT_USAGE, r"'--bootstrap': 99 is not 0 or an integer from 100"),
    Case("bootstrap-cell-2", _batch("bootstrap", "2"), EXIT_OK, None,
         stderr=_row("bootstrap", r"must be 0 or an integer from 100 to 100,000, got 2")),
    Case("k-option-1e6", _check("-k", "1000000"), EXIT_USAGE, r"'-k' / '--k': 1000000 is not in the range 1<=x<=10000"),
    Case("max-queries-option-1e9", _check("--max-queries", "1000000000"), EXIT_USAGE,
         r"'--max-queries': 1000000000 is not in the range 1<=x<=10000000"),
    Case("momentum-option-above-one", _check("--momentum", "1.5"), EXIT_USAGE, r"'--momentum': '1\.5' must be <= 1"),
    Case("lr-option-1e31", _check("--lr", "1e31"), EXIT_USAGE, r"'--lr': '1e31' must be <= 1e\+30"),
    Case("seed-option-2-pow-70", _check("--seed", str(2**70)), EXIT_USAGE, r"'--seed': \d+ is not in the range"),
    Case("max-memory-option-10P", _check("--max-memory", "10000T"), EXIT_USAGE, r"'--max-memory': '10000T' is more than 1 PiB"),
    Case("plugin-timeout-option-1e9", _check("--plugin-timeout", "1e9"), EXIT_USAGE,
         r"'--plugin-timeout': '1e9' must be <= 604800"),
    Case("bootstrap-cell-1e9", _batch("bootstrap", "1000000000"), EXIT_OK, None,
         stderr=_row("bootstrap", r"must be 0 or an integer from 100 to 100,000, got 1000000000")),
    Case("k-cell-1e6", _batch("k", "10,1000000"), EXIT_OK, None,
         stderr=_row("k", r"must be an integer from 1 to 10,000, got 1000000")),
    Case("max-queries-cell-1e9", _batch("max_queries", "1000000000"), EXIT_OK, None,
         stderr=_row("max_queries", r"must be an integer from 1 to 10,000,000")),
    Case("alpha-cell-5", _batch("alpha", "0.5,5"), EXIT_OK, None, stderr=_row("alpha", r"must be a number >= 0 and <= 1, got 5\.0")),
    Case("momentum-cell-5", _batch("momentum", "5"), EXIT_OK, None,
         stderr=_row("momentum", r"must be a number >= 0 and <= 1, got 5\.0")),
    Case("seed-cell-2-pow-70", _batch("seed", str(2**70)), EXIT_OK, None,
         stderr=_row("seed", r"must be an integer from 0 to 18,446,744,073,709,551,615")),
    # QA F4: a CSV cell nan is the number it names (refused as --lr nan is), not an empty
    # cell keeping the default; F2: an integer cell beyond 2^64 is quoted as written.
    Case("lr-cell-nan", _batch("lr", "nan"), EXIT_OK, None, stderr=_row("lr", r"must be a number > 0 and <= 1e\+30, "
                                                                       r"got nan")),
    Case("seed-cell-nan", _batch("seed", "nan"), EXIT_OK, None, stderr=_row("seed", r"expected an integer, got 'nan'")),
    Case("seed-cell-2-pow-64", _batch("seed", str(2**64)), EXIT_OK, None,
         stderr=_row("seed", r"must be an integer from 0 to 18,446,744,073,709,551,615, got 18446744073709551616")),
    Case("accuracy-tolerance-cell-0", _batch("accuracy_tolerance", "0"), EXIT_OK, None,
         stderr=_row("accuracy_tolerance", r"must be a number > 0 and <= 1, got 0\.0")),
    Case("id-offset-cell-negative", _batch("id_offset", "-3"), EXIT_OK, None,
         stderr=_row("id_offset", r"must be an integer from 0 to 9,223,372,036,854,775,807, got -3")),
    Case("max-memory-cell-huge", _batch("max_memory", "999999T"), EXIT_OK, None,
         stderr=_row("max_memory", r"must be an integer from 1 to 1,125,899,906,842,624")),
    Case("jobs-option-1e5", _command("batch", "m.csv", "-o", "r.parquet", "-j", "100000"), EXIT_USAGE,
         r"'-j' / '--jobs': 100000 is not in the range 1<=x<=512"),
    Case("row-timeout-option-negative", _command("batch", "m.csv", "-o", "r.parquet", "--row-timeout", "-1"),
         EXIT_USAGE, r"'--row-timeout': '-1' must be >= 0"),
    Case("flush-interval-option-1e9", _command("batch", "m.csv", "-o", "r.parquet", "--flush-interval", "1e9"),
         EXIT_USAGE, r"'--flush-interval': '1e9' must be <= 86400"),
    Case("retrain-epochs-1e9", _command(*RETRAIN, "--epochs", "1000000000"), EXIT_USAGE,
         r"'--epochs': 1000000000 is not in the range 1<=x<=10000"),
    Case("retrain-dim-1e6", _command(*RETRAIN, "--dim", "1000000"), EXIT_USAGE, r"'--dim': 1000000 is not in the range 1<=x<=4096"),
    Case("retrain-n-items-1e10", _command("retrain", "--n-items", "10000000000", "-o", "m.pt"), EXIT_USAGE,
         r"'--n-items': 10000000000 is not in the range 2<=x<=10000000"),
    Case("retrain-batch-size-1e9", _command(*RETRAIN, "--batch-size", "1000000000"), EXIT_USAGE,
         r"'--batch-size': 1000000000 is not in the range 2<=x<=1000000"),
    Case("retrain-temperature-1e9", _command(*RETRAIN, "--temperature", "1e9"), EXIT_USAGE,
         r"'--temperature': '1e9' must be <= 1000"),
    Case("experiment-seeds-1e6", _command("experiment", "conditions", "-o", "out", "--seeds", "1000000"), EXIT_USAGE,
         r"'--seeds': 1000000 is not in the range 1<=x<=1000"),
    Case("experiment-k-1e6", _command("experiment", "lr-sweep", "-o", "out", "-k", "1000000"), EXIT_USAGE,
         r"'-k' / '--k': 1000000 is not in the range 1<=x<=10000"),
    Case("row-timeout-stops-stuck-row", _row_timeout, EXIT_OK, None,
         stderr=r"row 1 \(slow\.npy\) failed: RowTimeout: the audit ran longer than --row-timeout 3 s; its worker "
                r"process was stopped and the batch went on", process=True, timeout=120),
    # QA scale F1: the streamed table's temporary .npy went with the killed worker? It stayed.
    Case("row-timeout-stops-streamed-row", _streamed_row_timeout, EXIT_OK, None,
         stderr=r"row 0 \(big\.npy\) failed: RowTimeout: the audit ran longer than --row-timeout 2 s",
         process=True, timeout=120),
]

PRODUCT_FAILURES: list[Case] = []


@pytest.mark.parametrize("case", params(CASES, PRODUCT_FAILURES))
def test_hostile_range(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)


def test_corpus_size() -> None:
    assert len(CASES) + len(PRODUCT_FAILURES) >= 20


def test_one_table_for_options_and_cells() -> None:
    """Every ranged option's click type is built from auditor/ranges.py: the bounds in
    --help are the ones manifest cells are checked against."""
    import click

    from auditor.cli import cli
    from auditor.ranges import RANGES

    check = cli.commands["check"]
    for param in check.params:
        name = {"ks": "ks", "alphas": "alphas"}.get(param.name or "", param.name or "")
        if name in RANGES and isinstance(param.type, (click.IntRange, click.FloatRange)):
            found = RANGES[name]
            assert (param.type.min, param.type.max) in ((found.low, found.high), (int(found.low), int(found.high))), name
    ranged = [p.name for p in check.params if isinstance(p.type, (click.IntRange, click.FloatRange))]
    assert {"bootstrap", "max_queries", "ks", "seed", "alphas", "plugin_timeout"} <= set(ranged), ranged


def test_bootstrap_is_zero_or_at_least_the_minimum() -> None:
    """0 (no interval) and 100..100,000 resamples; 1 to 99 refused by the one range, for
    options, manifest cells and library calls alike (AuditConfig names the setting)."""
    import pytest

    from auditor.config import AuditConfig
    from auditor.errors import InputError
    from auditor.ranges import MIN_BOOTSTRAP, RANGES

    found = RANGES["bootstrap"]
    assert MIN_BOOTSTRAP == 100
    assert [found.contains(n) for n in (0, 1, 2, 99, 100, 1000, 100_000, 100_001)] == [
        True, False, False, False, True, True, True, False]
    assert found.describe() == "0 or an integer from 100 to 100,000"
    with pytest.raises(InputError, match=r"bootstrap must be 0 or an integer from 100 to 100,000, got 2"):
        AuditConfig(model="m.npy", bootstrap=2)


@pytest.mark.parametrize(("fields", "message"), [
    ({"ks": 10}, r"^ks must be a sequence of cut-offs, such as \(10, 100\), got 10$"),
    ({"ks": "10"}, r"^ks must be a sequence of cut-offs, such as \(10, 100\), got '10'$"),
    ({"alphas": 0.5}, r"^alphas must be a sequence of exponents, such as \(0\.25, 0\.5\), got 0\.5$"),
    ({"ks": ("10",)}, r"^ks must be an integer from 1 to 10,000, got '10'$"),
    ({"ks": (True,)}, r"^ks must be an integer from 1 to 10,000, got True$"),
    ({"max_queries": "500"}, r"^max_queries must be an integer from 1 to 10,000,000, got '500'$"),
    ({"seed": None}, r"^seed must be an integer from 0 to"),
    ({"alphas": (None,)}, r"^alphas must be a number >= 0 and <= 1, got None$"),
    ({"accuracy_tolerance": "0.9"}, r"^accuracy_tolerance must be a number > 0 and <= 1, got '0\.9'$"),
    ({"head_mass": [0.2]}, r"^head_mass must be a number > 0 and <= 1, got \[0\.2\]$"),
    # A path setting given an object (QA diffapi F3: a bare TypeError in run_audit, an unhashable config).
    ({"model": np.zeros((3, 2))}, r"^model must be a path to a file \(a str or pathlib\.Path\), got numpy\.ndarray; "
                                  r"save an in-memory table to a file"),
    ({"model": {"item_embeddings": [1.0]}}, r"^model must be a path to a file \(a str or pathlib\.Path\), got dict; save"),
    ({"interactions": 5}, r"^interactions must be a path to a file \(a str or pathlib\.Path\), got int$"),
    ({"holdout": b"h.parquet"}, r"^holdout must be a path to a file \(a str or pathlib\.Path\), got bytes$"),
    ({"trace": ""}, r"^trace must be a path to a file \(a str or pathlib\.Path\), got an empty path$"),
    ({"plugins": "my_plugin.py"}, r"^plugins must be a sequence of paths, such as \(Path\('my_plugin\.py'\),\), got str$"),
    ({"plugins": (Path("a.py"), 3)}, r"^plugins must be a path to a file \(a str or pathlib\.Path\), got int$"),
])
def test_a_library_setting_of_the_wrong_type_is_an_audit_error(fields: dict[str, Any], message: str) -> None:
    """QA Api F4: a wrong type in AuditConfig is an InputError naming the setting (an
    ``except AuditError`` catches it), never a bare TypeError from a comparison."""
    from auditor.config import AuditConfig
    from auditor.errors import InputError

    with pytest.raises(InputError, match=message):
        AuditConfig(**{"model": "m.npy", **fields})

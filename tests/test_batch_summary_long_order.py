"""Past 40 audited rows the terminal lists no row-by-row table (the HTML page lists every
row); it now says so and where the full table is (QA12 scale, item 3: it was left out
without a word)."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pytest
from rich.console import Console

from auditor.cli._common import option_names
from auditor.errors import spelled_as
from auditor.summaries import STATUS_OK

HEAD = "head_share_1pct_ratio@10"


def _table(n: int) -> pa.Table:
    return pa.table({"row": list(range(n)), "status": [STATUS_OK] * n, "model": [f"m{i}.npy" for i in range(n)],
                     "error": [None] * n, "spearman": [0.5 + i / 1000 for i in range(n)],
                     HEAD: [2.0 + i / 100 for i in range(n)]})


def _console(n: int, html: Path | None) -> str:
    from auditor.batch.summary import summarise
    from auditor.report.batch_summary import summary_console

    buffer = io.StringIO()
    console = Console(file=buffer, width=400, color_system=None)
    with spelled_as(option_names):  # as `popaudit batch` renders it: settings named by their flags
        for renderable in summary_console(summarise(_table(n)), n_resumed=0, output=Path("r.parquet"), html=html):
            console.print(renderable)
    return " ".join(buffer.getvalue().split())


@pytest.mark.parametrize("html, where", [
    (Path("s.html"), "the HTML summary s.html lists"),
    (None, "an HTML summary (popaudit batch --html FILE) lists"),
])
def test_past_40_rows_the_terminal_says_where_the_full_table_is(html: Path | None, where: str) -> None:
    text = _console(41, html)
    assert "Row by row (changes" not in text
    assert (f"Row by row: 41 audited rows, more than the terminal lists (40): {where} every row, with its changes "
            "from the previous one and why any is not comparable; each row's figures are in r.parquet.") in text


def test_up_to_40_rows_the_table_is_listed_and_nothing_said() -> None:
    text = _console(40, Path("s.html"))
    assert "Row by row (changes from the previous audited row)" in text and "more than the terminal lists" not in text


def test_the_html_page_lists_every_row() -> None:
    from auditor.batch.summary import summarise
    from auditor.report.batch_summary import summary_html

    page = summary_html(summarise(_table(41)))
    assert "Changes are from the previous audited row." in page  # the row-by-row table's caption
    assert all(page.count(f">m{i}.npy<") == 2 for i in range(41))  # the ranking's row and the row-by-row table's

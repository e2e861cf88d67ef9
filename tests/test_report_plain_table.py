"""PlainTable draws a table without rich's per-cell rendering: the output must be rich's
own, byte for byte, for every table the reports draw (fitting, collapsed, wrapped, folded,
cut with an ellipsis, with and without a header, styled cells) at every width, plain and
in colour (every colour system)."""

from __future__ import annotations

import io
import random

import pytest
from rich.console import Console, Group
from rich.table import Table as RichTable
from rich.text import Text

from auditor.report.plain_table import PlainTable

WORDS = ["0.978", "[0.972, 0.983]", "head_share_10pct", "overlap dot∩cosine", "82.67×", "", "ρ", "a b c d",
         "second difference ‖f(θ+εv)‖ over 3 random directions (ε=0.1: 2.41e-18)", "holds", "1,234,567",
         "x" * 30, "item tower's optimizer state: SGD (lr=10, momentum=0)", "—"]


STYLES = ["", "", "red", "green", "dim", "bold red", "dark_orange", "yellow"]


def _table(headers: list[str], rows: list[list[str]], *, show_header: bool, justify: list[str],
           overflow: list[str], styles: list[list[str]] | None = None) -> RichTable:
    table = RichTable(show_header=show_header)
    for name, just, over in zip(headers, justify, overflow):
        table.add_column(Text(name), justify=just, overflow=over)  # type: ignore[arg-type]
    for r, row in enumerate(rows):
        table.add_row(*(Text(cell, style=styles[r][c] if styles else "") for c, cell in enumerate(row)))
    return table


def _text(renderable: object, width: int, color: str | None = None) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=color is not None,
                      color_system=color, highlight=False)  # type: ignore[arg-type]
    console.print(renderable)
    return buffer.getvalue()


def _random_case(rng: random.Random) -> RichTable:
    n_cols = rng.randint(1, 8)
    n_rows = rng.randint(0, 6)
    headers = [rng.choice(WORDS[:8] + ["measure", "decile"]) for _ in range(n_cols)]
    rows = [[rng.choice(WORDS) for _ in range(n_cols)] for _ in range(n_rows)]
    return _table(headers, rows, show_header=rng.random() < 0.7,
                  justify=[rng.choice(["left", "right"]) for _ in range(n_cols)],
                  overflow=[rng.choice(["ellipsis", "fold"]) for _ in range(n_cols)],
                  styles=[[rng.choice(STYLES) for _ in range(n_cols)] for _ in range(n_rows)])


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("width", [100, 80, 47, 20, 9])
def test_random_tables_print_as_rich_prints_them(seed: int, width: int) -> None:
    table = _random_case(random.Random(seed))
    assert _text(PlainTable(table), width) == _text(table, width)


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("width", [100, 80, 47, 20, 9])
def test_random_tables_with_a_column_that_does_not_wrap_print_as_rich_prints_them(seed: int, width: int) -> None:
    table = _random_case(random.Random(seed))
    table.columns[random.Random(seed + 1000).randrange(len(table.columns))].no_wrap = True
    assert _text(PlainTable(table), width) == _text(table, width)


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("color", ["standard", "256", "truecolor"])
def test_random_tables_print_as_rich_prints_them_in_colour(seed: int, color: str) -> None:
    table = _random_case(random.Random(seed))
    for width in (100, 47, 20):
        coloured = _text(PlainTable(table), width, color)
        assert coloured == _text(table, width, color)
        assert "\x1b[" in coloured or not table.show_header or width < 100  # the header is bold


def test_the_audit_tables_shapes() -> None:
    """A right-justified measure table that fits 100 columns and is collapsed below (a two-word
    header wrapped, a long word cut with an ellipsis) and a folded evidence table."""
    measures = _table(
        ["measure", "dot", "cosine", "dot / cosine", "alpha_0.25", "alpha_0.5", "alpha_0.75", "popular"],
        [["head_share_10pct", "31.4%", "3.3%", "9.56×", "8.3%", "15.1%", "22.9%", "100.0%"],
         ["overlap dot∩cosine", "1.000", "0.31", "—", "0.5", "0.6", "0.7", "0.01"]],
        show_header=True, justify=["right"] * 8, overflow=["ellipsis"] * 8,
    )
    evidence = _table(
        ["condition", "status", "evidence", "source"],
        [["C1", "holds", WORDS[8] + " " + WORDS[12], "checkpoint"], ["C2", "unknown", "", "probe"]],
        show_header=True, justify=["left"] * 4, overflow=["ellipsis", "ellipsis", "fold", "ellipsis"],
    )
    for width in (100, 80, 60):
        plain = _text(PlainTable(measures), width)
        assert plain == _text(measures, width)
        assert ("…" in plain) == (width < 100)  # cut with an ellipsis once collapsed
        assert _text(PlainTable(evidence), width) == _text(evidence, width)


def test_other_tables_and_titles() -> None:
    """A table with options laid out by rich alone (here a title) is rich's; inside a
    group, the plain text equals the rich table's."""
    table = _table(["name", "value"], [["spearman", "0.978"]], show_header=False,
                   justify=["left", "right"], overflow=["ellipsis", "ellipsis"])
    grouped = _text(Group(Text("Frequency", style="bold"), PlainTable(table)), 80)
    assert grouped == _text(Group(Text("Frequency", style="bold"), table), 80)
    assert grouped.splitlines()[2] == "│ spearman │ 0.978 │"
    table.title = "Frequency"
    for color in (None, "truecolor"):
        assert _text(PlainTable(table), 80, color) == _text(table, 80, color)


@pytest.mark.parametrize("color", [False, True])
@pytest.mark.parametrize("width", [100, 80, 0])
def test_the_audit_report_is_what_rich_draws(monkeypatch: pytest.MonkeyPatch, color: bool, width: int) -> None:
    """A whole audit's terminal report (every section's tables, a log file's natural
    width too): the brief alone, rendered with PlainTable, equals the whole document's
    brief rendered by rich's own tables; the JSON report equals the document's data."""
    from auditor.plugin_api import RenderContext
    from auditor.report.audit_doc import audit_document
    from auditor.report.console import ConsoleRenderer
    from auditor.report.json import JsonRenderer
    from report_samples import full_result

    result = full_result()
    context = RenderContext(color=color, width=width)
    fast = ConsoleRenderer().render(result, context)
    monkeypatch.setattr(PlainTable, "__rich_console__", lambda self, console, options: iter([self.table]))
    assert fast == ConsoleRenderer().render_document(audit_document(result), context)
    assert ("\x1b[" in fast) == color and "┏" in fast
    assert JsonRenderer().render(result, context) == JsonRenderer().render_document(audit_document(result), context)


def test_a_who_pays_table_too_wide_keeps_the_group_names_whole() -> None:
    # The Who-pays table (9 columns) at a 100-column terminal: the figures' columns narrow
    # (their headers wrap), the nowrap group column keeps "blockbuster" (it read "blockbus…").
    from auditor.report.console import renderable
    from auditor.report.formatting import Table as Block

    headers = ("user group", "users", "profile GAP", "ΔGAP dot", "JS dot", "NDCG dot", "ΔGAP cosine", "JS cosine",
               "NDCG cosine")
    rows = tuple((g, "64", "56.2", "-58.2%", "0.249", "0.033", "-91.7%", "0.672", "0.013")
                 for g in ("niche", "diverse", "blockbuster"))
    block = Block(headers, rows, (False, *[True] * 8), nowrap=(0,))
    printed = _text(renderable(block), 100)
    assert "│ blockbuster │" in printed and "…" not in printed
    assert "blockbus…" in _text(renderable(Block(headers, rows, (False, *[True] * 8))), 100)  # without the hint

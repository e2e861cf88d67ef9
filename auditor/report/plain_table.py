"""A report table as rich lays it out, written as plain text without rich's per-cell work.

rich renders every cell of a table through its whole pipeline (padding, measuring,
wrapping, justifying, cropping: about 0.15 ms a cell), which was most of what the
terminal report cost (an audit's report holds some 800 cells). Without colour the text
follows from the column widths alone: the widths are computed as rich's ``Table`` computes
them (the longest cell plus a space a side; a table too wide collapsed by rich's own
rule), the box characters are rich's, a cell that fits is padded and justified as rich
justifies it, a single word too long is cut with rich's ellipsis, and the few cells that
wrap or fold are laid out by rich's own ``Text.wrap``. With colour on, the rich table
renders itself (its styles are segments this module does not write). The text is rich's
either way: tests/test_report_plain_table.py compares the two on random tables.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich._pick import pick_bool
from rich._ratio import ratio_reduce
from rich.box import Box
from rich.cells import cell_len, set_cell_size
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Column, Table as RichTable
from rich.text import Text

PADDING = (0, 1, 0, 1)
"""rich's default cell padding, the only one the fast path lays out (one space a side)."""


class PlainTable:
    """A rich renderable for one table: its plain text written here when the console
    has no colour, else the rich table itself. ``cells``: the header row (when the table shows
    one) and the body rows, as the plain strings the table's ``Text`` cells hold."""

    def __init__(self, table: RichTable, cells: Sequence[Sequence[str]]) -> None:
        self.table = table
        self.cells = cells

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = self._lines(console, options) if console.color_system is None and _plain_layout(self.table) else None
        if lines is None:
            yield self.table
            return
        for line in lines:
            yield Segment(line)
            yield Segment.line()

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.table)

    def _lines(self, console: Console, options: ConsoleOptions) -> list[str] | None:
        """The table's lines (None: a table without columns, or a row of another length)."""
        table = self.table
        columns = table.columns
        if not columns or any(len(row) != len(columns) for row in self.cells):
            return None
        widths = self._widths(console, options)
        header = table.show_header
        rows = [
            _row([_cell(console, text, width, column) for text, width, column in zip(row, widths, columns)],
                 widths, bottom=header and index == 0)
            for index, row in enumerate(self.cells)
        ]  # fmt: skip
        box = table.box
        assert box is not None  # _plain_layout checked it
        box = box.substitute(options, safe=pick_bool(table.safe_box, console.safe_box))
        return _boxed(box if header else box.get_plain_headed_box(), widths, rows, header)

    def _widths(self, console: Console, options: ConsoleOptions) -> list[int]:
        """Each column's width with its padding, as rich's ``Table`` computes it: the
        longest cell plus one space a side, collapsed as rich collapses a table too wide
        for ``options`` (the widest columns first, then all evenly). Cells of more than
        one line (or with tabs or control characters) are measured by rich itself."""
        table = self.table
        available = options.max_width - table._extra_width
        if available < 3 or not self.cells or not all(_simple(text) for row in self.cells for text in row):
            return table._calculate_column_widths(console, options.update_width(available))
        natural = [max(cell_len(row[i]) for row in self.cells) + 2 for i in range(len(table.columns))]
        widths = [min(width, available) for width in natural]
        if sum(widths) <= available:
            return widths
        widths = RichTable._collapse_widths(widths, [True] * len(widths), available)
        if sum(widths) > available:
            widths = ratio_reduce(sum(widths) - available, [1] * len(widths), widths, widths)
        return [min(full, width) if width >= 1 else 0 for full, width in zip(natural, widths)]


def _simple(text: str) -> bool:
    """Whether rich measures ``text`` as its cell length: one line, nothing it strips."""
    return text.isprintable() and text == text.strip()


def _cell(console: Console, text: str, width: int, column: Column) -> list[str]:
    """The lines of one cell, ``width`` columns with one space of padding a side, as
    rich's ``Text`` lays out ``text`` (a cell that fits, or one word cut with an
    ellipsis, without rich; one that wraps or folds by rich's own ``Text.wrap``)."""
    inner = width - 2
    if inner < 1:  # rich renders nothing where there is no room: the cell stays blank
        return []
    if _simple(text) and column.justify in ("left", "right", "default"):
        length = cell_len(text)
        if length > inner and column.overflow == "ellipsis" and len(text.split()) == 1:
            text, length = set_cell_size(text, inner - 1) + "…", inner
        if length <= inner:
            pad = " " * (inner - length)
            return [f" {pad}{text} " if column.justify == "right" else f" {text}{pad} "]
    lines = Text(text).wrap(console, inner, justify=column.justify, overflow=column.overflow,
                            tab_size=console.tab_size or 8, no_wrap=False)  # fmt: skip
    return [set_cell_size(f" {set_cell_size(line.plain, inner)} ", width) for line in lines] or [" " * width]


def _row(cells: list[list[str]], widths: list[int], *, bottom: bool) -> list[list[str]]:
    """A row's cells as lines of equal count: shorter cells filled with blank lines below
    (a header row: above, as rich aligns a header to its bottom)."""
    height = max(1, *(len(cell) for cell in cells))
    filled = []
    for cell, width in zip(cells, widths):
        blank = [" " * width] * (height - len(cell))
        filled.append(blank + cell if bottom else cell + blank)
    return [list(line) for line in zip(*filled)]


def _plain_layout(table: RichTable) -> bool:
    """Whether ``table`` uses only the layout :class:`PlainTable` writes itself: a box
    with its edge, rich's default padding, no title, caption, footer, row lines, sections,
    fixed or minimum width, expansion or column width settings."""
    return (
        table.box is not None and table.show_edge and not table.show_lines and not table.show_footer
        and table.leading == 0 and table.padding == PADDING and table.pad_edge and not table.collapse_padding
        and table.width is None and table.min_width is None and not table.expand
        and table.title is None and table.caption is None
        and not any(row.end_section for row in table.rows)
        and all(c.width is None and c.min_width is None and c.max_width is None and c.ratio is None
                and not c.no_wrap for c in table.columns)
    )  # fmt: skip


def _boxed(box: Box, widths: list[int], rows: list[list[list[str]]], header: bool) -> list[str]:
    """The lines of a table whose rows are ``rows`` (each a list of lines of padded
    cells; the header first when ``header``), framed as rich frames them: the first row
    between the head characters, the last between the foot ones, a head rule under a
    header row."""
    lines = [box.get_top(widths)]
    for index, row_lines in enumerate(rows):
        if index == 0:
            left, right, divider = box.head_left, box.head_right, box.head_vertical
        elif index == len(rows) - 1:
            left, right, divider = box.foot_left, box.foot_right, box.foot_vertical
        else:
            left, right, divider = box.mid_left, box.mid_right, box.mid_vertical
        lines += [left + divider.join(line) + right for line in row_lines]
        if index == 0 and header:
            lines.append(box.get_row(widths, "head", edge=True))
    lines.append(box.get_bottom(widths))
    return lines

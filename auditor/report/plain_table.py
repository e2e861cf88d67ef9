"""A report table as rich lays it out, without rich's per-cell rendering.

rich renders every cell of a table through its whole pipeline (padding, measuring,
wrapping, justifying, cropping: about 0.15 ms a cell), which was most of what the
terminal report cost (an audit's report holds some 800 cells). The same text, and the
same styled segments, follow from the column widths: the widths are computed as rich's
``Table`` computes them (the longest cell plus a space a side; a table too wide collapsed
by rich's own rule), the box characters are rich's, a cell that fits is padded and
justified as rich justifies it, a single word too long is cut with rich's ellipsis, and
the few cells that wrap or fold are laid out by rich's own ``Text.wrap``. Each cell's
padding carries the cell's style and its text the text's style (the header's bold
added), as in rich's segments; without colour a line is one plain segment. A table this
module does not lay out (other options, cells that are not plain ``Text``) renders
itself through rich. tests/test_report_plain_table.py compares the two, with and without
colour, on random tables.
"""

from __future__ import annotations

from rich.box import Box
from rich.cells import cell_len, set_cell_size
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.table import Column, Table as RichTable
from rich.text import Text

try:  # rich's own rule for shrinking columns; a private module, so a rich without it
    from rich._ratio import ratio_reduce  # draws every table itself (_plain_layout: False)
except ImportError:  # pragma: no cover - depends on the installed rich
    ratio_reduce = None  # type: ignore[assignment]

PADDING = (0, 1, 0, 1)
"""rich's default cell padding, the only one laid out here (one space a side)."""

Piece = tuple[str, Style | None]
"""A run of a line's text and its style (None: unstyled), a segment of rich's."""


class PlainTable:
    """A rich renderable drawing ``table`` as rich would, without rich's per-cell
    rendering where the table is one :func:`_plain_layout` accepts (else through rich)."""

    def __init__(self, table: RichTable) -> None:
        self.table = table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        cells = _cells(self.table)
        lines = None if cells is None else _lines(self.table, cells, console, options)
        if lines is None:
            yield self.table
            return
        plain = console.color_system is None  # styles print as nothing: one segment a line
        for line in lines:
            if plain:
                yield Segment("".join(text for text, _style in line))
            else:
                yield from (Segment(text, style) for text, style in line)
            yield Segment.line()

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.table)


def _cells(table: RichTable) -> list[list[Text]] | None:
    """The header row (when shown) and the body rows, or None where the table is not one
    this module lays out: see :func:`_plain_layout` and :func:`_plain_text`."""
    columns = table.columns
    if not columns or not _plain_layout(table):
        return None
    rows = [[column.header for column in columns]] if table.show_header else []
    rows += [list(row) for row in zip(*(list(column.cells) for column in columns))]
    if not all(isinstance(cell, Text) and _plain_text(cell) for row in rows for cell in row):
        return None
    return rows  # type: ignore[return-value]  # every cell checked to be a Text


def _plain_text(text: Text) -> bool:
    """A ``Text`` laid out by its column alone: no spans, no settings of its own."""
    return (not text.spans and text.justify is None and text.overflow is None and text.no_wrap is None
            and text.end == "\n")  # fmt: skip


def _plain_layout(table: RichTable) -> bool:
    """Whether ``table`` uses only the layout written here: a box with its edge, rich's
    default padding, no title, caption, footer, row lines, sections, fixed or minimum
    width, expansion, column width settings or justification but left and right (a
    column may refuse to wrap: the collapse passes it by, as rich's does)."""
    return (
        ratio_reduce is not None and table.box is not None and table.show_edge and not table.show_lines and not table.show_footer
        and table.leading == 0 and table.padding == PADDING and table.pad_edge and not table.collapse_padding
        and table.width is None and table.min_width is None and not table.expand
        and table.title is None and table.caption is None
        and not any(row.end_section for row in table.rows)
        and all(c.width is None and c.min_width is None and c.max_width is None and c.ratio is None
                and c.justify in ("left", "right") and c.vertical == "top"
                for c in table.columns)
    )  # fmt: skip


def _lines(table: RichTable, cells: list[list[Text]], console: Console, options: ConsoleOptions) -> list[list[Piece]]:
    """The table's lines as styled pieces."""
    widths = _widths(table, cells, console, options)
    header = table.show_header
    get_style = console.get_style
    rows: list[list[list[list[Piece]]]] = []
    for index, row in enumerate(cells):
        if header and index == 0:
            styles = [get_style(table.header_style or "") + get_style(column.header_style) for column in table.columns]
        else:
            row_style = get_style(table.get_row_style(console, index - 1 if header else index))
            styles = [get_style(column.style or "") + row_style for column in table.columns]
        rendered = [_cell(console, text, width, column, style)
                    for text, width, column, style in zip(row, widths, table.columns, styles)]  # fmt: skip
        rows.append(_row(rendered, widths, styles, bottom=header and index == 0))
    box = table.box
    assert box is not None  # _plain_layout checked it
    box = box.substitute(options, safe=console.safe_box if table.safe_box is None else table.safe_box)
    border = get_style(table.style or "") + get_style(table.border_style or "")
    return _boxed(box if header else box.get_plain_headed_box(), widths, rows, header, border)


def _widths(table: RichTable, cells: list[list[Text]], console: Console, options: ConsoleOptions) -> list[int]:
    """Each column's width with its padding, as rich's ``Table`` computes it: the longest
    cell plus one space a side, collapsed as rich collapses a table too wide for
    ``options`` (the widest columns that may wrap first, then all evenly). Cells of more than one line
    (or with tabs or control characters) are measured by rich itself."""
    available = options.max_width - table._extra_width
    if available < 3 or not cells or not all(_simple(text.plain) for row in cells for text in row):
        return table._calculate_column_widths(console, options.update_width(available))
    natural = [max(cell_len(row[i].plain) for row in cells) + 2 for i in range(len(table.columns))]
    widths = [min(width, available) for width in natural]
    if sum(widths) <= available:
        return widths
    widths = RichTable._collapse_widths(widths, [not column.no_wrap for column in table.columns], available)
    if sum(widths) > available:
        widths = ratio_reduce(sum(widths) - available, [1] * len(widths), widths, widths)
    return [min(full, width) if width >= 1 else 0 for full, width in zip(natural, widths)]


def _simple(text: str) -> bool:
    """Whether rich measures and lays out ``text`` as its cell length: one line, nothing
    it strips or expands."""
    return text.isprintable() and text == text.strip()


def _cell(console: Console, text: Text, width: int, column: Column, style: Style) -> list[list[Piece]]:
    """The lines of one cell ``width`` columns wide with one space of padding a side,
    as rich lays out ``text`` (a cell that fits, or one word cut with an ellipsis,
    without rich; one that wraps or folds by rich's ``Text.wrap``). The padding carries
    the cell's ``style``, the text the text's style with the cell's added."""
    inner = width - 2
    if inner < 1:  # rich renders nothing where there is no room: the cell stays blank
        return []
    own = console.get_style(text.style) if text.style else None
    text_style = style + own if style else own
    pad: Piece = (" ", style if style else Style.null())
    plain = text.plain
    if _simple(plain):
        length = cell_len(plain)
        if length > inner and column.overflow == "ellipsis" and len(plain.split()) == 1:
            plain, length = set_cell_size(plain, inner - 1) + "…", inner
        if length <= inner:
            fill = " " * (inner - length)
            return [[pad, (fill + plain if column.justify == "right" else plain + fill, text_style), pad]]
    tab_size = console.tab_size if text.tab_size is None else text.tab_size
    lines = text.wrap(console, inner, justify=column.justify, overflow=column.overflow, tab_size=tab_size or 8,
                      no_wrap=bool(column.no_wrap))  # fmt: skip
    return [_padded(line.plain, inner, pad, text_style) for line in lines]


def _padded(line: str, inner: int, pad: Piece, text_style: Style | None) -> list[Piece]:
    """One wrapped line between its padding, cut or filled to ``inner`` columns as rich's
    ``render_lines`` does (its fill in the padding's style)."""
    length = cell_len(line)
    if length > inner:
        return [pad, (set_cell_size(line, inner), text_style), pad]
    fill = [(" " * (inner - length), pad[1])] if length < inner else []
    return [pad, (line, text_style), *fill, pad]


def _row(cells: list[list[list[Piece]]], widths: list[int], styles: list[Style], *,
         bottom: bool) -> list[list[list[Piece]]]:
    """A row's cells as lines of equal count, each line the pieces of each cell: shorter
    cells filled with blank lines in the cell's style, below (a header row: above, as
    rich aligns a header to its bottom). A row whose every cell is empty (no room) is
    one unstyled blank line, as rich's ``Segment.set_shape`` makes it."""
    height = max(len(cell) for cell in cells)
    filled = []
    for cell, width, style in zip(cells, widths, styles):
        blank: list[list[Piece]] = [[(" " * width, style if height else None)]] * (max(1, height) - len(cell))
        filled.append(blank + cell if bottom else cell + blank)
    return [list(line) for line in zip(*filled)]


def _boxed(
    box: Box, widths: list[int], rows: list[list[list[list[Piece]]]], header: bool, border: Style
) -> list[list[Piece]]:
    """The lines of a table whose rows are ``rows`` (the header first when ``header``),
    framed as rich frames them in the ``border`` style: the first row between the head
    characters, the last between the foot ones, a head rule under a header row."""
    lines: list[list[Piece]] = [[(box.get_top(widths), border)]]
    for index, row_lines in enumerate(rows):
        if index == 0:
            left, right, divider = box.head_left, box.head_right, box.head_vertical
        elif index == len(rows) - 1:
            left, right, divider = box.foot_left, box.foot_right, box.foot_vertical
        else:
            left, right, divider = box.mid_left, box.mid_right, box.mid_vertical
        for line in row_lines:
            pieces: list[Piece] = [(left, border)]
            for number, cell in enumerate(line):
                pieces += cell if number == 0 else [(divider, border), *cell]
            lines.append([*pieces, (right, border)])
        if index == 0 and header:
            lines.append([(box.get_row(widths, "head", edge=True), border)])
    lines.append([(box.get_bottom(widths), border)])
    return lines

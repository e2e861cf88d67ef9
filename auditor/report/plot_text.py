"""Text on the report's figures: titles that fit the room they have, wrapped between
phrases and never inside one, and bar labels with the decimals a value needs.

Used by every figure popaudit draws (audit reports, experiment, mitigation and batch
summaries), so no title is cut off at the figure's edge or split mid-phrase by a
narrow panel, and a share of 0.4% never reads as 0.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from matplotlib import rcParams
from matplotlib.axes import Axes
from matplotlib.container import BarContainer
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextToPath

from auditor.wording import share_row

PHRASE_BREAK = re.compile(r"(?<=[:;,])\s+|\s+(?=\()")
"""Where a title may wrap: after a colon, semicolon or comma, or before a parenthesis."""
MIN_TITLE_POINTS = 6.0


def fit_title(target: Axes | Figure, text: str, **kwargs: Any) -> None:
    """Set ``text`` as the title of an axes (or the suptitle of a figure) so that it fits
    the room it has: wrapped between phrases (:data:`PHRASE_BREAK`), never inside one, and
    set smaller only when a single phrase is wider than the room (down to
    :data:`MIN_TITLE_POINTS`; a phrase too wide even then wraps between words rather than
    run off the figure). Explicit newlines stay.
    """
    figure = target if isinstance(target, Figure) else target.get_figure()
    assert isinstance(figure, Figure)
    room = figure.get_figwidth() - 0.2  # inches; a little margin either side
    if isinstance(target, Axes):
        spec = target.get_subplotspec()
        if spec is not None:
            room = figure.get_figwidth() * len(spec.colspan) / spec.get_gridspec().ncols
        # Centred over the axes, which the tick and axis labels push off the panel's centre.
        room -= 0.9
    default = rcParams["figure.titlesize" if isinstance(target, Figure) else "axes.titlesize"]
    font = FontProperties(size=kwargs.pop("fontsize", default))
    lines = [line for part in text.split("\n") for line in _wrap(PHRASE_BREAK.split(part), font, room)]
    widest = max(_text_inches(line, font) for line in lines)
    if widest > room:
        # 2% under the exact fit: glyph widths do not scale exactly with the size.
        font.set_size(max(MIN_TITLE_POINTS, 0.98 * font.get_size_in_points() * room / widest))
        if max(_text_inches(line, font) for line in lines) > room:  # the last resort: words
            lines = [piece for line in lines for piece in _wrap(line.split(" "), font, room)]
    title = "\n".join(lines)
    if isinstance(target, Figure):
        target.suptitle(title, fontsize=font.get_size_in_points(), **kwargs)
    else:
        target.set_title(title, fontsize=font.get_size_in_points(), **kwargs)


def _wrap(pieces: list[str], font: FontProperties, room: float) -> list[str]:
    """Greedy lines of whole ``pieces`` (joined by a space), each at most ``room`` inches
    wide where one piece alone is not wider."""
    lines: list[str] = []
    for piece in pieces:
        joined = f"{lines[-1]} {piece}" if lines else piece
        if lines and _text_inches(joined, font) <= room:
            lines[-1] = joined
        else:
            lines.append(piece)
    return lines or [""]


def _text_inches(text: str, font: FontProperties) -> float:
    width, _height, _descent = _TEXT_PATH.get_text_width_height_descent(text, font, ismath=False)
    return float(width) / 72.0


_TEXT_PATH = TextToPath()


def share_labels(rows: Sequence[Sequence[float | None]]) -> list[list[str]]:
    """The head-share bars' labels, by scoring (dot, cosine, popular) then K, from ``rows``
    (each K's shares in that order, as fractions): the cells the tables print for them
    (:func:`auditor.wording.share_row`, one row rule: ``17.95%`` beside a 2-decimal pair,
    never a bar of ``17.9%`` under a cell of ``17.95%``)."""
    cells = [share_row(list(row)) for row in rows]
    return [list(column) for column in zip(*cells)] if cells else []


def bar_labels(ax: Axes, bars: BarContainer, labels: Sequence[str], *, rotate: bool) -> None:
    """Each bar's label above it: its table cell (:func:`share_labels`)."""
    ax.bar_label(bars, labels=list(labels), fontsize=7, padding=1, rotation=90 if rotate else 0)

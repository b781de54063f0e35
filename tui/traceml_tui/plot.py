"""Charts drawn straight into terminal cells: stacked columns and a line, numbers on both axes.

Pure functions of numbers and a size, returning a Canvas of exactly `height` rows of `width`
cells (as Textual strips for the widget, as a Text for tests). The live view redraws its two
charts every few seconds while a job runs, so a picture must cost little: plotext, used before,
spent 6-14 ms of Python on a step chart and Textual as much again turning its ANSI text back
into cells, the largest part of the view's CPU beside a fast rank (docs/performance.md).

Layout, for a chart `width` x `height` (the plot is `height` - 2 rows):

    34.8 ms┤   ▄█ █
           │  ███▆█ ▂      one column per point (fewer points spread over the columns)
    17.4 ms┤ ████████▅
           │█████████
    0.00 ms┤█████████
           └┬───┬────┬
            22  55   87    step numbers at the ticks

The y labels name the bottom, middle and top of the range; `┤` marks their rows. A value below
the range's bottom is drawn at it (never below), one above its top at it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.color import Color
from rich.segment import Segment
from rich.style import Style
from rich.text import Span, Text
from textual.strip import Strip

Rgb = tuple[int, int, int]
EIGHTHS = " ▁▂▃▄▅▆▇█"
"""A cell filled from the bottom in eighths: EIGHTHS[k] is k/8 full."""
LINE_LEVELS = "⣀⠤⠒⠉"
"""A line through a cell at its bottom, lower middle, upper middle and top quarter (braille)."""
X_TICKS = 4
"""Step numbers named on the x axis (first, last and evenly between)."""


@dataclass(frozen=True, slots=True)
class Frame:
    """Where a picture's parts lie: the plot's rows and columns, and the axes' labels."""

    width: int
    height: int
    rows: int
    """Plot rows (the picture less the x axis and its labels)."""
    left: int
    """Cells before the plot: the y labels and the axis."""
    lo: float
    hi: float
    y_labels: tuple[str, str, str]
    """Bottom, middle and top of the y range, as the chart writes its values."""

    @property
    def cols(self) -> int:
        return self.width - self.left

    def label_rows(self) -> tuple[int, int, int]:
        """Plot rows (0 = top) of the bottom, middle and top labels."""
        return self.rows - 1, (self.rows - 1) // 2, 0

    def scale(self, steps: int) -> Callable[[float], float]:
        """A value's height in units of 1/`steps` of a row above the plot's bottom, within the
        plot (a value that is not a finite number: 0)."""
        span = self.hi - self.lo
        lo, top = self.lo, float(self.rows * steps)
        per = top / span if span > 0 else 0.0

        def level(value: float) -> float:
            if not math.isfinite(value):
                return 0.0
            return min(max((value - lo) * per, 0.0), top)

        return level


def frame(
    width: int, height: int, y: tuple[float, float], label: Callable[[float], str]
) -> Frame | None:
    """The layout of a `width` x `height` picture of the y range `y`; None when too small to
    hold a plot (fewer than 2 rows or 4 columns of it)."""
    lo, hi = y
    labels = (label(lo), label((lo + hi) / 2), label(hi))
    left = max(len(s) for s in labels) + 1
    rows = height - 2
    if rows < 2 or width - left < 4:
        return None
    return Frame(width, height, rows, left, lo, hi, labels)


def columns(points: int, cols: int) -> list[tuple[int, int]]:
    """The columns [a, b) of each of `points` points spread over `cols` (each gets at least one
    when points <= cols; with more points than columns, later points share the last ones)."""
    if points <= 0:
        return []
    out = []
    for i in range(points):
        a = min(i * cols // points, cols - 1)
        b = max(a + 1, min((i + 1) * cols // points, cols))
        out.append((a, b))
    return out


class Canvas:
    """Rows of cells, each a character and a style (None: the widget's own)."""

    __slots__ = ("chars", "styles")

    def __init__(self, width: int, height: int) -> None:
        self.chars = [[" "] * width for _ in range(height)]
        self.styles: list[list[Style | None]] = [[None] * width for _ in range(height)]

    def put(self, row: int, col: int, char: str, style: Style | None = None) -> None:
        self.chars[row][col] = char
        self.styles[row][col] = style

    def write(self, row: int, col: int, text: str, style: Style | None = None) -> None:
        """`text` from `col` on, clipped at the right edge."""
        line = self.chars[row]
        for k, ch in enumerate(text[: max(0, len(line) - col)]):
            line[col + k] = ch
            self.styles[row][col + k] = style

    def text(self) -> Text:
        """The cells as one Text: a span per run of equal styles."""
        plain: list[str] = []
        spans: list[Span] = []
        at = 0
        for chars, styles in zip(self.chars, self.styles, strict=True):
            spans += [Span(at + a, at + b, st) for a, b, st in _runs(styles) if st is not None]
            plain.append("".join(chars))
            at += len(chars) + 1
        return Text("\n".join(plain), spans=spans, no_wrap=True, overflow="crop")

    def strips(self, base: Style) -> list[Strip]:
        """The rows as Textual strips, each run of equal styles one segment over `base` (the
        widget's own style: its background shows through)."""
        over: dict[Style, Style] = {}

        def full(style: Style | None) -> Style:
            if style is None:
                return base
            return over.get(style) or over.setdefault(style, base + style)

        return [
            Strip(
                [Segment("".join(chars[a:b]), full(st)) for a, b, st in _runs(styles)], len(chars)
            )
            for chars, styles in zip(self.chars, self.styles, strict=True)
        ]


def _runs(styles: Sequence[Style | None]) -> list[tuple[int, int, Style | None]]:
    """[start, end) and style of each run of equal styles in a row."""
    out = []
    start = 0
    for col in range(1, len(styles) + 1):
        if col == len(styles) or styles[col] is not styles[start]:
            out.append((start, col, styles[start]))
            start = col
    return out


def axes(canvas: Canvas, f: Frame, xs: Sequence[float], x_label: Callable[[float], str]) -> None:
    """The y labels and axis, the x axis with its ticks and step numbers under them."""
    for row, text in zip(f.label_rows(), f.y_labels, strict=True):
        canvas.write(row, f.left - 1 - len(text), text)
    ticks = set(f.label_rows())
    for row in range(f.rows):
        canvas.put(row, f.left - 1, "┤" if row in ticks else "│")
    base = f.rows
    canvas.put(base, f.left - 1, "└")
    for col in range(f.left, f.width):
        canvas.put(base, col, "─")
    if not xs:
        return
    first, last = xs[0], xs[-1]
    marks = sorted({round(first + (last - first) * i / (X_TICKS - 1)) for i in range(X_TICKS)})
    free = f.left  # the x labels never overlap: each starts after the last one's end and a gap
    for mark in marks:
        share = (mark - first) / (last - first) if last > first else 0.0
        col = f.left + min(f.cols - 1, round(share * (f.cols - 1)))
        canvas.put(base, col, "┬")
        text = x_label(mark)
        start = min(max(col - len(text) // 2, free), f.width - len(text))
        if start >= free:
            canvas.write(base + 1, start, text)
            free = start + len(text) + 1


def _framed(
    width: int,
    height: int,
    y: tuple[float, float],
    y_label: Callable[[float], str],
    xs: Sequence[float],
    x_label: Callable[[float], str],
) -> tuple[Frame, Canvas] | None:
    """An empty chart with its axes drawn, and its layout; None when the size holds no plot."""
    f = frame(width, height, y, y_label)
    if f is None:
        return None
    canvas = Canvas(width, height)
    axes(canvas, f, xs, x_label)
    return f, canvas


def stacked(
    layers: Sequence[tuple[Rgb, Sequence[float]]],
    xs: Sequence[float],
    width: int,
    height: int,
    y: tuple[float, float],
    y_label: Callable[[float], str],
    x_label: Callable[[float], str],
) -> Canvas | None:
    """Columns of stacked layers: `layers` bottom first, each (colour, running total per point),
    so the last layer's totals are the columns' heights. Each cell takes the colour of the layer
    with the largest share of it, so a layer thinner than a cell shows where it dominates one
    and nowhere else; the top cell of a column is filled in eighths."""
    framed = _framed(width, height, y, y_label, xs, x_label) if layers else None
    if framed is None:
        return None
    f, canvas = framed
    styles = [Style(color=Color.from_rgb(*rgb)) for rgb, _ in layers]
    totals = [totals for _, totals in layers]
    level = f.scale(8)  # heights in eighths of a row
    chars, cells = canvas.chars, canvas.styles
    for i, (a, b) in enumerate(columns(len(xs), f.cols)):
        tops = [level(t[i]) for t in totals]
        k = 0
        for row in range(f.rows):  # row 0 is the plot's bottom here
            floor = row * 8
            eighths = min(8, round(tops[-1] - floor))
            if eighths <= 0:
                break
            ceil = floor + eighths
            while tops[k] <= floor:  # ends: the last top is above the floor
                k += 1
            style = styles[k if tops[k] >= ceil else _widest(tops, k, floor, ceil)]
            at = f.rows - 1 - row
            chars[at][f.left + a : f.left + b] = EIGHTHS[eighths] * (b - a)
            cells[at][f.left + a : f.left + b] = [style] * (b - a)
    return canvas


def _widest(tops: Sequence[float], k: int, floor: float, ceil: float) -> int:
    """The layer with the largest share of [floor, ceil], from layer `k`, the one at `floor`
    (`tops`: each layer's top, ascending; the lower one on a tie)."""
    best, widest, bottom = k, -1.0, floor
    for j in range(k, len(tops)):
        share = min(tops[j], ceil) - bottom
        if share > widest:
            best, widest = j, share
        if tops[j] >= ceil:
            break
        bottom = max(bottom, tops[j])
    return best


def line(
    rgb: Rgb,
    xs: Sequence[float],
    ys: Sequence[float],
    width: int,
    height: int,
    y: tuple[float, float],
    y_label: Callable[[float], str],
    x_label: Callable[[float], str],
) -> Canvas | None:
    """One series as a line: each point a dash at a quarter of a row (four levels a cell)."""
    framed = _framed(width, height, y, y_label, xs, x_label) if ys else None
    if framed is None:
        return None
    f, canvas = framed
    style = Style(color=Color.from_rgb(*rgb))
    level = f.scale(4)  # heights in quarters of a row
    for value, (a, b) in zip(ys, columns(len(ys), f.cols), strict=False):
        quarter = min(int(level(value)), f.rows * 4 - 1)
        row, char = f.rows - 1 - quarter // 4, LINE_LEVELS[quarter % 4]
        for col in range(f.left + a, f.left + b):
            canvas.put(row, col, char, style)
    return canvas

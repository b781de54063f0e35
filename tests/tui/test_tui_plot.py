"""The charts' pictures (traceml_tui.plot): sizes, heights, colours and axes, cell by cell."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text

from traceml_tui import plot
from traceml_tui.format import mb, ms, steps

RED, GREEN, BLUE = (200, 0, 0), (0, 200, 0), (0, 0, 200)


def drawn(canvas: plot.Canvas | None) -> Text:
    assert canvas is not None, "the size holds a chart"
    return canvas.text()


def cells(picture: Text) -> list[list[tuple[str, str | None]]]:
    """(character, colour as rich names it: "#c80000") of every cell, row by row."""
    rows: list[list[tuple[str, str | None]]] = []
    for line in picture.split("\n", include_separator=False):
        colours: list[str | None] = [None] * len(line.plain)
        for span in line.spans:
            style = span.style
            assert isinstance(style, Style), "every span of a picture is a Style"
            for col in range(span.start, span.end):
                colours[col] = style.color.name if style.color else None
        rows.append(list(zip(line.plain, colours, strict=True)))
    return rows


def column(picture: Text, col: int) -> list[tuple[str, str | None]]:
    """The plot's column `col`, top row first, without the axis rows."""
    rows = cells(picture)[:-2]
    return [row[col] for row in rows]


def plot_left(picture: Text) -> int:
    """The first plot column: the one after the y axis (`┤` on the top row)."""
    return picture.plain.split("\n")[0].index("┤") + 1


def rgb(c: tuple[int, int, int]) -> str:
    return f"#{c[0]:02x}{c[1]:02x}{c[2]:02x}"


def test_every_picture_is_exactly_its_size_and_too_small_is_empty() -> None:
    for width, height in ((40, 9), (113, 9), (30, 4), (12, 7)):
        stacked = drawn(
            plot.stacked([(RED, [1.0, 2.0, 3.0])], [1, 2, 3], width, height, (0.0, 3.0), ms, steps)
        )
        line = drawn(
            plot.line(BLUE, [1, 2, 3], [5.0, 6.0, 7.0], width, height, (5.0, 7.0), mb, steps)
        )
        for picture in (stacked, line):
            rows = picture.plain.split("\n")
            assert len(rows) == height, (width, height, picture.plain)
            assert {len(r) for r in rows} == {width}, (width, height, picture.plain)
    assert plot.stacked([(RED, [1.0])], [1], 10, 3, (0.0, 1.0), ms, steps) is None, "no rows"
    assert plot.line(BLUE, [1], [1.0], 8, 9, (0.0, 1.0), mb, steps) is None, "no columns"


def test_a_column_is_as_high_as_its_value_in_eighths_of_a_row() -> None:
    # 4 plot rows over 0..8: a row is 2 ms, an eighth 0.25 ms
    values = [8.0, 4.0, 1.0, 2.25, 0.0, 20.0]
    f = plot.frame(99, 6, (0.0, 8.0), ms)
    assert f is not None
    picture = drawn(
        plot.stacked([(RED, values)], list(range(6)), f.left + 6, 6, (0.0, 8.0), ms, steps)
    )
    left = plot_left(picture)
    heights = ["".join(c for c, _ in column(picture, left + i)) for i in range(6)]
    assert heights[0] == "████", "the top of the range fills the column"
    assert heights[1] == "  ██"
    assert heights[2] == "   ▄", "half a row"
    assert heights[3] == "  ▁█", "a row and an eighth"
    assert heights[4] == "    ", "nothing for 0"
    assert heights[5] == "████", "a value above the range stops at its top"


def test_each_cell_takes_the_layer_with_the_largest_share_of_it() -> None:
    # running totals, bottom first: red 0-3, green 3-3.25, blue 3.25-4 (a row is 1 ms)
    layers = [(RED, [3.0]), (GREEN, [3.25]), (BLUE, [4.0])]
    picture = drawn(plot.stacked(layers, [7], 20, 6, (0.0, 4.0), ms, steps))
    col = column(picture, plot_left(picture))
    assert [c for c, _ in col] == ["█"] * 4
    assert [colour for _, colour in col] == [rgb(BLUE), rgb(RED), rgb(RED), rgb(RED)]
    # the same thin green layer over half a row of its own: it now shows
    layers = [(RED, [3.0]), (GREEN, [3.6]), (BLUE, [4.0])]
    picture = drawn(plot.stacked(layers, [7], 20, 6, (0.0, 4.0), ms, steps))
    assert column(picture, plot_left(picture))[0][1] == rgb(GREEN)


def test_the_axes_carry_values_and_step_numbers() -> None:
    picture = drawn(
        plot.stacked([(RED, [10.0] * 50)], list(range(101, 151)), 60, 9, (0.0, 20.0), ms, steps)
    )
    rows = picture.plain.split("\n")
    assert rows[0].lstrip().startswith("20.0 ms┤")
    assert rows[6].lstrip().startswith("0.00 ms┤")
    assert "10.0 ms┤" in rows[3]
    assert all("│" in rows[r] for r in (1, 2, 4, 5))
    assert "└" in rows[7] and rows[7].count("┬") == 4
    labels = rows[8].split()
    assert labels[0] == "101" and labels[-1] == "150", rows[8]
    assert labels == sorted(labels, key=int), "step numbers in order, none overlapping"


def test_long_step_numbers_never_overlap() -> None:
    xs = [1_000_000.0 + i for i in range(20)]
    picture = drawn(plot.stacked([(RED, [1.0] * 20)], xs, 30, 9, (0.0, 1.0), ms, steps))
    labels = picture.plain.split("\n")[-1].split()
    assert labels[0] == "1,000,000"
    assert all("," in label and len(label) == 9 for label in labels), labels


def test_a_line_is_drawn_at_a_quarter_of_a_row() -> None:
    # 4 plot rows over 0..16 MB: a row is 4 MB, a quarter 1 MB
    ys = [0.0, 1.0, 2.0, 3.0, 15.5, 40.0]
    f = plot.frame(99, 6, (0.0, 16.0), mb)
    assert f is not None
    picture = drawn(plot.line(GREEN, list(range(6)), ys, f.left + 6, 6, (0.0, 16.0), mb, steps))
    left = plot_left(picture)
    marks = [
        [(r, c) for r, (c, _) in enumerate(column(picture, left + i)) if c != " "] for i in range(6)
    ]
    assert marks == [[(3, "⣀")], [(3, "⠤")], [(3, "⠒")], [(3, "⠉")], [(0, "⠉")], [(0, "⠉")]]
    assert {colour for _, colour in column(picture, left + 2) if colour} == {rgb(GREEN)}


def test_fewer_points_than_columns_spread_over_the_width() -> None:
    f = plot.frame(99, 6, (0.0, 2.0), ms)
    assert f is not None
    picture = drawn(
        plot.stacked([(RED, [1.0, 2.0])], [1, 2], f.left + 10, 6, (0.0, 2.0), ms, steps)
    )
    bottom = picture.plain.split("\n")[3]
    assert bottom[plot_left(picture) :] == "█" * 10, "two points, five columns each"
    assert plot.columns(3, 10) == [(0, 3), (3, 6), (6, 10)]
    assert plot.columns(10, 3)[-1] == (2, 3), "more points than columns: they share"


def test_strips_are_the_same_cells_over_the_widgets_own_style() -> None:
    canvas = plot.stacked(
        [(RED, [1.0, 2.0]), (GREEN, [2.0, 2.0])], [1, 2], 30, 7, (0.0, 2.0), ms, steps
    )
    assert canvas is not None
    base = Style(bgcolor="#101010", color="#eeeeee")
    strips = canvas.strips(base)
    assert [s.text for s in strips] == canvas.text().plain.split("\n")
    assert {s.cell_length for s in strips} == {30}
    segments = [seg for s in strips for seg in s]
    assert all(seg.style is not None and seg.style.bgcolor == base.bgcolor for seg in segments)
    colours = {seg.style.color.name for seg in segments if seg.style and seg.style.color}
    assert colours == {"#eeeeee", rgb(RED), rgb(GREEN)}, "axes in the widget's colour"

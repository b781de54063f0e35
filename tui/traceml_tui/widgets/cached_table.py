"""A DataTable that renders a cell again only when its content, look or width changed.

Textual's DataTable keys its cell cache on a counter that every `update_cell`, `add_row` and
`sort` bump, so each snapshot re-rendered every visible cell (about 0.1 ms each through Rich),
although most cells of a rank's row keep their text from one snapshot to the next. This table
keeps each cell's rendered lines while the cell object (cells are immutable Text, replaced when
their text changes) and everything else the rendering depends on stay the same. A row that only
moved (a re-sort) reuses its lines with its new position stamped into the mouse metadata, as
DataTable itself would have rendered them. It reads nothing but its own rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.widgets import DataTable

if TYPE_CHECKING:
    from textual._types import SegmentLines

MAX_CACHED_CELLS = 50_000
"""Cells kept (13 columns x 1,000 ranks fit several times); the cache starts over past this."""

Look = tuple[Any, ...]
"""Everything besides the cell that DataTable's rendering of a cell depends on."""


class CachedDataTable(DataTable[Text]):
    """DataTable[Text] whose cells are rendered once per content, not once per update."""

    def __init__(self, **kwargs: Any) -> None:
        self._lines: dict[tuple[Any, Any], tuple[Text, Look, int, SegmentLines]] = {}
        self.cells_rendered = 0
        """Cells rendered through DataTable (cache misses); tests count redraws with it."""
        super().__init__(**kwargs)

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> SegmentLines:
        if row_index < 0 or column_index < 0:  # the header and row labels: as DataTable does
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        if row_key is None or column_key is None:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        cell = self.get_cell(row_key, column_key)
        look = (
            base_style,
            width,
            cursor,
            hover,
            self.show_cursor,
            self._show_hover_cursor,
            self._pseudo_class_state,
            self.cell_padding,
            self.rows[row_key].height,
        )
        hit = self._lines.get((row_key, column_key))
        if hit is not None and hit[0] is cell and hit[1] == look:
            if hit[2] == row_index:
                return hit[3]
            lines = _restamp(hit[3], row_index, column_index)
        else:
            self.cells_rendered += 1
            lines = self._render_plain(row_index, column_index, cell, look) or super()._render_cell(
                row_index, column_index, base_style, width, cursor, hover
            )
        if len(self._lines) >= MAX_CACHED_CELLS:
            self._lines.clear()
        self._lines[row_key, column_key] = (cell, look, row_index, lines)
        return lines

    def _render_plain(self, row: int, column: int, cell: Text, look: Look) -> SegmentLines | None:
        """The lines DataTable renders for a one-line ASCII Text without spans, built directly
        (Rich's Padding and Styled cost ~0.1 ms a cell); None for any other cell."""
        base_style, width, cursor, hover, show_cursor, show_hover, _, padding, height = look
        plain = cell.plain
        if height != 1 or cell.spans or not plain.isascii() or "\n" in plain or width < 2 * padding:
            return None
        component, post = self._get_styles_to_render_cell(
            False,
            False,
            row < self.fixed_rows or column < self.fixed_columns,
            hover,
            cursor,
            show_cursor,
            show_hover,
            self.cursor_foreground_priority == "css",
            self.cursor_background_priority == "css",
        )
        pre = base_style + Style.from_meta({"row": row, "column": column}) + component
        inner = width - 2 * padding
        body = plain[:inner]
        pad = Segment(" " * padding, _styled(pre, None, post))
        line = [pad] if padding else []
        line.append(Segment(body, _styled(pre, self.app.console.get_style(cell.style), post)))
        if len(body) < inner:
            line.append(Segment(" " * (inner - len(body)), _styled(pre, None, post)))
        return [[*line, pad] if padding else line]

    def _clear_caches(self) -> None:
        super()._clear_caches()
        self._lines.clear()

    def notify_style_update(self) -> None:
        """Styles (the theme, the focus) changed: every cell is rendered again."""
        self._lines.clear()
        super().notify_style_update()


def _styled(pre: Style, style: Style | None, post: Style | None) -> Style:
    """A segment's style after Rich's Styled(pre_style, post_style) (Segment.apply_style)."""
    out = pre + style if style else pre
    return out + post if post else out


def _restamp(lines: SegmentLines, row_index: int, column_index: int) -> SegmentLines:
    """`lines` with the cell's position in their metadata changed to (row_index, column_index).

    DataTable merges the position into every segment's style and no other style sets those two
    keys, so merging the new one over the old gives the segments it would render for the row.
    """
    meta = Style.from_meta({"row": row_index, "column": column_index})
    return [
        [Segment(seg.text, seg.style + meta if seg.style else meta, seg.control) for seg in line]
        for line in lines
    ]

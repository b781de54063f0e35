"""CachedDataTable: it draws what DataTable draws, and renders a cell again only when needed."""

from __future__ import annotations

import itertools

from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from traceml_tui.widgets.cached_table import CachedDataTable

CELLS = [
    Text("12"),
    Text("live", style=Style(color="green")),
    Text("123456789"),
    Text(""),
    Text("abcde"),
    Text("x", style="bold red"),
]


class TableApp(App[None]):
    def __init__(self, cursor: bool = True) -> None:
        super().__init__()
        self.cursor = cursor

    def compose(self) -> ComposeResult:
        yield CachedDataTable(cursor_type="row" if self.cursor else "none", zebra_stripes=True)


async def test_plain_cells_are_drawn_exactly_as_datatable_draws_them() -> None:
    app = TableApp()
    async with app.run_test(size=(80, 12)) as pilot:
        table = app.query_one(CachedDataTable)
        table.add_column("a", key="a", width=5)
        table.add_column("b", key="b", width=8)
        for i, cell in enumerate(CELLS):
            table.add_row(cell, Text(cell.plain, style=cell.style), key=str(i))
        await pilot.pause()
        styles = (Style(bgcolor="black"), Style(), Style(color="red", meta={"fixed": True}))
        cases = itertools.product(range(len(CELLS)), (0, 1), (False, True), (False, True), styles)
        for row, column, cursor, hover, base in cases:
            width = 7 if column == 0 else 10
            expected = DataTable._render_cell(table, row, column, base, width, cursor, hover)
            table._clear_caches()
            drawn = table._render_cell(row, column, base, width, cursor, hover)
            assert drawn == expected, (row, column, cursor, hover, base)


async def test_unchanged_cells_are_not_rendered_again() -> None:
    app = TableApp(cursor=False)  # the cursor's row is drawn differently: it would move too
    async with app.run_test(size=(80, 12)) as pilot:
        table = app.query_one(CachedDataTable)
        table.add_column("a", key="a", width=5)
        table.add_column("b", key="b", width=8)
        for i in range(4):
            table.add_row(Text(str(i)), Text("same"), key=str(i))
        await pilot.pause()
        drawn = table.cells_rendered
        assert drawn >= 8
        table.update_cell("2", "a", Text("22"))
        await pilot.pause()
        assert table.cells_rendered == drawn + 1, "only the changed cell is rendered"
        position = {"22": 0, "3": 1, "0": 2, "1": 3}  # every row moves by two: same stripe
        table.sort("a", key=lambda cell: position[cell.plain])
        await pilot.pause()
        assert table.cells_rendered == drawn + 1, "moved rows reuse their lines"
        row_meta = table._render_cell(0, 1, Style(), 10)[0][1].style
        assert row_meta is not None and row_meta.meta == {"row": 0, "column": 1}

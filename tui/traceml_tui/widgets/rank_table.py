"""The per-rank table: step ms, lag vs the median rank, phase split and state, worst first.

Rows are keyed by rank and updated cell by cell (only cells whose text changed), then re-sorted
only when the order changed, so 1,000 ranks scroll smoothly; never clear-and-rebuild. Only the
visible cells whose text changed are rendered again (CachedDataTable). The table reads only the
snapshots the screen hands it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable

from traceml.analysis.view import RankWindow
from traceml.records import PHASES
from traceml_tui.format import ms, opt_pct, signed_pct
from traceml_tui.snapshot import Snapshot, worst_first
from traceml_tui.widgets.cached_table import CachedDataTable
from traceml_tui.widgets.redraw import StaticText

PHASE_HEADS = {
    "dataloader": "data",
    "between": "betw",
    "forward": "fwd",
    "backward": "bwd",
    "optimizer": "opt",
    "h2d": "h2d",
    "other": "other",
}
COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("rank", "rank", 5),
    ("state", "state", 8),
    ("step", "step ms", 8),
    ("lag", "lag", 7),
    *((p, PHASE_HEADS[p], 5) for p in PHASES),
    ("steps", "steps", 8),
    ("host", "host", 16),
)
"""(column key, label, width); the cell tuples below follow this order. Fixed widths: measuring
cells to size columns costs O(ranks) per changed cell, which 1,000 ranks cannot afford."""
Cells = tuple[str, ...]


def row_cells(rank: RankWindow, lag: float | None) -> Cells:
    """The text of one rank's row, in COLUMNS order."""
    step = ms(rank.median_ms) if rank.steps else "waiting"
    phases = tuple(opt_pct(s) for s in rank.phase_share)
    host = rank.host or "?"
    return (str(rank.rank), rank.state, step, signed_pct(lag), *phases, str(rank.total_steps), host)


class RankTable(Vertical):
    """Every rank, worst first; Enter on a row focuses that rank in the memory and system panels."""

    BORDER_TITLE = "Ranks, worst first · lag: % of a step behind the median rank"
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "rank-table--dead",
        "rank-table--stalled",
        "rank-table--live",
        "rank-table--finished",
    }

    @dataclass
    class Chosen(Message):
        """The user chose a rank in the table."""

        rank: int

    def __init__(self) -> None:
        super().__init__()
        self._cells: dict[int, Cells] = {}
        self._order: list[int] = []
        self.note = StaticText("Waiting for the run…", classes="note")
        self.table: CachedDataTable = CachedDataTable(cursor_type="row", zebra_stripes=True)

    def compose(self) -> ComposeResult:
        yield self.note
        yield self.table

    def on_mount(self) -> None:
        self._add_columns()

    def _add_columns(self) -> None:
        if not self.table.columns:
            for key, label, width in COLUMNS:
                self.table.add_column(label, key=key, width=width)

    @property
    def order(self) -> list[int]:
        """Ranks in display order (worst first)."""
        return list(self._order)

    def update_from(self, snap: Snapshot) -> None:
        """Show `snap`'s ranks: add new rows, update changed cells, drop gone ranks, re-sort."""
        self._add_columns()
        ranks = snap.view.ranks
        self.note.show("Waiting for the first rank…")
        self.note.display = not ranks
        self.set_class(not ranks, "-waiting")
        for rank in ranks:
            self._put(rank.rank, row_cells(rank, snap.lags.get(rank.rank)))
        for gone in set(self._cells) - {r.rank for r in ranks}:
            self.table.remove_row(str(gone))
            del self._cells[gone]
        order = [r.rank for r in sorted(ranks, key=lambda r: worst_first(r, snap.lags.get(r.rank)))]
        if order != self._order:
            self._sort(order)

    def _put(self, rank: int, cells: Cells) -> None:
        old = self._cells.get(rank)
        self._cells[rank] = cells
        table, key = self.table, str(rank)
        if old is None:
            table.add_row(
                *(self._cell(c[0], t) for c, t in zip(COLUMNS, cells, strict=True)), key=key
            )
            return
        for (col, _, _), before, after in zip(COLUMNS, old, cells, strict=True):
            if before != after:
                table.update_cell(key, col, self._cell(col, after))

    def _cell(self, column: str, text: str) -> Text:
        """Plain text (never parsed as markup); the state in its theme colour."""
        if column == "state" and f"rank-table--{text}" in self.COMPONENT_CLASSES:
            return Text(
                text, style=self.get_component_rich_style(f"rank-table--{text}", partial=True)
            )
        return Text(text)

    def _sort(self, order: list[int]) -> None:
        table = self.table
        at = (
            table.coordinate_to_cell_key(table.cursor_coordinate).row_key
            if table.row_count
            else None
        )
        self._order = order
        position = {str(rank): i for i, rank in enumerate(order)}
        table.sort("rank", key=lambda cell: position[str(cell)])
        if at is not None and at.value in position:
            table.move_cursor(row=table.get_row_index(at), scroll=False)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.post_message(self.Chosen(int(event.row_key.value)))

"""The live view: holds the latest snapshot and hands each panel its slice (attributes
down, messages up: panels never read the feed, the store or each other).

It receives `SnapshotReady`, `FeedFailed` and `ChildExited` messages, and owns the display state
(paused, focused rank). It never reads the feed, the store or a socket.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container
from textual.screen import Screen
from textual.widgets import Footer

from traceml_tui.chart_data import ChartScope
from traceml_tui.messages import ChildExited, FeedFailed, SnapshotReady
from traceml_tui.screens.focus_rank import FocusRank
from traceml_tui.screens.help import HelpScreen
from traceml_tui.snapshot import Snapshot, run_state
from traceml_tui.widgets.diagnosis import DiagnosisPanel
from traceml_tui.widgets.header import RunHeader
from traceml_tui.widgets.log_panel import LogPanel
from traceml_tui.widgets.memory import MemoryPanel
from traceml_tui.widgets.phase_bars import PhaseBars
from traceml_tui.widgets.rank_table import RankTable
from traceml_tui.widgets.step_chart import StepChartPanel
from traceml_tui.widgets.system import SystemPanel

if TYPE_CHECKING:
    from textual.timer import Timer


PANELS_S = 3.0
"""Least time between two redraws of the panels while the run goes on; the header (step, uptime,
state) takes every snapshot, once a second. Drawing a snapshot costs the UI thread 20-40 ms,
most of what the viewer costs beside the job: `traceml attach` beside one 0.4 ms-a-step rank
used 4.0-4.5 % of a core drawing every panel every second, 2.1 % every 3 s, and 1.2 % drawing
nothing (taking in the records, Textual idle). A change of the run's state, of its primary
finding or of its ranks, a key, a resize or the script's exit still draws at once."""


def gist(snap: Snapshot) -> tuple[object, ...]:
    """What must reach the panels at once when it changes: where the snapshot came from, the
    run's state, its rank count and its primary finding (kind and severity)."""
    primary = snap.diagnosis.primary if snap.diagnosis is not None else None
    return (
        snap.source,
        run_state(snap, snap.taken_at).word,
        snap.child_exit,
        len(snap.view.ranks),
        (primary.kind, primary.severity) if primary is not None else None,
    )


def panels_now(shown: Snapshot | None, snap: Snapshot, since_s: float) -> bool:
    """True when the panels show `snap` now, rather than PANELS_S after they last drew
    (`since_s` ago) the snapshot `shown`."""
    return shown is None or since_s >= PANELS_S or gist(shown) != gist(snap)


class MainScreen(Screen[None]):
    """Header, diagnosis, phase bars, ranks, memory, system and (under `traceml run`) the log.

    Args:
        log_path: The script's log file to tail in a panel; None hides the panel.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("r", "focus_rank", "Rank"),
        Binding("p", "toggle_pause", "Pause"),
        Binding("t", "toggle_scope", "Run/recent"),
    ]

    def __init__(self, log_path: Path | None = None) -> None:
        super().__init__()
        self.log_path = log_path
        self.latest: Snapshot | None = None
        """The newest snapshot received, shown or not (while paused)."""
        self.shown: Snapshot | None = None
        """The snapshot the panels show now."""
        self.paused = False
        self.focus_rank: int | None = None
        """The rank chosen with `r` or Enter; None = automatic (the worst rank)."""
        self.scope: ChartScope | None = None
        """What the charts span, chosen with `t`; None = automatic (the last 100 steps live,
        the whole run for a finished run's summary)."""
        self.child_exit: int | None = None
        self.draw_s = 0.0
        """CPU seconds the UI thread spent between the last two snapshots it drew (drawing one
        and everything else it did meanwhile); read by the feed thread to space snapshots
        (feed.DRAW_SHARE)."""
        self._drawn_at: float | None = None
        """time.thread_time() when the last snapshot arrived; None before the first."""
        self._panels_at = -PANELS_S
        """time.monotonic() when the panels last drew a snapshot."""
        self._panels_timer: Timer | None = None
        """Draws the newest snapshot in the panels PANELS_S after their last draw; None when
        none is pending."""
        self.header = RunHeader()
        self.diagnosis = DiagnosisPanel()
        self.phases = PhaseBars()
        self.ranks = RankTable()
        self.memory = MemoryPanel()
        self.system = SystemPanel()
        self.chart = StepChartPanel()

    def compose(self) -> ComposeResult:
        yield self.header
        with Container(id="body"):
            yield self.diagnosis
            yield self.phases
            yield self.chart
            yield self.memory
            yield self.ranks
            yield self.system
        if self.log_path is not None:
            yield LogPanel(self.log_path)
        yield Footer()

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        self.latest = message.snapshot
        if not self.paused:
            now = time.thread_time()
            if self._drawn_at is not None:
                self.draw_s = now - self._drawn_at
            self._drawn_at = now
            snap = message.snapshot
            since = time.monotonic() - self._panels_at
            if panels_now(self.shown, self._with_exit(snap), since):
                self.show(snap)
                return
            self.header.snapshot = self._with_exit(snap)
            if self._panels_timer is None:
                self._panels_timer = self.set_timer(PANELS_S - since, self._panels_due)

    def _panels_due(self) -> None:
        self._panels_timer = None
        if not self.paused and self.latest is not None and self.latest is not self.shown:
            self.show(self.latest)

    def _with_exit(self, snap: Snapshot) -> Snapshot:
        if self.child_exit is None:
            return snap
        return dataclasses.replace(snap, child_exit=self.child_exit)

    def on_feed_failed(self, message: FeedFailed) -> None:
        self.header.failure = message.reason

    def on_child_exited(self, message: ChildExited) -> None:
        self.child_exit = message.status
        for log in self.query(LogPanel):
            log.add_class("-done")
        if self.latest is not None:
            self.show(self.latest)
        self.notify(f"The script finished (exit {message.status}); press q to quit.")

    def show(self, snap: Snapshot) -> None:
        """Hand every panel its slice of `snap`."""
        snap = self._with_exit(snap)
        self._panels_at = time.monotonic()
        self.shown = snap
        self.header.snapshot = snap
        self.diagnosis.snapshot = snap
        self.phases.snapshot = snap
        self.ranks.update_from(snap)
        self._show_focused()

    def _show_focused(self) -> None:
        if self.shown is None:
            return
        snap = self.shown
        rank, scope = self._rank(snap), self.chart_scope(snap)
        self.chart.show(snap, rank, scope)
        self.memory.show(snap, rank, scope)
        self.system.show(snap, rank)

    def _rank(self, snap: Snapshot) -> int | None:
        if self.focus_rank is not None and snap.rank(self.focus_rank) is not None:
            return self.focus_rank
        if snap.source == "summary":  # the rank whose timeline the summary kept
            return next((r.rank for r in snap.view.ranks if r.timeline), snap.worst)
        return snap.worst

    def chart_scope(self, snap: Snapshot) -> ChartScope:
        """The scope chosen with `t`, else the last steps live and the whole run for a summary."""
        if self.scope is not None:
            return self.scope
        return "run" if snap.source == "summary" else "recent"

    def action_toggle_scope(self) -> None:
        """`t`: the charts switch between the last 100 steps and the whole run."""
        current = self.chart_scope(self.shown) if self.shown is not None else "recent"
        self.scope = "run" if current == "recent" else "recent"
        self._show_focused()

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        self.header.note = "paused" if self.paused else ""
        if not self.paused and self.latest is not None:
            self.show(self.latest)

    def action_focus_rank(self) -> None:
        ranks = [r.rank for r in self.shown.view.ranks] if self.shown else []
        self.app.push_screen(FocusRank(ranks), self.set_focus_rank)

    def set_focus_rank(self, rank: int | None) -> None:
        """Show `rank` in the memory and system panels; None goes back to automatic."""
        self.focus_rank = rank
        self._show_focused()

    def on_rank_table_chosen(self, message: RankTable.Chosen) -> None:
        self.set_focus_rank(message.rank)

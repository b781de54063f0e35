"""Pilot tests of the keys: ? help, tab between panels, r rank focus, p pause, q quit."""

from __future__ import annotations

import asyncio
import time
from unittest.mock import patch

from textual.widgets import Input

from tests.tui.fixtures import CannedRun, CannedSource, fill, screen_of, snapshot_of, until
from traceml_tui import feed as feed_module
from traceml_tui.app import TraceMLApp
from traceml_tui.screens.focus_rank import FocusRank
from traceml_tui.screens.help import HelpScreen
from traceml_tui.widgets.cached_table import CachedDataTable
from traceml_tui.widgets.diagnosis import DiagnosisPanel
from traceml_tui.widgets.memory import MemoryPanel
from traceml_tui.widgets.phase_bars import PhaseBars
from traceml_tui.widgets.step_chart import StepChartPanel
from traceml_tui.widgets.system import SystemPanel

SIZE = (120, 40)


async def shown(app: TraceMLApp, pilot: object) -> None:
    await until(pilot, lambda: app.main.shown is not None)  # type: ignore[arg-type]


async def test_question_mark_opens_help_and_escape_closes_it() -> None:
    app = TraceMLApp(None, source=snapshot_of())
    async with app.run_test(size=SIZE) as pilot:
        await shown(app, pilot)
        await pilot.press("question_mark")
        assert isinstance(screen_of(app), HelpScreen)
        await pilot.press("escape")
        assert screen_of(app) is app.main


async def test_tab_moves_between_panels() -> None:
    app = TraceMLApp(None, source=snapshot_of())
    async with app.run_test(size=SIZE) as pilot:
        await shown(app, pilot)
        seen = [type(app.focused)]
        for _ in range(6):
            await pilot.press("tab")
            seen.append(type(app.focused))
        panels = [
            DiagnosisPanel,
            PhaseBars,
            StepChartPanel,
            MemoryPanel,
            CachedDataTable,
            SystemPanel,
        ]
        assert seen == [*panels, DiagnosisPanel]
        await pilot.press("shift+tab")
        assert type(app.focused) is SystemPanel


async def test_r_focuses_a_rank_in_memory_and_system() -> None:
    app = TraceMLApp(None, source=snapshot_of())
    async with app.run_test(size=SIZE) as pilot:
        await shown(app, pilot)
        await pilot.press("r")
        assert isinstance(screen_of(app), FocusRank)
        await pilot.press("9", "enter")
        assert isinstance(screen_of(app), FocusRank), "a rank the run does not have is refused"
        screen_of(app).query_one(Input).value = ""
        await pilot.press("2", "enter")
        assert screen_of(app) is app.main
        assert app.main.memory.border_title == "Memory · rank 2"
        assert app.main.system.border_title == "System · rank 2"
        await pilot.press("r", "enter")
        assert app.main.memory.border_title == "Memory · rank 3", "empty input: the worst rank"


async def test_enter_on_a_table_row_focuses_that_rank() -> None:
    app = TraceMLApp(None, source=snapshot_of())
    async with app.run_test(size=SIZE) as pilot:
        await shown(app, pilot)
        app.main.ranks.table.focus()
        await pilot.press("ctrl+home", "enter")
        assert app.main.memory.border_title == "Memory · rank 3", "the worst rank is on top"


async def test_p_pauses_the_display_and_keeps_the_data() -> None:
    source = CannedSource()
    app = TraceMLApp(None, source=source)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.main
        source.push(lambda store: fill(store, CannedRun(steps=40)))
        await until(pilot, lambda: screen.shown is not None and screen.shown.view.total_steps == 40)
        await pilot.press("p")
        assert "[paused]" in str(screen.header.render().plain)
        source.push(lambda store: fill(store, CannedRun(steps=60), 40))
        await until(
            pilot, lambda: screen.latest is not None and screen.latest.view.total_steps == 60
        )
        assert screen.shown is not None and screen.shown.view.total_steps == 40
        await pilot.press("p")
        assert screen.shown is screen.latest
        assert "paused" not in str(screen.header.render().plain)


async def test_q_detaches_from_an_attached_run() -> None:
    source = CannedSource()
    app = TraceMLApp(None, source=source)
    async with app.run_test(size=SIZE) as pilot:
        await shown(app, pilot)
        await pilot.press("q")
        await pilot.pause()
    assert app.return_value == 0
    assert not app.detached, "attached: there is no job of ours to leave running"


async def test_q_stops_the_feed_thread_at_once_however_long_it_would_wait() -> None:
    """Leaving wakes the feed (`TraceMLApp.exit`): a real `app.run()` waits for the feed's thread
    before it returns, and the feed sleeps in its source's poll until records come."""
    source = CannedSource()
    app = TraceMLApp(None, source=source)
    # Unwoken, each pump would wait a minute: no snapshot falls due, no cap cuts it short.
    with patch.multiple(feed_module, PUMP_MAX_S=60.0, IDLE_S=60.0):
        async with app.run_test(size=SIZE) as pilot:
            await shown(app, pilot)
            await pilot.pause(0.3)
            assert not source.closed, "the feed waits in its source"
            await pilot.press("q")
        deadline = time.monotonic() + 10
        while not source.closed and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    assert source.closed, "the feed's thread ended and closed its source"

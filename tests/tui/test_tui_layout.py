"""Small terminals and small runs: what must stay on screen, and panels that give rows back."""

from __future__ import annotations

from pathlib import Path

from tests.tui.fixtures import CannedRun, CannedSource, snapshot_of, until
from traceml_tui.app import TraceMLApp
from traceml_tui.messages import ChildExited
from traceml_tui.widgets.diagnosis import DiagnosisPanel
from traceml_tui.widgets.log_panel import LogPanel
from traceml_tui.widgets.phase_bars import PhaseBars
from traceml_tui.widgets.rank_table import RankTable


async def test_at_80x24_the_verdict_and_every_phase_fit_without_scrolling() -> None:
    app = TraceMLApp(None, source=snapshot_of())
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.main.shown is not None)
        await pilot.pause()
        diagnosis = app.main.query_one(DiagnosisPanel).region
        phases = app.main.query_one(PhaseBars).region
        assert diagnosis.y >= 1 and phases.bottom <= 23, "above the footer, no scrolling"
        assert phases.height >= 11, "title, stacked bar and 7 phase rows, inside a border"


async def test_a_one_rank_run_gets_a_small_rank_table() -> None:
    app = TraceMLApp(None, source=snapshot_of(CannedRun(ranks=1, slow_rank=None)))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.main.shown is not None)
        await pilot.pause()
        assert app.main.query_one(RankTable).region.height <= 6


async def test_an_empty_or_finished_log_panel_gives_its_rows_back(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    app = TraceMLApp(None, log_path=log, source=CannedSource())
    async with app.run_test(size=(120, 40)) as pilot:
        panel = app.main.query_one(LogPanel)
        await pilot.pause()
        assert panel.region.height == 3, "nothing written yet"
        log.write_text("".join(f"line {i}\n" for i in range(100)))
        await until(pilot, lambda: not panel.has_class("-waiting"))
        await pilot.pause()
        running = panel.region.height
        assert running >= 10
        app.main.post_message(ChildExited(0))
        await until(pilot, lambda: panel.has_class("-done"))
        await pilot.pause()
        assert panel.region.height < running

"""Pilot tests of each panel, fed by canned snapshots and by a canned source through the feed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from textual.coordinate import Coordinate
from textual.widgets import DataTable, Static

from tests.tui.fixtures import T0, CannedRun, CannedSource, fill, snapshot_of, summary_of, until
from traceml.errors import TransportError
from traceml.records import RankEnd, SystemSample
from traceml_tui.app import TraceMLApp
from traceml_tui.screens.main import MainScreen
from traceml_tui.summary_snapshot import from_summary
from traceml_tui.widgets.diagnosis import DiagnosisPanel
from traceml_tui.widgets.header import RunHeader
from traceml_tui.widgets.memory import CHART_POINTS, MemoryPanel
from traceml_tui.widgets.phase_bars import PhaseBars
from traceml_tui.widgets.rank_table import RankTable
from traceml_tui.widgets.step_chart import StepChartPanel
from traceml_tui.widgets.system import SystemPanel

SIZE = (120, 40)


def text(widget: object) -> str:
    """What a panel shows, as plain text."""
    if isinstance(widget, Static):
        return str(widget.render())
    return str(widget.render().plain)  # type: ignore[attr-defined]


def main(app: TraceMLApp) -> MainScreen:
    return app.main


async def test_every_panel_shows_the_canned_run() -> None:
    app = TraceMLApp(None, source=snapshot_of())
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: main(app).shown is not None)
        screen = main(app)
        header = text(screen.query_one(RunHeader))
        assert "train-20231114-221320-a1b2" in header
        assert "train.py" in header
        assert "4 ranks on 1 host" in header
        assert "step 120" in header
        assert "up 0:04" in header
        assert "● live" in header
        diagnosis = text(screen.query_one(DiagnosisPanel))
        assert "CRITICAL INPUT_BOUND" in diagnosis
        assert "dataloader 45 %" in diagnosis
        assert "→ Raise DataLoader num_workers" in diagnosis
        assert "INPUT_STRAGGLER" in diagnosis
        bars = text(screen.query_one(PhaseBars))
        assert "step median 27.0 ms" in bars
        assert "dataloader" in bars and "45 %" in bars and "12.0 ms" in bars
        assert screen.query_one(PhaseBars).border_subtitle == "last 100 steps, median of 4 ranks"
        table = screen.query_one(RankTable)
        assert table.table.row_count == 4
        assert table.order[0] == 3, "the input straggler is listed first"
        memory = screen.query_one(MemoryPanel)
        assert memory.border_title == "Memory · rank 3", "the worst rank by default"
        assert "device" in text(memory.query_one(".label.device", Static))
        series = memory.chart.data
        assert series is not None and series.name == "device allocated"
        assert len(series.points) == CHART_POINTS, "100 steps bucketed to the chart's points"
        chart = screen.query_one(StepChartPanel)
        assert chart.chart.data is not None and chart.chart.data.steps == 100
        assert chart.border_title == "Step time over the last 100 steps · rank 3"
        system = text(screen.query_one(SystemPanel))
        assert "CPU  process 101 % · host 41 %" in system, "rank 3's sample"
        assert "GPU  util 51 %" in system and "power 295 W" in system and "70 °C" in system


async def test_waiting_is_said_in_words_before_any_data() -> None:
    source = CannedSource()
    app = TraceMLApp(None, source=source)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: main(app).shown is not None)
        screen = main(app)
        assert "waiting for the first step" in text(screen.query_one(RunHeader))
        assert text(screen.query_one(PhaseBars)) == "Waiting for the first step…"
        assert text(screen.query_one(DiagnosisPanel)) == "Waiting for the first step…"
        assert screen.query_one(RankTable).has_class("-waiting")
        assert "Waiting for the first rank" in text(screen.query_one(RankTable).query_one(".note"))
        assert screen.query_one(PhaseBars).has_class("-waiting")
        assert "Waiting" in text(screen.query_one(SystemPanel))


async def test_a_live_feed_shows_dead_stalled_and_finished_ranks() -> None:
    source = CannedSource()
    run = CannedRun()
    app = TraceMLApp(None, source=source)
    async with app.run_test(size=SIZE) as pilot:
        screen = main(app)
        source.push(lambda store: fill(store, run))
        await until(pilot, lambda: screen.shown is not None and screen.shown.view.total_steps > 0)
        source.push(lambda store: store.set_rank_state(1, "stalled"))
        await until(pilot, lambda: "1 of 4 ranks stalled" in text(screen.query_one(RunHeader)))
        assert screen.query_one(RankTable).order[0] == 1
        assert screen.query_one(RunHeader).has_class("-stale")
        source.push(lambda store: store.set_rank_state(2, "dead"))
        await until(pilot, lambda: "1 of 4 ranks dead" in text(screen.query_one(RunHeader)))
        assert screen.query_one(RankTable).order[:2] == [2, 1]
        assert screen.query_one(RunHeader).has_class("-dead")
        cell = screen.query_one(RankTable).table.get_cell("2", "state")
        assert str(cell) == "dead"

        def end_all(store: object) -> None:
            for rank in range(run.ranks):
                store.add_end(RankEnd(rank, "ok", run.steps, T0 + 10))  # type: ignore[attr-defined]

        source.push(end_all)
        await until(pilot, lambda: "finished (ok)" in text(screen.query_one(RunHeader)))
        assert app.is_running, "the app stays up until the user quits"
        app.workers.cancel_group(app, "feed")
        await until(pilot, lambda: source.closed)
    assert source.opened


async def test_an_old_system_sample_is_marked_stale() -> None:
    snap = snapshot_of()
    old = SystemSample(rank=3, t=snap.taken_at - 30, process_cpu_pct=50.0)
    app = TraceMLApp(None, source=replace(snap, system={3: old}))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: main(app).shown is not None)
        system = main(app).query_one(SystemPanel)
        assert system.has_class("-stale")
        assert "No system sample for 30 s" in text(system)
        assert "GPU  none seen" in text(system)


async def test_a_cpu_run_says_it_has_no_device_memory() -> None:
    app = TraceMLApp(None, source=snapshot_of(CannedRun(cuda=False, ranks=1, slow_rank=None)))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: main(app).shown is not None)
        memory = main(app).query_one(MemoryPanel)
        assert "No device memory (CPU run)" in text(memory.query_one(".note", Static))
        assert not memory.query_one(".label.device").display
        assert memory.query_one(".label.host").display
        assert memory.chart.data is not None and memory.chart.data.name == "host RSS"
        assert "1 rank on 1 host" in text(main(app).query_one(RunHeader))


async def test_a_finished_run_opens_from_its_summary() -> None:
    app = TraceMLApp(None, source=from_summary(summary_of()))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: main(app).shown is not None)
        screen = main(app)
        header = text(screen.query_one(RunHeader))
        assert "finished (ok)" in header and "ran 0:03" in header
        assert "INPUT_BOUND" in text(screen.query_one(DiagnosisPanel))
        assert "whole run after warm-up" in (screen.query_one(PhaseBars).border_subtitle or "")
        assert "host RSS peak" in text(screen.query_one(MemoryPanel).query_one(".note", Static))
        chart = screen.query_one(StepChartPanel)
        assert chart.scope == "run", "a summary opens on the whole run"
        data = chart.chart.data
        assert data is not None and data.steps == 120, "the summary's timeline, warm-up included"
        assert screen.query_one(MemoryPanel).chart.data is not None
        assert "avg" in text(screen.query_one(SystemPanel))
        assert screen.query_one(RankTable).table.get_cell("3", "state").plain == "finished"


async def test_a_summary_says_how_many_steps_tracemls_own_work_overlapped() -> None:
    summary = summary_of()
    assert summary["system"]["traceml_held_steps"] == 0
    summary["system"].update(traceml_held_steps=3, traceml_held_ms=24.8)
    for shown, expected in ((summary_of(), False), (summary, True)):
        said = "TraceML's own work overlapped 3 steps" in await system_text(shown)
        assert said is expected


async def system_text(summary: dict[str, Any]) -> str:
    """The System panel's text when `summary` is opened."""
    app = TraceMLApp(None, source=from_summary(summary))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: main(app).shown is not None)
        return text(main(app).query_one(SystemPanel))


async def test_a_thousand_ranks_update_in_place() -> None:
    run = CannedRun(ranks=1000, steps=8, slow_rank=500)
    source = CannedSource()
    app = TraceMLApp(None, source=source)
    async with app.run_test(size=SIZE) as pilot:
        screen = main(app)
        source.push(lambda store: fill(store, run))
        # The first draw of a thousand rows takes seconds on a loaded machine.
        await until(
            pilot,
            lambda: screen.shown is not None and len(screen.shown.view.ranks) == 1000,
            timeout=20,
        )
        table = screen.query_one(RankTable)
        data_table = table.query_one(DataTable)
        assert data_table.row_count == 1000
        assert table.order[0] == 500
        first_key = data_table.coordinate_to_cell_key(Coordinate(0, 0)).row_key
        source.push(lambda store: fill(store, CannedRun(ranks=1000, steps=12, slow_rank=500), 8))
        # A big table's first draw is costly, so the next snapshot may come up to
        # feed.MAX_INTERVAL_S later; a loaded machine adds to it.
        updated = lambda: screen.shown is not None and screen.shown.view.total_steps == 12  # noqa: E731
        await until(pilot, updated, timeout=20)
        await pilot.pause(0.1)
        assert data_table.row_count == 1000
        assert data_table.get_cell("7", "steps").plain == "12"
        assert data_table.coordinate_to_cell_key(Coordinate(0, 0)).row_key == first_key


class UnreachableSource(CannedSource):
    def open(self) -> None:
        raise TransportError("cannot connect to rank 0: its socket is gone")


async def test_a_run_that_cannot_be_reached_is_said_in_the_header() -> None:
    app = TraceMLApp(None, source=UnreachableSource())
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "its socket is gone" in text(app.main.header))
        assert "● not connected" in text(app.main.header)
        assert app.main.header.has_class("-dead")
        assert app.is_running, "the user reads the reason and quits"


async def test_an_unknown_run_is_said_in_the_header(runtime_dir: Path) -> None:
    app = TraceMLApp("no-such-run", runtime_dir=runtime_dir)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "no run matches 'no-such-run'" in text(app.main.header))

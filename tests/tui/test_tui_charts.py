"""The step-time and memory charts: their points, scale and y-range, and the `t` toggle."""

from __future__ import annotations

from functools import partial

import pytest

from tests.tui.fixtures import CannedRun, CannedSource, charts_drawn, fill, snapshot_of, until
from traceml.records import PHASES
from traceml_tui.app import TraceMLApp
from traceml_tui.chart_data import (
    MEMORY_SPAN_FLOOR,
    Point,
    bucket,
    chart_data,
    memory_range,
)
from traceml_tui.widgets.chart import REDRAW_S

SIZE = (120, 40)
LONG = CannedRun(steps=300)


def point(step: int, ms: float, weight: int = 1) -> Point:
    phases = (ms / 2, None, ms / 2, None, None, None, None)
    return Point(step, weight, ms, phases, 100.0 + step, None, ms)


def test_recent_is_the_last_100_steps_and_run_is_every_step() -> None:
    snap = snapshot_of(LONG)
    worst = snap.worst
    assert worst == 3, "the input straggler"
    recent = chart_data(snap, worst, "recent", 500)
    whole = chart_data(snap, worst, "run", 500)
    assert recent is not None and whole is not None
    assert recent.steps == 100 and recent.points[0].step == 201 and recent.points[-1].step == 300
    assert whole.steps == 300 and whole.points[0].step <= 2, "the run from its first step"
    assert chart_data(snap, 0, "recent", 500) is None, "only charted ranks carry recent steps"


def test_stacked_layers_add_up_to_the_step() -> None:
    data = chart_data(snapshot_of(), 3, "recent", 500)
    assert data is not None
    layers = data.stacked()
    assert [p for p, _ in layers] == list(PHASES), "every phase measured, bottom: dataloader"
    top = layers[-1][1]
    assert top == pytest.approx([p.step_ms for p in data.points])


def test_bucketing_keeps_weights_means_and_the_slowest_step() -> None:
    points = [point(i, 10.0) for i in range(1, 100)] + [point(100, 1000.0)]
    merged = bucket(points, 10)
    assert len(merged) == 10 and sum(p.weight for p in merged) == 100
    assert merged[-1].step == 100 and merged[-1].max_ms == 1000.0
    assert merged[-1].step_ms == pytest.approx((9 * 10 + 1000) / 10)
    assert merged[0].phase_ms[1] is None, "a phase never measured stays None, not 0"


def test_a_2_percent_wobble_does_not_fill_the_memory_chart() -> None:
    lo, hi = memory_range([1000.0, 1020.0, 1005.0])
    assert hi - lo >= MEMORY_SPAN_FLOOR * 1020.0
    assert (1020.0 - 1000.0) / (hi - lo) <= 0.1
    assert lo <= 1000.0 and hi >= 1020.0
    assert memory_range([0.0, 500.0, 1000.0]) == (0.0, 1000.0), "real growth keeps its range"


async def test_t_switches_the_charts_between_recent_and_the_whole_run() -> None:
    app = TraceMLApp(None, source=snapshot_of(LONG))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.main.chart.chart.data is not None)
        chart = app.main.chart
        assert chart.chart.data is not None and chart.chart.data.steps == 100
        assert "t: whole run" in str(chart.border_subtitle)
        await pilot.press("t")
        assert chart.chart.data is not None and chart.chart.data.steps == 300
        assert chart.border_title == "Step time over the whole run · rank 3"
        assert app.main.memory.chart.data is not None
        assert "whole run" in str(app.main.memory.border_subtitle)
        await pilot.pause()
        text = chart.chart.text
        assert " ms┤" in text, "the y axis carries values in ms"
        assert "300" in text, "the x axis names step numbers"
        await pilot.press("t")
        assert chart.chart.data is not None and chart.chart.data.steps == 100


async def test_a_chart_is_not_built_again_without_new_data() -> None:
    source = CannedSource()
    app = TraceMLApp(None, source=source)
    async with app.run_test(size=SIZE) as pilot:
        for n in range(20, 200, 20):
            source.push(partial(fill, run=CannedRun(steps=n), first=n - 20))
        await until(pilot, lambda: charts_drawn(app, 180))
        builds = app.main.chart.chart.builds
        await pilot.pause(REDRAW_S + 0.3)
        assert app.main.chart.chart.builds <= builds + 1, "no build without new data"
        assert app.main.chart.chart.data is not None and app.main.chart.chart.data.steps == 100

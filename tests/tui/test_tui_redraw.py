"""The live view redraws only what changed: an idle run's snapshots (one a second, to move ages)
neither lay the screen out again nor rebuild a chart; a panel is laid out only when its height
changes. Laying out re-measures and repaints every widget (20-40 ms of the UI thread)."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from textual.content import Content

from tests.tui.fixtures import CannedRun, CannedSource, charts_drawn, fill, until
from traceml_tui import snapshot as snapshot_module
from traceml_tui.app import TraceMLApp
from traceml_tui.feed import IDLE_S
from traceml_tui.widgets.redraw import need, shown

SIZE = (120, 40)


@pytest.mark.parametrize(
    ("old", "new", "heights", "expected"),
    [
        ("a\nb", "a\nb", (2, 2), "nothing"),
        ("a\nb", "a\nc", (2, 2), "repaint"),
        ("a\nb", "a\nb\nc", (2, 3), "layout"),
        ("a long line", "a longer line", (1, 2), "layout"),  # it wraps now
        (None, "a", (-1, 1), "layout"),  # never shown: the first layout
        ("a", "b", (1, -1), "layout"),  # no width yet: nothing is measured
        ("a", "b", (-1, 1), "layout"),  # the old height was measured at another width
    ],
)
def test_what_a_new_content_takes(
    old: str | None, new: str, heights: tuple[int, int], expected: str
) -> None:
    before = None if old is None else shown(old)
    assert need(before, shown(new), *heights) == expected


def test_a_change_of_style_alone_is_a_change() -> None:
    bold, plain = Content.styled("ok", "bold"), Content("ok")
    assert bold == plain  # Content's own == compares text only
    assert need(shown(bold), shown(plain), 1, 1) == "repaint"


async def test_an_idle_run_is_neither_laid_out_again_nor_its_charts_rebuilt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A run silent for STALE_AFTER_S turns "stalled": a real change of the header, which may
    # then wrap. On a loaded host the charts can take that long to appear, so the run is kept
    # "live" here: what is tested is that ages moving alone lay nothing out.
    monkeypatch.setattr(snapshot_module, "STALE_AFTER_S", 3600.0)
    source = CannedSource()
    app = TraceMLApp(None, source=source)
    async with app.run_test(size=SIZE) as pilot:
        source.push(partial(fill, run=CannedRun(steps=120)))
        await until(pilot, lambda: charts_drawn(app, 120))
        await pilot.pause(0.3)
        layouts: list[str] = []
        for widget in app.main.query("*"):
            original = widget.refresh

            def spy(*regions: Any, _w: Any = widget, _o: Any = original, **kw: Any) -> Any:
                if kw.get("layout"):
                    layouts.append(type(_w).__name__)
                return _o(*regions, **kw)

            monkeypatch.setattr(widget, "refresh", spy)
        builds = (app.main.chart.chart.builds, app.main.memory.chart.builds)
        # Two idle snapshots (one every IDLE_S) shown; a loaded host may take longer than that.
        seen = [app.main.shown]

        def two_more() -> bool:
            if app.main.shown is not seen[-1]:
                seen.append(app.main.shown)
            return len(seen) >= 3

        await until(pilot, two_more, timeout=IDLE_S * 2.5 + 15)
        assert layouts == []
        assert (app.main.chart.chart.builds, app.main.memory.chart.builds) == builds

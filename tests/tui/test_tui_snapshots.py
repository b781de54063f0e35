"""SVG snapshots, one per screen, from canned records (`make snapshots` updates them)."""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot

from tests.tui.fixtures import snapshot_of, until
from traceml_tui.app import TraceMLApp


def app() -> TraceMLApp:
    return TraceMLApp(None, source=snapshot_of())


async def drawn(pilot: Pilot[Any]) -> None:
    """Wait until the canned snapshot is on screen."""
    main = pilot.app.main  # type: ignore[attr-defined]
    await until(pilot, lambda: main.shown is not None)
    await pilot.pause()


def test_main_screen_wide(snap_compare: Any) -> None:
    assert snap_compare(app(), terminal_size=(120, 40), run_before=drawn)


def test_main_screen_80x24(snap_compare: Any) -> None:
    assert snap_compare(app(), terminal_size=(80, 24), run_before=drawn)


def test_help_screen(snap_compare: Any) -> None:
    async def help_open(pilot: Pilot[Any]) -> None:
        await drawn(pilot)
        await pilot.press("question_mark")

    assert snap_compare(app(), terminal_size=(120, 40), run_before=help_open)

"""The run's header line: run, script, ranks, hosts, step, uptime and the run's state in words.

Renders only from its `snapshot` reactive (plus a `note` the screen sets, e.g. "paused"); it never
reads the feed, the store or another widget.
"""

from __future__ import annotations

from typing import Any

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from traceml_tui.format import clock
from traceml_tui.snapshot import RunState, Snapshot, is_over, run_state
from traceml_tui.widgets.redraw import Redraw

STATE_STYLE = {
    "-live": "bold $success",
    "-waiting": "bold $warning",
    "-stale": "bold $warning",
    "-dead": "bold $error",
    "-finished": "bold $primary",
}
STATE_CLASSES = tuple(STATE_STYLE)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _ranks(snap: Snapshot) -> str:
    view = snap.view
    seen, world = len(view.ranks), view.world_size
    ranks = _plural(world, "rank") if seen >= world else f"{seen}/{world} ranks"
    return f"{ranks} on {_plural(view.hosts, 'host')}"


def _elapsed(snap: Snapshot, state: RunState) -> str:
    if snap.duration_s is not None:
        return f"ran {clock(snap.duration_s)}"
    if snap.started is None:
        return "up n/a"
    if is_over(snap) and snap.last_data_at:  # the clock stops with the run
        return f"ran {clock(snap.last_data_at - snap.started)}"
    return f"up {clock(snap.taken_at - snap.started)}"


def header_content(
    snap: Snapshot | None, state: RunState, note: str = "", failure: str = ""
) -> Content:
    """The header as styled text; pure, so tests can check it without an app."""
    parts: list[str | tuple[str, str]] = [("TraceML", "bold $primary")]
    if snap is not None:
        view = snap.view
        parts += ["  ", (view.run_id or "run ?", "bold"), "  ", view.script or "?"]
        facts = [_ranks(snap), f"step {view.total_steps:,}", _elapsed(snap, state)]
        if snap.restarts:
            facts.append(f"restart {snap.restarts}")
        parts += ["  ·  ", "  ·  ".join(facts)]
    parts += ["  ·  ", ("● " + state.text, STATE_STYLE[state.css])]
    if failure:
        parts += ["  ", (failure, "$error")]
    if note:
        parts += ["  ", (f"[{note}]", "reverse $warning")]
    return Content.assemble(*parts)


class RunHeader(Widget):
    """Who the run is and whether it is alive, in one or two lines."""

    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True, repaint=False)
    note: reactive[str] = reactive("", repaint=False)
    """A word the screen adds, e.g. "paused"; "" for none."""
    failure: reactive[str] = reactive("", repaint=False)
    """Why the feed stopped (the run cannot be reached, or was lost); "" while it runs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._redraw = Redraw(self)

    def _state(self) -> RunState:
        if self.failure:
            return RunState("lost", "not connected", "-dead")
        snap = self.snapshot
        return run_state(snap, snap.taken_at if snap else 0.0)

    # Each of the three goes through the same Redraw, so it always knows what is on screen.
    def watch_snapshot(self) -> None:
        self._set_state_class()
        self._redraw.show(self.render())

    def watch_failure(self) -> None:
        self._set_state_class()
        self._redraw.show(self.render())

    def watch_note(self) -> None:
        self._redraw.show(self.render())

    def _set_state_class(self) -> None:
        css = self._state().css
        for name in STATE_CLASSES:
            self.set_class(name == css, name)

    def render(self) -> Content:
        return header_content(self.snapshot, self._state(), self.note, self.failure)

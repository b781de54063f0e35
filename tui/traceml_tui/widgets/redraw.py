"""Redraw a widget only as far as what it shows changed.

Asking Textual for a layout pass re-measures and repaints every widget on the screen: 20-40 ms of
the UI thread on this 2-core host. The panels asked for one at every snapshot, changed or not,
so an idle run's live view (a snapshot a second, nothing new in it) cost 6-7 % of a core. Each
panel now says what it shows through `Redraw`: the same content again does nothing, changed
content of the same height (measured as Textual measures it, at the same width) is a repaint of
that widget alone, and only content whose height changes asks for a layout.
"""

from __future__ import annotations

from typing import Any, Literal

from textual.content import Content
from textual.visual import Visual
from textual.widget import Widget
from textual.widgets import Static

Shown = tuple[str, tuple[Any, ...]]
"""What a widget shows: its plain text and its style spans (Content's == ignores styles)."""

Need = Literal["nothing", "repaint", "layout"]


def shown(content: str | Content) -> Shown:
    if isinstance(content, Content):
        return content.plain, tuple(content.spans)
    return str(content), ()


def need(old: Shown | None, new: Shown, old_height: int, new_height: int) -> Need:
    """What showing `new` (`new_height` lines at the widget's width; -1 when it has no width
    yet) in place of `old` (`old_height` lines at that width; -1 when unknown) takes."""
    if old == new:
        return "nothing"
    if old is None or new_height < 0 or new_height != old_height:
        return "layout"
    return "repaint"


class Redraw:
    """Remembers what one widget shows, and refreshes it as little as a new content needs."""

    __slots__ = ("_height", "_shown", "_widget", "_width")

    def __init__(self, widget: Widget) -> None:
        self._widget = widget
        self._shown: Shown | None = None
        self._height = -1
        self._width = 0
        """The width `_height` was measured at: a height from another width says nothing."""

    def shows(self, content: str | Content) -> bool:
        """True when `content` is what the widget shows already."""
        return shown(content) == self._shown

    def decide(self, content: str | Content, visual: Visual | None = None) -> Need:
        """What showing `content` next takes (its height measured on `visual`, by default the
        content itself); it counts as shown from now on."""
        new = shown(content)
        if new == self._shown:
            return "nothing"
        widget = self._widget
        width = widget.content_size.width
        measure = visual if visual is not None else content
        height = -1
        if width > 0 and isinstance(measure, Visual):
            # As Textual's own Widget.get_content_height measures it.
            height = measure.get_height(widget.styles, width)  # type: ignore[arg-type]
        old_height = self._height if width == self._width else -1
        needed = need(self._shown, new, old_height, height)
        self._shown, self._height, self._width = new, height, width
        return needed

    def show(self, content: Content) -> Need:
        """`content` is what the widget renders now: refresh it as far as that takes."""
        needed = self.decide(content)
        if needed != "nothing":
            self._widget.refresh(layout=needed == "layout")
        return needed


class StaticText(Static):
    """A Static whose `show` redraws only as far as its text changed (`update` always asks for
    a layout pass)."""

    def __init__(self, content: str = "", **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._redraw = Redraw(self)

    def show(self, content: str | Content) -> None:
        if self._redraw.shows(content):
            return
        self.update(content, layout=False)  # a repaint; the new visual measures its height
        if self._redraw.decide(content, self.visual) == "layout":
            self.refresh(layout=True)

"""The help screen: the keys, and what each panel shows. Static text; closes on any of its keys."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS: tuple[tuple[str, str], ...] = (
    ("q", "quit; the job runs on (`traceml run` asks first)"),
    ("?", "this help"),
    ("tab, shift+tab", "move between panels"),
    ("r", "the rank charted and in Memory, System (default: worst)"),
    ("t", "charts: the last 100 steps, or the whole run"),
    ("p", "pause the display (data keeps arriving)"),
    ("ctrl+c", "`traceml run`: Ctrl-C to the script; else quit"),
)
PANELS: tuple[tuple[str, str], ...] = (
    ("Diagnosis", "the main finding, its numbers, what to do next"),
    ("Step time", "where the median rank's step goes: % and ms"),
    ("Step chart", "one rank's step time over time, phases stacked (ms)"),
    ("Ranks", "every rank, worst first: step ms, phase split, and lag:"),
    ("", "how far it is behind the median rank, in % of a step"),
    ("Memory", "device (or host) memory of one rank over time, in MB"),
    ("System", "CPU, host memory, GPU util, power, temperature"),
)
LABEL = 16


def help_text() -> str:
    keys = "\n".join(f"  {key:<{LABEL}} {what}" for key, what in KEYS)
    panels = "\n".join(f"  {name:<{LABEL}} {what}" for name, what in PANELS)
    note = "The viewer only reads: quitting never touches the job."
    return f"Keys\n{keys}\n\nPanels\n{panels}\n\n{note}"


class HelpScreen(ModalScreen[None]):
    """Keys and panels, over the live view."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "app.pop_screen", "Close"),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog") as box:
            box.border_title = "TraceML help"
            box.border_subtitle = "esc to close"
            yield Static(help_text())

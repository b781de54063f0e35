"""Asked on every way out (`q`, ctrl+q, the command palette's Quit) while the script of
`traceml run` still runs: stop it, or leave it running?

Only asks; the app carries out the choice (it owns the child process). "Leave it running" has the
focus, so a reflexive `q` Enter never kills a run.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static

QuitChoice = Literal["stop", "detach"]


class ConfirmQuit(ModalScreen[QuitChoice]):
    """Stop the job (SIGTERM, then wait) or leave it running detached; escape cancels."""

    AUTO_FOCUS = "#detach"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "choose('stop')", "Stop the job"),
        Binding("d", "choose('detach')", "Leave it running"),
        Binding("escape,c", "app.pop_screen", "Cancel"),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as box:
            box.border_title = "Quit TraceML"
            yield Static("The script is still running. Stop it, or leave it running detached?")
            with Horizontal(classes="buttons"):
                # Content, not a str: a str label is markup, which would eat "[s]".
                yield Button(Content("Stop the job [s]"), id="stop", variant="error")
                yield Button(Content("Leave it running [d]"), id="detach", variant="primary")
                yield Button(Content("Cancel [esc]"), id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id in ("stop", "detach"):
            self.action_choose(event.button.id)
        else:
            self.app.pop_screen()

    def action_choose(self, choice: str) -> None:
        self.dismiss("stop" if choice == "stop" else "detach")

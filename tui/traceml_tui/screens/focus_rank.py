"""Asks which rank the memory and system panels should show; empty input means "automatic".

It only asks: the screen applies the choice, and nothing here touches the run.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class FocusRank(ModalScreen[int | None]):
    """Type a rank and Enter; an empty line returns None (automatic); escape cancels.

    Args:
        ranks: The ranks the run has, so a rank that does not exist is refused in place.
    """

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "Cancel")]

    def __init__(self, ranks: list[int]) -> None:
        super().__init__()
        self.ranks = set(ranks)
        self.span = f"{min(ranks)}-{max(ranks)}" if ranks else "none yet"

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as box:
            box.border_title = "Focus a rank"
            yield Static(f"Rank ({self.span}); empty for automatic, esc to cancel")
            yield Input(placeholder="rank", type="integer")
            yield Static("", classes="error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            self.dismiss(None)
        elif int(text) in self.ranks:
            self.dismiss(int(text))
        else:
            self.query_one(".error", Static).update(f"No rank {text} in this run.")

"""The script's own output under `traceml run`: a bounded tail of the log file the launcher writes.

This is the one panel that reads a file, because the log is the script's output, not run data: a
timer reads at most READ_BYTES of new bytes per tick from a regular file (never blocks), keeps the
last MAX_LINES lines, and strips terminal control sequences. It never writes to the file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import BinaryIO

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Log, Static

MAX_LINES = 2000
READ_BYTES = 256 * 1024
"""Most bytes read per tick (and from the end of an existing log when the panel opens)."""
POLL_S = 0.25
MAX_PARTIAL = 8 * 1024
"""Most bytes kept of a line not ended yet (a progress bar that only ever writes \r)."""
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def clean(line: str) -> str:
    """What a terminal would show of one line: escape codes dropped, \\r keeps the last rewrite."""
    line = _ANSI.sub("", line)
    if "\r" in line.rstrip("\r"):
        line = line.rstrip("\r").rsplit("\r", 1)[-1]
    return line.rstrip("\r")


class LogTail:
    """New complete lines of a growing text file, read without blocking.

    Args:
        path: The file; it may not exist yet.
        start_bytes: On first open, skip all but the last this many bytes.
    """

    def __init__(self, path: Path, start_bytes: int = READ_BYTES) -> None:
        self.path = path
        self.start_bytes = start_bytes
        self._offset: int | None = None
        self._partial = b""
        self._mid_line = False
        """True after starting in the middle of a long log: its first partial line is dropped."""

    def read(self, limit: int = READ_BYTES) -> list[str]:
        """Lines completed since the last call (at most `limit` bytes read); [] when none."""
        try:
            with self.path.open("rb") as f:
                data = self._read(f, limit)
        except OSError:
            return []
        if self._mid_line:
            cut = data.find(b"\n")
            if cut < 0:
                return []
            data, self._mid_line = data[cut + 1 :], False
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()[-MAX_PARTIAL:]
        return [clean(raw.decode("utf-8", "replace")) for raw in lines]

    def _read(self, f: BinaryIO, limit: int) -> bytes:
        size = f.seek(0, os.SEEK_END)
        if self._offset is None or size < self._offset:
            self._offset = max(0, size - self.start_bytes)
            self._partial, self._mid_line = b"", self._offset > 0
        f.seek(self._offset)
        data = f.read(limit)
        self._offset += len(data)
        return data


class LogPanel(Vertical, can_focus=False):
    """The last MAX_LINES lines of the script's output, following the end."""

    def __init__(self, path: Path) -> None:
        super().__init__(classes="-waiting")
        self.tail = LogTail(path)
        self.border_title = f"Script output · {path.name}"
        self.note = Static("Waiting for the script's output…", classes="note")
        self.log_view = Log(max_lines=MAX_LINES, auto_scroll=True)

    def compose(self) -> ComposeResult:
        yield self.note
        yield self.log_view

    def on_mount(self) -> None:
        self.poll()
        self.set_interval(POLL_S, self.poll)

    def poll(self) -> None:
        """Append whatever the script wrote since the last poll."""
        lines = self.tail.read()
        if not lines:
            return
        self.note.display = False
        self.set_class(False, "-waiting")
        self.log_view.write_lines(lines[-MAX_LINES:])

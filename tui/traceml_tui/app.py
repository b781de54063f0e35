"""TraceMLApp: the live view of one run, for `traceml attach` and `traceml run`.

The app wires three things and nothing more: the feed worker (the only reader of the run), the
main screen (which draws snapshots), and, under `traceml run`, the script's child process (Ctrl-C
is passed to it, `q` asks whether to stop it). The viewer only reads the run: quitting never
touches a job it did not start, and it never imports torch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from rich.console import RenderableType
from textual import work
from textual.app import App
from textual.binding import Binding, BindingType
from textual.worker import get_current_worker

from traceml.errors import TraceMLError
from traceml_tui.feed import Feed, Source
from traceml_tui.messages import ChildExited, FeedFailed, SnapshotReady
from traceml_tui.screens.confirm_quit import ConfirmQuit, QuitChoice
from traceml_tui.screens.main import MainScreen
from traceml_tui.snapshot import Snapshot

STOP_WAIT_S = 10.0
"""After SIGTERM, how long the script may take to shut down before it is killed."""
CHILD_POLL_S = 0.5
TERMINAL_CHECK_S = 1.0
"""How often the view checks that its terminal is still there (see `check_terminal`)."""


def terminal_alive() -> bool:
    """True while the view's terminal (its stdin) is a terminal still open at the other end."""
    try:
        return sys.__stdin__ is not None and os.isatty(sys.__stdin__.fileno())
    except (OSError, ValueError):
        return False


def exit_status(returncode: int) -> int:
    """A Popen return code as a shell reports it: killed by signal N -> 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


class TraceMLApp(App[int]):
    """The live view of one run.

    Args:
        run_ref: Run id or unique prefix; None = the newest live run (also what `textual run
            traceml_tui.app:TraceMLApp`, i.e. `make tui`, opens).
        runtime_dir: Where the run files are; None = TraceML's default runtime dir.
        log_path: The script's log file, shown in a panel (under `traceml run`); None hides it.
        child: The script's process under `traceml run`; None when attached to a run.
        source: A ready Source or a fixed Snapshot (tests, a loaded summary); None = find the run
            through the transport.
    """

    CSS_PATH = "app.tcss"
    TITLE = "TraceML"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]  # noqa: RUF012 (Textual's type)
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "request_quit", "Quit"),
        Binding("ctrl+q", "request_quit", show=False, priority=True),
        Binding("ctrl+c", "interrupt", show=False, priority=True),
    ]

    def __init__(
        self,
        run_ref: str | None = None,
        *,
        runtime_dir: Path | None = None,
        log_path: Path | None = None,
        child: subprocess.Popen[bytes] | None = None,
        source: Source | Snapshot | None = None,
    ) -> None:
        super().__init__()
        self.run_ref = run_ref
        self.runtime_dir = runtime_dir
        self.log_path = log_path
        self.child = child
        self.source = source
        self.detached = False
        """True when the user chose to leave the script running."""
        self.main = MainScreen(log_path)
        self._child_reported = False
        self._feed: Feed | None = None
        """The running feed, woken when the app leaves: Textual's exit waits for its thread."""
        self._leaving = False
        """Set by `exit`, before Textual cancels the feed's worker: the woken feed stops."""

    def on_mount(self) -> None:
        self.push_screen(self.main)
        self.feed()
        if self.child is not None:
            self.set_interval(CHILD_POLL_S, self.poll_child)
        if not self.is_headless and terminal_alive():
            self.set_interval(TERMINAL_CHECK_S, self.check_terminal)

    def check_terminal(self) -> None:
        """Leave, as a detach does, once the terminal is gone without a hang-up signal (a
        pseudo-terminal whose other end closed, under `setsid` or a harness): Textual's input
        thread would read nothing in a loop, a core's worth of CPU beside the job, for good."""
        if not terminal_alive():
            self.detached = True
            self.exit(0)

    @work(thread=True, exclusive=True, exit_on_error=False, group="feed")
    def feed(self) -> None:
        """The feed worker: the only code that reads the run (see `traceml_tui.feed`)."""
        worker = get_current_worker()
        screen = self.main

        def cancelled() -> bool:
            return worker.is_cancelled or self._leaving

        try:
            source = self._connect(cancelled)
            if isinstance(source, Snapshot):
                screen.post_message(SnapshotReady(source))
                return
            feed = Feed(
                source,
                lambda snap: screen.post_message(SnapshotReady(snap)),
                draw_s=lambda: screen.draw_s,
                focus=lambda: screen.focus_rank,
                known_steps=getattr(source, "known_steps", None),
            )
            self._feed = feed
            feed.run(cancelled)
        except TraceMLError as err:
            screen.post_message(FeedFailed(err.msg))
        except Exception as err:  # noqa: BLE001 (say why the panels stay empty, never go blank)
            screen.post_message(FeedFailed(f"the feed stopped: {type(err).__name__}: {err}"))

    def exit(
        self,
        result: int | None = None,
        return_code: int = 0,
        message: RenderableType | None = None,
    ) -> None:
        """Leave, waking the feed so that its thread sees the cancellation now."""
        super().exit(result, return_code, message)
        self._leaving = True
        feed = self._feed
        if feed is not None:
            feed.wake()

    def _connect(self, cancelled: Callable[[], bool]) -> Source | Snapshot:
        if self.source is not None:
            return self.source
        from traceml_tui.source import open_run

        return open_run(
            self.run_ref,
            runtime_dir=self.runtime_dir,
            wait=self.child is not None,
            cancelled=cancelled,
        )

    def poll_child(self) -> None:
        """Tell the screen once when the script exits."""
        if self.child is None or self._child_reported:
            return
        code = self.child.poll()
        if code is not None:
            self._child_reported = True
            self.main.post_message(ChildExited(exit_status(code)))

    def child_running(self) -> bool:
        return self.child is not None and self.child.poll() is None

    def child_status(self) -> int:
        """The script's exit status; 0 when there is no script (attached)."""
        if self.child is None or self.child.returncode is None:
            return 0
        return exit_status(self.child.returncode)

    async def action_quit(self) -> None:
        """Textual's own way out (the command palette's Quit): the same choice as `q`."""
        self.action_request_quit()

    def action_request_quit(self) -> None:
        """`q`: detach from a run; under `traceml run` with the script alive, ask first."""
        if isinstance(self.screen, ConfirmQuit):
            return
        if self.child_running():
            self.push_screen(ConfirmQuit(), self.carry_out)
        else:
            self.exit(self.child_status())

    def carry_out(self, choice: QuitChoice | None) -> None:
        """Do what the user chose in ConfirmQuit."""
        if choice == "detach":
            self.detached = True
            self.exit(0)
        elif choice == "stop":
            self.notify("Stopping the script (SIGTERM)…")
            self.stop_child()

    @work(thread=True, exclusive=True, group="stop")
    def stop_child(self) -> None:
        """SIGTERM the script, wait for it (killing it after STOP_WAIT_S), then exit."""
        child = self.child
        if child is None:
            return
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
        try:
            child.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        self.call_from_thread(self.exit, self.child_status())

    def action_interrupt(self) -> None:
        """Ctrl-C: the script gets SIGINT, as it would in a terminal; attached, it quits."""
        child = self.child
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGINT)
            self.notify("Ctrl-C sent to the script.")
        else:
            self.exit(self.child_status())

"""`traceml run` mode: the script's log panel, Ctrl-C passed to it, and the quit dialog."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.command import CommandPalette
from textual.widgets import Button

from tests.tui.fixtures import CannedSource, screen_of, until
from traceml_tui.app import TraceMLApp
from traceml_tui.screens.confirm_quit import ConfirmQuit
from traceml_tui.widgets.header import RunHeader
from traceml_tui.widgets.log_panel import LogPanel

SIZE = (120, 40)
SCRIPT = r"""
import signal, sys, time
def on_int(signum, frame):
    print("got SIGINT", flush=True)
    sys.exit(3)
signal.signal(signal.SIGINT, on_int)
print("\x1b[32mstarting\x1b[0m", flush=True)
for i in range(100000):
    print(f"step {i}", flush=True)
    time.sleep(0.05)
"""


@pytest.fixture
def child(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    log = tmp_path / "output.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=out, stderr=out)
    yield proc, log
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def header(app: TraceMLApp) -> str:
    return str(app.main.query_one(RunHeader).render().plain)


def log_lines(app: TraceMLApp) -> list[str]:
    return list(app.main.query_one(LogPanel).log_view.lines)


async def test_the_log_panel_tails_the_script_and_ctrl_c_reaches_it(
    child: tuple[subprocess.Popen[bytes], Path],
) -> None:
    proc, log = child
    app = TraceMLApp("run-x", log_path=log, child=proc, source=CannedSource())
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "step 3" in log_lines(app))
        assert log_lines(app)[0] == "starting", "escape codes are stripped"
        await pilot.press("ctrl+c")
        await until(pilot, lambda: "finished (exit 3)" in header(app))
        await until(pilot, lambda: "got SIGINT" in log_lines(app))
        assert app.is_running, "the app waits for q after the script ends"
        await pilot.press("q")
    assert app.return_value == 3


async def test_q_asks_and_detach_leaves_the_script_running(
    child: tuple[subprocess.Popen[bytes], Path],
) -> None:
    proc, log = child
    app = TraceMLApp("run-x", log_path=log, child=proc, source=CannedSource())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q", "q")
        assert isinstance(screen_of(app), ConfirmQuit)
        assert sum(isinstance(s, ConfirmQuit) for s in app.screen_stack) == 1, "asked once"
        await pilot.press("escape")
        assert screen_of(app) is app.main and app.is_running
        await pilot.press("q", "d")
    assert app.return_value == 0 and app.detached
    assert proc.poll() is None, "detached: the script runs on"


async def test_q_then_stop_terminates_the_script(
    child: tuple[subprocess.Popen[bytes], Path],
) -> None:
    proc, log = child
    app = TraceMLApp("run-x", log_path=log, child=proc, source=CannedSource())
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "step 1" in log_lines(app))
        await pilot.press("q")
        await pilot.click("#stop")
        await until(pilot, lambda: not app.is_running)
    assert proc.returncode == -15
    assert app.return_value == 143, "killed by SIGTERM, as a shell reports it"


async def test_q_enter_leaves_the_script_running_and_the_keys_are_shown(
    child: tuple[subprocess.Popen[bytes], Path],
) -> None:
    proc, log = child
    app = TraceMLApp("run-x", log_path=log, child=proc, source=CannedSource())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        dialog = screen_of(app)
        assert isinstance(dialog, ConfirmQuit)
        labels = [str(b.label) for b in dialog.query(Button)]
        assert labels == ["Stop the job [s]", "Leave it running [d]", "Cancel [esc]"]
        assert app.focused is not None and app.focused.id == "detach"
        await pilot.press("enter")
    assert app.detached and proc.poll() is None, "q Enter never kills the run"


async def test_quit_from_the_command_palette_asks_too(
    child: tuple[subprocess.Popen[bytes], Path],
) -> None:
    proc, log = child
    app = TraceMLApp("run-x", log_path=log, child=proc, source=CannedSource())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(screen_of(app), CommandPalette))
        await pilot.press(*"quit")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(screen_of(app), ConfirmQuit))
        await pilot.press("escape")
        assert app.is_running and proc.poll() is None
        await pilot.press("ctrl+q")
        assert isinstance(screen_of(app), ConfirmQuit), "ctrl+q asks as well"
        await pilot.press("s")
        await until(pilot, lambda: not app.is_running)
    assert proc.returncode is not None


WAITER = r"""
import subprocess, sys
from traceml_tui.launch import wait_for
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], start_new_session=True)
print("ready", flush=True)
sys.exit(wait_for(child))
"""


@pytest.mark.slow
def test_ctrl_c_after_the_view_is_gone_reaches_the_script() -> None:
    """The script has its own session: the launcher's SIGINT must be passed on by hand."""
    waiter = subprocess.Popen(
        [sys.executable, "-c", WAITER, SCRIPT], stdout=subprocess.PIPE, text=True
    )
    assert waiter.stdout is not None
    assert waiter.stdout.readline() == "ready\n"
    while "step" not in waiter.stdout.readline():
        pass
    waiter.send_signal(signal.SIGINT)
    assert waiter.wait(timeout=20) == 3, "the script's own SIGINT handler ran and exited 3"

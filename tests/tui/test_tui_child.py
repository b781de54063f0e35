"""`traceml run` mode: the script's log panel, Ctrl-C passed to it, and the quit dialog."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

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

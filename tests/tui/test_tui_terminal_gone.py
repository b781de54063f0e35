"""A terminal that goes away without a hang-up signal: `traceml run`'s view leaves as a detach
does, and the script runs on.

A shell's terminal sends SIGHUP when it closes, and the launcher ends with it. A pseudo-terminal
that is not the launcher's controlling terminal (`setsid traceml run`, a harness that drives it)
sends none: its input reads empty forever, and Textual's input thread spun on it, a core's worth
of CPU beside the job until someone killed the launcher. Here a real pty, the launcher in a
session of its own, and the pty's master closed while the script runs.
"""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import child_env
from traceml.transport.runfiles.rundir import RunDir
from traceml.transport.runfiles.runfile import read_rank_file

pytestmark = pytest.mark.slow

RUN_ID = "tui-gone-0001"
SCRIPT = r"""
import time, torch, traceml
traceml.init(mode="auto")
model = torch.nn.Linear(8, 1)
for step in range(1_000_000):
    with traceml.trace_step(model):
        model(torch.randn(4, 8)).sum().backward()
    time.sleep(0.001)
"""


def drain(fd: int) -> None:
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        return


def test_the_view_leaves_when_its_terminal_is_gone_and_the_script_runs_on(
    tmp_path: Path, runtime_dir: Path
) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = child_env(TERM="xterm-256color", TRACEML_RUNTIME_DIR=str(runtime_dir))
    cmd = [sys.executable, "-m", "traceml", "run", "--run-id", RUN_ID, str(script)]
    launcher = subprocess.Popen(
        cmd, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=tmp_path, start_new_session=True
    )
    os.close(slave)
    threading.Thread(target=drain, args=(master,), daemon=True).start()
    script_pid = 0
    try:
        deadline = time.monotonic() + 60
        while not script_pid:
            assert time.monotonic() < deadline, "the script never wrote its rank file"
            try:
                script_pid = read_rank_file(RunDir(runtime_dir, RUN_ID).rank_json(0)).info.pid
            except Exception:
                time.sleep(0.2)
        time.sleep(1.0)  # the view is up and drawing
        assert launcher.poll() is None
        os.close(master)
        launcher.wait(timeout=15)  # before: it never ended, spinning on the closed terminal
        assert launcher.returncode == 0, "it leaves as a detach does"
        assert psutil.Process(script_pid).is_running(), "the script runs on"
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        if script_pid:
            try:
                psutil.Process(script_pid).terminate()
                psutil.Process(script_pid).wait(10)
            except psutil.Error:
                pass

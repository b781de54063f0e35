"""End to end in a real terminal (tmux): `run_live` beside an instrumented script, detach, attach.

The driver does what the `traceml run` launcher does (start the script writing to output.log in
its run dir, then call `run_live`); the screen is read with capture-pane. Skipped without tmux.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from traceml.transport.rundir import RunDir

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux"),
]

RUN_ID = "tui-e2e-0001"
TRAIN = r"""
import time, torch, traceml
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self): return 10**6
    def __getitem__(self, i):
        time.sleep(0.0002)
        return torch.randn(8), torch.randn(1)

traceml.init(mode="auto")
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step, (x, y) in enumerate(DataLoader(Slow(), batch_size=32)):
    with traceml.trace_step(model):
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    if step % 50 == 0:
        print(f"train step {step}", flush=True)
"""
DRIVER = r"""
import os, subprocess, sys
from pathlib import Path
from traceml_tui.launch import run_live

train, log, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
env = dict(os.environ, TRACEML_RUN_ID=sys.argv[4], TRACEML_SUMMARY=str(out.parent / "s.json"))
with log.open("wb") as sink:
    child = subprocess.Popen(
        [sys.executable, "-m", "traceml.bootstrap", str(train)],
        stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
    )
(out.parent / "child.pid").write_text(str(child.pid))
code = run_live(sys.argv[4], log, child)
out.write_text(str(code))
"""


class Tmux:
    """One tmux server of our own (its own socket), so no user session is touched."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket

    def run(self, *args: str) -> str:
        cmd = ["tmux", "-S", str(self.socket), *args]
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout

    def start(self, name: str, command: str) -> None:
        self.run("new-session", "-d", "-s", name, "-x", "120", "-y", "40", command)

    def screen(self, name: str) -> str:
        return self.run("capture-pane", "-p", "-t", name)

    def wait_for(self, name: str, check: Callable[[str], bool], timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen(name)
            if check(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"screen of {name} never matched:\n{text}")
            time.sleep(0.3)


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    mux = Tmux(tmp_path / "tmux.sock")
    yield mux
    subprocess.run(["tmux", "-S", str(mux.socket), "kill-server"], capture_output=True)


def stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def test_run_live_detach_and_attach_again(tmux: Tmux, tmp_path: Path, runtime_dir: Path) -> None:
    run_dir = RunDir(runtime_dir, RUN_ID).create()
    train, driver, out = tmp_path / "train.py", tmp_path / "driver.py", tmp_path / "code"
    train.write_text(TRAIN)
    driver.write_text(DRIVER)
    env = f"TRACEML_RUNTIME_DIR={runtime_dir}"
    cmd = f"{sys.executable} {driver} {train} {run_dir.log_path} {out} {RUN_ID}"
    tmux.start("run", f"{env} {cmd}; sleep 60")
    pid = 0
    try:
        screen = tmux.wait_for("run", lambda s: "INPUT_BOUND" in s and "train step" in s)
        pid = int((tmp_path / "child.pid").read_text())
        assert "dataloader" in screen and "● live" in screen and RUN_ID in screen
        tmux.run("send-keys", "-t", "run", "q")
        tmux.wait_for("run", lambda s: "Leave it running" in s, timeout=10)
        tmux.run("send-keys", "-t", "run", "d")
        deadline = time.monotonic() + 10
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert out.read_text() == "0", "detached: run_live returns 0"
        os.kill(pid, 0)  # the script runs on

        attach = f"{sys.executable} -m traceml attach {RUN_ID[:8]}"
        tmux.start("attach", f"{env} {attach}; sleep 60")
        screen = tmux.wait_for("attach", lambda s: "INPUT_BOUND" in s and "train step" in s)
        assert "Script output · output.log" in screen, "the log is shown again on attach"
        tmux.run("send-keys", "-t", "attach", "q")
        tmux.wait_for("attach", lambda s: "INPUT_BOUND" not in s, timeout=10)
        os.kill(pid, 0)  # still running after the second detach
    finally:
        if pid:
            stop(pid)

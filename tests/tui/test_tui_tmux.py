"""End to end in a real terminal (tmux): `traceml run` shows the live view, detach, attach again.

The screen is read with capture-pane, as a user would see it. `.ci/run` installs tmux.
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

from traceml.transport.runfiles.rundir import RunDir
from traceml.transport.runfiles.runfile import read_rank_file

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


def script_pid(run_dir: RunDir) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            return read_rank_file(run_dir.rank_json(0)).info.pid
        except Exception:
            time.sleep(0.2)
    raise AssertionError("the script never wrote its rank file")


def test_traceml_run_live_detach_and_attach_again(
    tmux: Tmux, tmp_path: Path, runtime_dir: Path
) -> None:
    run_dir = RunDir(runtime_dir, RUN_ID)
    train = tmp_path / "train.py"
    train.write_text(TRAIN)
    env = f"TRACEML_RUNTIME_DIR={runtime_dir}"
    run = f"{sys.executable} -m traceml run --run-id {RUN_ID} {train}"
    tmux.start("run", f"cd {tmp_path} && {env} {run}; echo EXIT=$?; sleep 60")
    pid = 0
    try:
        screen = tmux.wait_for("run", lambda s: "INPUT_BOUND" in s and "train step" in s)
        pid = script_pid(run_dir)
        assert "dataloader" in screen and "● live" in screen and RUN_ID in screen
        tmux.run("send-keys", "-t", "run", "q")
        tmux.wait_for("run", lambda s: "Leave it running" in s, timeout=10)
        tmux.run("send-keys", "-t", "run", "d")
        screen = tmux.wait_for("run", lambda s: "EXIT=" in s, timeout=15)
        assert "EXIT=0" in screen, "detaching leaves `traceml run` with exit code 0"
        assert f"traceml attach {RUN_ID}" in screen, "it says how to come back"
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


def test_make_demo_shows_the_live_view_then_the_card_and_the_next_step(
    tmux: Tmux, tmp_path: Path, runtime_dir: Path
) -> None:
    """`make demo` in a terminal: live view (charts included), q after the end, card, next step."""
    repo = Path(__file__).resolve().parents[2]
    (tmp_path / "examples").symlink_to(repo / "examples")
    bin_dir = Path(sys.executable).parent
    make = (
        f"make -f {repo / 'Makefile'} BIN={bin_dir} -o {bin_dir / 'traceml'} demo"
        "; echo EXIT=$?; sleep 60"
    )
    # COLUMNS/LINES from the test's own environment would override the pane's 120x40.
    env = f"unset COLUMNS LINES; export TRACEML_RUNTIME_DIR={runtime_dir}"
    tmux.start("demo", f"cd {tmp_path} && {env}; {make}")
    screen = tmux.wait_for("demo", lambda s: "Step time over" in s and "INPUT_BOUND" in s)
    assert "ms┤" in screen, "the step chart carries its scale"
    tmux.wait_for("demo", lambda s: "press q to quit" in s, timeout=90)  # the script exited
    tmux.run("send-keys", "-t", "demo", "q")
    screen = tmux.wait_for("demo", lambda s: "EXIT=" in s, timeout=30)
    assert "Next: fix it and compare" in screen
    assert "summary written to" in screen and "INPUT_BOUND" in screen


SHADOW_LAUNCH = r"""
import os, pathlib, time
marker = pathlib.Path(os.environ["SCRIPT_MARKER"])
deadline = time.monotonic() + 30
while not marker.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
pathlib.Path(os.environ["IMPORT_SAW"]).write_text("started" if marker.exists() else "not started")
raise ImportError("simulated broken install of the live view")
"""
MARKED = r"""
import os, pathlib, sys, time
pathlib.Path(os.environ["SCRIPT_MARKER"]).write_text("up")
try:
    time.sleep(60)
except KeyboardInterrupt:
    print("script interrupted", flush=True)
    sys.exit(3)
"""


def test_the_script_starts_before_the_view_and_runs_on_when_the_view_cannot(
    tmux: Tmux, tmp_path: Path, runtime_dir: Path
) -> None:
    """The launcher starts the script before importing the view (whose import would delay it a
    quarter of a second); a view that cannot start leaves the script running, Ctrl-C still
    reaches it (it runs in a session of its own), and its exit code comes through."""
    shadow = tmp_path / "shadow" / "traceml_tui"  # first on PYTHONPATH: hides the real view
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    (shadow / "launch.py").write_text(SHADOW_LAUNCH)
    script = tmp_path / "marked.py"
    script.write_text(MARKED)
    saw = tmp_path / "saw"
    env = (
        f"unset COLUMNS LINES; export TRACEML_RUNTIME_DIR={runtime_dir}"
        f" PYTHONPATH={shadow.parent} SCRIPT_MARKER={tmp_path / 'marker'} IMPORT_SAW={saw}"
    )
    run = f"{sys.executable} -m traceml run --run-id {RUN_ID} {script}"
    tmux.start("run", f"cd {tmp_path} && {env}; {run}; echo EXIT=$?; sleep 60")
    tmux.wait_for("run", lambda s: "the live view cannot start" in s, timeout=60)
    assert saw.read_text() == "started", "the script was started before the view's import"
    tmux.run("send-keys", "-t", "run", "C-c")
    screen = tmux.wait_for("run", lambda s: "EXIT=" in s, timeout=30)
    assert "the live view cannot start (ImportError: simulated broken install" in screen
    assert "EXIT=3" in screen, "Ctrl-C reached the script, and its exit code came through"
    log = RunDir(runtime_dir, RUN_ID).log_path.read_text()
    assert "script interrupted" in log, "the script's output is in the run's log"

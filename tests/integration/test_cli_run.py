"""`traceml run` as a user meets it: argv, exit codes, signals, and bad input in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import child_env, traceml_cmd
from traceml.analysis.schema import validate_summary

pytestmark = pytest.mark.slow

ECHO = """
import json, os, sys
import torch
import traceml
m = torch.nn.Linear(4, 1)
for _ in range(3):
    with traceml.trace_step(m):
        m(torch.randn(2, 4)).sum().backward()
print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "name": __name__}))
sys.exit(int(os.environ.get("EXIT_CODE", "0")))
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def run_cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        traceml_cmd(*args),
        capture_output=True,
        text=True,
        timeout=90,
        cwd=tmp_path,
        env=child_env(**env),
    )


def test_script_sees_python_semantics_and_exit_code(tmp_path: Path) -> None:
    script = write(tmp_path, "echo.py", ECHO)
    summary = tmp_path / "out" / "s.json"
    proc = run_cli(
        tmp_path,
        "run",
        "--no-live",
        "--summary",
        str(summary),
        str(script),
        "--lr",
        "3",
        EXIT_CODE="3",
    )
    assert proc.returncode == 3, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {"argv": [str(script), "--lr", "3"], "path0": str(tmp_path), "name": "__main__"}
    data = json.loads(summary.read_text())
    validate_summary(data)
    assert data["run"]["exit"] == "error"
    assert data["run"]["argv"] == ["--lr", "3"]


def test_default_summary_location(tmp_path: Path) -> None:
    script = write(tmp_path, "echo.py", ECHO)
    proc = run_cli(tmp_path, "run", "--no-live", "--run-id", "echo-fixed-0001", str(script))
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "traceml-runs" / "echo-fixed-0001" / "final_summary.json"
    validate_summary(json.loads(path.read_text()))


def test_script_that_never_calls_trace_step_gets_no_steps(tmp_path: Path) -> None:
    script = write(tmp_path, "plain.py", "import torch\nprint(torch.ones(2).sum().item())\n")
    summary = tmp_path / "s.json"
    proc = run_cli(tmp_path, "run", "--no-live", "--summary", str(summary), str(script))
    assert proc.returncode == 0
    data = json.loads(summary.read_text())
    validate_summary(data)
    assert data["primary"]["kind"] == "NO_STEPS"
    assert "trace_step" in data["primary"]["action"]


@pytest.mark.parametrize(
    ("setup", "needle"),
    [
        ("missing", "no such script"),
        ("syntax", "syntax error"),
        ("notdir", "not a directory"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path: Path, setup: str, needle: str) -> None:
    args = ["run", "--no-live"]
    if setup == "missing":
        args.append(str(tmp_path / "missing.py"))
    elif setup == "syntax":
        args.append(str(write(tmp_path, "bad.py", "def f(:\n  pass\n")))
    else:
        blocker = write(tmp_path, "blocker", "a file where a folder should be")
        args += ["--summary", str(blocker / "s.json"), str(write(tmp_path, "ok.py", "pass\n"))]
    proc = run_cli(tmp_path, *args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0]
    assert "Traceback" not in proc.stderr


SLOW_LOOP = """
import sys, time, torch, traceml
m = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
print("started", flush=True)
for i in range(100000):
    with traceml.trace_step(m):
        opt.zero_grad(); m(torch.randn(2, 4)).sum().backward(); opt.step()
    time.sleep(0.01)
"""


def start_in_own_group(tmp_path: Path, source: str, summary: Path) -> subprocess.Popen[str]:
    """`traceml run --no-live` of `source` as the leader of its own process group, without a
    terminal, as a scheduler or `timeout` starts a job."""
    script = write(tmp_path, "loop.py", source)
    return subprocess.Popen(
        traceml_cmd("run", "--no-live", "--summary", str(summary), str(script)),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=child_env(),
        start_new_session=True,
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_writes_summary_with_signal_exit(tmp_path: Path, sig: signal.Signals) -> None:
    summary = tmp_path / "s.json"
    proc = start_in_own_group(tmp_path, SLOW_LOOP, summary)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    time.sleep(1.0)
    os.killpg(proc.pid, sig)  # as a terminal's Ctrl-C or a scheduler's TERM reach the group
    proc.wait(timeout=30)
    assert proc.returncode in (128 + sig, 1, -sig)
    data = json.loads(summary.read_text())
    validate_summary(data)
    assert data["run"]["exit"] == "signal"
    assert data["step_time"]["steps"] > 10
    assert sys.executable


CLEANUP_LOOP = """
import os, time, torch, traceml
m = torch.nn.Linear(4, 1)
print(os.getpid(), flush=True)
try:
    while True:
        with traceml.trace_step(m):
            m(torch.randn(2, 4)).sum().backward()
        time.sleep(0.01)
except KeyboardInterrupt:
    print("caught", flush=True)
    time.sleep(0.3)  # the script's own clean-up: a checkpoint, a log flush
    print("cleaned", flush=True)
    raise
"""


def test_interrupt_delivered_twice_spares_the_scripts_cleanup(tmp_path: Path) -> None:
    """Ctrl-C without a terminal reaches the group and is forwarded by the launcher too: the
    script must see one KeyboardInterrupt, not a second one in the middle of its clean-up."""
    summary = tmp_path / "s.json"
    proc = start_in_own_group(tmp_path, CLEANUP_LOOP, summary)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.stdout.readline().strip() == "caught"
    os.kill(child, signal.SIGINT)  # the forwarded copy, however late the launcher sends it
    out, err = proc.communicate(timeout=30)
    assert out.strip() == "cleaned", err
    assert err.count("KeyboardInterrupt") == 1, err
    assert json.loads(summary.read_text())["run"]["exit"] == "signal"


TIMED_LOOP = """
import time, torch, traceml
m = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
end = time.monotonic() + 2.5
while time.monotonic() < end:
    with traceml.trace_step(m):
        opt.zero_grad(); m(torch.randn(32, 64)).sum().backward(); opt.step()
"""


def test_the_summary_says_what_traceml_own_thread_cost(tmp_path: Path) -> None:
    script = write(tmp_path, "loop.py", TIMED_LOOP)
    summary = tmp_path / "s.json"
    proc = run_cli(tmp_path, "run", "--no-live", "--summary", str(summary), str(script))
    assert proc.returncode == 0, proc.stderr
    system = json.loads(summary.read_text())["system"]
    own = system["traceml_cpu_pct_avg"]
    assert own is not None and 0.0 < own < system["cpu_pct_avg"]
    assert f"(TraceML {own:.1f} %)" in proc.stderr

"""Shared pieces of the fault tests: a training subprocess read line by line, and the checks
every case ends with (same step count, no added traceback, a valid summary).

Output is read by threads as it comes, so a test that is busy elsewhere never blocks the job
on a full pipe: whatever slows the job down here is TraceML's doing, not the harness's.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traceml.analysis.schema import validate_summary

SCRIPTS = Path(__file__).resolve().with_name("_scripts")
TRAIN = SCRIPTS / "train.py"
VIEWER = SCRIPTS / "viewer.py"
STEPS_LINE = re.compile(r"^steps (\d+)$", re.MULTILINE)
NOT_A_WARNING = re.compile(r"traceml: (step \d|summary written to )")
"""TraceML's own stderr lines that are not warnings: progress lines and where the summary went."""
PAGE_MB = os.sysconf("SC_PAGE_SIZE") / (1024.0 * 1024.0)


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll `check` every 20 ms; AssertionError naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(0.02)


@dataclass(frozen=True)
class Result:
    """How a finished job ended."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def steps(self) -> int | None:
        """The step count the script printed last, None if it never got there."""
        found = STEPS_LINE.findall(self.stdout)
        return int(found[-1]) if found else None


class Lines:
    """A pipe read into a list by a daemon thread; `wait` polls it with a deadline."""

    def __init__(self, stream: Any) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for line in iter(stream.readline, ""):
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        stream.close()

    def wait(self, match: Callable[[str], bool], timeout: float, what: str) -> str:
        """The latest line for which `match` is true, waiting up to `timeout` seconds for one."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in reversed(self.lines):
                    if match(line):
                        return line
                left = deadline - time.monotonic()
                assert left > 0, f"no {what} within {timeout:.0f} s; got {self.lines[-8:]}"
                self._cond.wait(min(left, 0.5))

    def text(self, timeout: float = 5.0) -> str:
        self._thread.join(timeout)
        with self._cond:
            return "\n".join(self.lines)


class Job:
    """A running subprocess with its stdout and stderr read as they come."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.out = Lines(proc.stdout)
        self.err = Lines(proc.stderr)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_line(self, prefix: str, timeout: float = 60.0) -> str:
        return self.out.wait(lambda line: line.startswith(prefix), timeout, repr(prefix))

    def last_progress(self) -> int:
        """Steps done at the latest `progress` line (0 before the first one)."""
        steps = [int(line.split()[1]) for line in self.out.lines if line.startswith("progress ")]
        return steps[-1] if steps else 0

    def wait_steps(self, more: int, timeout: float = 60.0) -> None:
        """Wait until the job reports `more` steps beyond its latest progress line."""
        target = self.last_progress() + more

        def reached(line: str) -> bool:
            return line.startswith("progress ") and int(line.split()[1]) >= target

        self.out.wait(reached, timeout, f"step {target}")

    def progress_times(self) -> list[float]:
        return [float(line.split()[2]) for line in self.out.lines if line.startswith("progress ")]

    def finish(self, timeout: float = 60.0) -> Result:
        """Wait for the process to end and return what it said."""
        self.proc.wait(timeout)
        return Result(self.proc.returncode, self.out.text(), self.err.text())

    def stop(self) -> None:
        """Kill what is left (at the end of a test that failed half way)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGCONT)
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(10)


def spawn(argv: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None) -> Job:
    """Start `argv` in its own process group, stdout and stderr piped as text."""
    full_env = dict(os.environ if env is None else env)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    full_env["OMP_NUM_THREADS"] = "1"  # two shared cores: keep torch from fighting the test
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=full_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    return Job(proc)


def traceml_run(
    tmp_path: Path, run_id: str | None, *script_args: str, script: Path = TRAIN
) -> list[str]:
    """`python -m traceml run --no-live --summary <tmp>/out/... [--run-id ID] script ...`."""
    argv = [sys.executable, "-m", "traceml", "run", "--no-live"]
    argv += ["--summary", str(summary_of(tmp_path))]
    argv += ["--run-id", run_id] if run_id is not None else []
    return [*argv, str(script), *script_args]


def summary_of(tmp_path: Path) -> Path:
    return tmp_path / "out" / "final_summary.json"


@contextmanager
def training(
    tmp_path: Path,
    run_id: str | None,
    *script_args: str,
    script: Path = TRAIN,
    env: dict[str, str] | None = None,
) -> Iterator[Job]:
    """`traceml run` of `script` (train.py by default); killed if still running at the end.
    `run_id` None lets TraceML derive one."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    job = spawn(
        traceml_run(tmp_path, run_id, *script_args, script=script), cwd=tmp_path, env=full_env
    )
    try:
        yield job
    finally:
        job.stop()


def tracebacks(stderr: str) -> list[str]:
    """The exception line of each traceback in `stderr`."""
    lines = stderr.splitlines()
    found = []
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            tail = next((x for x in lines[i + 1 :] if x and not x.startswith(" ")), "?")
            found.append(tail)
    return found


def warnings(stderr: str, source: str = "") -> list[str]:
    """TraceML's warning lines on stderr (`traceml: <source>...`), not its progress lines or
    where the summary went."""
    return [
        line
        for line in stderr.splitlines()
        if line.startswith(f"traceml: {source}") and not NOT_A_WARNING.match(line)
    ]


def check_finished(result: Result, summary: Path, steps: int | None = None) -> dict[str, Any]:
    """The job ended as if TraceML had not been hurt: exit 0, the steps it planned (or printed),
    no traceback on stderr, and a valid summary that counts exactly those steps."""
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stderr[-3000:]}"
    assert not tracebacks(result.stderr), result.stderr[-3000:]
    assert result.steps is not None, result.stdout[-2000:]
    if steps is not None:
        assert result.steps == steps
    data: dict[str, Any] = json.loads(summary.read_text())
    validate_summary(data)
    assert data["run"]["exit"] == "ok"
    assert data["ranks"][0]["steps"] == result.steps
    return data


def run_dir(runtime: Path, run_id: str) -> Path:
    return runtime / run_id


def rank_file(runtime: Path, run_id: str, timeout: float = 60.0) -> dict[str, Any]:
    """rank-0.json of a live run, once its publisher has bound (polled with a deadline)."""
    path = run_dir(runtime, run_id) / "rank-0.json"
    wait_for(path.exists, timeout, f"{path}")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@dataclass(frozen=True)
class ProcStats:
    """One look at a process from outside: resident MB, open fds, threads."""

    rss_mb: float
    fds: int
    threads: int


def proc_stats(pid: int) -> ProcStats | None:
    """From /proc; None once the process is gone."""
    try:
        resident = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        threads = len(os.listdir(f"/proc/{pid}/task"))
    except (OSError, IndexError, ValueError):
        return None
    return ProcStats(resident * PAGE_MB, fds, threads)


def child_pid(parent: int, timeout: float = 30.0) -> int:
    """The single child of `parent` (the script under `traceml run`), once it exists."""
    path = Path(f"/proc/{parent}/task/{parent}/children")
    found: list[int] = []

    def check() -> bool:
        try:
            found[:] = [int(p) for p in path.read_text().split()]
        except OSError:
            return False
        return len(found) == 1

    wait_for(check, timeout, f"the child of {parent}")
    return found[0]

"""Run a command and account for the CPU of every process it starts, optionally under a pty.

The total is exact: RUSAGE_CHILDREN grows by the CPU of every descendant once it has been waited
for, and every process of a run (launcher, ranks, job collector, torchrun's agent) reaps its own
children. The split by process comes from psutil, reading each process of the tree every POLL_S
and keeping its last reading: a process loses at most its last POLL_S of CPU there, which is the
same in a short and a long run, so it cancels in the per-step slope. The tree is walked for new
processes every TREE_EVERY polls; one that lives less than that between two walks is in the
exact total only.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import pty
import resource
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

WORKLOAD = Path(__file__).resolve().parent / "_workload.py"
POLL_S = 0.02
TREE_EVERY = 10
"""Polls between two walks of the process tree: a walk reads every process's /proc entry (0.6 ms
of the harness's CPU with ~120 processes), and at every poll it kept 3 % of a core busy on a
2-core host beside the arms it measures; the processes already known are read at every poll."""
KEY_POLL_S = 0.005
"""How soon after the training process exits `q` reaches the live view: the harness's delay
counts in the run's wall time (start-up plus exit), so it is kept well under what is measured."""


@dataclass
class RunResult:
    """What one run of a command cost."""

    wall_s: float
    cpu_s: float
    """User + system CPU of the whole process tree (exact)."""
    by_role: dict[str, float] = field(default_factory=dict)
    """CPU seconds by kind of process (psutil's last reading before each exited)."""
    by_pid: dict[int, float] = field(default_factory=dict)
    """CPU seconds by process, from the same readings."""
    readings: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    """Every reading of each process: (time.perf_counter(), CPU seconds), in order."""

    def cpu_between(self, pid: int, t0: float, t1: float) -> float:
        """CPU seconds process `pid` used between two perf_counter times (one clock for every
        process of the host), from its readings around them (the last one at or before each
        time; 0.0 when it has none there). psutil's ticks are 10 ms, the readings POLL_S apart:
        over a loop of seconds that is well under a µs a step."""
        got = self.readings.get(pid, [])

        def at(t: float) -> float:
            before = [cpu for when, cpu in got if when <= t]
            return before[-1] if before else 0.0

        return max(0.0, at(t1) - at(t0))


def role(cmdline: list[str]) -> str:
    """Which part of a run a process is, from its command line."""
    text = " ".join(cmdline)
    if "collectord" in text:
        return "collector"
    if "torch.distributed.run" in text or "torchrun" in text:
        return "agent"
    if " run " in f" {text} " and ("-m traceml" in text or "/traceml " in f"{text} "):
        return "launcher"
    if "_workload.py" in text:
        return "training"
    return "other"


class TreeMeter(threading.Thread):
    """Polls the process tree under `root` and keeps each process's latest CPU seconds."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.cpu: dict[int, tuple[str, float]] = {}
        self.readings: dict[int, list[tuple[float, float]]] = {}
        self.stop_evt = threading.Event()

    def run(self) -> None:
        try:
            top = psutil.Process(self.root)
        except psutil.Error:
            return
        procs: list[psutil.Process] = []
        polls = 0
        while not self.stop_evt.is_set():
            if polls % TREE_EVERY == 0:
                try:
                    procs = [top, *top.children(recursive=True)]
                except psutil.Error:
                    return
            polls += 1
            for p in procs:
                self.read(p)
            self.stop_evt.wait(POLL_S)

    def read(self, p: psutil.Process) -> None:
        try:
            with p.oneshot():
                t = p.cpu_times()
                known = self.cpu.get(p.pid)
                # A child read between fork and exec still shows its parent's command line:
                # only a settled role is kept (a missed "training" would never get its `q`).
                if known is not None and (known[0] == "training" or p.pid == self.root):
                    name = known[0]
                else:
                    name = role(p.cmdline())
                    # An exiting process's command line reads empty before it is a zombie: an
                    # agent stays one (until it execs a rank: a child read before its exec).
                    if known is not None and known[0] == "agent" and name != "training":
                        name = "agent"
                cpu = t.user + t.system
                self.cpu[p.pid] = (name, cpu)
                self.readings.setdefault(p.pid, []).append((time.perf_counter(), cpu))
        except psutil.Error:
            return

    def by_role(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, cpu in self.cpu.values():
            out[name] = out.get(name, 0.0) + cpu
        return out

    def by_pid(self) -> dict[int, float]:
        return {pid: cpu for pid, (_, cpu) in self.cpu.items()}

    def pids(self, name: str) -> list[int]:
        return [pid for pid, (n, _) in self.cpu.items() if n == name]


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_measured(
    cmd: list[str], env: dict[str, str], cwd: str, *, tty: bool = False, timeout: float = 600
) -> RunResult:
    """Run `cmd` to its end; with `tty`, under a 120x40 pty (a terminal, for the live view),
    pressing `q` once its training processes (and torchrun's agent) have exited (the view waits
    for the user)."""
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    if tty:
        proc, meter = _run_tty(cmd, env, cwd, timeout)
    else:
        proc = subprocess.Popen(
            cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        meter = TreeMeter(proc.pid)
        meter.start()
        _, err = proc.communicate(timeout=timeout)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err.decode()[-3000:]}")
    wall = time.perf_counter() - t0
    meter.stop_evt.set()
    meter.join()
    return RunResult(wall, _children_cpu() - cpu0, meter.by_role(), meter.by_pid(), meter.readings)


def _run_tty(
    cmd: list[str], env: dict[str, str], cwd: str, timeout: float
) -> tuple[subprocess.Popen[bytes], TreeMeter]:
    proc, master, drain = start_in_pty(cmd, env, cwd)
    meter = TreeMeter(proc.pid)
    meter.start()
    deadline = time.monotonic() + timeout
    seen_training = False
    while proc.poll() is None and time.monotonic() < deadline:
        # Under `traceml run --nproc-per-node N` the launcher's child is torchrun's agent, which
        # outlives its ranks by a moment: a `q` then asks whether to stop the running script,
        # and that dialog takes no more `q`s. So `q` waits for the agent too.
        running = [pid for pid in meter.pids("training") + meter.pids("agent") if alive(pid)]
        seen_training |= bool(meter.pids("training"))
        if seen_training and not running:
            os.write(master, b"q")
        time.sleep(KEY_POLL_S)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    os.close(master)
    drain.join(1)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} (under a pty) failed ({proc.returncode})")
    return proc, meter


def start_in_pty(
    cmd: list[str], env: dict[str, str], cwd: str | None = None
) -> tuple[subprocess.Popen[bytes], int, threading.Thread]:
    """`cmd` in a session of its own on a 120x40 pty whose output a thread reads and throws
    away, as a terminal would show it: the process, the pty's master fd and that thread."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = dict(env, TERM="xterm-256color", COLUMNS="120", LINES="40")
    proc = subprocess.Popen(
        cmd, env=env, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
    )
    os.close(slave)
    drain = threading.Thread(target=_drain, args=(master,), daemon=True)
    drain.start()
    return proc, master, drain


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _drain(fd: int) -> None:
    """Read the terminal's output and throw it away, as a terminal would show it."""
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        return


@dataclass
class TracedRank:
    """One traced training process of `_workload.py`, running."""

    proc: subprocess.Popen[bytes]
    env: dict[str, str]
    """Its environment: a viewer started with it finds the run (same runtime dir and run id)."""
    out: Path
    """Where it writes its step times once SIGUSR1 ends its loop (see _workload.py)."""

    def stop(self, timeout: float = 60) -> array[float]:
        """End its loop (SIGUSR1) and return its step times in µs; SystemExit when it failed
        or wrote none."""
        self.proc.send_signal(signal.SIGUSR1)
        _, err = self.proc.communicate(timeout=timeout)
        if self.proc.returncode != 0 or not self.out.exists():
            raise SystemExit(
                f"the training process failed ({self.proc.returncode}): {err.decode()}"
            )
        return step_times(self.out)


def step_times(out: Path) -> array[float]:
    """The per-step wall times (µs) that _workload.py wrote to `out`."""
    times = array("d")
    times.frombytes(out.read_bytes())
    return times


def step_ends(out: Path, times: array[float]) -> list[float]:
    """When each step of `out`'s loop ended, on the host's perf_counter clock (one clock for
    every process of the host): the loop's start plus the steps so far."""
    return list(itertools.accumulate((us / 1e6 for us in times), initial=loop_start(out)))[1:]


def loop_start(out: Path) -> float:
    """When `out`'s loop began (perf_counter), as _workload.py wrote it to `out`.t0."""
    return float(Path(f"{out}.t0").read_text())


def start_traced_rank(
    tmp: Path,
    run_id: str,
    steps: int,
    width: int,
    base_env: Mapping[str, str] = os.environ,
    timeout: float = 60,
) -> TracedRank:
    """`_workload.py traceml` with its own runtime dir under `tmp`, returned once its rank file
    exists and a second more has passed: its loop has begun, so an attach finds a live run and
    SIGUSR1 ends the loop. Killed when it does not get there within `timeout`."""
    runtime = tmp / "rt"
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in base_env.items() if not k.startswith("TRACEML_")}
    env.update(OMP_NUM_THREADS="1", TRACEML_RUNTIME_DIR=str(runtime), TRACEML_RUN_ID=run_id)
    env["TRACEML_SUMMARY"] = str(tmp / "final_summary.json")
    out = tmp / "steps"
    cmd = [sys.executable, str(WORKLOAD), "traceml", str(steps), str(width), "32", str(out)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    while not (runtime / run_id / "rank-0.json").exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise SystemExit("the training process never published its rank file")
        time.sleep(0.1)
    time.sleep(1.0)
    return TracedRank(proc, env, out)

"""Viewers that die, freeze or swarm never slow, block or break the training they watch."""

from __future__ import annotations

import itertools
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faults._harness import (
    VIEWER,
    Job,
    check_finished,
    proc_stats,
    spawn,
    summary_of,
    training,
    wait_for,
)

pytestmark = [pytest.mark.faults, pytest.mark.slow]

FREEZE_S = 30.0
MAX_STEP_GAP_S = 3.0
"""Longest silence between two progress lines of the job (printed every ~0.2 s) we accept on a
loaded 2-core machine; a job blocked on a viewer would stay silent for the whole freeze."""
FREEZE_RSS_BOUND_MB = 40.0
SWARM = 20
SWARM_ROUNDS = 2


def viewer(tmp_path: Path, run_id: str, *args: str) -> Job:
    return spawn([sys.executable, str(VIEWER), run_id, *args], cwd=tmp_path)


def seen_at_least(n: int) -> Callable[[str], bool]:
    return lambda line: line.startswith("seen ") and int(line.split()[1]) >= n


def started_pid(job: Job) -> int:
    return int(job.wait_line("started").split()[1])


def test_viewer_killed_with_sigkill_mid_stream(tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    with training(tmp_path, "kill9", "--until", str(stop), "--steps", "1000000") as job:
        started_pid(job)
        first = viewer(tmp_path, "kill9")
        first.out.wait(seen_at_least(20), 60, "the first viewer's records")
        first.proc.kill()
        first.proc.wait(10)
        job.wait_steps(100)
        second = viewer(tmp_path, "kill9")
        second.out.wait(seen_at_least(1), 60, "the second viewer's records")
        stop.touch()
        result = job.finish()
        tail = second.out.wait(lambda line: line.startswith("end "), 30, "the second viewer's end")
        second.finish()
    check_finished(result, summary_of(tmp_path))
    assert tail == f"end {result.steps} gaps 0", "a viewer after the killed one sees every step"


def test_viewer_frozen_for_30s_never_blocks_training(tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    with training(tmp_path, "freeze", "--until", str(stop), "--steps", "1000000") as job:
        pid = started_pid(job)
        frozen = viewer(tmp_path, "freeze")
        frozen.out.wait(seen_at_least(20), 60, "the viewer's records")
        os.kill(frozen.pid, signal.SIGSTOP)
        steps_at_freeze = job.last_progress()
        frozen_at = time.time()
        rss = []
        while time.time() - frozen_at < FREEZE_S:
            stats = proc_stats(pid)
            assert stats is not None, "the job died while the viewer was frozen"
            rss.append(stats.rss_mb)
            time.sleep(1.0)
        os.kill(frozen.pid, signal.SIGCONT)
        progress = [t for t in job.progress_times() if t >= frozen_at - 1]
        during = job.last_progress() - steps_at_freeze
        stop.touch()
        result = job.finish()
        frozen.out.wait(lambda line: line.startswith("end "), 30, "the thawed viewer's end")
        frozen.finish()
    check_finished(result, summary_of(tmp_path))
    assert during > 0
    gaps = [b - a for a, b in itertools.pairwise(progress)]
    assert max(gaps) < MAX_STEP_GAP_S, f"the job stalled {max(gaps):.1f} s during the freeze"
    assert max(rss) - rss[0] < FREEZE_RSS_BOUND_MB, f"RSS grew {max(rss) - rss[0]:.0f} MB"


def test_twenty_viewers_attaching_and_detaching_leak_nothing(tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    with training(tmp_path, "swarm", "--until", str(stop), "--steps", "1000000") as job:
        pid = started_pid(job)
        job.wait_steps(50)  # the tx thread has opened all it keeps open
        fds, threads = steady_fds(pid), proc_threads(pid)
        swarm = viewer(tmp_path, "swarm", "--churn", str(SWARM))
        peak = 0
        deadline = time.monotonic() + 90
        while not any(line == f"round {SWARM_ROUNDS}" for line in swarm.out.lines):
            assert swarm.proc.poll() is None, swarm.finish().stdout
            assert time.monotonic() < deadline, f"the viewers did not finish {SWARM_ROUNDS} rounds"
            peak = max(peak, steady_fds(pid, samples=1))
        swarm.proc.kill()  # mid-round: 20 more peers vanish without a goodbye
        swarm.proc.wait(10)
        wait_for(lambda: steady_fds(pid, samples=1) <= fds, 10, f"the job's fds back to {fds}")
        threads_after = proc_threads(pid)
        stop.touch()
        result = job.finish()
    check_finished(result, summary_of(tmp_path))
    assert peak >= fds + SWARM, "the viewers never connected"
    assert threads_after == threads


def steady_fds(pid: int, samples: int = 5) -> int:
    """Open fds of `pid`, the least of a few looks 20 ms apart: a file the job has open for a
    moment (its rank file being rewritten, /proc/stat being read) is not a leak."""
    counts = []
    for _ in range(samples):
        stats = proc_stats(pid)
        assert stats is not None, f"process {pid} is gone"
        counts.append(stats.fds)
        time.sleep(0.02)
    return min(counts)


def proc_threads(pid: int) -> int:
    stats = proc_stats(pid)
    assert stats is not None, f"process {pid} is gone"
    return stats.threads

"""TRACEML_BEATS=process: the beats in a process of their own, the training process threadless.

Every test runs a real training subprocess (`_beats_train.py`) and its real beats process, and
reads what a user reads: the summary and the training process's own threads. A stalled rank's
phase, attach and `traceml ls` in this mode: test_stall_phase.py, run in both modes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from traceml.analysis.schema import validate_summary
from traceml.instrument import ship
from traceml.instrument.timer import native

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().with_name("_beats_train.py")


def start(
    tmp_path: Path,
    steps: int,
    end: str = "ok",
    workers: int = 0,
    start_new_session: bool = False,
    **env: str,
) -> Any:
    full = dict(os.environ, TRACEML_BEATS="process", OMP_NUM_THREADS="1")
    full["TRACEML_SUMMARY"] = str(tmp_path / "summary.json")
    full.update(env)
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(steps), end, str(workers)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full,
        start_new_session=start_new_session,
    )


def run(
    tmp_path: Path, steps: int, end: str = "ok", workers: int = 0, **env: str
) -> tuple[int, str, str]:
    proc = start(tmp_path, steps, end, workers, False, **env)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def summary(tmp_path: Path, timeout: float = 15.0) -> dict[str, Any]:
    """The run's summary, waiting for it where the beats process writes it after the training
    process is gone (a killed one)."""
    path = tmp_path / "summary.json"
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, "no summary written"
        time.sleep(0.05)
    time.sleep(0.2)  # written whole by a rename, but be sure the writer is done
    data: dict[str, Any] = json.loads(path.read_text())
    validate_summary(data)
    return data


def line(out: str, name: str) -> int:
    return int(next(x for x in out.splitlines() if x.startswith(name + " ")).split()[1])


def beats_processes(tmp_path: Path) -> list[int]:
    """Pids of the beats processes of this test's runs (the summary path in their environment
    tells them from other tests' running beside): none may outlive its run."""
    mark = f"TRACEML_SUMMARY={tmp_path / 'summary.json'}".encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if b"traceml.instrument.beats_main" in cmd and mark in env.split(b"\0"):
            found.append(int(pid))
    return found


def test_a_run_with_its_beats_in_a_process_is_summarised_whole(tmp_path: Path) -> None:
    code, out, err = run(tmp_path, 600)
    assert code == 0, err
    assert line(out, "threads") == 1, "the training process ran a thread of TraceML's"
    data = summary(tmp_path)
    assert data["run"]["exit"] == "ok"
    assert data["step_time"]["steps"] == 600
    assert data["run"]["optimizers"] == ["SGD"]
    for name in ("dataloader", "forward", "backward", "optimizer"):
        assert data["step_time"][f"{name}_pct"] > 0, name
    assert "traceml:" not in err.replace("traceml: summary written to", ""), err
    assert not beats_processes(tmp_path)


def test_an_exception_is_in_the_summary(tmp_path: Path) -> None:
    code, _, err = run(tmp_path, 200, "raise")
    assert code == 1 and "boom at the end" in err
    data = summary(tmp_path)
    assert data["run"]["exit"] == "error"
    assert data["run"]["error"] == {"type": "RuntimeError", "message": "boom at the end"}
    assert data["step_time"]["steps"] == 200


def test_sigterm_is_in_the_summary(tmp_path: Path) -> None:
    code, _, _ = run(tmp_path, 200, "term")
    assert code != 0
    data = summary(tmp_path)
    assert data["run"]["exit"] == "signal"
    assert data["step_time"]["steps"] == 200


def test_ctrl_c_to_the_process_group_still_gets_the_summary(tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches every process of the group, the beats process included:
    it must outlive the signal to answer the training process's END."""
    proc = start(tmp_path, 100_000_000, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline() == "looping\n"
    time.sleep(0.5)  # steps go on meanwhile
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    data = summary(tmp_path)
    assert data["run"]["exit"] == "signal"
    assert data["step_time"]["steps"] > 0
    assert not beats_processes(tmp_path)


def test_a_killed_training_process_still_gets_its_summary(tmp_path: Path) -> None:
    """SIGKILL leaves no thread of the process to write anything: the beats process does, from
    every step the ring holds, and says the rank was killed."""
    code, _, _ = run(tmp_path, 1500, "kill")
    assert code == -signal.SIGKILL
    data = summary(tmp_path)
    assert data["run"]["exit"] == "killed"
    assert data["step_time"]["steps"] == 1500
    deadline = time.monotonic() + 10
    while beats_processes(tmp_path):
        assert time.monotonic() < deadline, "the beats process outlived its killed run"
        time.sleep(0.05)


def test_a_killed_beats_process_leaves_the_loop_untouched(tmp_path: Path) -> None:
    """The beats process gone mid-run: the loop runs every step and ends well, with one warning
    (no live view, no summary) instead of an error."""
    proc = start(tmp_path, 4000)
    assert proc.stdout is not None and proc.stdout.readline() == "looping\n"
    (beats,) = beats_processes(tmp_path)
    os.kill(beats, signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert line(out, "steps") == 4000
    assert err.count("beats process ended") == 1, err
    assert "Traceback" not in err


def test_dataloader_workers_do_not_hold_the_beats_process(tmp_path: Path) -> None:
    """Forked workers let go of the pipe: the run ends, with every step, and a killed run
    with workers still gets its summary."""
    ended, killed = tmp_path / "ended", tmp_path / "killed"
    ended.mkdir()
    killed.mkdir()
    code, out, err = run(ended, 300, "ok", workers=2)
    assert code == 0, err
    # The workers' queues start feeder threads of multiprocessing's: none may be TraceML's.
    names = next(x for x in out.splitlines() if x.startswith("threads ")).split()[2]
    assert "traceml" not in names and "ZMQ" not in names, names
    data = summary(ended)
    assert (data["run"]["exit"], data["step_time"]["steps"]) == ("ok", 300)
    code, _, _ = run(killed, 300, "kill", workers=2)
    assert code == -signal.SIGKILL
    data = summary(killed)
    assert (data["run"]["exit"], data["step_time"]["steps"]) == ("killed", 300)


def fake_clock(step_ns: int = 1000) -> Any:
    now = [0]

    def clock() -> int:
        now[0] += step_ns
        return now[0]

    return clock


def run_steps(timer: Any, n: int) -> None:
    for _ in range(n):
        timer.enter()
        timer.begin(2)
        timer.end(2)
        timer.exit()


def test_the_ring_holds_what_the_queue_would_have() -> None:
    """The C timer writing to the ring gives the beats process the same RawSteps that it
    queues for the tx thread; the Python reading of the bytes agrees with the C one."""
    from collections import deque

    c = native()
    assert c is not None and c.STEP_WORDS == ship.STEP_WORDS and c.RING_HEADER == ship.RING_HEADER
    queued: deque[Any] = deque()
    run_steps(c.StepTimer(queued, clock=fake_clock()), 5)
    fd, ring = ship.new_ring(8)
    os.close(fd)
    into_ring: deque[Any] = deque()
    timer = c.StepTimer(into_ring, clock=fake_clock())
    timer.use_ring(ring)
    run_steps(timer, 5)
    assert not into_ring, "a step went to the queue"
    data, after = c.ring_read(ring, 0)
    assert after == 5
    assert c.raw_unpack(data) == list(queued) == ship.unpack(data)
    assert c.ring_read(ring, 5) == (b"", 5)
    with pytest.raises(ValueError, match="whole number of steps"):
        c.raw_unpack(data[:-1])
    timer.use_ring(None)
    run_steps(timer, 1)
    assert len(into_ring) == 1, "use_ring(None) queues again"


def test_a_full_ring_keeps_its_newest_steps_and_the_open_phase() -> None:
    c = native()
    assert c is not None
    fd, ring = ship.new_ring(4)
    os.close(fd)
    timer = c.StepTimer(__import__("collections").deque(), clock=fake_clock())
    timer.use_ring(ring)
    run_steps(timer, 6)
    data, after = c.ring_read(ring, 0)
    assert after == 6
    assert [r.step for r in c.raw_unpack(data)] == [2, 3, 4, 5]
    timer.enter()
    timer.begin(3)
    assert ship.open_label(ring) == 3
    timer.end(3)
    assert ship.open_label(ring) == 6  # other: inside the step, no phase open
    with pytest.raises(ValueError, match="not a ring"):
        timer.use_ring(bytearray(64))  # no slots in its header


def test_a_cut_frame_reads_as_the_end() -> None:
    import io

    whole = ship.frame(ship.INFO, b"x" * 20)
    assert ship.read_frame(io.BytesIO(whole)) == (ship.INFO, b"x" * 20)
    assert ship.read_frame(io.BytesIO(whole[:-1])) is None
    assert ship.read_frame(io.BytesIO(b"")) is None

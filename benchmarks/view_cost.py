"""What an attached live view costs the job's steps, measured inside one run.

Run: .venv/bin/python benchmarks/view_cost.py [--period S] [--cycles N] [--width W]

overhead.py prices `traceml run` with its live view as a process of its own against other
processes, and the layout of each new process moves a 0.4 ms step by more than the view costs.
Here there is one training process (benchmarks/_workload.py, traced) and one `traceml attach`
of it in a 120x40 pseudo-terminal, for the whole run. Every --period seconds the view is
stopped (SIGSTOP, every thread of it) or continued (SIGCONT), in the order ABBA, so the job's
steps fall in windows with the view at work and windows without it; the first 0.2 s after each
switch belong to neither. Per kind of window: the steps' mean, p99 and max (µs), and the view's
CPU over its windows (% of a core). `noise` is the difference between the two halves of the
windows without the view (every other one), what the same condition moves by within the run.

A stopped view still holds its subscription: the rank sends it what it would send a running
one, and the zmq queue fills and drops as it would for a frozen viewer. After each SIGCONT the
view catches up on what it missed, so the windows with the view carry the intake of both: the
figure is an upper bound of what a view that keeps up costs.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from array import array
from pathlib import Path

import psutil
from _common import byte_compile, pct
from _procs import start_in_pty, start_traced_rank, step_ends

RUN_ID = "viewcost-0001"
SETTLE_S = 0.2
"""Time after each stop or continue whose steps count in neither kind of window."""


def cpu_s(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--period", type=float, default=4.0, help="seconds per window")
    ap.add_argument("--cycles", type=int, default=8, help="ABBA pairs of windows (2 at least)")
    ap.add_argument("--width", type=int, default=16, help="MLP width (16: ~0.4 ms a step here)")
    a = ap.parse_args()
    if a.cycles < 2:  # the noise is the spread between windows without the view: two at least
        ap.error("--cycles must be 2 or more")
    print(f"TraceML {byte_compile()}")
    tmp = Path(tempfile.mkdtemp(prefix="traceml-viewcost-"))
    windows_s = 2 * a.period * a.cycles
    steps = int((windows_s + 30) / 0.0001)  # ended by SIGUSR1 after the last window
    rank = start_traced_rank(tmp, RUN_ID, steps, a.width)
    train, env, out = rank.proc, rank.env, rank.out
    view, master, _ = start_in_pty([sys.executable, "-m", "traceml", "attach", RUN_ID], env)
    time.sleep(4.0)  # the view's start and its first snapshot
    windows: list[tuple[bool, float, float, float]] = []
    """(view running, from, to on perf_counter, view CPU seconds)."""
    try:
        for c in range(a.cycles):
            for running in (True, False) if c % 2 == 0 else (False, True):
                view.send_signal(signal.SIGCONT if running else signal.SIGSTOP)
                c0, t0 = cpu_s(view.pid), time.perf_counter()
                time.sleep(a.period)
                windows.append((running, t0 + SETTLE_S, time.perf_counter(), cpu_s(view.pid) - c0))
        if train.poll() is not None:
            raise SystemExit("the training process ended before the last window: raise its steps")
        durations = rank.stop()
    finally:
        view.send_signal(signal.SIGCONT)
        view.terminate()
        if train.poll() is None:
            train.kill()
        view.wait()
        os.close(master)
    report(out, durations, windows, a)


def report(
    out: Path,
    durations: array[float],
    windows: list[tuple[bool, float, float, float]],
    a: argparse.Namespace,
) -> None:
    if not Path(f"{out}.t0").exists():
        raise SystemExit("the training process did not write its steps")
    ends = step_ends(out, durations)

    def steps_in(w: list[tuple[bool, float, float, float]]) -> list[float]:
        return [
            d
            for e, d in zip(ends, durations, strict=True)
            if any(lo <= e < hi for _, lo, hi, _ in w)
        ]

    on = [w for w in windows if w[0]]
    off = [w for w in windows if not w[0]]
    rows = {"view at work": steps_in(on), "view stopped": steps_in(off)}
    half = [steps_in(off[0::2]), steps_in(off[1::2])]
    noise = abs(statistics.fmean(half[0]) - statistics.fmean(half[1]))
    print(
        f"\none traced rank and one attached view, {a.cycles} ABBA pairs of {a.period:g} s windows"
    )
    print(f"  {'':14} {'steps':>7} {'mean µs':>9} {'p99 µs':>8} {'max µs':>8} {'view CPU':>9}")
    for (name, got), ws in zip(rows.items(), (on, off), strict=True):
        cpu = 100 * sum(w[3] for w in ws) / sum(w[2] - w[1] + SETTLE_S for w in ws)
        print(
            f"  {name:14} {len(got):7,} {statistics.fmean(got):9.1f} {pct(got, 0.99):8.0f}"
            f" {max(got):8.0f} {cpu:8.1f} %"
        )
    added = statistics.fmean(rows["view at work"]) - statistics.fmean(rows["view stopped"])
    print(f"  the view adds {added:+.1f} µs to the mean step (noise {noise:.1f} µs)")


if __name__ == "__main__":
    main()

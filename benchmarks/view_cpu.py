"""The live view's own CPU beside a fast rank, by thread, optionally against another checkout.

Run: .venv/bin/python benchmarks/view_cpu.py [--rounds N] [--period S] [--tree PATH]

One traced rank (benchmarks/_workload.py, a ~0.4 ms step) runs throughout. `traceml attach` of
it, in a 120x40 pseudo-terminal, is started, left WARM_S to take the history and draw, then its
CPU is read per thread over --period seconds, and it is quit. With --tree, a view from that
checkout (`git worktree add PATH COMMIT`, then `python setup.py build_ext --inplace` there) takes
turns with this one, in the order ABBA, so that the host's drift falls on both alike: each
figure is the mean over the rounds with its standard deviation, as % of one core, and as µs of
CPU per step of the rank (what `overhead.py`'s CPU column adds up for `traceml run`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from _common import byte_compile
from _procs import start_in_pty, start_traced_rank

RUN_ID = "viewcpu-0001"
WARM_S = 5.0
"""The view's start, its attach snapshot and first draws: not counted."""


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of `pid`; the main thread's id is `pid`."""
    return {t.id: t.user_time + t.system_time for t in psutil.Process(pid).threads()}


def one_view(env: dict[str, str], tree: str | None, period: float) -> tuple[float, float]:
    """(main thread, the other threads) CPU seconds of one attached view over `period`."""
    env = dict(env)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([tree, str(Path(tree) / "tui")])
    view, master, _ = start_in_pty([sys.executable, "-m", "traceml", "attach", RUN_ID], env)
    try:
        time.sleep(WARM_S)
        if view.poll() is not None:
            raise SystemExit(f"the view ended at once ({view.returncode})")
        before = thread_cpu(view.pid)
        time.sleep(period)
        after = thread_cpu(view.pid)
    finally:
        os.write(master, b"q")
        try:
            view.wait(10)
        except subprocess.TimeoutExpired:
            view.kill()
            view.wait()
        os.close(master)
    spent = {t: after[t] - before.get(t, 0.0) for t in after}
    main = spent.pop(view.pid, 0.0)
    return main, sum(spent.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4, help="views of each arm")
    ap.add_argument("--period", type=float, default=20.0, help="seconds each view is measured")
    ap.add_argument("--tree", help="another checkout, built, whose view takes turns with this")
    ap.add_argument("--width", type=int, default=16, help="MLP width (16: ~0.4 ms a step here)")
    a = ap.parse_args()
    print(f"TraceML {byte_compile()}")
    if a.tree:
        byte_compile(a.tree)
    arms: list[tuple[str, str | None]] = [("this tree", None)]
    if a.tree:
        arms.append((a.tree, a.tree))
    # ended by SIGUSR1 after the last view; steps of 0.1 ms would fit (the loop keeps each time)
    steps = int((len(arms) * a.rounds * (a.period + WARM_S + 5) + 30) / 1e-4)
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # --tree sets its own
    tmp = Path(tempfile.mkdtemp(prefix="traceml-viewcpu-"))
    rank = start_traced_rank(tmp, RUN_ID, steps, a.width, base)
    got: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in arms}
    try:
        for r in range(a.rounds):
            for name, tree in arms if r % 2 == 0 else arms[::-1]:
                got[name].append(one_view(rank.env, tree, a.period))
        durations = rank.stop()
    finally:
        if rank.proc.poll() is None:
            rank.proc.kill()
    step_us = statistics.fmean(durations)
    print(
        f"\none traced rank ({step_us:.0f} µs a step), each view measured over {a.period:g} s"
        f" after {WARM_S:g} s, {a.rounds} rounds, mean ± sd over the rounds"
    )
    print(f"  {'view':30} {'% of a core':>14} {'main thread':>12} {'others':>8} {'µs a step':>10}")
    for name, rows in got.items():
        total = [100 * (m + o) / a.period for m, o in rows]
        main_pct = statistics.fmean(100 * m / a.period for m, _ in rows)
        other_pct = statistics.fmean(100 * o / a.period for _, o in rows)
        sd = f"{statistics.stdev(total):4.2f}" if len(total) > 1 else " n/a"  # one round: none
        mean = statistics.fmean(total)
        print(
            f"  {name[-30:]:30} {mean:8.2f} ± {sd} {main_pct:11.2f} {other_pct:8.2f}"
            f" {mean / 100 * step_us:10.1f}"
        )


if __name__ == "__main__":
    main()

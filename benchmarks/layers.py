"""What each layer of TraceML adds to a separate training process, step by step.

Run: .venv/bin/python benchmarks/layers.py [--pairs N] [--steps N] [--width W] [--seed N]

overhead.py prices whole arms (trace_step, traceml run, the live view, the peer); inloop.py
resolves TraceML's parts inside one process, with TraceML initialised in every block. This one
answers what lies between: the same loop (benchmarks/_workload.py) as separate processes, one
per arm and round, the arms interleaved, each round in an order of its own drawn from --seed:

  bare A, bare B     no traceml import at all (their difference is the noise)
  init, unpatched    traceml.init(mode="auto"), then its patches removed: the tx thread, its
                     sockets and its once-a-second work, idle
  init               traceml.init(mode="auto") and no trace_step: every patch passes through
                     outside a step
  trace_step         init and trace_step(model) around every step
  trace_step, tx asleep
                     the same with TraceML's tx thread asleep through the loop: it converts,
                     folds and publishes every step after the last (not timed), so the
                     difference from trace_step is what its work costs the steps
  trace_step, live(TB)
                     with --live: trace_step and `traceml.integrations.live` logging into a
                     TensorBoard writer every second (and the same with --tree's checkout)
  trace_step, --tree PATH
                     with --tree: trace_step with another checkout of TraceML (built with
                     `python setup.py build_ext --inplace`) first on PYTHONPATH, such as the
                     commit before a change (`git worktree add`), measured beside this one

Per arm: the mean of every step after the first 50 of every round, and the p99, as added to the
mean of bare A and B; beside the mean, the standard error of the arm's per-round difference from
that round's bare processes, a better measure of the noise than one bare pair's difference.
Processes are started and their steps read as overhead.py does (the same command, environment
and warm-up cut). The last two columns split off the long steps (over 2.5x their process's
median): how many there are and what they add to the mean; the rest of an arm's added mean is a
shift of every step. The last, each process's longest step (the median over the arm's processes,
so one disturbed process does not set it): the tx thread's longest hold shows there.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import byte_compile, pct, round_differences, round_order, round_stderrs
from overhead import Arm, command, env_for, read_steps

ARMS = (
    Arm("bare A", "bare"),
    Arm("bare B", "bare"),
    Arm("init, unpatched", "init-unpatched"),
    Arm("init", "init"),
    Arm("trace_step", "traceml"),
    Arm("trace_step, tx asleep", "traceml-asleep"),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--pairs", type=int, default=4, help="rounds of every arm")
    ap.add_argument("--seed", type=int, default=0, help="draws each round's order of the arms")
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--width", type=int, default=16, help="MLP width (16: ~0.4 ms a step here)")
    ap.add_argument(
        "--skip-init",
        action="store_true",
        help="leave out the two init arms (bare, trace_step and the tx thread asleep only)",
    )
    ap.add_argument("--tree", help="another built checkout of TraceML: one more trace_step arm")
    ap.add_argument(
        "--live",
        action="store_true",
        help="add trace_step with live logging into TensorBoard (traceml.integrations.live)",
    )
    ap.add_argument(
        "--run",
        action="store_true",
        help="add `traceml run --no-live` (the same rank code, started by the launcher) and"
        " trace_step with init before torch is imported (as that launcher's rank does)",
    )
    args = ap.parse_args()
    arms = [a for a in ARMS if not (args.skip_init and a.mode.startswith("init"))]
    if args.run:
        launcher = (sys.executable, "-m", "traceml", "run", "--no-live")
        arms.append(Arm("run --no-live", "traceml", launcher))
        arms.append(Arm("trace_step, early init", "traceml-early"))
    if args.live:
        arms.append(Arm("trace_step, live(TB)", "traceml-tb"))
    if args.tree:
        tree = str(Path(args.tree).resolve())
        arms.append(Arm(f"trace_step, {Path(tree).name}", "traceml", tree=tree))
        if args.live:
            arms.append(Arm(f"live(TB), {Path(tree).name}", "traceml-tb", tree=tree))
        print(f"{tree}: {byte_compile(tree)}")
    print(f"TraceML {byte_compile()}")
    steps: dict[str, list[float]] = {arm.name: [] for arm in arms}
    rounds: dict[str, list[float]] = {arm.name: [] for arm in arms}  # each process's mean
    round_p99: dict[str, list[float]] = {arm.name: [] for arm in arms}  # and its p99
    others: dict[str, list[tuple[float, float, float]]] = {arm.name: [] for arm in arms}
    longs: dict[str, list[tuple[float, float]]] = {arm.name: [] for arm in arms}
    longest: dict[str, list[float]] = {arm.name: [] for arm in arms}
    held: dict[str, list[tuple[float, float]]] = {arm.name: [] for arm in arms}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.pairs):
            for arm in round_order(arms, r, args.seed):
                out = Path(tmp) / f"{arms.index(arm)}-{r}"
                cmd = command(arm, args.steps, args.width, out)
                env = env_for(arm, Path(tmp), None)
                env["TRACEML_SUMMARY"] = f"{out}.summary.json"
                subprocess.run(cmd, check=True, env=env, cwd=tmp, capture_output=True)
                got = read_steps(out)
                if arm.mode != "bare":
                    held[arm.name].append(held_steps(Path(f"{out}.summary.json"), got))
                steps[arm.name] += got
                rounds[arm.name].append(statistics.fmean(got))
                round_p99[arm.name].append(pct(got, 0.99))
                others[arm.name].append(other_threads(Path(f"{out}.threads"), args.steps))
                longs[arm.name].append(long_steps(got))
                longest[arm.name].append(max(got))
    means = {arm: statistics.fmean(v) for arm, v in steps.items()}
    p99s = {arm: pct(v, 0.99) for arm, v in steps.items()}
    bare, bare_p99 = (means["bare A"] + means["bare B"]) / 2, (p99s["bare A"] + p99s["bare B"]) / 2
    noise = abs(means["bare A"] - means["bare B"])
    se = round_stderrs(rounds)
    # The p99 each process read against its round's bare pair, averaged, with the standard error
    # of that: a few processes with a slow tail (bare among them) move a pooled p99 by tens of
    # % (see overhead.py), and the figure and its standard error should be of one estimator.
    p99_diff = {
        arm: (100 * m / bare_p99, 100 * v / bare_p99)
        for arm, (m, v) in round_differences(round_p99).items()
    }
    print(
        f"MLP width {args.width}: {args.pairs} rounds x {args.steps:,} steps a process per arm;"
        f" µs per step (bare absolute, others added; noise = |bare A - bare B| = {noise:.1f})"
    )
    print(
        f"  {'':<22} {'mean step':>10} {'± se':>6} {'p99 step':>10} {'± se':>6}"
        f" {'threads µs/step':>15} {'wake/s':>7} {'training/s':>11} {'held/s':>7} {'ms/s':>6}"
        f" {'long /10k':>10} {'their µs/step':>14} {'longest ms':>11}"
    )

    def other_cells(name: str) -> str:
        cpu, wakes, training = (statistics.fmean(v) for v in zip(*others[name], strict=True))
        cells = f" {cpu:>15.2f} {wakes:>7.1f} {training:>11.1f}"
        if not held[name]:
            return cells + f" {'':>7} {'':>6}"
        steps_s, ms_s = (statistics.fmean(v) for v in zip(*held[name], strict=True))
        return cells + f" {steps_s:>7.2f} {ms_s:>6.2f}"

    def long_cells(name: str) -> str:
        per_10k, excess = (statistics.fmean(v) for v in zip(*longs[name], strict=True))
        worst = statistics.median(longest[name]) / 1000
        return f" {per_10k:>10.1f} {excess:>14.2f} {worst:>11.2f}"

    print(
        f"  {'bare':<22} {bare:>10.1f} {'':>6} {bare_p99:>10.0f} {'':>6}{other_cells('bare A')}"
        f"{long_cells('bare A')}"
    )
    ab = se.get("bare A - bare B", math.nan)
    ab_p99, ab_p99_se = p99_diff.get("bare A - bare B", (math.nan, math.nan))
    print(
        f"  {'bare A - bare B':<22} {means['bare A'] - means['bare B']:>+10.1f} {ab:>6.1f}"
        f" {ab_p99:>+9.0f}% {ab_p99_se:>5.0f}%"
    )
    for arm in arms[2:]:
        p99, p99_se = p99_diff.get(arm.name, (math.nan, math.nan))
        print(
            f"  {arm.name:<22} {means[arm.name] - bare:>+10.1f}"
            f" {se.get(arm.name, math.nan):>6.1f} {p99:>+9.0f}%"
            f" {p99_se:>5.0f}%"
            f"{other_cells(arm.name)}"
            f"{long_cells(arm.name)}"
        )
    print(
        "  ± se: the standard error of the arm's difference from bare over the rounds (each"
        " round's\n  processes ran back to back); the p99 as % of bare's pooled p99, each"
        " process's p99 against\n  its round's bare pair, averaged, and its se the same way:"
        " about 2 se either side"
        " holds the true\n  difference if rounds are alike. threads: the CPU of the training"
        " process's other threads\n  over the loop, per step, and how often a second they were"
        " put on a CPU (the tx thread's\n  wake-ups among them; each may take the GIL from the"
        " training thread); training/s: how often\n  a second the training thread was put back"
        " on a CPU, after waiting for the GIL or being preempted. held/s, ms/s: the steps a"
        " second that\n  overlapped TraceML's tx thread at work, and their overlap in ms a second"
        " (the run's summary:\n  system.traceml_held_steps and traceml_held_ms)."
    )
    print(
        f"  long: steps over {LONG_X:g}x their process's median step, per 10,000 steps, and what"
        " they add to the\n  mean step over that median (bare: bare A's). TraceML's tx thread"
        " holding the GIL shows here.\n  longest: each process's longest step after its warm-up,"
        " the median over the arm's processes."
    )


LONG_X = 2.5
"""A step this many times its process's median is a long one: a GIL hold of TraceML's tx thread
(1-5 ms at a 0.4 ms step), a garbage collection, the host taking the core."""


def other_threads(path: Path, steps: int) -> tuple[float, float, float]:
    """(µs of CPU a step, wake-ups a second) of every thread of a process but the training one,
    and the training thread's wake-ups a second, over its loop (_workload.py writes them)."""
    threads = json.loads(path.read_text())
    _, training = threads.pop("training", (0.0, 0.0))
    cpu = sum(cpu for cpu, _ in threads.values())
    return cpu * 1e6 / steps, sum(wakes for _, wakes in threads.values()), training


def held_steps(summary: Path, steps: list[float]) -> tuple[float, float]:
    """(steps, ms) a second of a traced process's loop that overlapped its tx thread's work, as
    its summary counts them (over every step, the warm-up's included; `steps` after it)."""
    system = json.loads(summary.read_text())["system"]
    seconds = sum(steps) / 1e6
    return system["traceml_held_steps"] / seconds, system["traceml_held_ms"] / seconds


def long_steps(steps: list[float]) -> tuple[float, float]:
    """(long steps per 10,000, their excess over the median, µs per step) of one process."""
    median = statistics.median(steps)
    excess = [x - median for x in steps if x > LONG_X * median]
    return len(excess) / len(steps) * 1e4, sum(excess) / len(steps)


if __name__ == "__main__":
    main()

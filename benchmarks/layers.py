"""What each layer of TraceML adds to a separate training process, step by step.

Run: .venv/bin/python benchmarks/layers.py [--pairs N] [--steps N] [--width W]

overhead.py prices whole arms (trace_step, traceml run, the live view, the peer); inloop.py
resolves TraceML's parts inside one process, with TraceML initialised in every block. This one
answers what lies between: the same loop (benchmarks/_workload.py) as separate processes, one
per arm and round, the arms interleaved:

  bare A, bare B     no traceml import at all (their difference is the noise)
  init, unpatched    traceml.init(mode="auto"), then its patches removed: the tx thread, its
                     sockets and its once-a-second work, idle
  init               traceml.init(mode="auto") and no trace_step: every patch passes through
                     outside a step
  trace_step         init and trace_step(model) around every step

Per arm: the mean of every step after the first 50 of every round, and the p99, as added to the
mean of bare A and B. Processes are started and their steps read as overhead.py does (the same
command, environment and warm-up cut).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
from pathlib import Path

from _common import byte_compile, pct
from overhead import Arm, command, env_for, read_steps

ARMS = (
    Arm("bare A", "bare"),
    Arm("bare B", "bare"),
    Arm("init, unpatched", "init-unpatched"),
    Arm("init", "init"),
    Arm("trace_step", "traceml"),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--pairs", type=int, default=4, help="rounds of every arm")
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--width", type=int, default=16, help="MLP width (16: ~0.4 ms a step here)")
    args = ap.parse_args()
    print(f"TraceML {byte_compile()}")
    steps: dict[str, list[float]] = {arm.name: [] for arm in ARMS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.pairs):
            for arm in ARMS:
                out = Path(tmp) / f"{arm.mode}-{r}"
                cmd = command(arm, args.steps, args.width, out)
                env = env_for(arm, Path(tmp), None)
                subprocess.run(cmd, check=True, env=env, cwd=tmp, capture_output=True)
                steps[arm.name] += read_steps(out)
    means = {arm: statistics.fmean(v) for arm, v in steps.items()}
    p99s = {arm: pct(v, 0.99) for arm, v in steps.items()}
    bare, bare_p99 = (means["bare A"] + means["bare B"]) / 2, (p99s["bare A"] + p99s["bare B"]) / 2
    noise = abs(means["bare A"] - means["bare B"])
    print(
        f"MLP width {args.width}: {args.pairs} rounds x {args.steps:,} steps a process per arm;"
        f" µs per step (bare absolute, others added; noise = |bare A - bare B| = {noise:.1f})"
    )
    print(f"  {'':<18} {'mean step':>10} {'p99 step':>10}")
    print(f"  {'bare':<18} {bare:>10.1f} {bare_p99:>10.0f}")
    for arm in ARMS[2:]:
        p99 = (p99s[arm.name] / bare_p99 - 1) * 100
        print(f"  {arm.name:<18} {means[arm.name] - bare:>+10.1f} {p99:>+9.0f}%")


if __name__ == "__main__":
    main()

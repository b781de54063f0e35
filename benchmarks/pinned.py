"""What a run costs when all of it shares the training's one core, measured beside a bare twin.

Run: .venv/bin/python benchmarks/pinned.py [--rounds N] [--steps N] [--size 0.4|1] [--peer]
     [--seed N] [--arms bare,floor,threaded,trace_step,no-live,live,peer,...]

overhead.py runs its arms one after the other, and this host's speed drifts from one process to
the next by 10-20 µs a 0.4 ms step: even over twelve rounds its standard errors are 2-9 µs. Here
each arm runs *at the same time* as a bare process, the two pinned to different CPUs (taskset;
every process the arm's run starts inherits its CPU), and the two are compared over the seconds
both loops ran: what the host does meanwhile falls on both alike. The CPUs swap from round to
round, and each round runs the arms in an order of its own (_common.round_order).

Every process and thread of the arm's run shares the training thread's core: the tx thread's
conversion, fold and publishing, the launcher, the live view's drawing, the peer's own processes.
Whatever the run spends anywhere therefore lands in the training loop's step times, so the mean
step added here is the training thread's own cost *and* the CPU of every process of the run, in
one figure: what a job with no core to spare pays. Where other cores are idle (overhead.py's
arms, a real job's spare cores) part of that runs beside the loop instead and costs it less.

Arms (each beside its own bare twin): bare (the noise: a bare process against a bare twin),
floor (the same loop timed by hand as cheaply as Python can: ten clock reads inline and one
append a step, nothing else; what any tool that times these phases from Python pays),
bare in a process that has run one thread (`threaded`: the loop's process is no longer
single-threaded, as with any thread TraceML's or another's starts, and as every job with
DataLoader workers, intra-op threads, CUDA or a process group already is; benchmarks/threaded.py),
`trace_step`, `traceml run --no-live`, `traceml run` with the live view in a 120x40 pty, and with
--peer traceml-ai 0.5.0's `traceml run`; and when --arms names them, TraceML's patches with no
step opened (`init`), `trace_step` with the tx thread asleep (`asleep`), and `trace_step` with
the due beats on the training thread (`inline`: TRACEML_INLINE=1), and `trace_step` in a process
with no thread of TraceML's (`threadless`: no tx thread, no ZeroMQ socket), and `trace_step` with
its beats in a process of their own (`process`: TRACEML_BEATS=process, that process on the same
core). Per arm: the mean
step and the p99 added to its twin's over their common window, as the mean over the rounds and
its standard error.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import TARGET_US, byte_compile, pct, round_order, stderr, verdict
from _procs import alive, start_in_pty, step_ends, step_times
from overhead import (
    BEATS_PROCESS,
    INLINE_BEATS,
    THREADLESS,
    Arm,
    arms,
    calibrate,
    command,
    env_for,
)

WARMUP_STEPS = 200
"""Steps at the start of each loop left out (first iterations, the tx thread's first tick)."""
FLOOR = Arm("floor", "floor")
"""The bare loop with what the cheapest timing of its phases costs (ten clock reads inline and one
append a step, nothing reading them: _workload.py): the floor under TraceML's own cost."""
SPLIT = [
    Arm("init, no trace_step", "init"),
    Arm("trace_step, tx asleep", "traceml-asleep"),
    INLINE_BEATS,
    THREADLESS,
    BEATS_PROCESS,
]
"""Arms that split `trace_step`'s cost, run only when --arms names them: TraceML's patches with
no step ever opened, `trace_step` with the tx thread asleep through the loop (it folds at the
exit, outside the loop's window), `trace_step` with its beats on the training thread, and
`trace_step` in a process with no thread of TraceML's (overhead.THREADLESS), and `trace_step` with
its beats in a process of their own, which shares the core (overhead.BEATS_PROCESS)."""
KEYS = {
    "bare": "bare",
    "floor": "floor",
    "bare, threaded": "threaded",
    "init, no trace_step": "init",
    "trace_step, tx asleep": "asleep",
    "trace_step, inline beats": "inline",
    "trace_step, no thread": "threadless",
    "trace_step, beats process": "process",
    "trace_step": "trace_step",
    "run --no-live": "no-live",
    "run, live view": "live",
    "traceml-ai 0.5.0": "peer",
}
"""--arms' name of each arm."""
TWIN_STEPS_FACTOR = 20
"""The bare twin is asked for this many times the arm's steps and stopped (SIGUSR1) once the
arm's run has ended, so its loop spans the arm's whatever the arm's start-up costs."""


def window(a: Path, b: Path) -> tuple[list[float], list[float], float]:
    """The steps of loops `a` and `b` that ended while both ran, past each one's warm-up, and the
    window's length in seconds."""
    ta, tb = step_times(a), step_times(b)
    ea, eb = step_ends(a, ta), step_ends(b, tb)
    if len(ta) <= WARMUP_STEPS or len(tb) <= WARMUP_STEPS:
        raise SystemExit(f"a loop ended within its warm-up: {a} {len(ta)}, {b} {len(tb)} steps")
    lo = max(ea[WARMUP_STEPS], eb[WARMUP_STEPS])
    hi = min(ea[-1], eb[-1])
    in_a = [us for us, e in zip(ta, ea, strict=True) if lo < e <= hi]
    in_b = [us for us, e in zip(tb, eb, strict=True) if lo < e <= hi]
    if len(in_a) < 100 or len(in_b) < 100:
        raise SystemExit(f"the two loops overlapped by {max(0.0, hi - lo):.2f} s only")
    return in_a, in_b, hi - lo


def run(cmd: list[str], env: dict[str, str], cwd: Path, tty: bool, out: Path) -> None:
    """Run `cmd` to its end; with `tty` under a 120x40 pty, pressing `q` once the training
    process (its pid from `out`.cpu, which _workload.py writes last) has exited: the view waits
    for the user then, where a `q` before would ask whether to stop the script. No process tree
    is polled, as overhead.py does for its CPU figures: the harness's own CPU would land on
    either side of a pair."""
    if not tty:
        got = subprocess.run(
            cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        if got.returncode != 0:
            err = got.stderr.decode()[-3000:]
            raise SystemExit(f"{' '.join(cmd)} failed ({got.returncode}):\n{err}")
        return
    proc, master, _ = start_in_pty(cmd, env, str(cwd))
    done = Path(f"{out}.cpu")
    try:
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            if done.exists() and (pid := done.read_text().split()[-1:]) and not alive(int(pid[0])):
                os.write(master, b"q")
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            raise SystemExit(f"{' '.join(cmd)} did not end")
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode})")
    finally:
        os.close(master)


def pair(
    arm: Arm, cpus: tuple[int, int], steps: int, width: int, tmp: Path, peer_bin: Path | None
) -> tuple[list[float], list[float], float]:
    """Run `arm` on CPU `cpus[0]` and a bare twin on `cpus[1]` at once: (arm's steps, twin's
    steps, window seconds) over their common window."""
    twin_out, arm_out = tmp / "twin", tmp / f"arm-{arm.mode}"
    for p in (twin_out, arm_out):
        for suffix in ("", ".t0", ".threads", ".cpu"):
            Path(f"{p}{suffix}").unlink(missing_ok=True)
    bare = Arm("twin", "bare")
    twin_cmd = command(bare, steps * TWIN_STEPS_FACTOR, width, twin_out)
    twin = subprocess.Popen(
        ["taskset", "-c", str(cpus[1]), *twin_cmd],
        env=env_for(bare, tmp, None),
        cwd=str(tmp),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        cmd = ["taskset", "-c", str(cpus[0]), *command(arm, steps, width, arm_out)]
        run(cmd, env_for(arm, tmp, peer_bin), tmp, arm.tty, arm_out)
    finally:
        if twin.poll() is None:
            twin.send_signal(signal.SIGUSR1)
        _, err = twin.communicate(timeout=60)
    if twin.returncode != 0:
        raise SystemExit(f"the bare twin failed ({twin.returncode}): {err.decode()[-2000:]}")
    return window(arm_out, twin_out)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=8000, help="steps of each arm's loop")
    ap.add_argument("--size", type=float, default=0.4, help="bare step in ms (sets the width)")
    ap.add_argument("--seed", type=int, default=0, help="draws each round's order of the arms")
    ap.add_argument("--peer", action="store_true", help="add traceml-ai 0.5.0 (pip installs it)")
    ap.add_argument(
        "--arms",
        type=lambda text: set(text.split(",")),
        help=f"only these arms, comma-separated, of: {', '.join(KEYS.values())} (default: all"
        " but init, asleep and inline)",
    )
    a = ap.parse_args()
    if a.arms is not None and not a.arms <= set(KEYS.values()):
        ap.error(f"unknown arm in --arms: {', '.join(sorted(a.arms - set(KEYS.values())))}")
    if a.arms is not None and "peer" in a.arms and not a.peer:
        ap.error("--arms peer needs --peer")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("pinned.py needs two CPUs (one for each process of a pair)")
    first, second = cpus[0], cpus[1]
    print(f"TraceML {byte_compile()}")
    tmp = Path(tempfile.mkdtemp(prefix="traceml-pinned-"))
    (tmp / "rt").mkdir(mode=0o700)
    peer_bin = None
    if a.peer:
        from _peer import make_peer_venv

        peer_bin = make_peer_venv()
    width = calibrate(a.size)
    # overhead's arms after its bare pair: `bare, threaded`, then TraceML's and the peer's
    every = [Arm("bare", "bare"), FLOOR, *(x for x in arms(peer_bin) if x.mode != "bare")]
    if a.arms is None:
        all_arms = every
    else:
        every[3:3] = SPLIT
        all_arms = [x for x in every if KEYS[x.name] in a.arms]
    added: dict[str, list[float]] = {x.name: [] for x in all_arms}
    p99s: dict[str, list[float]] = {x.name: [] for x in all_arms}
    twin_means: list[float] = []
    seconds: list[float] = []
    for r in range(a.rounds):
        for i, arm in enumerate(round_order(all_arms, r, a.seed)):
            on = (first, second) if (r + i) % 2 == 0 else (second, first)
            mine, twin, span = pair(arm, on, a.steps, width, tmp, peer_bin)
            added[arm.name].append(statistics.fmean(mine) - statistics.fmean(twin))
            p99s[arm.name].append(100 * (pct(mine, 0.99) / pct(twin, 0.99) - 1))
            twin_means.append(statistics.fmean(twin))
            seconds.append(span)
        print(f"  round {r + 1} of {a.rounds} done", file=sys.stderr, flush=True)
    print(
        f"\neach arm pinned to one CPU with every process of its run, a bare twin on the other,"
        f" at once; MLP width {width}, bare twin {statistics.fmean(twin_means):.1f} µs a step,"
        f" {a.rounds} rounds, windows of {statistics.fmean(seconds):.1f} s on average"
    )
    print(
        "µs added to the mean step (± standard error over the rounds), p99 added (± se), and"
        f" whether the mean resolves the {TARGET_US:g} µs target (within or over it by 2 se,"
        " the arm's or bare's, whichever is larger)"
    )
    print(f"  {'arm':26} {'mean step':>18} {'p99':>14}  {f'{TARGET_US:g} µs?':>10}")
    noise = stderr(added["bare"]) if "bare" in added else math.nan
    for arm in all_arms:
        d, q = added[arm.name], p99s[arm.name]
        print(
            f"  {arm.name:26} {statistics.fmean(d):+8.1f} ± {stderr(d):4.1f}"
            f" {statistics.fmean(q):+7.0f} % ± {stderr(q):3.0f}"
            f"  {verdict(statistics.fmean(d), stderr(d), noise=noise):>10}"
        )
    if "traceml-ai 0.5.0" in added:
        peer = statistics.fmean(added["traceml-ai 0.5.0"])
        for name in (x for x in ("trace_step", "run --no-live", "run, live view") if x in added):
            ours = statistics.fmean(added[name])
            ratio = f"{peer / ours:.1f}x" if ours > 0 else "n/a (ours not above bare)"
            print(f"  traceml-ai / {name}: {ratio}")
    print(f"  host load now {os.getloadavg()[0]:.1f}; arms' order from --seed {a.seed}")


if __name__ == "__main__":
    main()

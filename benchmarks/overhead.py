"""What TraceML adds to a training job: per step, per run, in every process the run starts.

Run: make bench   (or .venv/bin/python benchmarks/overhead.py [--quick] [--peer] [--rss]
     [--start-exit N] [--rounds N] [--seed N] [--size 0.4|1] [--inline] [--threadless]
     [--beats-process])

The same training script (benchmarks/_workload.py: an MLP fed by a DataLoader over a
TensorDataset, batch 32, one torch thread, sized to about 0.4 ms and 1 ms a step) runs as a
separate process in each arm, at two run lengths, the arms interleaved round by round, each
round in an order of its own drawn from --seed (see _common.round_order):

  bare A, bare B   `python script`, no traceml import at all (two arms: their difference is the
                   noise beside every figure); the script never starts a thread
  bare, threaded   the same in a process that has run one thread before its loop, as every job
                   with DataLoader workers, intra-op threads, CUDA or a process group is (and as
                   TraceML's threads make it): what a job already multi-threaded is measured
                   against (benchmarks/threaded.py)
  trace_step       `python script` calling traceml.init(mode="auto") + trace_step
  run --no-live    `traceml run --no-live script` (launcher + bootstrap + the same script)
  run, live view   `traceml run script` under a 120x40 pty: the launcher runs the live view
  trace_step, inline beats (--inline) trace_step with TRACEML_INLINE=1: the tx worker's due
                   beats on the training thread at its steps' ends
  trace_step, no thread (--threadless) trace_step in a process with no thread of TraceML's (no
                   tx thread, no ZeroMQ socket): what another process doing the beats would
                   leave to the training process
  trace_step, beats process (--beats-process) trace_step with TRACEML_BEATS=process: the steps
                   go to a ring that a beats process of TraceML's reads, folds and publishes;
                   the training process keeps no thread of TraceML's, and the beats process's
                   CPU is in the CPU columns
  traceml-ai 0.5.0 (--peer) the peer's `traceml run script` (its default summary mode), the
                   script using `import traceml_ai as traceml`, installed into a throwaway venv

Per arm: mean, p99 and max of the script's own per-step times (long runs, pooled); the slope of
total wall time and of CPU time (all processes of the run: exact, from RUSAGE_CHILDREN) between
the short and the long run, per step, so start-up and exit cancel; the CPU slope of the training
process alone (its own getrusage, written by the script: under a launcher that runs it in a
process not named after it, a process listing would guess); the CPU slope of the run's other
processes (the launcher with its live view, the job collector, torchrun's agent; psutil's last
reading of each, see _procs.py), read directly because the all-processes slope less the
training one is the difference of two noisy figures; and the intercept of the wall time
(start-up plus exit). Every traced figure is shown as added to the mean of bare A and B, with
|A - B| as the noise. Under the table, the mean step's standard error over the rounds (each
arm's long run against its round's bare pair), and the same for the CPU slope of every process:
with 3 or more rounds, a better measure of the noise than one pair's difference.
`--start-exit N` instead runs every arm N times at 20 steps, interleaved, and prints the wall
time each adds to bare (median, mean, max): start-up and exit alone, with more samples than the
intercept column can have.
`--rss` instead runs 1,000,000 traced steps of a tiny model in this process and prints the
training process's RSS every 100,000 steps (flat = bounded memory).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import (
    TARGET_US,
    Loop,
    byte_compile,
    pct,
    round_differences,
    round_order,
    round_stderrs,
    verdict,
)
from _procs import RunResult, loop_start, run_measured, step_times

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "_workload.py"
BATCH = 32
WARMUP_STEPS = 50
"""Steps at the start of each run left out of the step statistics (first-iteration costs)."""


@dataclass(frozen=True)
class Arm:
    name: str
    mode: str
    """What _workload.py does: bare, traceml or peer."""
    launcher: tuple[str, ...] = ()
    """Command before the script; () = plain python."""
    tty: bool = False
    tree: str | None = None
    """Another checkout of TraceML (built) imported instead of this one: PYTHONPATH."""


@dataclass
class Samples:
    """Every run of one arm at one step size."""

    short: list[RunResult] = field(default_factory=list)
    long: list[RunResult] = field(default_factory=list)
    steps: dict[int, list[float]] = field(default_factory=dict)
    """Per-step µs of the long runs after WARMUP_STEPS, pooled, by rank."""
    round_means: dict[int, list[float]] = field(default_factory=dict)
    """The mean of each long run's steps, round by round, by rank."""
    round_p99s: dict[int, list[float]] = field(default_factory=dict)
    """The p99 of each long run's steps, round by round, by rank."""
    round_loop_cpu: list[float] = field(default_factory=list)
    """Each long run's CPU over its timed loop alone, µs a step, every process: see loop_cpu."""


THREADED = Arm("bare, threaded", "threaded")
"""The bare loop in a process that has run one thread before it (_workload.py): what leaving
glibc's single-threaded paths (malloc and free without locks) costs, part of any in-process
tool's cost on a single-threaded loop and of none on a job already multi-threaded."""


INLINE_BEATS = Arm("trace_step, inline beats", "traceml-inline")
"""`trace_step` with the tx worker's due beats run on the training thread at its steps' ends
(TRACEML_INLINE=1), where the default leaves every beat to the tx thread."""

THREADLESS = Arm("trace_step, no thread", "traceml-threadless")
"""`trace_step` in a training process that keeps no thread of TraceML's (no tx thread, no ZeroMQ
socket; its steps fall out of the queue unread, _workload.py): what the training process would
pay were the beats done in another process, that process's own CPU left out."""


BEATS_PROCESS = Arm("trace_step, beats process", "traceml-process")
"""`trace_step` with its beats in a process of their own (TRACEML_BEATS=process): the training
process keeps no thread of TraceML's, and the beats process's CPU is in the CPU columns."""


def arms(peer_bin: Path | None) -> list[Arm]:
    py = sys.executable
    out = [
        Arm("bare A", "bare"),
        Arm("bare B", "bare"),
        THREADED,
        Arm("trace_step", "traceml"),
        Arm("run --no-live", "traceml", (py, "-m", "traceml", "run", "--no-live")),
        Arm("run, live view", "traceml", (py, "-m", "traceml", "run"), tty=True),
    ]
    if peer_bin is not None:
        out.append(Arm("traceml-ai 0.5.0", "peer", (str(peer_bin / "traceml"), "run")))
    return out


def command(arm: Arm, steps: int, width: int, out: Path, batch: int = BATCH) -> list[str]:
    args = [arm.mode, str(steps), str(width), str(batch), str(out)]
    if arm.mode == "peer":
        return [*arm.launcher, str(WORKLOAD), "--args", *args]
    if "traceml" in arm.launcher:  # our `traceml run`
        return [*arm.launcher, "--summary", str(out) + ".summary.json", str(WORKLOAD), *args]
    if arm.launcher:
        return [*arm.launcher, str(WORKLOAD), *args]
    return [sys.executable, str(WORKLOAD), *args]


def env_for(arm: Arm, tmp: Path, peer_bin: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEML_")}
    env.update(OMP_NUM_THREADS="1", TRACEML_RUNTIME_DIR=str(tmp / "rt"))
    env["TRACEML_SUMMARY"] = str(tmp / "summary.json")
    if arm.tree is not None:
        env["PYTHONPATH"] = arm.tree
    if arm.mode == "peer" and peer_bin is not None:
        env["PATH"] = f"{peer_bin}:{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(peer_bin.parent)
    return env


def read_steps(path: Path) -> list[float]:
    return list(step_times(path))[WARMUP_STEPS:]


def measure(
    all_arms: list[Arm],
    shape: tuple[int, int],
    lengths: tuple[int, int],
    rounds: int,
    tmp: Path,
    peer_bin: Path | None = None,
    ranks: int = 1,
    seed: int = 0,
) -> dict[str, Samples]:
    """Every arm at both lengths, round after round, arms interleaved in an order drawn afresh
    each round (round_order, from `seed`); `shape` = (width, batch) of the MLP; `ranks` > 1
    when the arms run under torchrun."""
    res = {a.name: Samples() for a in all_arms}
    for r in range(rounds):
        for arm in round_order(all_arms, r, seed):
            for steps in lengths:
                out = tmp / f"steps-{arm.mode}-{steps}"
                cmd = command(arm, steps, shape[0], out, shape[1])
                got = run_measured(cmd, env_for(arm, tmp, peer_bin), str(tmp), tty=arm.tty)
                sample = res[arm.name]
                per_rank = [out] if ranks == 1 else [Path(f"{out}.{r}") for r in range(ranks)]
                if steps == lengths[0]:
                    sample.short.append(got)
                else:
                    sample.long.append(got)
                    for r, path in enumerate(per_rank):
                        got_steps = read_steps(path)
                        sample.steps.setdefault(r, []).extend(got_steps)
                        sample.round_means.setdefault(r, []).append(statistics.fmean(got_steps))
                        sample.round_p99s.setdefault(r, []).append(pct(got_steps, 0.99))
                own = [Path(f"{path}.cpu").read_text().split() for path in per_rank]
                training = {int(pid) for _, pid in own}
                got.by_role["training"] = sum(float(cpu) for cpu, _ in own)
                got.by_role["others"] = sum(
                    cpu for pid, cpu in got.by_pid.items() if pid not in training
                )
                if steps == lengths[1]:
                    sample.round_loop_cpu.append(loop_cpu(got, per_rank, training))
    return res


def loop_cpu(got: RunResult, per_rank: list[Path], training: set[int]) -> float:
    """The CPU every process of a run used over rank 0's timed loop alone, µs a step: each
    training process's threads over its own loop (the kernel's schedstat, which _workload.py
    writes), and every other process (launcher, live view, job collector, torchrun's agent)
    over the same seconds, from its psutil readings. The slopes between two run lengths cancel
    start-up and exit only on average: those vary by 0.3 s of wall and 0.2 s of CPU from one
    process to the next, ±100 µs a step over the 2,000 steps between the 1 ms arm's lengths,
    where over the loop alone nothing but the loop counts."""
    by_thread = [json.loads(Path(f"{path}.threads").read_text()) for path in per_rank]
    threads = sum(cpu for rank in by_thread for cpu, _ in rank.values())
    raw = step_times(per_rank[0])
    t0 = loop_start(per_rank[0])
    t1 = t0 + sum(raw) / 1e6
    others = sum(got.cpu_between(pid, t0, t1) for pid in got.readings if pid not in training)
    return (threads + others) / len(raw) * 1e6


# -- figures -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figures:
    mean: float
    p99: float
    max: float
    wall: float
    """Wall-time slope, µs per step."""
    cpu: float
    """CPU slope of all processes, µs per step."""
    train_cpu: float
    """CPU slope of the training process(es), µs per step."""
    other_cpu: float
    """CPU slope of every other process of the run (launcher and its live view, job collector,
    torchrun's agent), µs per step: psutil's readings, not the difference of two noisy slopes."""
    fixed: float
    """Wall-time intercept (start-up plus exit), s."""


def round_slopes(s: Samples, dn: int, value: str) -> list[float]:
    """(long - short) / dn of each round, in µs per step."""
    pairs = zip(s.short, s.long, strict=True)
    return [(_get(b, value) - _get(a, value)) / dn * 1e6 for a, b in pairs]


def slope(s: Samples, dn: int, value: str) -> float:
    """Median over rounds of (long - short) / dn, in µs per step."""
    return statistics.median(round_slopes(s, dn, value))


def _get(r: RunResult, value: str) -> float:
    if value == "wall":
        return r.wall_s
    if value == "cpu":
        return r.cpu_s
    if value == "other":
        return r.by_role.get("others", 0.0)
    return r.by_role.get("training", 0.0)


def figures(s: Samples, lengths: tuple[int, int], rank: int = 0) -> Figures:
    dn = lengths[1] - lengths[0]
    wall = slope(s, dn, "wall")
    fixed = statistics.median(r.wall_s - wall * lengths[0] / 1e6 for r in s.short)
    steps = s.steps[rank]
    return Figures(
        statistics.fmean(steps),
        pct(steps, 0.99),
        max(steps),
        wall,
        slope(s, dn, "cpu"),
        slope(s, dn, "train"),
        slope(s, dn, "other"),
        fixed,
    )


def print_table(
    size: str,
    res: dict[str, Samples],
    lengths: tuple[int, int],
    rounds: int,
    rank: int = 0,
    target_pct: float | None = None,
) -> None:
    """One block of the table; step figures of `rank`, wall and CPU of the whole run. The
    verdicts are against TARGET_US, or `target_pct` % of bare's mean step when given (DDP's)."""
    figs = {name: figures(s, lengths, rank) for name, s in res.items()}
    step = round_differences({name: s.round_means.get(rank, []) for name, s in res.items()})
    se = {name: v for name, (_, v) in step.items()}
    dn = lengths[1] - lengths[0]
    cpu_se = round_stderrs({name: round_slopes(s, dn, "cpu") for name, s in res.items()})
    p99_by_process = round_differences({n: s.round_p99s.get(rank, []) for n, s in res.items()})
    a, b = figs.pop("bare A"), figs.pop("bare B")
    fields = ("mean", "p99", "max", "wall", "cpu", "train_cpu", "other_cpu", "fixed")
    bare = {f: (getattr(a, f) + getattr(b, f)) / 2 for f in fields}
    noise = {f: abs(getattr(a, f) - getattr(b, f)) for f in fields}
    print(
        f"\n{size}: {rounds} rounds x {lengths[0]:,} and {lengths[1]:,} steps;"
        " µs per step unless said; +added (±noise = |bare A - bare B|)"
    )
    head = (
        f"  {'':26} {'mean step':>17} {'wall slope':>17} {'p99 step':>17} {'max step':>10}"
        f" {'CPU all procs':>17} {'CPU training':>17} {'CPU others':>17} {'start+exit s':>15}"
    )
    print(head)

    def cell(f: str, v: float, width: int = 17) -> str:
        if f == "fixed":  # seconds, and their spread between processes is tenths of a second
            return f"{v:+.2f} ({noise[f]:.2f})".rjust(width)
        return f"{v:7.1f} ({noise[f]:5.1f})".rjust(width)

    print(
        f"  {'bare':26} {bare['mean']:17.1f} {bare['wall']:17.1f} {bare['p99']:17.0f}"
        f" {bare['max']:10.0f} {bare['cpu']:17.1f} {bare['train_cpu']:17.1f}"
        f" {bare['other_cpu']:17.1f} {bare['fixed']:15.2f}"
    )
    for name, fig in figs.items():
        added = {f: getattr(fig, f) - bare[f] for f in fields}
        p99 = (
            f"{100 * added['p99'] / bare['p99']:+.0f} % ({100 * noise['p99'] / bare['p99']:.0f} %)"
        )
        print(
            f"  {name:26} {cell('mean', added['mean']):>17} {cell('wall', added['wall']):>17}"
            f" {p99:>17}"
            f" {fig.max:10.0f} {cell('cpu', added['cpu']):>17}"
            f" {cell('train_cpu', added['train_cpu']):>17}"
            f" {cell('other_cpu', added['other_cpu']):>17} {cell('fixed', added['fixed'], 15)}"
        )
    if se:
        print(
            "  mean step's standard error over the rounds (each arm's difference from its round's"
            " bare pair; bare A - bare B's own): "
            + ", ".join(f"{name} {v:.1f}" for name, v in se.items())
        )
    if p99_by_process:
        # The pooled p99 above is what a user's runs pay, but one process's p99 moves by a
        # third on its own (bare's 406-643 µs over twelve processes of one hour; 6 processes of
        # 40 read 616-805 µs where the rest read 450-525, bare among them): a few such processes
        # in one arm move its pooled p99 by tens of %. Each process against its own round's
        # bare pair, averaged, with the spread of that over the rounds, is the fairer figure.
        print(
            "  p99 step, each process against its round's bare pair, mean (standard error) over"
            " the rounds, % of bare's p99: "
            + ", ".join(
                f"{name} {100 * m / bare['p99']:+.0f} % ({100 * v / bare['p99']:.0f} %)"
                for name, (m, v) in p99_by_process.items()
            )
        )
    loop = round_differences({name: s.round_loop_cpu for name, s in res.items()})
    if loop:
        bare_loop = statistics.fmean(res["bare A"].round_loop_cpu + res["bare B"].round_loop_cpu)
        print(
            f"  CPU of every process over the timed loop alone (bare {bare_loop:.1f} µs a step),"
            " added, mean (standard error) over the rounds: "
            + ", ".join(f"{name} {m:+.1f} ({v:.1f})" for name, (m, v) in loop.items())
        )
    pair = "bare A - bare B"
    # (figure, {arm or the pair: (mean added, standard error over the rounds)})
    targets = [("mean step", step), ("CPU over the loop", loop)]
    target = TARGET_US if target_pct is None else bare["mean"] * target_pct / 100
    named = f"{TARGET_US:g} µs" if target_pct is None else f"{target_pct:g} % ({target:.1f} µs)"
    for what, diffs in targets:
        noise = diffs.get(pair, (0.0, math.nan))[1]
        if len(diffs) > 1:
            print(
                f"  {what} against the {named} target (within or over it by 2 standard"
                " errors, the arm's or the bare pair's, whichever is larger; else unresolved): "
                + ", ".join(
                    f"{n} {verdict(m, v, target, noise)}"
                    for n, (m, v) in diffs.items()
                    if n != pair
                )
            )
    if cpu_se:
        # One bare pair's CPU difference understates how far two processes doing the same work
        # differ: one run gave `--no-live` +41 µs a step against trace_step's +5.7 with a pair's
        # noise of 3.9, though its launcher idles and its rank does trace_step's work.
        print(
            "  CPU (all processes) slope's standard error over the rounds, the same way: "
            + ", ".join(f"{name} {v:.1f}" for name, v in cpu_se.items())
        )


# -- start-up plus exit -------------------------------------------------------------------------

START_EXIT_STEPS = 20
"""Steps of each --start-exit run: a few ms of training, the rest is start-up and exit."""


def start_exit(
    all_arms: list[Arm], rounds: int, tmp: Path, peer_bin: Path | None, seed: int = 0
) -> None:
    """Wall time of many short runs of each arm, interleaved, as added to bare.

    The table's start+exit column is an intercept from a few pairs of long runs, and its noise
    (tenths of a second) is as large as the figure; here every run is short, so it is start-up
    and exit alone, measured `rounds` times. A live-view run counts until `q` has closed the
    view, pressed as soon as the script has exited (the view waits for the user).
    """
    walls: dict[str, list[float]] = {a.name: [] for a in all_arms}
    for r in range(rounds):
        for arm in round_order(all_arms, r, seed):
            out = tmp / f"start-exit-{arm.mode}"
            cmd = command(arm, START_EXIT_STEPS, 16, out)
            walls[arm.name].append(
                run_measured(cmd, env_for(arm, tmp, peer_bin), str(tmp), tty=arm.tty).wall_s
            )
    a, b = walls.pop("bare A"), walls.pop("bare B")
    bare = statistics.median(a + b)
    noise = abs(statistics.median(a) - statistics.median(b))
    print(
        f"\nstart-up plus exit: {rounds} runs of {START_EXIT_STEPS} steps per arm, interleaved;"
        f" s of wall time added to bare's median {bare:.2f} s (noise: bare A - bare B"
        f" {noise:.2f} s)"
    )
    print(f"  {'':17} {'median':>8} {'mean':>8} {'max':>8}")
    for name, got in walls.items():
        cells = (statistics.median(got), statistics.fmean(got), max(got))
        print(f"  {name:17}" + "".join(f" {v - bare:+8.2f}" for v in cells))


# -- RSS over a million steps ------------------------------------------------------------------


def rss_mode(steps: int) -> None:
    import psutil
    import torch

    import traceml

    torch.set_num_threads(1)
    traceml.init(mode="auto")
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    proc = psutil.Process()
    every = steps // 10
    print(f"RSS of the training process over {steps:,} traced steps (tiny model, auto mode)")
    t0 = time.perf_counter()
    for i in range(1, steps + 1):
        with traceml.trace_step(model):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        if i % every == 0:
            rss = proc.memory_info().rss / 2**20
            print(f"  step {i:>9,}  RSS {rss:7.1f} MB  ({time.perf_counter() - t0:5.0f} s)")
    traceml.shutdown()


# -- main --------------------------------------------------------------------------------------


SLOW_HOST = 1.25
"""calibrate() calls the host slow when the smallest step is this many times the one asked for."""


def calibrate(target_ms: float) -> int:
    """The MLP width whose bare step takes about `target_ms` here (one torch thread). Says so
    when even the smallest width is well over it: the host runs slower than any table here
    was measured on, and the run will be of a longer step than its heading's."""
    import torch

    torch.set_num_threads(1)
    width = 16
    while True:
        loop = Loop(width, BATCH)
        loop.block(30, traced=False)
        ms = statistics.median(loop.block(100, traced=False)) / 1000
        if width == 16 and ms > target_ms * SLOW_HOST:
            print(
                f"host: slow: the smallest step (MLP width 16) takes {ms:.2f} ms, over the"
                f" {target_ms:g} ms asked for (0.28 ms on the reference host); the table below"
                " is of that step, and its noise will be several times the reference's"
            )
        if ms >= target_ms * 0.9 or width >= 16384:
            return width
        width = int(width * max(1.1, min(2.0, (target_ms / ms) ** 0.5)))


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one size, one round (about a minute)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0, help="draws each round's order of the arms")
    ap.add_argument(
        "--size",
        type=float,
        choices=(0.4, 1.0),
        action="append",
        help="only this step size in ms (repeat for both; default both)",
    )
    ap.add_argument("--peer", action="store_true", help="add traceml-ai 0.5.0 (pip installs it)")
    ap.add_argument(
        "--inline", action="store_true", help="add trace_step with its beats on the training thread"
    )
    ap.add_argument(
        "--threadless", action="store_true", help="add trace_step with no thread (THREADLESS)"
    )
    ap.add_argument(
        "--beats-process",
        action="store_true",
        help="add trace_step with its beats in a process of their own (BEATS_PROCESS)",
    )
    ap.add_argument("--rss", action="store_true", help="RSS over 1,000,000 traced steps")
    ap.add_argument("--rss-steps", type=int, default=1_000_000, help="steps of --rss")
    ap.add_argument(
        "--start-exit",
        type=int,
        metavar="N",
        default=0,
        help="only start-up and exit, N runs an arm",
    )
    args = ap.parse_args()
    if args.rss:
        rss_mode(args.rss_steps)
        return
    tmp = Path(tempfile.mkdtemp(prefix="traceml-bench-"))
    (tmp / "rt").mkdir(mode=0o700)
    peer_bin = None
    if args.peer:
        from _peer import make_peer_venv

        peer_bin = make_peer_venv()
    load = os.getloadavg()[0]
    print(f"host: {os.cpu_count()} CPUs, load {load:.1f}" + (" (busy: noisy)" if load > 1 else ""))
    print(f"TraceML {byte_compile()}")
    if args.start_exit:
        start_exit(arms(peer_bin), args.start_exit, tmp, peer_bin, args.seed)
        return
    sizes = [(0.4, (500, 2500))] if args.quick else [(0.4, (1000, 5000)), (1.0, (500, 2500))]
    if args.size:
        sizes = [(ms, lengths) for ms, lengths in sizes if ms in args.size]
    rounds = 1 if args.quick else args.rounds
    for target_ms, lengths in sizes:
        width = calibrate(target_ms)
        every = arms(peer_bin) + ([INLINE_BEATS] if args.inline else [])
        every += [THREADLESS] if args.threadless else []
        every += [BEATS_PROCESS] if args.beats_process else []
        res = measure(every, (width, BATCH), lengths, rounds, tmp, peer_bin, seed=args.seed)
        print_table(f"~{target_ms:g} ms CPU step (MLP width {width})", res, lengths, rounds)
    print(
        "\n  targets: mean, wall slope and CPU (all processes) <= +10 µs; p99 within 10 %;"
        " start+exit <= +0.5 s; traceml run no costlier than trace_step"
    )
    print(f"  load now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

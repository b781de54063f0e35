"""What TraceML adds per step, measured inside one process: fine enough to resolve a few µs.

Run: .venv/bin/python benchmarks/inloop.py [--width W] [--blocks N] [--steps N]

overhead.py runs every arm as its own process, so the loader, the allocator and the first
seconds of each process move a 0.4 ms step by tens of µs from one run to the next: it cannot
resolve a 10 µs target on a shared host. Here one process runs the overhead benchmark's loop
(the same MLP and DataLoader) in blocks that alternate, in a shuffled order, between:

  bare      no patch installed, no trace_step (TraceML's tx thread idles);
  C         auto mode with the C timer and wrappers (the default);
  Python    auto mode with the pure-Python timer and wrappers. Both arms feed one tx thread,
            whose fold is C when built (analysis/_fold.c): TRACEML_C_TIMER=0 also folds in
            Python, which adds what benchmarks/fold.py shows (about 1.5 µs a step there);

or, with --parts, the C path's parts: `trace_step` with no patch installed, then `trace_step`
with one patch (dataloader, forward, backward, optimizer) at a time;

or, with --split, what the C arm's cost is made of:
  floor     no patch, no trace_step: the same loop timed as cheaply as Python can (ten clock
            reads inline and one append a step, _common.Loop.floor_step);
  C         as above;
  C, tx asleep  the C arm with the tx thread held asleep through the block (the benchmark
            holds the lock each of its ticks takes first; while nobody listens its samples ride
            on the ticks, except beside a loop faster than about 0.24 ms a step, whose
            once-a-second sample still runs), then made to fold the block's steps before the
            pause: the training thread's own cost, without the tx thread's work;
  bare, tx asleep  bare with the tx thread held asleep the same way: what `C, tx asleep`
            compares with, and what the idle tx thread's periodic work (the system sample, the
            rank file) costs the bare blocks.
Run it under `taskset -c 0` to put the tx thread on the training thread's core, as pinned.py does.
The arms' timers are made here, not by the session, and are given no beat (Timer.use_beat): every
beat of the tx worker runs on the tx thread, as by default (pinned.py's and overhead.py's
`inline` arms run them on the training thread, TRACEML_INLINE=1).

Every block is followed by a pause long enough for the tx thread to fold and publish the
block's last steps, and the block's CPU is read after it, so `CPU` holds every thread's work
for those steps (the training thread's wrappers, the tx thread's conversion, fold, packing and
publishing). `mean` and `p99` are the steps' own wall times. Figures are µs added per step
against bare; `noise`, beside them, is the difference between the means of two sets of bare
blocks (every other one), what the same arm moves by within this run.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import random
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import Loop, c_step_timer, pct, quiet_shutdown

FLOOR = "floor"
ASLEEP = "C, tx asleep"
BARE_ASLEEP = "bare, tx asleep"
PAUSE_S = 1.1
"""After a block. While nobody listens the tx thread folds once a second: a pause a little longer
than that has it fold the block's last steps in the pause, not in the next block's time, where
they would land on whichever arm came next (0.6 s before: every arm alike, but the C arm's own
cost then showed diluted over the others)."""


def arms(summary: Path, parts: bool, split: bool = False) -> dict[str, Any]:
    """Each arm's (hooks, step context, timer), set up once on one session; both timers feed
    the session's queue, so its tx thread folds their steps as a run's; `bare` is all None."""
    import torch

    import traceml
    from traceml import api
    from traceml.config import PATCHES
    from traceml.instrument.hooks import Hooks
    from traceml.instrument.timer import StepTimer, native

    traceml.init(mode="auto", summary=summary)
    session = api.current_session()
    assert session is not None
    session.hooks.remove()
    out, rss, on_error = session.raw, session.rss.pages, session.on_error
    skip = frozenset({"h2d", "comm"})
    result: dict[str, Any] = {"bare": (None, None, None), "_torch": torch, "_session": session}
    c = native()
    if c is not None:
        timer = c_step_timer(c, out, read_rss=rss)
        # As trace_step's own: its methods prebound, where the tree has it (a tree before it
        # on PYTHONPATH has not).
        prebound = getattr(api, "_prebound", lambda ctx: ctx)
        step = prebound(c.Step(timer, lambda: None, on_error))
        result["C"] = (Hooks(timer, on_error, skip), step, timer)
        if parts:  # the C path's parts: trace_step alone, then one patch at a time
            every = frozenset(PATCHES)
            result["trace_step"] = (Hooks(timer, on_error, every), step, timer)
            for name in ("dataloader", "forward", "backward", "optimizer"):
                result[f"+{name}"] = (Hooks(timer, on_error, every - {name}), step, timer)
            return result
        if split:
            return {
                "bare": result["bare"],
                FLOOR: (None, None, None),
                "C": result["C"],
                ASLEEP: result["C"],
                BARE_ASLEEP: result["bare"],
                "_torch": torch,
                "_session": session,
            }
    py = StepTimer(out, read_rss=rss)
    ctx = api.StepContext(session)
    ctx._timer = py  # the session's own timer is the C one
    result["Python"] = (Hooks(py, on_error, skip), ctx, py)
    return result


def tx_parts(loop: Loop, steps: int, summary: Path) -> None:
    """The tx thread's own CPU (thread time) in each of its parts, per step of a traced run in
    auto mode (the session's own timer: the C one when built), and for the periodic ones per
    call: what a tick's or a second's work costs whatever the loop's speed."""
    import traceml
    from traceml.analysis.store import RunStore
    from traceml.instrument import session
    from traceml.instrument.system import SystemSampler
    from traceml.instrument.worker import TxWorker
    from traceml.transport.publish.publisher import Publisher

    spent: dict[str, int] = {}
    calls: dict[str, int] = {}

    def timed(name: str, owner: Any, attr: str) -> None:
        original = getattr(owner, attr)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time_ns()
            try:
                return original(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0) + time.thread_time_ns() - t0
                calls[name] = calls.get(name, 0) + 1

        setattr(owner, attr, wrapper)

    parts = [
        ("RawSteps to StepRecords", TxWorker, "_take"),
        ("RunStore fold", RunStore, "add_steps"),
        ("publish steps (pack, send)", Publisher, "send_steps"),
        ("publisher service", Publisher, "service"),
        ("  of which rank and run files", Publisher, "_write_files"),
        ("system sample, heartbeat finding", TxWorker, "_sample"),
        ("  of which psutil", SystemSampler, "sample"),
        ("  of which heartbeat finding", session, "_primary_kind"),
        ("tick (all but the sample)", TxWorker, "_tick"),
    ]
    for name, owner, attr in parts:
        timed(name, owner, attr)
    traceml.init(mode="auto", summary=summary)
    collections = GcByThread()
    gc.callbacks.append(collections)
    t0 = time.monotonic()
    try:
        loop.block(steps, traced=True)
        time.sleep(PAUSE_S)
    finally:
        gc.callbacks.remove(collections)
    seconds = time.monotonic() - t0
    quiet_shutdown()
    print(
        f"tx thread CPU, {steps:,} traced steps (MLP width {loop.width}) in {seconds:.1f} s:"
        f"\n  {'':36s} {'µs a step':>9s} {'calls':>6s} {'µs a call':>10s}"
    )
    for name, _, _ in parts:
        ns, n = spent.get(name, 0), calls.get(name, 0)
        print(f"  {name:36s} {ns / steps / 1e3:9.2f} {n:6d} {ns / max(1, n) / 1e3:10.1f}")
    total = spent.get("tick (all but the sample)", 0) + spent.get(
        "system sample, heartbeat finding", 0
    )
    print(f"  {'in all':36s} {total / steps / 1e3:9.2f}")
    print("garbage collections during those steps (the thread that ran each pays it):")
    for thread, (n, ns) in sorted(collections.by_thread.items()):
        print(f"  {thread:36s} {n:5d} collections, {ns / steps / 1e3:6.2f} µs a step")


class GcByThread:
    """A gc.callbacks entry: collections and their wall time, by the thread that ran each."""

    def __init__(self) -> None:
        self.main = threading.get_ident()
        self.by_thread: dict[str, tuple[int, int]] = {}
        self._start: dict[int, int] = {}

    def __call__(self, phase: str, _info: dict[str, int]) -> None:
        me = threading.get_ident()
        if phase == "start":
            self._start[me] = time.perf_counter_ns()
            return
        name = "training thread" if me == self.main else "tx thread (and any other)"
        n, ns = self.by_thread.get(name, (0, 0))
        took = time.perf_counter_ns() - self._start.pop(me, time.perf_counter_ns())
        self.by_thread[name] = (n + 1, ns + took)


def run_block(
    loop: Loop, steps: int, traced: bool, floor: bool = False, asleep: Any = None
) -> tuple[list[float], float, float]:
    """Per-step wall µs of `steps` steps, the process CPU s up to the end of the pause, and the
    perf_counter() at which the first step began. `floor`: Loop.floor_block's steps; `asleep`:
    the session's TxWorker, held asleep through the block, then made to fold it."""
    cpu0 = time.process_time()
    if asleep is not None:
        with asleep._ticked:  # every tick takes it first: the tx thread waits here, asleep
            times = loop.block(steps, traced)
        asleep.flush(10.0)
    else:
        times = loop.floor_block(steps) if floor else loop.block(steps, traced)
    started = loop.started
    time.sleep(PAUSE_S)
    return times, time.process_time() - cpu0, started


def note_busy_spans() -> tuple[list[tuple[int, int]], Callable[[], None]]:
    """Every busy span the tx thread notes from now on (perf_counter_ns pairs, in order), and
    the call that stops noting them (BusySpans.add is itself again)."""
    from traceml.instrument.busy import BusySpans

    spans: list[tuple[int, int]] = []
    add = BusySpans.add

    def noted(self: BusySpans, start_ns: int, end_ns: int) -> None:
        spans.append((start_ns, end_ns))
        add(self, start_ns, end_ns)

    def stop() -> None:
        BusySpans.add = add  # type: ignore[method-assign]

    BusySpans.add = noted  # type: ignore[method-assign]
    return spans, stop


def split_held(
    blocks: list[tuple[list[float], float]], spans: list[tuple[int, int]]
) -> tuple[list[float], list[float]]:
    """The step times of `blocks` ((µs per step, start s) each) that overlapped no busy span of
    the tx thread, and those that did, by the overlap the tx thread itself computes for
    `held_ms` (BusySpans.overlaps): what the training thread's own wrappers cost against what
    waiting on the GIL behind the tx thread's work costs."""
    from traceml.instrument.busy import BusySpans
    from traceml.instrument.timer import RawStep

    busy = BusySpans(kept=max(1, len(spans)))
    for start_ns, end_ns in spans:
        busy.add(start_ns, end_ns)
    clear: list[float] = []
    held: list[float] = []
    for times, started in blocks:
        bounds = [round(us * 1e3) for us in itertools.accumulate(times, initial=started * 1e6)]
        raws = [
            RawStep(i, a, b, (), 0, -1, None, None)
            for i, (a, b) in enumerate(itertools.pairwise(bounds))
        ]
        overlapped = busy.overlaps(raws)
        for i, us in enumerate(times):
            (held if i in overlapped else clear).append(us)
    return clear, held


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--width", type=int, default=16, help="MLP width (16: ~0.4 ms a step here)")
    ap.add_argument("--blocks", type=int, default=8, help="blocks per arm")
    ap.add_argument("--steps", type=int, default=3000, help="steps per block")
    ap.add_argument(
        "--parts", action="store_true", help="C arms only: trace_step alone, then each patch alone"
    )
    ap.add_argument(
        "--split",
        action="store_true",
        help="bare, floor, C, and C and bare with the tx thread asleep",
    )
    ap.add_argument(
        "--tx", type=int, metavar="STEPS", help="only the tx thread's CPU per part, over STEPS"
    )
    a = ap.parse_args()
    if a.blocks < 2:
        ap.error("--blocks must be at least 2 (the noise compares two sets of bare blocks)")
    import torch

    torch.set_num_threads(1)
    loop = Loop(a.width, 32)
    tmp = Path(tempfile.mkdtemp(prefix="traceml-inloop-"))
    if a.tx:
        tx_parts(loop, a.tx, tmp / "final_summary.json")
        shutil.rmtree(tmp, ignore_errors=True)
        return
    spans, stop_noting = note_busy_spans()
    if a.parts and a.split:
        ap.error("--parts and --split are two different sets of arms: one at a time")
    setups = arms(tmp / "final_summary.json", a.parts, a.split)
    torch = setups.pop("_torch")
    session = setups.pop("_session")
    names = list(setups)
    rng = random.Random(0)
    order = [n for _ in range(a.blocks) for n in rng.sample(names, len(names))]
    walls: dict[str, list[list[float]]] = {n: [] for n in names}
    cpus: dict[str, list[float]] = {n: [] for n in names}
    began: dict[str, list[float]] = {n: [] for n in names}
    step = 0
    for name in names + order:  # one warm-up block of each arm first, not counted
        hooks, ctx, timer = setups[name]
        for other in setups.values():
            if other[0] is not None:
                other[0].remove()
        if hooks is not None:
            hooks.install_auto(torch, h2d=False)
            hooks.watch_model(loop.model)
            timer.step = step  # one ascending run of steps, as one timer would give
            timer.rest()  # the pause and the other arms' blocks are in no step
            # Every arm's steps go through `traceml.trace_step(model)`, as a user's do: the
            # session hands out this arm's context and reads this arm's timer.
            session.step_ctx, session.timer = ctx, timer
        times, cpu, started = run_block(
            loop,
            a.steps,
            traced=hooks is not None,
            floor=name == FLOOR,
            asleep=session.worker if name in (ASLEEP, BARE_ASLEEP) else None,
        )
        step = timer.step if timer is not None else step
        walls[name].append(times)
        cpus[name].append(cpu)
        began[name].append(started)
    for name in names:
        walls[name], cpus[name], began[name] = walls[name][1:], cpus[name][1:], began[name][1:]
    quiet_shutdown()
    stop_noting()
    shutil.rmtree(tmp, ignore_errors=True)

    def mean(name: str) -> float:
        return statistics.fmean(t for block in walls[name] for t in block)

    def p99(name: str) -> float:
        return pct([t for block in walls[name] for t in block], 0.99)

    def cpu(name: str) -> float:
        return sum(cpus[name]) / (len(cpus[name]) * a.steps) * 1e6

    bare_means = [statistics.fmean(t for b in walls["bare"][i::2] for t in b) for i in (0, 1)]
    bare_cpus = [
        sum(cpus["bare"][i::2]) / (len(cpus["bare"][i::2]) * a.steps) * 1e6 for i in (0, 1)
    ]
    noise_mean = abs(bare_means[0] - bare_means[1])
    noise_cpu = abs(bare_cpus[0] - bare_cpus[1])
    print(
        f"in one process, MLP width {a.width}: {a.blocks} blocks x {a.steps} steps per arm, "
        "shuffled; µs per step (bare absolute, others added; noise = bare vs bare)"
    )
    print(f"  {'':10s} {'mean step':>18s} {'p99 step':>16s} {'CPU, all threads':>20s}")
    b_mean, b_p99, b_cpu = mean("bare"), p99("bare"), cpu("bare")
    print(f"  {'bare':10s} {b_mean:18.1f} {b_p99:16.0f} {b_cpu:20.1f}")
    for name in names[1:]:
        print(
            f"  {name:10s} {mean(name) - b_mean:+10.1f} ({noise_mean:4.1f})"
            f" {(p99(name) / b_p99 - 1) * 100:+10.0f} %    "
            f" {cpu(name) - b_cpu:+12.1f} ({noise_cpu:4.1f})"
        )
    if "C" in walls:
        clear, held = split_held(list(zip(walls["C"], began["C"], strict=True)), spans)
        bare = [t for block in walls["bare"] for t in block]
        print(
            "\nthe C arm's steps, apart by whether they overlapped the tx thread's work (µs;"
            " held: the step waited on the GIL behind it, or ran beside it in C):"
        )
        print(f"  {'':18s} {'steps':>7s} {'mean':>8s} {'p99':>7s} {'p99.9':>7s} {'max':>7s}")
        for label, values in (("bare", bare), ("C, not held", clear), ("C, held", held)):
            if values:
                print(
                    f"  {label:18s} {len(values):7d} {statistics.fmean(values):8.1f}"
                    f" {pct(values, 0.99):7.0f} {pct(values, 0.999):7.0f} {max(values):7.0f}"
                )
        share = len(held) / max(1, len(held) + len(clear))
        extra = statistics.fmean(held) - statistics.fmean(clear) if held and clear else 0.0
        print(f"  held steps add {share * extra:.1f} µs to the C arm's mean ({share:.2%} of them)")


if __name__ == "__main__":
    main()

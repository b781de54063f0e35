"""Instructions TraceML adds to a step, counted by valgrind: exact where the clock is noisy.

Run: .venv/bin/python benchmarks/instructions.py [--short N] [--long N] [--top K]

overhead.py, layers.py and inloop.py time steps, and a 2-core host moves a 0.4 ms step by 2-5 µs
from one block or process to the next: a change that saves 0.5 µs cannot be seen there. This
benchmark counts instead. Each arm runs as its own process under valgrind's callgrind (one
file per thread) at two run lengths, and the difference of the two counts, per step, is what
a step executes, start-up and exit cancelled:

  bare        the loop without TraceML (no import)
  init        traceml.init(mode="auto") and no trace_step: every patch passes through
  trace_step  init and `traceml.trace_step(model)` around every step (the default C path)
  process     trace_step with TRACEML_BEATS=process (--arms process): the C timer writes each
              step into the ring, and the beats process (not followed by valgrind, so running
              natively) does the rest; the other threads' column is then the training
              process's alone

Columns: instructions per step on the training thread, and on every other thread of the
process together (TraceML's tx thread, zmq's I/O threads, torch's), each as added to bare.
`--top K` lists the K functions whose own instructions per step on the training thread grew
most from bare to trace_step (callgrind_annotate's self cost).

Instructions are not time: a cache miss costs more than an instruction, and the GIL's
hand-offs between the two threads are not in it. What the count gives is a figure that does
not move with the host's load, so a change of a few hundred instructions a step can be read
directly. For scale, the bare step's count is printed beside its time natively.

So that the count is the same from one run to the next, the child (under valgrind a step runs
about 50 times slower):
- lets the tx thread sleep through the loop and fold, pack and publish every step at the exit
  (still inside the slope: it is per step); its once-a-tick and once-a-second work (publisher
  service, system samples, heartbeat finding: about 0.8 µs a step natively, inloop.py --tx)
  is left out, and the threads never contend for the GIL, which valgrind runs in turns;
- first runs and folds POOL_FILL traced steps, so that every counted step takes its RawStep
  from the C timer's pool, as natively where each fold refills it (hence --long <= 2,048);
- collects garbage after the warm-up, and prints the collections the counted steps caused;
- runs with PYTHONHASHSEED=0, so that dict lookups probe the same slots in every run;
- keeps 256 step records (4,096 by default) so both runs' summaries at exit cost the same;
- turns the RSS read (every 10 ms natively, every step at valgrind's pace) into a constant -1.
A second line per arm leaves out the instructions that depend on how valgrind schedules the
threads rather than on the code they run (SCHEDULING): read that one to compare two trees. Even
so, the training thread's count of the same code still moved by about 2,400 a step between two
runs (2026-12-06): a smaller difference between two trees is not resolved.
`--cache` runs bare and trace_step under cachegrind instead, which simulates the host's caches,
and prints the cache misses a step adds (all threads together: cachegrind does not split
them): instructions are not the whole cost of code that runs between torch's kernels, whose
data and code have evicted TraceML's from the first-level caches since the last step. With
`--top K` it also lists the K functions whose misses a step grew most, and the events a step of
TraceML's own C and of the clock it reads, function by function (a miss in torch's or the
allocator's code that grew is most often the two processes' different layouts, not work done).
Needs valgrind (`apt install valgrind`); takes 5-10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ARMS = ("bare", "init", "trace_step", "process")
DEFAULT_ARMS = ("init", "trace_step")
WARMUP = 200
HISTORY = 256
"""Step records the child keeps (4,096 by default): fewer than --short's, see child()."""
POOL_FILL = 2048
"""Traced steps run and folded before the counted ones, so the C timer's pool holds a RawStep
for each counted step (as natively, where every fold refills it): --long may not exceed it."""


def child(arm: str, steps: int, width: int) -> None:
    """The loop, as run under valgrind; prints the mean step time (µs) on stderr."""
    import itertools

    import torch
    from _common import Loop, quiet_shutdown

    torch.set_num_threads(1)
    loop = Loop(width, 32)
    out = tempfile.mkdtemp(prefix="traceml-insn-child-")
    # The run's files go with the summary, removed at the end, not into the user's runtime dir.
    os.environ["TRACEML_RUNTIME_DIR"] = out
    if arm != "bare":
        from dataclasses import replace

        import traceml
        from traceml import api
        from traceml.instrument import memory, worker

        # No tick during the loop: the tx thread folds, packs and publishes every step at the
        # exit instead, so the two threads never contend for the GIL under valgrind (which runs
        # them in turns and would count its hand-offs), and its per-step work is still counted.
        worker.TICK_S = worker.QUIET_TICK_S = 1e9
        # A C callable: the timer's RSS read costs one call and returns "unreadable".
        memory.HostRss.pages = staticmethod(itertools.repeat(-1).__next__)  # type: ignore[assignment]
        # Both runs fill the history ring, so the summary at exit costs both the same.
        from traceml.config import settings_from_env

        api.settings_from_env = lambda *a, **k: replace(  # type: ignore[attr-defined]
            settings_from_env(*a, **k), history_steps=HISTORY
        )
        if arm == "process":
            # The beats process is another exec'd python: valgrind does not follow it (it runs
            # natively, at its own ticks), and counts the training process alone.
            os.environ["TRACEML_BEATS"] = "process"
        traceml.init(mode="auto", summary=Path(out) / "final_summary.json")
    traced = arm in ("trace_step", "process")
    loop.block(WARMUP, traced=traced)
    if arm == "trace_step":
        # Natively each fold hands its RawSteps back to the timer, which reuses them; this
        # child's tx thread sleeps through the loop, so without these the training thread would
        # allocate a RawStep every step and its allocator's slow paths would be counted as
        # TraceML's (thousands of instructions a step, moving with the heap's layout).
        loop.block(POOL_FILL, traced=True)
        from traceml import api as _api

        assert _api._session is not None and _api._session.worker is not None
        if not _api._session.worker.flush(600.0):
            raise SystemExit("the tx thread did not fold the pool-filling steps")
    # Every run starts the counted steps with empty young generations: a full collection
    # (tens of millions of instructions in a torch process) in one run and not the other would
    # otherwise swing the slope by more than TraceML's own work.
    gc.collect()
    before = [g["collections"] for g in gc.get_stats()]
    t0 = time.perf_counter()
    loop.block(steps, traced=traced)
    print(f"{(time.perf_counter() - t0) / steps * 1e6:.1f}", file=sys.stderr)
    after = [g["collections"] for g in gc.get_stats()]
    print("gc " + " ".join(str(b - a) for a, b in zip(before, after, strict=True)), file=sys.stderr)
    if arm != "bare":
        quiet_shutdown()
    shutil.rmtree(out, ignore_errors=True)


def thread_files(prefix: Path) -> dict[int, tuple[int, Path]]:
    """(instructions, file) by thread number (1 = main) from callgrind's per-thread files."""
    out: dict[int, tuple[int, Path]] = {}
    for f in prefix.parent.glob(prefix.name + ".*-[0-9][0-9]"):
        text = f.read_text(errors="replace")
        thread = re.search(r"^thread: (\d+)", text, re.M)
        total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
        if thread and total:
            out[int(thread.group(1))] = (int(total.group(1)), f)
    return out


SCHEDULING = re.compile(r"pthread_cond_|blas_thread_server|sched_yield|futex")
"""Functions whose instructions depend on how valgrind schedules the threads, not on the code
run: the condition variable the GIL signals at each release (hundreds of instructions more
whenever another thread waits on it) and OpenBLAS's worker thread spinning while it waits for
work. Their count moves by thousands a step from one run to the next (0 to 8,000 on the training
thread), so a second figure leaves them out."""


@dataclass
class Run:
    threads: dict[int, tuple[int, Path]]
    """(instructions, callgrind file) by thread number, 1 the main (training) thread."""
    gc: str
    """Collections of generations 0, 1 and 2 during the counted steps."""
    scheduling: dict[int, int]
    """Instructions of SCHEDULING's functions, by thread number."""


def run_arm(arm: str, steps: int, width: int, tmp: Path) -> Run:
    """One child under callgrind: its threads' instructions and files."""
    prefix = tmp / f"{arm}.{steps}"
    tool = ["--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={prefix}.%p"]
    stderr = under_valgrind(tool, arm, steps, width)
    collections = re.findall(r"^gc ([\d ]+)$", stderr, re.M)
    threads = thread_files(prefix)
    scheduling = {
        t: sum(n for name, n in self_costs(f).items() if SCHEDULING.search(name))
        for t, (_, f) in threads.items()
    }
    return Run(threads, collections[-1] if collections else "?", scheduling)


def under_valgrind(tool: list[str], arm: str, steps: int, width: int) -> str:
    """Run the child for `arm` under valgrind with the `tool` options; its stderr."""
    child = ["--child", arm, str(steps), "--width", str(width)]
    cmd = ["valgrind", *tool, sys.executable, __file__, *child]
    # One string hash for every child: dict lookups' probe lengths, and so their instructions,
    # depend on it (thousands a step between two seeds).
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).parent, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{arm} ({steps} steps) failed under valgrind:\n{done.stderr[-2000:]}")
    return done.stderr


def self_costs(path: Path) -> dict[str, int]:
    """callgrind_annotate's self cost per function of one thread's file."""
    text = subprocess.run(
        ["callgrind_annotate", "--threshold=100", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    costs: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(?!=>)(\S.*)", line)
        if m and "PROGRAM TOTALS" not in line and "events annotated" not in line:
            # One name per function: callgrind marks recursion depth with 'N.
            name = re.sub(r"\s*\[[^\]]*\]$", "", m.group(2)).split("/")[-1]
            name = re.sub(r"'\d+$", "", name)
            costs[name] = costs.get(name, 0) + int(m.group(1).replace(",", ""))
    return costs


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--short", type=int, default=400, help="steps of the short run")
    ap.add_argument("--long", type=int, default=1400, help="steps of the long run")
    ap.add_argument("--width", type=int, default=16, help="MLP width (16: ~0.4 ms a step here)")
    ap.add_argument(
        "--arms",
        nargs="+",
        choices=ARMS[1:],
        default=DEFAULT_ARMS,
        help="beside bare (process: trace_step with TRACEML_BEATS=process)",
    )
    ap.add_argument(
        "--top", type=int, default=0, help="list the K functions that grew most (--cache: misses)"
    )
    ap.add_argument("--cache", action="store_true", help="cache misses (cachegrind) instead")
    ap.add_argument("--child", nargs=2, metavar=("ARM", "STEPS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child[0], int(a.child[1]), a.width)
        return
    if shutil.which("valgrind") is None:
        print(
            "valgrind is not installed: apt install valgrind, then run this again", file=sys.stderr
        )
        raise SystemExit(2)
    if a.long <= a.short or a.short <= HISTORY or a.long > POOL_FILL:
        ap.error(
            f"--short must be over {HISTORY} steps, --long more than --short and at most"
            f" {POOL_FILL}"
        )
    if a.cache:
        cache_misses(a.short, a.long, a.width, a.top)
        return
    arms = ("bare", *(arm for arm in ARMS[1:] if arm in a.arms))
    runs = [(arm, n) for arm in arms for n in (a.short, a.long)]
    native = native_step_us(a.width)
    with tempfile.TemporaryDirectory(prefix="traceml-insn-") as tmp:
        workers = max(1, min(len(runs), os.cpu_count() or 1))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            counts = pool.map(lambda r: run_arm(*r, a.width, Path(tmp)), runs)
            got = dict(zip(runs, counts, strict=True))
        span = a.long - a.short

        def slope(arm: str, main_thread: bool, scheduled: bool = True) -> float:
            def count(n: int) -> int:
                run = got[(arm, n)]
                return sum(
                    v - (0 if scheduled else run.scheduling.get(t, 0))
                    for t, (v, _) in run.threads.items()
                    if (t == 1) == main_thread
                )

            return (count(a.long) - count(a.short)) / span

        b_main, b_other = slope("bare", True), slope("bare", False)
        print(
            f"instructions per step (callgrind, {a.long:,} less {a.short:,} steps, MLP width "
            f"{a.width}; the bare step takes {native:.0f} µs natively)"
        )
        print(f"  {'':12s} {'training thread':>24s} {'other threads':>14s}   gc 0/1/2, long run")
        gcs = {arm: got[(arm, a.long)].gc.replace(" ", "/") for arm in arms}
        print(f"  {'bare':12s} {b_main:24,.0f} {b_other:14,.0f}   {gcs['bare']}")
        for arm in arms[1:]:
            m, o = slope(arm, True), slope(arm, False)
            share = (m / b_main - 1) * 100
            print(
                f"  {arm:12s} {m - b_main:+15,.0f} ({share:+4.1f} %) {o - b_other:+14,.0f}"
                f"   {gcs[arm]}"
            )
        print("  less the threads' scheduling (the GIL's condition variable, BLAS's spinning):")
        for arm in arms[1:]:
            added_main = slope(arm, True, False) - slope("bare", True, False)
            added_other = slope(arm, False, False) - slope("bare", False, False)
            print(f"  {arm:12s} {added_main:+15,.0f} {'':8s} {added_other:+14,.0f}")
        for arm in arms[1:] if a.top else ():
            if arm != "init":
                top(got, a.short, a.long, a.top, arm)


def top(got: dict[tuple[str, int], Run], short: int, long: int, k: int, traced: str) -> None:
    """The k functions whose own instructions per step grew most, from bare to the `traced`
    arm, on the training thread and on the others together."""
    for main_thread, title in ((True, "training thread"), (False, "other threads")):
        cost = {
            (arm, n): added(
                self_costs(f)
                for t, (_, f) in got[(arm, n)].threads.items()
                if (t == 1) == main_thread
            )
            for arm in ("bare", traced)
            for n in (short, long)
        }
        grown = {
            name: sum(
                sign * (cost[(arm, long)].get(name, 0) - cost[(arm, short)].get(name, 0))
                for arm, sign in ((traced, 1), ("bare", -1))
            )
            / (long - short)
            for name in {n for c in cost.values() for n in c}
        }
        print(f"\n{title}, {traced} against bare: the {k} functions whose own instructions")
        print("per step grew most (callgrind_annotate's self cost)")
        for name in sorted(grown, key=grown.__getitem__, reverse=True)[:k]:
            print(f"  {grown[name]:+9,.0f}  {name[:100]}")


def added(costs: Iterable[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in costs:
        for name, n in c.items():
            out[name] = out.get(name, 0) + n
    return out


CACHE_EVENTS = ("Ir", "I1mr", "ILmr", "Dr", "D1mr", "DLmr", "Dw", "D1mw", "DLmw")


def cache_misses(short: int, long: int, width: int, k: int = 0) -> None:
    """bare and trace_step under cachegrind at both lengths: events per step, and added; with
    `k`, the k functions whose misses grew most and TraceML's own C's events per step."""
    runs = [(arm, n) for arm in ("bare", "trace_step") for n in (short, long)]
    with tempfile.TemporaryDirectory(prefix="traceml-cache-") as tmp:

        def one(run: tuple[str, int]) -> tuple[list[int], dict[tuple[str, str], list[int]]]:
            arm, n = run
            out = Path(tmp) / f"{arm}.{n}"
            tool = ["--tool=cachegrind", "--cache-sim=yes", f"--cachegrind-out-file={out}"]
            under_valgrind(tool, arm, n, width)
            text = out.read_text(errors="replace")
            return totals(text, out), function_events(text, out) if k else {}

        workers = max(1, min(len(runs), os.cpu_count() or 1))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            done = dict(zip(runs, pool.map(one, runs), strict=True))
    got = {run: events for run, (events, _) in done.items()}
    span = long - short
    per = {
        arm: [(b - a) / span for a, b in zip(got[(arm, short)], got[(arm, long)], strict=True)]
        for arm in ("bare", "trace_step")
    }
    print(f"cache events per step (cachegrind, {long:,} less {short:,} steps, all threads)")
    print(f"  {'':11}" + "".join(f"{e:>11}" for e in CACHE_EVENTS))
    for arm, values in per.items():
        print(f"  {arm:11}" + "".join(f"{v:11,.0f}" for v in values))
    added = [t - b for b, t in zip(per["bare"], per["trace_step"], strict=True)]
    print(f"  {'added':11}" + "".join(f"{v:+11,.0f}" for v in added))
    print("  (I1/D1: first-level misses, IL/DL: last-level misses, which go to memory)")
    if k:
        by_function = {run: functions for run, (_, functions) in done.items()}
        cache_top(by_function, short, long, k)


OWN_CODE = ("_native.c", "clock_gettime.c", "pytime.c")
"""Source files of the code a boundary runs for TraceML alone: the C timer and its wrappers, and
the clock they read (libc's, and CPython's wrapper where it is used)."""


def cache_top(
    by_function: dict[tuple[str, int], dict[tuple[str, str], list[int]]],
    short: int,
    long: int,
    k: int,
) -> None:
    """The k functions whose first-level misses per step grew most from bare to trace_step, and
    the events per step of TraceML's own C (OWN_CODE) by function."""

    def per_step(arm: str) -> dict[tuple[str, str], list[float]]:
        a, b = by_function[(arm, short)], by_function[(arm, long)]
        zero = [0] * len(CACHE_EVENTS)
        return {
            f: [
                (y - x) / (long - short)
                for x, y in zip(a.get(f, zero), b.get(f, zero), strict=True)
            ]
            for f in set(a) | set(b)
        }

    bare, traced = per_step("bare"), per_step("trace_step")
    zero = [0.0] * len(CACHE_EVENTS)
    for event in ("I1mr", "D1mr"):
        i = CACHE_EVENTS.index(event)
        grown = {f: traced.get(f, zero)[i] - bare.get(f, zero)[i] for f in set(bare) | set(traced)}
        print(
            f"\n{event}, trace_step against bare: the {k} functions whose misses a step grew most"
        )
        for f in sorted(grown, key=grown.__getitem__, reverse=True)[:k]:
            print(f"  {grown[f]:+8.1f}  {f[1][:70]}  ({f[0]})")
    own = sorted(f for f in traced if f[0] in OWN_CODE and traced[f][0] >= 1)
    print("\nTraceML's own C and the clock it reads, per step (trace_step):")
    print(f"  {'':40}" + "".join(f"{e:>8}" for e in ("Ir", "I1mr", "D1mr")))
    for f in own:
        row = traced[f]
        print(
            f"  {f[1][:40]:40}"
            + "".join(f"{row[CACHE_EVENTS.index(e)]:8.1f}" for e in ("Ir", "I1mr", "D1mr"))
        )
    sums = [sum(traced[f][CACHE_EVENTS.index(e)] for f in own) for e in ("Ir", "I1mr", "D1mr")]
    print(f"  {'in all':40}" + "".join(f"{v:8.1f}" for v in sums))


def function_events(text: str, path: Path) -> dict[tuple[str, str], list[int]]:
    """A cachegrind file's (`text`, read from `path`) events by (source file, function), in
    CACHE_EVENTS' order; an event the file does not count is 0."""
    names = event_names(text, path)
    order = [names.index(e) if e in names else len(names) for e in CACHE_EVENTS]
    out: dict[tuple[str, str], list[int]] = {}
    where = ("?", "?")
    for line in text.splitlines():
        if line.startswith("fl="):
            where = (line[3:].rsplit("/", 1)[-1], where[1])
        elif line.startswith("fn="):
            where = (where[0], line[3:])
        elif line[:1].isdigit():
            values = line.split()[1:]
            row = out.setdefault(where, [0] * len(CACHE_EVENTS))
            for j, at in enumerate(order):
                if at < len(values):
                    row[j] += int(values[at])
    return out


def event_names(text: str, path: Path) -> list[str]:
    """The events a cachegrind file (`text`, read from `path`) counts, in its columns' order."""
    names = re.search(r"^events: (.+)$", text, re.M)
    if names is None:
        raise SystemExit(f"no events line in {path}")
    return names.group(1).split()


def totals(text: str, path: Path) -> list[int]:
    """The summary line of a cachegrind file (`text`, read from `path`), in CACHE_EVENTS' order."""
    names = event_names(text, path)
    values = re.search(r"^summary: (.+)$", text, re.M)
    if values is None:
        raise SystemExit(f"no totals in {path}")
    found = dict(zip(names, map(int, values.group(1).split()), strict=True))
    return [found.get(e, 0) for e in CACHE_EVENTS]


def native_step_us(width: int) -> float:
    """The bare loop's mean step natively (µs), for scale."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", "bare", "2000", "--width", str(width)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parent,
    )
    return float(re.findall(r"^([\d.]+)$", done.stderr, re.M)[-1])


if __name__ == "__main__":
    main()

"""What a second thread costs a single-threaded training loop, before it does anything at all.

Run: .venv/bin/python benchmarks/threaded.py [--width W] [--blocks N] [--steps N]

A process that has only ever run one thread has glibc's `__libc_single_threaded` set, and glibc
(2.36 here) then takes paths without locks or atomic instructions, malloc and free among them
(torch's own libraries do not read the flag: their reference counts are atomic either way). The
first thread a process creates clears it for good, whatever that thread does and even after it
has ended. TraceML's tx thread and ZeroMQ's I/O thread clear it, as would any other tool's thread;
so do a DataLoader with workers, more than one intra-op thread, CUDA and any process group.
So does importing torch without OMP_NUM_THREADS=1 in the environment (its OpenMP pool starts a
thread at once, whatever `torch.set_num_threads` says later). The overhead benchmarks' loop has
none of these (OMP_NUM_THREADS=1, an in-memory DataLoader): there, part of what TraceML adds is
the loop leaving those paths.

This measures that part alone, in one process that never starts a thread: the benchmarks' loop
(the MLP and DataLoader of overhead.py, untraced, TraceML never imported) runs in blocks in
the order ABBA, with the flag cleared in the B blocks and set again in the A blocks, which is
safe only because no other thread exists (checked before every block). Figures are µs added
to the mean step and to the p99 by the cleared flag; `noise` is the difference between the
means of two sets of A blocks (every other one), what the same arm moves by within the run.
Then the same for one torch op in a tight loop (`torch.add` into a new tensor: its
allocation), where the loop's other costs are absent.
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"  # before torch is imported: its OpenMP pool starts a thread

import argparse
import ctypes
import statistics
import time

from _common import Loop, pct
from overhead import BATCH, calibrate

WARMUP_STEPS = 2000
OP_CALLS = 200_000
"""Calls of the tight-loop op per measurement."""


def single_threaded_flag() -> ctypes.c_char:
    """glibc's `__libc_single_threaded`, writable; SystemExit where it is absent or cleared."""
    try:
        flag = ctypes.c_char.in_dll(ctypes.CDLL(None), "__libc_single_threaded")
    except ValueError:
        raise SystemExit(
            "this C library has no __libc_single_threaded (glibc 2.32 or later)"
        ) from None
    if flag.value != b"\x01":
        raise SystemExit(
            "this process is already multi-threaded (a library imported here started a thread):"
            " nothing to measure"
        )
    return flag


def set_flag(flag: ctypes.c_char, single: bool) -> None:
    """Set the flag only while this process has one thread: with two, the paths without atomics
    would race."""
    if single and len(os.listdir("/proc/self/task")) != 1:
        raise SystemExit("a thread appeared during the run: the measurement stops here")
    flag.value = b"\x01" if single else b"\x00"


def single_in(i: int) -> bool:
    """Whether measurement `i` runs single-threaded: the order ABBA, so that a drift over the run
    falls on both halves alike."""
    return i % 4 in (0, 3)


def loop_blocks(
    flag: ctypes.c_char, width: int, blocks: int, steps: int
) -> tuple[list[float], list[float], list[float], list[float]]:
    """(A blocks' means, B blocks' means, A steps, B steps), A single-threaded, B cleared."""
    loop = Loop(width, BATCH)
    loop.block(WARMUP_STEPS)
    means: dict[bool, list[float]] = {True: [], False: []}
    steps_of: dict[bool, list[float]] = {True: [], False: []}
    for b in range(blocks):
        single = single_in(b)
        set_flag(flag, single)
        times = loop.block(steps)
        means[single].append(statistics.fmean(times))
        steps_of[single] += times
    set_flag(flag, True)
    return means[True], means[False], steps_of[True], steps_of[False]


def op_ns(flag: ctypes.c_char, rounds: int) -> tuple[float, float]:
    """ns a `torch.add` call (a new 64-float tensor each), single-threaded and cleared: the
    median over `rounds` alternating measurements of OP_CALLS calls."""
    import torch

    a, b = torch.ones(64), torch.ones(64)
    add = torch.add
    got: dict[bool, list[float]] = {True: [], False: []}
    for r in range(2 * rounds):
        single = single_in(r)
        set_flag(flag, single)
        t0 = time.perf_counter_ns()
        for _ in range(OP_CALLS):
            add(a, b)
        got[single].append((time.perf_counter_ns() - t0) / OP_CALLS)
    set_flag(flag, True)
    return statistics.median(got[True]), statistics.median(got[False])


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--width", type=int, help="MLP width (default: a ~0.4 ms step here)")
    ap.add_argument("--blocks", type=int, default=24, help="blocks, a multiple of 4 (ABBA)")
    ap.add_argument("--steps", type=int, default=6000, help="steps per block")
    a = ap.parse_args()
    if a.blocks < 8 or a.blocks % 4:
        ap.error("--blocks must be a multiple of 4, at least 8")
    import torch

    torch.set_num_threads(1)
    flag = single_threaded_flag()
    set_flag(flag, True)  # checks that torch's import started no thread
    width = a.width or calibrate(0.4)
    single, cleared, single_steps, cleared_steps = loop_blocks(flag, width, a.blocks, a.steps)
    bare = statistics.fmean(single)
    noise = statistics.fmean(single[0::2]) - statistics.fmean(single[1::2])
    added = statistics.fmean(cleared) - bare
    p99 = 100 * (pct(cleared_steps, 0.99) / pct(single_steps, 0.99) - 1)
    print(
        f"MLP width {width}, {a.blocks} blocks of {a.steps} steps (ABBA), single-threaded"
        f" {bare:.1f} µs a step"
    )
    print(
        f"  __libc_single_threaded cleared: mean {added:+.2f} µs a step (noise {noise:+.2f}),"
        f" p99 {p99:+.1f} %"
    )
    one, many = op_ns(flag, 5)
    print(
        f"  one torch.add into a new tensor, tight loop: {one:.0f} ns single-threaded,"
        f" {many:.0f} ns cleared ({many - one:+.0f} ns)"
    )


if __name__ == "__main__":
    main()

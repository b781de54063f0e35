"""The training script every overhead run executes: the same loop bare, traced, or under the peer.

Run by benchmarks/overhead.py, layers.py and distributed.py, never by hand. Usage:
    python _workload.py MODE STEPS WIDTH BATCH OUT
MODE is one of bare, threaded, floor, traceml, traceml-early, traceml-asleep, traceml-inline,
traceml-threadless, traceml-process, traceml-tb, init, init-unpatched, peer.
`bare` never imports traceml and never starts a thread: its process stays single-threaded;
`threaded` is `bare` in a process that has run one thread (started and ended before the loop),
as every process that has started any thread is for good, and as every job with DataLoader
workers, intra-op threads, CUDA or a process group is (benchmarks/threaded.py says what that
changes); `floor` is `bare` with what the cheapest timing of the same phases costs and no
more: ten clock reads a step, inline where TraceML's boundaries are (the batch's wait, the step's
start and end, forward, backward and the optimizer's step on each side), and one append of them
to a bounded deque, which nothing reads (one process only: no torchrun; its loop is the bare
one's, copied, so that neither pays a branch for the other); `traceml` calls
`traceml.init(mode="auto")` and `trace_step` (under `traceml run`, init was already done by the
launcher's bootstrap and this call is ignored);
`traceml-early` is `traceml` with init before torch is imported (as under `traceml run`);
`traceml-asleep` does the same with the tx thread asleep through the loop (no tick: it converts,
folds and publishes every step at the exit, which is not timed);
`traceml-inline` is `traceml` with the due beats run on the training thread at its steps' ends
(TRACEML_INLINE=1), the tx thread beating only while no step ends;
`traceml-threadless` is `traceml` with no thread of TraceML's in the process (no tx thread, no
ZeroMQ socket): its steps fall out of the bounded queue unread and no summary is written. It is
what the training process would pay were the beats done by another process (a prototype's
floor, docs/performance.md "The training process with no thread of TraceML's");
`traceml-process` is `traceml` with its beats in a process of their own (TRACEML_BEATS=process):
the C timer writes the steps into a ring that the beats process reads, folds and publishes, and
that process writes the summary; the training process keeps no thread of TraceML's;
`traceml-tb` adds `traceml.integrations.live` logging into a TensorBoard writer (event files in
OUT.tb) every second, as a user who logs TraceML's live figures does;
`init` calls init and never trace_step; `init-unpatched` also removes init's patches;
`peer` does the same with `traceml_ai` 0.5.0. Under torchrun (WORLD_SIZE > 1) the model is wrapped
in DDP over gloo. Each rank writes its per-step wall times (µs, end of one step to end of the next,
as TraceML cuts them) to OUT[.rank] as raw doubles, the loop's start (perf_counter, one clock for
every process of the host) to OUT[.rank].t0, its own CPU seconds (all threads, up to the end of
the loop) and its pid to OUT[.rank].cpu, and each thread's CPU seconds and wake-ups a second over
the loop alone, by thread name, to OUT[.rank].threads (JSON).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import threading
import time
from array import array

from _common import Loop


class Stop(Exception):
    """SIGUSR1: the loop ends here and the steps so far are written."""


def _stop(_signum: int, _frame: object) -> None:
    raise Stop


def main(argv: list[str]) -> None:
    mode, steps, width, batch, out = argv[0], int(argv[1]), int(argv[2]), int(argv[3]), argv[4]
    early = mode == "traceml-early"
    if early:  # init before torch is imported, as traceml run's bootstrap does
        import traceml

        traceml.init(mode="auto")
        mode = "traceml"
    import torch

    torch.set_num_threads(1)
    if mode == "threaded":
        one = threading.Thread(target=lambda: None)
        one.start()
        one.join()
        mode = "bare"
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        out = f"{out}.{dist.get_rank()}"
    tm = None
    if mode == "traceml-inline":
        os.environ["TRACEML_INLINE"] = "1"
        mode = "traceml"
    if mode == "traceml-process":
        os.environ["TRACEML_BEATS"] = "process"
        mode = "traceml"
    if mode == "traceml-threadless":
        # No thread of TraceML's: no tx thread, no ZeroMQ socket (whose I/O thread would start).
        os.environ["TRACEML_PUBLISH"] = "0"
        from traceml.instrument import worker

        worker.TxWorker.start = lambda self: None  # type: ignore[method-assign]
        mode = "traceml"
    if mode in ("traceml", "traceml-asleep", "traceml-tb"):
        import traceml as tm

        if mode == "traceml-asleep":
            from traceml.instrument import worker

            worker.TICK_S = worker.QUIET_TICK_S = 1e9
    elif mode == "peer":
        import traceml_ai as tm  # type: ignore[import-not-found, no-redef]
    if tm is not None and not early:
        tm.init(mode="auto")
    if mode == "traceml-tb":
        from torch.utils.tensorboard import SummaryWriter

        from traceml.integrations import live

        live(SummaryWriter(f"{out}.tb"), every_s=1.0)
    if mode in ("init", "init-unpatched"):
        import traceml
        from traceml import api

        traceml.init(mode="auto")
        session = api.current_session()
        if mode == "init-unpatched" and session is not None:
            session.hooks.remove()
    loop = Loop(width, batch, ddp=world > 1)
    if mode == "floor":
        _floor(loop, steps, out)
        return
    times = array("d", bytes(8 * steps))
    it = iter(loop.loader)
    model, step = loop.model, loop.step
    threads0 = _threads()
    t_prev = time.perf_counter()
    t0 = t_prev
    i = 0
    signal.signal(signal.SIGUSR1, _stop)  # view_cost.py ends the loop when it has measured
    try:
        while i < steps:
            try:
                x, y = next(it)
            except StopIteration:
                it = iter(loop.loader)
                continue
            if tm is not None:
                with tm.trace_step(model):
                    step(x, y)
            else:
                step(x, y)
            now = time.perf_counter()
            times[i] = (now - t_prev) * 1e6
            t_prev = now
            i += 1
    except Stop:
        del times[i:]
    _write(out, times, t0, threads0)
    if world > 1:
        import gc

        import torch.distributed as dist

        dist.barrier()
        # DDP's objects hold the process group in reference cycles: collected first, gloo's
        # threads are joined at destroy_process_group, not at the interpreter's exit, where one
        # freeing a finished collective can abort the rank (see README, "Distributed runs").
        del loop, model, step, it
        gc.collect()
        dist.destroy_process_group()


def _floor(loop: Loop, steps: int, out: str) -> None:
    """The bare loop with the floor of timing it (the module's docstring; Loop.floor_step)."""
    times = array("d", bytes(8 * steps))
    it = iter(loop.loader)
    clock = time.perf_counter_ns
    threads0 = _threads()
    t_prev = time.perf_counter()
    t0 = t_prev
    i = 0
    signal.signal(signal.SIGUSR1, _stop)
    try:
        while i < steps:
            w0 = clock()
            try:
                x, y = next(it)
            except StopIteration:
                it = iter(loop.loader)
                continue
            loop.floor_step(x, y, w0, clock())
            now = time.perf_counter()
            times[i] = (now - t_prev) * 1e6
            t_prev = now
            i += 1
    except Stop:
        del times[i:]
    _write(out, times, t0, threads0)


def _write(out: str, times: array[float], t0: float, threads0: dict[int, tuple[int, int]]) -> None:
    """The loop's step times, start, CPU and threads' CPU, as the module's docstring says."""
    with open(out, "wb") as f:
        times.tofile(f)
    with open(f"{out}.t0", "w") as f:  # the loop's start on the host's monotonic clock
        f.write(repr(t0))
    # This process's own CPU (every thread of it) and pid, read here: a launcher may run the
    # script in a process whose command line does not name it, so the benchmark does not guess
    # from ps which process trained.
    threads = _threads_since(threads0, time.perf_counter() - t0)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open(f"{out}.cpu", "w") as f:
        f.write(f"{usage.ru_utime + usage.ru_stime!r} {os.getpid()}")
    with open(f"{out}.threads", "w") as f:
        json.dump(threads, f)


def _threads() -> dict[int, tuple[int, int]]:
    """(ns on a CPU, times put on one) of each thread of this process, by its native id: the
    kernel's schedstat, exact where the ticks of /proc's stat are 10 ms."""
    out: dict[int, tuple[int, int]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ran, _, slices = f.read().split()
        except (OSError, ValueError):
            continue  # ended meanwhile, or no schedstat on this kernel
        out[int(tid)] = (int(ran), int(slices))
    return out


def _threads_since(before: dict[int, tuple[int, int]], seconds: float) -> dict[str, list[float]]:
    """CPU seconds and wake-ups a second of each thread over the loop, by thread name: this
    thread is "training", threads started outside Python (ZeroMQ's, torch's) "native"."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    names[threading.get_native_id()] = "training"
    out: dict[str, list[float]] = {}
    for tid, (ran, slices) in _threads().items():
        ran0, slices0 = before.get(tid, (0, 0))
        row = out.setdefault(names.get(tid, "native"), [0.0, 0.0])
        row[0] += (ran - ran0) / 1e9
        row[1] += (slices - slices0) / seconds
    return out


if __name__ == "__main__":
    main(sys.argv[1:])

"""Live transport benchmark: publishing cost, attach latency, subscriber ingest rate.

Run: `.venv/bin/python benchmarks/transport.py [--steps N] [--snapshot N]`. Prints, side by
side in one run: publishing cost per step (us) with no viewer, one viewer and one stalled viewer;
attach latency to a full snapshot of 100,000 steps (target < 1 s); and the records per second
one subscriber ingests (target >= 6,400/s). Needs no torch and no GPU.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

import zmq

from traceml.config import Settings
from traceml.records import RankEnd, RankInfo, StepRecord
from traceml.transport.publish.publisher import Publisher
from traceml.transport.subscribe.runs import resolve_run
from traceml.transport.subscribe.subscriber import Subscriber
from traceml.transport.wire.events import StepsEvent

BATCH = 16
"""Records per send_steps call: what a tx thread draining every 20 ms sees at ~800 steps/s."""


def info(run_id: str) -> RankInfo:
    return RankInfo(
        run_id=run_id,
        rank=0,
        host=socket.gethostname(),
        pid=os.getpid(),
        started=time.time(),
        script="b",
    )


def step(i: int) -> StepRecord:
    return StepRecord(0, i, 1.7e9 + i, 10.0, (3.0, None, 2.0, 4.0, 1.0, None, 0.0), "host", 512.0)


def service(pub: Publisher, last: int) -> None:
    pub.service(time.monotonic(), last_step=last, dropped=0, primary="COMPUTE_BOUND")


# -- child processes ---------------------------------------------------------------------------


def serve_history(runtime: str, run_id: str, n: int, conn: Connection) -> None:
    """Publish `n` steps, then act as a tx thread (service every 20 ms) until told to stop."""
    pub = Publisher(info(run_id), Settings(history_steps=n), Path(runtime))
    pub.open()
    for lo in range(0, n, 1024):
        pub.send_steps([step(i) for i in range(lo, min(n, lo + 1024))])
    conn.send("ready")
    while not conn.poll(0.02):
        service(pub, n - 1)
    pub.close(RankEnd(0, "ok", n, time.time()), None)


def publish_flat_out(runtime: str, run_id: str, seconds: float, conn: Connection) -> None:
    """Publish as fast as one tx thread can, in batches of 64, servicing after each batch."""
    pub = Publisher(info(run_id), Settings(history_steps=200_000), Path(runtime))
    pub.open()
    conn.send("ready")
    conn.recv()
    i, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        pub.send_steps([step(k) for k in range(i, i + 64)])
        i += 64
        service(pub, i - 1)
    conn.send(i)
    while not conn.poll(0.02):
        service(pub, i - 1)
    pub.close(RankEnd(0, "ok", i, time.time()), None)


def read_steps(runtime: str, run_id: str, want: int, conn: Connection) -> None:
    """A viewer in its own process: attach and read until `want` records or told to stop."""
    got = 0
    with Subscriber(resolve_run(run_id, Path(runtime))) as sub:
        conn.send("attached")
        while got < want and not conn.poll(0):
            got += sum(len(e.records) for e in sub.poll(20) if isinstance(e, StepsEvent))
    conn.send(got)


# -- measurements ------------------------------------------------------------------------------


def publish_cost(runtime: Path, run_id: str, steps: int, viewer: str) -> float:
    """Microseconds of tx-thread time per published step, with `viewer` attached."""
    pub = Publisher(info(run_id), Settings(), runtime)
    pub.open()
    cleanup: Callable[[], None] = lambda: None  # noqa: E731
    if viewer == "one":
        cleanup = start_viewer(pub, runtime, run_id, steps)
    elif viewer == "stalled":
        cleanup = start_stalled_viewer(pub)
    t0 = time.perf_counter()
    for lo in range(0, steps, BATCH):
        pub.send_steps([step(i) for i in range(lo, lo + BATCH)])
        service(pub, lo + BATCH - 1)
    elapsed = time.perf_counter() - t0
    cleanup()
    pub.close(RankEnd(0, "ok", steps, time.time()), None)
    return elapsed / steps * 1e6 - record_cost(steps)


def record_cost(steps: int) -> float:
    """Microseconds per step spent only building the synthetic records (subtracted)."""
    t0 = time.perf_counter()
    for lo in range(0, steps, BATCH):
        [step(i) for i in range(lo, lo + BATCH)]
    return (time.perf_counter() - t0) / steps * 1e6


def start_viewer(pub: Publisher, runtime: Path, run_id: str, steps: int) -> Callable[[], None]:
    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(
        target=read_steps, args=(str(runtime), run_id, steps, child)
    )
    proc.start()
    parent.recv()
    while pub.stats.snapshots < 1:
        service(pub, -1)
        time.sleep(0.005)

    def stop() -> None:
        parent.send("stop")
        parent.recv()
        proc.join()

    return stop


def start_stalled_viewer(pub: Publisher) -> Callable[[], None]:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(pub.endpoints["pub"])
    while not sub.poll(5):
        service(pub, -1)
    sub.recv()

    def stop() -> None:
        sub.close(0)
        ctx.term()

    return stop


def attach_latency(runtime: Path, n: int) -> tuple[float, float, int]:
    """Seconds from Subscriber() to holding all `n` steps of a run's history (wall, and the
    viewer's own CPU time, which other load on the host does not inflate)."""
    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(
        target=serve_history, args=(str(runtime), "bench-attach", n, child)
    )
    proc.start()
    parent.recv()
    run = resolve_run("bench-attach", runtime)
    got = 0
    t0, cpu0 = time.perf_counter(), time.process_time()
    with Subscriber(run) as sub:
        while got < n and time.perf_counter() - t0 < 30:
            got += sum(len(e.records) for e in sub.poll(50) if isinstance(e, StepsEvent))
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    parent.send("stop")
    proc.join()
    return elapsed, cpu, got


def ingest_rate(runtime: Path, seconds: float) -> tuple[float, int, int, dict[str, int]]:
    """Records per second one subscriber delivers while one rank publishes flat out."""
    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(
        target=publish_flat_out, args=(str(runtime), "bench-ingest", seconds, child)
    )
    proc.start()
    parent.recv()
    got = 0
    with Subscriber(resolve_run("bench-ingest", runtime)) as sub:
        deadline = time.monotonic() + 2
        while not any(True for _ in sub.poll(20)) and time.monotonic() < deadline:
            pass
        parent.send("go")
        t0 = time.perf_counter()
        published = None
        while published is None or (got < published and time.perf_counter() - t0 < 60):
            got += sum(len(e.records) for e in sub.poll(20) if isinstance(e, StepsEvent))
            if published is None and parent.poll(0):
                published = parent.recv()
        elapsed = time.perf_counter() - t0
        stats = sub.stats
    parent.send("stop")
    proc.join()
    return got / elapsed, got, published, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--snapshot", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    runtime = Path(tempfile.mkdtemp(prefix="traceml-bench-"))
    try:
        print(
            f"host: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f};"
            f" pyzmq {zmq.pyzmq_version()}, libzmq {zmq.zmq_version()}"
        )
        costs = {
            v: publish_cost(runtime, f"bench-{v}", args.steps, v)
            for v in ("none", "one", "stalled")
        }
        print(f"publishing cost per step, batches of {BATCH} (tx thread, not the training thread):")
        for viewer, us in costs.items():
            print(f"  {viewer + ' viewer':<16} {us:7.2f} us/step")
        seconds, cpu, got = attach_latency(runtime, args.snapshot)
        verdict = "ok" if got == args.snapshot and seconds < 1.0 else "MISSED"
        print(
            f"attach to a {args.snapshot:,}-step history: {seconds * 1000:.0f} ms"
            f" ({cpu * 1000:.0f} ms of viewer CPU) for {got:,} records"
            f" (target < 1000 ms: {verdict})"
        )
        rate, got, published, stats = ingest_rate(runtime, args.seconds)
        verdict = "ok" if rate >= 6400 else "MISSED"
        print(
            f"one subscriber ingests {rate:,.0f} records/s ({got:,} of {published:,} published"
            f" flat out; resyncs {stats['resyncs']}, lost {stats['lost']}; target >= 6,400/s:"
            f" {verdict})"
        )
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


if __name__ == "__main__":
    main()

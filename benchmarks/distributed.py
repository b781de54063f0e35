"""Distributed benchmark (issue #5): what TraceML adds to a DDP step, and whether rank 0's job
collector keeps up with many ranks.

Run: .venv/bin/python benchmarks/distributed.py [--quick]

1. Per rank under DDP: a real `torch.distributed.run --nproc-per-node 2` job (gloo, CPU, one
   thread per rank, a small MLP sized to a few ms per step, fed by a DataLoader) in which every
   rank alternates blocks of bare steps (no hooks, no trace_step) and traced steps (auto mode,
   with the job collector on rank 0 and the other rank feeding it), as benchmarks/overhead.py
   does in one process. Each rank writes its per-step times; prints per rank the bare and
   traced medians, the added µs and the ratio. DDP steps are synchronised by the gradient
   all-reduce, so each rank's step time includes waiting for the other rank.
2. Collector ingest: one Collector bound on ipc in a private temp dir, in its own process,
   doing what rank 0's tx thread does (one poll() per 20 ms tick, every event folded into a
   RunStore), and 256 simulated ranks as CollectorFeeds (4 processes x 64 feeds, one thread
   each). Paced: 256 ranks x 20 steps/s plus a heartbeat and a system sample per rank per
   second. Burst: every feed sends 20-record frames as fast as its process can. Prints records/s
   received, frames rejected, records dropped at the feeds (queue full), the collector's CPU,
   and whether it keeps up (nothing dropped, received == sent).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _common import Loop, pct

if TYPE_CHECKING:
    from collections.abc import Iterator
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

    from traceml.analysis.store import RunStore
    from traceml.collect.collector import Collector
    from traceml.records import StepRecord
    from traceml.transport.publish.feed import CollectorFeed

WIDTH = 256
"""Hidden width of the DDP MLP: about 5 ms per synchronised step on a 2-core host."""
BATCH = 64
TICK_S = 0.02
"""The tx thread's tick (traceml.instrument.worker.TICK_S): the collector polls once per tick."""
FEED_PROCS = 4
RANKS = 256
BURST_FRAME = 20
"""Records per frame in the burst: what a rank stepping every 1 ms sends per tick."""
KEEPS_UP_S = 0.5
"""Keeping up also means the last record is folded within this long after the feeds stop."""
DRAIN_QUIET_S = 2.0
"""After the feeds stop, the collector waits this long without a frame before giving up."""
PHASES = (0.3, None, 0.25, 0.3, 0.1, None, 0.05)


# -- 1. DDP: the worker, run by torch.distributed.run ------------------------------------------


@contextlib.contextmanager
def cpu_split(out: list[float], steps: int) -> Iterator[None]:
    """Append CPU µs per step of this (training) thread and of the process's other threads."""
    thread0, proc0 = time.thread_time(), time.process_time()
    yield
    thread, proc = time.thread_time() - thread0, time.process_time() - proc0
    out += [thread / steps * 1e6, (proc - thread) / steps * 1e6]


def ddp_worker(out: Path, steps: int, rounds: int) -> None:
    """One rank: alternate bare and traced blocks in step with the other rank, save the times."""
    import torch
    import torch.distributed as dist

    import traceml
    from traceml.api import current_session

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    traceml.init(mode="auto", summary=out / "final_summary.json")
    session = current_session()
    assert session is not None, "traceml did not start"
    loop = Loop(WIDTH, BATCH, ddp=True)
    loop.block(50, traced=False)
    times: dict[str, list[float]] = {"bare": [], "traced": [], "cpu_bare": [], "cpu_traced": []}
    for _ in range(rounds):
        session.hooks.remove()
        with cpu_split(times["cpu_bare"], steps):
            times["bare"] += loop.block(steps, traced=False)
        session.hooks.install_auto(torch, h2d=False)
        session.last_model_id = 0
        with cpu_split(times["cpu_traced"], steps):
            times["traced"] += loop.block(steps, traced=True)
    traceml.shutdown()
    (out / f"rank-{rank}.json").write_text(json.dumps(times))
    dist.destroy_process_group()


def run_ddp(tmp: Path, steps: int, rounds: int) -> dict[int, dict[str, list[float]]]:
    """torch.distributed.run this file as 2 ranks; their per-step times by rank."""
    out = tmp / "ddp"
    out.mkdir()
    env = dict(
        os.environ,
        TRACEML_RUNTIME_DIR=str(tmp),
        TRACEML_RUN_ID=f"bench-ddp-{os.getpid()}",
        OMP_NUM_THREADS="1",
    )
    cmd = [
        *(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"),
        *(__file__, "--ddp-worker", str(out), "--steps", str(steps), "--rounds", str(rounds)),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"the DDP job failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return {r: json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)}


def noise_floor(bare: list[float], steps: int) -> float:
    """|median of the even bare blocks - median of the odd ones|: what "added" can resolve."""
    blocks = [bare[i : i + steps] for i in range(0, len(bare), steps)]
    even = [t for b in blocks[0::2] for t in b]
    odd = [t for b in blocks[1::2] for t in b]
    return abs(statistics.median(even) - statistics.median(odd)) if odd else math.nan


def cpu_medians(split: list[float]) -> tuple[float, float]:
    """Median over blocks of (training thread, other threads) CPU µs per step."""
    return statistics.median(split[0::2]), statistics.median(split[1::2])


def print_ddp(times: dict[int, dict[str, list[float]]], steps: int, rounds: int) -> None:
    print(
        f"DDP, 2 ranks (torchrun, gloo, CPU, 1 thread each), MLP width {WIDTH}, batch {BATCH}:"
        f" bare vs traced, {rounds} interleaved block pairs of {steps} steps (µs)"
    )
    print(
        f"  {'rank':<6} {'bare med':>9} {'traced med':>10} {'added':>7} {'ratio':>6} {'noise':>6}"
        f" {'bare p95':>9} {'traced p95':>10}   CPU/step bare -> traced: train thread; others"
    )
    for rank, res in sorted(times.items()):
        b, t = res["bare"], res["traced"]
        bm, tm = statistics.median(b), statistics.median(t)
        (bt, bo), (tt, to) = cpu_medians(res["cpu_bare"]), cpu_medians(res["cpu_traced"])
        print(
            f"  {rank:<6} {bm:9.0f} {tm:10.0f} {tm - bm:7.1f} {tm / bm:6.3f}"
            f" {noise_floor(b, steps):6.0f} {pct(b, 0.95):9.0f} {pct(t, 0.95):10.0f}"
            f"   {bt:.0f} -> {tt:.0f}; {bo:.0f} -> {to:.0f}"
        )
    print("  note: DDP steps are synchronised by the gradient all-reduce, so each rank's numbers")
    print("  include waiting for the other rank: the added µs is the job's, seen from each rank.")
    print("  noise = bare vs bare (even vs odd blocks): differences below it are not resolved.")
    print("  Others = gloo's threads and TraceML's tx thread (on rank 0 also the job collector).")
    print("  target: <= 10 µs added per step at the median (DESIGN.md, single process)")


# -- 2. collector ingest: child processes ------------------------------------------------------


@dataclass(frozen=True)
class IngestTest:
    name: str
    rate: float | None
    """Steps/s per rank; None = as fast as the feeds can send."""
    seconds: float

    def label(self) -> str:
        return f"{RANKS} x {self.rate:g}/s" if self.rate is not None else "burst"


@dataclass
class Tally:
    """What one feed process sent, in records."""

    sent: int = 0
    dropped: int = 0
    """Records in frames that a full feed queue refused (the collector fell behind)."""

    def push(self, feed: CollectorFeed, records: list[StepRecord]) -> None:
        before = feed.dropped
        feed.send_steps(records)
        if feed.dropped > before:
            self.dropped += len(records)
        else:
            self.sent += len(records)


def run_collector(endpoint: str, run_id: str, conn: Connection) -> None:
    """Child process: rank 0's side. Bind, send the address, and from "go" on do rank 0's
    collector work until told how many records were sent and all came (or nothing comes)."""
    from traceml.analysis.store import RunStore
    from traceml.collect.collector import Collector

    collector = Collector(run_id, endpoint, curve=False)
    conn.send(collector.open().encode())
    conn.recv()
    cpu0, t0 = time.process_time(), time.monotonic()
    records, last_frame = drain(collector, RunStore(), conn)
    wall, cpu = max(1e-9, last_frame - t0), time.process_time() - cpu0
    conn.send({"records": records, "frames": collector.received, "rejected": collector.rejected,
               "ranks": len(collector.ranks), "wall": wall, "cpu": cpu})  # fmt: skip
    collector.close()


def drain(collector: Collector, store: RunStore, conn: Connection) -> tuple[int, float]:
    """Poll once per tick until the expected count (sent by the parent) is in, or nothing came
    for DRAIN_QUIET_S; returns the records folded and when the last frame came."""
    records, expected = 0, None
    last_frame = next_tick = time.monotonic()
    while expected is None or (
        records < expected and time.monotonic() - last_frame < DRAIN_QUIET_S
    ):
        got = ingest(collector, store)
        records += got
        last_frame = time.monotonic() if got else last_frame
        if expected is None and conn.poll(0):
            expected = conn.recv()
        next_tick += TICK_S
        time.sleep(max(0.0, next_tick - time.monotonic()))
    return records, last_frame


def ingest(collector: Collector, store: RunStore) -> int:
    """One tick of rank 0's collector: poll, fold, count the step records."""
    from traceml.transport.subscribe.fold import apply_events
    from traceml.transport.wire.events import StepsEvent

    events = collector.poll()
    apply_events(store, events)
    return sum(len(e.records) for e in events if isinstance(e, StepsEvent))


def make_feeds(address: str, run_id: str, ranks: range) -> list[CollectorFeed]:
    from traceml.records import RankInfo
    from traceml.transport.publish.feed import CollectorFeed
    from traceml.transport.wire.address import CollectorAddress

    host, pid, now = socket.gethostname(), os.getpid(), time.time()
    feeds = []
    for r in ranks:
        info = RankInfo(run_id, r, r % 8, RANKS, host, pid, now, "distributed.py")
        feed = CollectorFeed(CollectorAddress.decode(address), info)
        feed.open()
        feed.hello()
        feeds.append(feed)
    return feeds


def record(rank: int, step: int, now: float) -> StepRecord:
    from traceml.records import StepRecord

    ms = 50.0
    return StepRecord(rank, step, now, ms, tuple(None if p is None else p * ms for p in PHASES))


class FeedProcess:
    """Up to 64 simulated ranks pushing to the collector from one thread."""

    def __init__(self, feeds: list[CollectorFeed], first: int) -> None:
        self.feeds = feeds
        self.first = first
        self.next_step = [0] * len(feeds)
        self.tally = Tally()

    def send(self, i: int, n: int, now: float) -> None:
        rank, lo = self.first + i, self.next_step[i]
        self.tally.push(self.feeds[i], [record(rank, s, now) for s in range(lo, lo + n)])
        self.next_step[i] = lo + n

    def paced(self, rate: float, seconds: float) -> None:
        t0 = next_tick = time.monotonic()
        last_hb = t0 - 1.0
        while (elapsed := time.monotonic() - t0) < seconds:
            now = time.time()
            for i in range(len(self.feeds)):
                due = int(elapsed * rate + (self.first + i) / RANKS)
                if due > self.next_step[i]:
                    self.send(i, due - self.next_step[i], now)
            if time.monotonic() - last_hb >= 1.0:
                last_hb = time.monotonic()
                self.heartbeats(now)
            next_tick += TICK_S
            time.sleep(max(0.0, next_tick - time.monotonic()))

    def heartbeats(self, now: float) -> None:
        from traceml.records import SystemSample

        for i, feed in enumerate(self.feeds):
            rank = self.first + i
            feed.heartbeat({"last_step": self.next_step[i] - 1, "dropped": 0, "pid": os.getpid()})
            feed.send_system(SystemSample(rank, now, 95.0, 60.0, 8000.0, 64000.0))

    def burst(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            now = time.time()
            for i in range(len(self.feeds)):
                self.send(i, BURST_FRAME, now)


def run_feeds(address: str, run_id: str, first: int, test: IngestTest, conn: Connection) -> None:
    """Child process: 64 CollectorFeeds on one thread; at "go", run the test, report a Tally."""
    count = RANKS // FEED_PROCS
    proc = FeedProcess(make_feeds(address, run_id, range(first, first + count)), first)
    conn.send("ready")
    conn.recv()
    cpu0 = time.process_time()
    if test.rate is None:
        proc.burst(test.seconds)
    else:
        proc.paced(test.rate, test.seconds)
    cpu = time.process_time() - cpu0
    for feed in proc.feeds:
        feed.close()
    conn.send({"sent": proc.tally.sent, "dropped": proc.tally.dropped, "cpu": cpu})


# -- 2. collector ingest: the measurement ------------------------------------------------------


@dataclass
class IngestResult:
    test: IngestTest
    sent: int
    dropped: int
    received: int
    frames: int
    rejected: int
    ranks: int
    collector_wall: float
    collector_cpu: float
    feeds_cpu: float

    @property
    def behind_s(self) -> float:
        """From the end of sending to the last record folded (+-1 tick)."""
        return max(0.0, self.collector_wall - self.test.seconds)

    @property
    def keeps_up(self) -> bool:
        lossless = self.dropped == 0 and self.rejected == 0 and self.received == self.sent
        return lossless and self.behind_s < KEEPS_UP_S


def spawn(target: Any, *args: Any) -> tuple[BaseProcess, Connection]:
    ours, theirs = mp.get_context("spawn").Pipe()
    proc = mp.get_context("spawn").Process(target=target, args=(*args, theirs), daemon=True)
    proc.start()
    return proc, ours


def join_or_kill(proc: BaseProcess, timeout: float) -> None:
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()


def run_ingest(tmp: Path, test: IngestTest) -> IngestResult:
    run_id = f"bench-ingest-{os.getpid()}"
    collector, c_conn = spawn(run_collector, f"ipc://{tmp}/collector.sock", run_id)
    address = c_conn.recv()
    feeds = [
        spawn(run_feeds, address, run_id, first, test)
        for first in range(0, RANKS, RANKS // FEED_PROCS)
    ]
    for _, conn in feeds:
        conn.recv()
    c_conn.send("go")
    for _, conn in feeds:
        conn.send("go")
    tallies = [conn.recv() for _, conn in feeds]
    sent = sum(t["sent"] for t in tallies)
    c_conn.send(sent)
    got = c_conn.recv()
    for proc in [collector, *(p for p, _ in feeds)]:
        join_or_kill(proc, 10)
    return IngestResult(
        test,
        sent,
        sum(t["dropped"] for t in tallies),
        got["records"],
        got["frames"],
        got["rejected"],
        got["ranks"],
        got["wall"],
        got["cpu"],
        sum(t["cpu"] for t in tallies),
    )


def print_ingest(results: list[IngestResult]) -> None:
    print(
        f"collector ingest: {RANKS} ranks as CollectorFeeds ({FEED_PROCS} processes x"
        f" {RANKS // FEED_PROCS}, one thread each) -> one Collector on ipc in its own process,"
        f" polled every {TICK_S * 1000:.0f} ms and folded into a RunStore (rank 0's work)"
    )
    print(
        f"  {'test':<12} {'sent rec/s':>10} {'recv rec/s':>10} {'sent':>9} {'received':>9}"
        f" {'dropped':>7} {'rejected':>8} {'coll. CPU':>9} {'µs/rec':>6} {'behind':>7}"
        f" {'feeds CPU':>9}  keeps up"
    )
    for r in results:
        secs, wall = r.test.seconds, r.collector_wall
        per_record = r.collector_cpu / max(1, r.received) * 1e6
        print(
            f"  {r.test.label():<12} {r.sent / secs:10,.0f} {r.received / wall:10,.0f}"
            f" {r.sent:9,} {r.received:9,} {r.dropped:7,} {r.rejected:8,}"
            f" {100 * r.collector_cpu / wall:7.0f} % {per_record:6.1f} {r.behind_s:6.1f}s"
            f" {100 * r.feeds_cpu / secs:7.0f} %  {'yes' if r.keeps_up else 'NO'}"
        )
    print(
        "  recv rec/s and coll. CPU (% of one core) over go -> last record folded; µs/rec ="
        " collector CPU per record; behind = last record folded - end of sending"
    )
    print(
        "  dropped = records in frames a full feed queue refused (SNDHWM 10,000 frames);"
        f" keeps up = none dropped or rejected, received == sent, behind < {KEEPS_UP_S:g} s"
    )
    print("  burst: the feeds' queues absorb what the collector cannot fold yet; behind = backlog")


# -- main --------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps, shorter tests")
    parser.add_argument("--ddp-worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ddp_worker is not None:
        ddp_worker(args.ddp_worker, args.steps, args.rounds)
        return
    steps, rounds = (100, 3) if args.quick else (150, 10)
    paced_s, burst_s = (4.0, 1.0) if args.quick else (15.0, 3.0)
    tmp = Path(tempfile.mkdtemp(prefix="tmld-"))
    tmp.chmod(0o700)
    load = os.getloadavg()[0]
    print(
        f"host: {os.cpu_count()} CPUs, load {load:.1f}" + (" (busy: noisy)" if load > 1.5 else "")
    )
    try:
        print_ddp(run_ddp(tmp, steps, rounds), steps, rounds)
        tests = [IngestTest("paced", 20.0, paced_s), IngestTest("burst", None, burst_s)]
        print_ingest([run_ingest(tmp, t) for t in tests])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

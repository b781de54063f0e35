"""Viewer benchmark (issue #4): does the live view keep up with a big or busy run, at what CPU?

Run: .venv/bin/python benchmarks/viewer.py [--quick]

Fleet processes (each one thread owning up to 64 Publishers, one per rank of one run, as that
many tx threads would) publish synthetic step records at a fixed rate per rank, paced on a
monotonic clock, plus one system sample per rank per second, into a private TRACEML_RUNTIME_DIR
(0700). The real Textual app, TraceMLApp, runs headless at 160x50 in another process, with a
hook on its main screen that logs every snapshot it draws: when it was built, handled and
painted, and how many steps it holds. The fleet starts publishing once the viewer is connected
(live streaming, not catching up on a history). After a warm-up (every rank's steps on screen,
then 2 s), over a fixed window:

- viewer CPU: the viewer process's CPU seconds (psutil) over the window, as % of one core;
- folded/s: steps the drawn snapshots gained per second over the window, against steps/s the
  fleet published (it logs its count every 20 ms tick);
- backlog: steps published when a snapshot was built minus steps in that snapshot, over the
  window's first and last quarter; it keeps up when the backlog grows by less than half a
  second of publishing;
- redraw latency: paint time minus the time at which the fleet had published as many steps as
  the painted snapshot holds (the age of the data on screen, +-1 fleet tick), median and p95.

Target: the viewer keeps up using under half a core. Headless Textual computes every frame but
skips writing it to a terminal: a real terminal adds the ANSI encoding and the write on top.
The "socket limit lifted" row patches zmq.Context in the viewer process only (MAX_SOCKETS 8192)
to show what the viewer would cost past the stock limit; nothing in traceml is changed. So that
one small host can play 1,000 ranks, the fleet services each publisher every 0.25 s (not every
20 ms tick) and rewrites rank files every 10 s (not 2 s); the viewer receives the same frames.
--quick runs shorter windows and only the 64-rank and stock 1,000-rank rows.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import math
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
from _common import pct

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess
    from multiprocessing.synchronize import Event

    from textual.app import App

    from traceml.records import StepRecord
    from traceml.transport.publish.publisher import Publisher

TICK_S = 0.02
"""Fleet loop period, as a rank's tx thread (traceml.instrument.worker.TICK_S)."""
SERVICE_EVERY_S = 0.25
"""How often each publisher gets service() (snapshot replies, the 1 s heartbeat, the rank file);
records are sent at once. A real tx thread services every tick: for 1,000 ranks on one small
host that alone would take a core, starving the viewer being measured."""
RANK_FILE_EVERY_S = 10.0
"""The fleet rewrites rank files this often instead of every 2 s (publisher.FILE_UPDATE_S), for
the same reason: 500 atomic file writes a second for 1,000 ranks. Still under the 15 s after
which a viewer would call a rank's file stale; the viewer receives exactly the same frames."""
RANKS_PER_FLEET = 64
"""Publishers per fleet process: each has its own zmq context (2 threads, ~10 fds)."""
SYSTEM_EVERY_S = 1.0
SIZE = (160, 50)
TARGET_CPU_PCT = 50.0
KEEPS_UP_S = 0.5
"""Most the backlog may grow over the window, in seconds of publishing, to count as keeping up."""
READY_TIMEOUT_S = 60.0
STOCK_MAX_SOCKETS = 1023
"""libzmq's default ZMQ_MAX_SOCKETS per context."""
LIFTED_MAX_SOCKETS = 8192
PHASE_SHARE = (0.10, 0.05, 0.30, 0.45, 0.10, None, 0.0)
"""Synthetic split of a step: dataloader, between, forward, backward, optimizer, h2d, other."""


@dataclass(frozen=True)
class Scenario:
    """One row of the table."""

    name: str
    ranks: int
    rate: float
    """Steps per second per rank."""
    max_sockets: int | None = None
    """Patch the viewer's zmq contexts to this many sockets; None = stock (1023)."""

    @property
    def label(self) -> str:
        return f"{self.ranks:,} x {self.rate:g}/s"

    @property
    def total_rate(self) -> float:
        return self.ranks * self.rate


@dataclass(frozen=True)
class Window:
    warmup_s: float
    """After every rank is on screen."""
    measure_s: float


@dataclass
class Result:
    """What one scenario measured; None = not measured (something failed first)."""

    scenario: Scenario
    span: tuple[float, float] | None = None
    """The measuring window, epoch seconds."""
    cpu_pct: float | None = None
    fleet_cpu_pct: float | None = None
    published_rate: float | None = None
    """Steps/s the fleet published over the window (all ranks)."""
    folded_rate: float | None = None
    """Steps/s the drawn snapshots gained over the window."""
    backlog: tuple[float, float] | None = None
    """Median backlog (steps) over the window's first and last quarter of snapshots."""
    backlog_max: float | None = None
    latency: tuple[float, float] | None = None
    """Median and p95 age of the data on screen when painted, seconds."""
    paint: tuple[float, float] | None = None
    """Median and p95 time from the screen handling a snapshot to its paint, seconds."""
    queued: float | None = None
    """Median time from a snapshot's build to the screen handling it, seconds."""
    interval_s: float | None = None
    """Median time between two drawn snapshots."""
    attach_s: float | None = None
    """From the first step published to every rank's steps on screen, seconds."""
    viewer_fds: int | None = None
    """Open file descriptors of the viewer at the end of the window."""
    draws: int = 0
    fleet_dropped: int = 0
    failure: str | None = None


# -- shared ------------------------------------------------------------------------------------


# -- the fleet (child processes) ---------------------------------------------------------------


@dataclass(frozen=True)
class FleetSpec:
    runtime: str
    run_id: str
    first: int
    """First rank of this fleet process; it owns ranks first .. first + count - 1."""
    count: int
    world: int
    rate: float
    log: str
    """The fleet writes "epoch-seconds published-so-far" here every tick."""


def step_record(rank: int, step: int, rate: float, now: float) -> StepRecord:
    from traceml.records import StepRecord

    ms = 1000.0 / rate * (1.0 + 0.02 * ((step * 7 + rank) % 5 - 2))
    phases = tuple(None if s is None else s * ms for s in PHASE_SHARE)
    return StepRecord(rank, step, now - ms / 1000, ms, phases, "host", 512.0 + step % 64)


class Fleet:
    """Publishers driven from one thread, each publishing `rate` steps/s, staggered by rank."""

    def __init__(self, spec: FleetSpec) -> None:
        self.spec = spec
        self.ranks = range(spec.first, spec.first + spec.count)
        self.pubs: list[Publisher] = []
        self.sent = [0] * spec.count
        self.last_sys = [0.0] * spec.count
        self.total = 0
        self.turn = 0
        self.per_tick = max(1, math.ceil(spec.count * TICK_S / SERVICE_EVERY_S))

    def open(self) -> None:
        from traceml.config import Settings
        from traceml.records import RankInfo
        from traceml.transport.publish.publisher import Publisher

        s, host, pid, now = self.spec, socket.gethostname(), os.getpid(), time.time()
        for r in self.ranks:
            info = RankInfo(s.run_id, r, r, s.world, host, pid, now, "viewer.py")
            pub = Publisher(info, Settings(), Path(s.runtime))
            pub.open()
            self.pubs.append(pub)

    def publish_due(self, elapsed: float) -> None:
        rate, world, now = self.spec.rate, self.spec.world, time.time()
        for i, (rank, pub) in enumerate(zip(self.ranks, self.pubs, strict=True)):
            due = int(elapsed * rate + rank / world)
            if due > self.sent[i]:
                pub.send_steps([step_record(rank, s, rate, now) for s in range(self.sent[i], due)])
                self.total += due - self.sent[i]
                self.sent[i] = due

    def service_some(self) -> None:
        """Service the next few publishers (and send their 1 Hz system sample)."""
        from traceml.records import SystemSample

        now = time.time()
        for _ in range(self.per_tick):
            i, self.turn = self.turn, (self.turn + 1) % len(self.pubs)
            rank, pub = self.ranks[i], self.pubs[i]
            if now - self.last_sys[i] >= SYSTEM_EVERY_S:
                self.last_sys[i] = now
                pub.send_system(SystemSample(rank, now, 95.0, 60.0, 8000.0, 64000.0))
            pub.service(now, last_step=self.sent[i] - 1, dropped=0, primary=None)

    def close(self) -> dict[str, int]:
        from traceml.records import RankEnd

        dropped = sum(p.dropped for p in self.pubs)
        for i, pub in enumerate(self.pubs):
            pub.close(RankEnd(self.ranks[i], "ok", self.sent[i], time.time()), None)
        return {"published": self.total, "dropped": dropped}


def run_fleet(spec: FleetSpec, opened: Event, go: Event, stop: Event) -> None:
    """Child process: open the publishers, service them until `go`, then also publish steps
    (so the viewer starts from live data, not a history to catch up on) until `stop`."""
    from traceml.transport.publish import publisher
    from traceml.transport.subscribe.subscriber import raise_fd_limit

    raise_fd_limit()  # a publisher holds ~10 fds
    publisher.FILE_UPDATE_S = RANK_FILE_EVERY_S
    fleet = Fleet(spec)
    fleet.open()
    opened.set()
    while not go.wait(TICK_S):
        fleet.service_some()
    t0 = next_tick = time.monotonic()
    with open(spec.log, "w", buffering=1) as log:
        while not stop.is_set():
            fleet.publish_due(time.monotonic() - t0)
            log.write(f"{time.time():.4f} {fleet.total}\n")
            fleet.service_some()
            next_tick += TICK_S
            time.sleep(max(0.0, next_tick - time.monotonic()))
    Path(spec.log + ".json").write_text(json.dumps(fleet.close()))


# -- the viewer (child process) ----------------------------------------------------------------


@dataclass(frozen=True)
class ViewerSpec:
    runtime: str
    run_id: str
    ranks: int
    out: str
    """The draw log (JSON) is written here at exit; a feed failure at once to out + ".failed"."""
    max_sockets: int | None


def lift_socket_limit(max_sockets: int) -> None:
    """Experiment only: every zmq.Context made in this process allows `max_sockets` sockets."""
    import zmq

    class LiftedContext(zmq.Context):  # type: ignore[type-arg]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.set(zmq.MAX_SOCKETS, max_sockets)

    zmq.Context = LiftedContext  # type: ignore[misc]


@dataclass(frozen=True)
class ViewerSignals:
    attached: Event
    """Set at the first snapshot: the subscriber is connected to every rank."""
    ready: Event
    """Set once a snapshot shows steps from every rank, or the feed failed."""
    stop: Event
    """Set by the benchmark: the app exits."""


def make_app(spec: ViewerSpec, sig: ViewerSignals, log: dict[str, Any]) -> App[int]:
    """TraceMLApp whose main screen logs every snapshot it draws into `log["draws"]`."""
    from traceml_tui import app as app_module
    from traceml_tui.app import TraceMLApp
    from traceml_tui.messages import FeedFailed, SnapshotReady
    from traceml_tui.screens.main import MainScreen

    class TimedScreen(MainScreen):
        # Textual dispatches a message to every class in the MRO: MainScreen's own handlers run
        # right after these, so these only take timestamps.
        def on_snapshot_ready(self, message: SnapshotReady) -> None:
            ranks = message.snapshot.view.ranks
            draw = {
                "taken": message.snapshot.taken_at,
                "handled": time.time(),
                "seen": sum(r.total_steps for r in ranks),
                "ranks": sum(1 for r in ranks if r.total_steps > 0),
            }
            log["draws"].append(draw)
            self.call_after_refresh(lambda: draw.__setitem__("painted", time.time()))
            sig.attached.set()
            if draw["ranks"] >= spec.ranks:
                sig.ready.set()

        def on_feed_failed(self, message: FeedFailed) -> None:
            log["failure"] = message.reason
            Path(spec.out + ".failed").write_text(message.reason)
            sig.attached.set()
            sig.ready.set()

    class TimedApp(TraceMLApp):
        CSS_PATH = str(Path(app_module.__file__).with_name("app.tcss"))

        def __init__(self) -> None:
            super().__init__(spec.run_id, runtime_dir=Path(spec.runtime))
            self.main = TimedScreen()

        def on_mount(self) -> None:  # TraceMLApp.on_mount runs too (MRO dispatch)
            self.set_interval(0.1, lambda: self.exit(0) if sig.stop.is_set() else None)

    return TimedApp()


def run_viewer(spec: ViewerSpec, sig: ViewerSignals) -> None:
    """Child process: the real app, headless, until `stop`; then its draw log to spec.out."""
    from traceml.transport.subscribe.subscriber import raise_fd_limit

    raise_fd_limit()
    if spec.max_sockets is not None:
        lift_socket_limit(spec.max_sockets)
    log: dict[str, Any] = {"draws": [], "failure": None}
    make_app(spec, sig, log).run(headless=True, size=SIZE)
    Path(spec.out).write_text(json.dumps(log))


# -- analysis ----------------------------------------------------------------------------------


class Timeline:
    """Steps published by all fleet processes over time, from their logs (a step function)."""

    def __init__(self, logs: list[Path]) -> None:
        events: list[tuple[float, int]] = []
        for path in logs:
            last = 0
            for line in path.read_text().splitlines():
                t, n = line.split()
                events.append((float(t), int(n) - last))
                last = int(n)
        events.sort()
        self.t = [t for t, _ in events]
        self.n = list(itertools.accumulate(d for _, d in events))

    def published_at(self, t: float) -> int:
        i = bisect.bisect_right(self.t, t) - 1
        return self.n[i] if i >= 0 else 0

    def reached(self, n: int) -> float | None:
        """First logged time at which the fleet had published `n` steps."""
        i = bisect.bisect_left(self.n, n)
        return self.t[i] if i < len(self.t) else None


def analyse(result: Result, draws: list[dict[str, float]], timeline: Timeline) -> None:
    """Fill `result` from the viewer's draws inside the window."""
    assert result.span is not None
    t0, t1 = result.span
    result.published_rate = (timeline.published_at(t1) - timeline.published_at(t0)) / (t1 - t0)
    draws = [d for d in draws if t0 <= d["taken"] <= t1 and "painted" in d]
    result.draws = len(draws)
    if len(draws) < 2:
        result.failure = result.failure or "fewer than 2 redraws in the window"
        return
    first, last = draws[0], draws[-1]
    result.folded_rate = (last["seen"] - first["seen"]) / (last["taken"] - first["taken"])
    backlog = [timeline.published_at(d["taken"]) - d["seen"] for d in draws]
    q = max(1, len(backlog) // 4)
    result.backlog = (statistics.median(backlog[:q]), statistics.median(backlog[-q:]))
    result.backlog_max = max(backlog)
    ages = [d["painted"] - t for d in draws if (t := timeline.reached(int(d["seen"])))]
    result.latency = (statistics.median(ages), pct(ages, 0.95)) if ages else None
    paint = [d["painted"] - d["handled"] for d in draws]
    result.paint = (statistics.median(paint), pct(paint, 0.95))
    result.queued = statistics.median(d["handled"] - d["taken"] for d in draws)
    gaps = [b["taken"] - a["taken"] for a, b in itertools.pairwise(draws)]
    result.interval_s = statistics.median(gaps)


# -- one measurement ---------------------------------------------------------------------------


class CpuMeter:
    """CPU seconds of some processes since the meter was made, as % of one core."""

    def __init__(self, procs: list[BaseProcess]) -> None:
        self.procs = [psutil.Process(p.pid) for p in procs]
        self.cpu0, self.t0 = self._cpu(), time.monotonic()

    def _cpu(self) -> float:
        return sum(float(t.user + t.system) for t in (p.cpu_times() for p in self.procs))

    def pct(self) -> float:
        return 100.0 * (self._cpu() - self.cpu0) / (time.monotonic() - self.t0)


def spawn(target: Any, *args: Any) -> BaseProcess:
    proc = mp.get_context("spawn").Process(target=target, args=args, daemon=True)
    proc.start()
    return proc


def fleet_spec(sc: Scenario, tmp: Path, run_id: str, first: int) -> FleetSpec:
    count = min(RANKS_PER_FLEET, sc.ranks - first)
    log = str(tmp / f"{run_id}.fleet{first}.log")
    return FleetSpec(str(tmp), run_id, first, count, sc.ranks, sc.rate, log)


def join_or_kill(proc: BaseProcess, timeout: float) -> None:
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()


def measure(sc: Scenario, window: Window, tmp: Path) -> Result:
    """Run the fleet and the viewer for one scenario and measure over the window."""
    run_id = f"bench-{sc.ranks}-{sc.max_sockets or 0}"
    ctx = mp.get_context("spawn")
    specs = [fleet_spec(sc, tmp, run_id, a) for a in range(0, sc.ranks, RANKS_PER_FLEET)]
    opened = [ctx.Event() for _ in specs]
    go, stop_fleets = ctx.Event(), ctx.Event()
    fleets = [spawn(run_fleet, s, e, go, stop_fleets) for s, e in zip(specs, opened, strict=True)]
    out = tmp / f"{run_id}.json"
    try:
        if not all(e.wait(READY_TIMEOUT_S) for e in opened):
            return Result(sc, failure="the fleet could not open its publishers in time")
        spec = ViewerSpec(str(tmp), run_id, sc.ranks, str(out), sc.max_sockets)
        sig = ViewerSignals(ctx.Event(), ctx.Event(), ctx.Event())
        viewer = spawn(run_viewer, spec, sig)
        result = watch(sc, window, (viewer, fleets), sig, go, Path(spec.out + ".failed"))
        sig.stop.set()
        join_or_kill(viewer, 30)
    finally:
        stop_fleets.set()
        for proc in fleets:
            join_or_kill(proc, 60)
    collect(result, out, [Path(s.log) for s in specs])
    return result


def wait_for(event: Event, viewer: BaseProcess, deadline: float) -> bool:
    while not event.wait(0.2):
        if not viewer.is_alive() or time.monotonic() > deadline:
            return False
    return True


def watch(
    sc: Scenario,
    window: Window,
    procs: tuple[BaseProcess, list[BaseProcess]],
    sig: ViewerSignals,
    go: Event,
    failed: Path,
) -> Result:
    """Start publishing once the viewer is connected; wait for every rank on screen plus the
    warm-up, then sample the CPUs over the window."""
    viewer, fleets = procs
    result = Result(sc)
    deadline = time.monotonic() + READY_TIMEOUT_S
    if wait_for(sig.attached, viewer, deadline):
        go.set()
        t_go = time.monotonic()
        wait_for(sig.ready, viewer, deadline)
        result.attach_s = time.monotonic() - t_go
    if failed.exists() or not sig.ready.is_set():
        result.failure = failed.read_text() if failed.exists() else "not every rank on screen"
        if not viewer.is_alive():
            result.failure = f"the viewer exited (code {viewer.exitcode})"
        return result
    time.sleep(window.warmup_s)
    viewer_cpu, fleet_cpu = CpuMeter([viewer]), CpuMeter(fleets)
    t0 = time.time()
    time.sleep(window.measure_s)
    result.cpu_pct, result.fleet_cpu_pct = viewer_cpu.pct(), fleet_cpu.pct()
    result.span = (t0, time.time())
    result.viewer_fds = psutil.Process(viewer.pid).num_fds()
    return result


def collect(result: Result, viewer_out: Path, fleet_logs: list[Path]) -> None:
    stats = [Path(f"{log}.json") for log in fleet_logs]
    result.fleet_dropped = sum(json.loads(p.read_text())["dropped"] for p in stats if p.exists())
    if result.span is not None and viewer_out.exists():
        draws = json.loads(viewer_out.read_text())["draws"]
        analyse(result, draws, Timeline(fleet_logs))


# -- report ------------------------------------------------------------------------------------


def verdict(r: Result) -> str:
    if r.failure is not None or r.cpu_pct is None or r.backlog is None:
        return "FAILED"
    behind = r.backlog[1] - r.backlog[0] > KEEPS_UP_S * r.scenario.total_rate
    costly = r.cpu_pct >= TARGET_CPU_PCT
    misses = [word for word, bad in (("falls behind", behind), ("CPU", costly)) if bad]
    return f"MISSED ({', '.join(misses)})" if misses else "ok"


def fmt_ms(pair: tuple[float, float] | None) -> str:
    return "-" if pair is None else f"{pair[0] * 1000:.0f} / {pair[1] * 1000:.0f} ms"


def fmt_backlog(r: Result) -> str:
    if r.backlog is None:
        return "-"
    a, b = r.backlog
    total = r.scenario.total_rate
    return f"{a:,.0f} -> {b:,.0f} ({a / total:.1f} -> {b / total:.1f} s)"


def fmt_rates(r: Result) -> str:
    if r.folded_rate is None or r.published_rate is None:
        return "-"
    return f"{r.folded_rate:,.0f} / {r.published_rate:,.0f}"


def print_table(results: list[Result], window: Window) -> None:
    print(
        f"viewer: TraceMLApp headless {SIZE[0]}x{SIZE[1]}; {window.measure_s:g} s window,"
        f" {window.warmup_s:g} s after every rank is on screen"
    )
    print(
        f"  {'scenario':<27} {'ranks x rate':>13} {'viewer CPU':>10} {'folded/published':>17}"
        f" {'backlog start -> end':>30} {'latency med/p95':>17}  verdict"
    )
    for r in results:
        cpu = "-" if r.cpu_pct is None else f"{r.cpu_pct:.0f} %"
        print(
            f"  {r.scenario.name:<27} {r.scenario.label:>13} {cpu:>10} {fmt_rates(r):>17}"
            f" {fmt_backlog(r):>30} {fmt_ms(r.latency):>17}  {verdict(r)}"
        )
    print(
        f"  target: keeps up (backlog grows < {KEEPS_UP_S:g} s of publishing over the window)"
        f" using < {TARGET_CPU_PCT:.0f} % of one core"
    )
    print(
        "  latency: age of the data on screen = paint time - when the fleet had published as"
        " many steps as the painted snapshot holds"
    )
    for r in results:
        print_details(r)


def explain(failure: str) -> str:
    if "Too many open files" in failure and "ZMQError" in failure:
        return (
            f"{failure} (not the fd limit: zmq allows {STOCK_MAX_SOCKETS} sockets per context"
            f" and the Subscriber opens 2 per rank in one context, so at most"
            f" {STOCK_MAX_SOCKETS // 2} ranks)"
        )
    return failure


def print_details(r: Result) -> None:
    name = r.scenario.name.split(":")[0]
    if r.failure is not None:
        print(f"  {name}: {explain(r.failure)}")
    if r.interval_s is None or r.queued is None:
        return
    print(
        f"  {name}: every rank on screen {r.attach_s or 0:.1f} s after the first step;"
        f" backlog at most {(r.backlog_max or 0) / r.scenario.total_rate:.1f} s;"
        f" {r.draws} redraws, one every {r.interval_s:.2f} s; {r.viewer_fds} viewer fds;"
        f" snapshot built -> handled"
        f" {r.queued * 1000:.0f} ms, handled -> painted {fmt_ms(r.paint)};"
        f" fleet CPU {r.fleet_cpu_pct or 0:.0f} %, {r.fleet_dropped} records dropped"
    )


def scenarios(quick: bool) -> list[Scenario]:
    rows = [
        Scenario("busy: 64 ranks", 64, 100.0),
        Scenario("big: 1,000 ranks", 1000, 1.0),
    ]
    if not quick:
        rows += [
            Scenario("largest stock: 500 ranks", 500, 1.0),
            Scenario("big, socket limit lifted", 1000, 1.0, LIFTED_MAX_SOCKETS),
        ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter windows, fewer rows")
    args = parser.parse_args()
    window = Window(2.0, 5.0) if args.quick else Window(2.0, 9.0)
    tmp = Path(tempfile.mkdtemp(prefix="tmlv-"))
    tmp.chmod(0o700)
    os.environ["TRACEML_RUNTIME_DIR"] = str(tmp)
    load = os.getloadavg()[0]
    print(
        f"host: {os.cpu_count()} CPUs, load {load:.1f}" + (" (busy: noisy)" if load > 1.5 else "")
    )
    try:
        results = [measure(sc, window, tmp) for sc in scenarios(args.quick)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print_table(results, window)


if __name__ == "__main__":
    main()

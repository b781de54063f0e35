"""Canned runs for the viewer's tests: real RunStores filled with hand-made StepRecords.

Everything is deterministic (a seeded RNG and a fixed clock), so snapshots and SVGs are stable.
"""

from __future__ import annotations

import queue
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from textual.app import App
from textual.pilot import Pilot
from textual.screen import Screen

from traceml.analysis.store import RunStore
from traceml.analysis.summary import build_summary
from traceml.records import PHASES, RankEnd, RankInfo, StepRecord, SystemSample
from traceml_tui.snapshot import Snapshot, from_store

T0 = 1_700_000_000.0
"""Epoch seconds at which every canned run starts."""
RUN_ID = "train-20231114-221320-a1b2"
GPU_MB = 81_559.0

BASE_MS: dict[str, float | None] = {
    "dataloader": 12.0,
    "between": 0.6,
    "forward": 8.0,
    "backward": 4.6,
    "optimizer": 1.0,
    "h2d": 0.4,
    "other": 0.3,
}
"""An input-bound step of about 27 ms: the dataloader takes almost half of it."""


@dataclass
class CannedRun:
    """How to fill a store: ranks, steps, and what makes some ranks different."""

    ranks: int = 4
    steps: int = 120
    cuda: bool = True
    slow_rank: int | None = 3
    """This rank's dataloader takes 40 % longer (an input straggler); None = even ranks."""
    leak_mb_per_step: float = 0.0
    phases: dict[str, float | None] = field(default_factory=lambda: dict(BASE_MS))


def record(run: CannedRun, rank: int, step: int, rng: random.Random) -> StepRecord:
    phases: list[float | None] = []
    for name in PHASES:
        base = run.phases[name]
        if base is None:
            phases.append(None)
            continue
        slow = 1.4 if name == "dataloader" and rank == run.slow_rank else 1.0
        phases.append(base * slow * rng.uniform(0.92, 1.08))
    step_ms = sum(p for p in phases if p is not None)
    allocated = 20_000 + 1_500 * rank + step * 2.0 + rng.uniform(0, 300) if run.cuda else None
    return StepRecord(
        rank=rank,
        step=step,
        wall_start=T0 + step * 0.027,
        step_ms=step_ms,
        phases=tuple(phases),
        clock="cuda" if run.cuda else "host",
        host_rss_mb=3_100 + 40 * rank + step * run.leak_mb_per_step + rng.uniform(0, 20),
        device_allocated_mb=allocated,
        device_reserved_mb=allocated * 1.25 if allocated is not None else None,
        device_peak_mb=allocated * 1.1 if allocated is not None else None,
    )


def info(run: CannedRun, rank: int) -> RankInfo:
    return RankInfo(
        run_id=RUN_ID,
        rank=rank,
        local_rank=rank,
        world_size=run.ranks,
        host="gpu-node-01",
        pid=4000 + rank,
        started=T0,
        script="train.py",
        argv=("--epochs", "3"),
        device=f"cuda:{rank}" if run.cuda else "cpu",
        device_capacity_mb=GPU_MB if run.cuda else None,
        torch_version="2.13.0",
        traceml_version="0.1.0",
    )


def sample(run: CannedRun, rank: int, t: float) -> SystemSample:
    gpu = run.cuda
    return SystemSample(
        rank=rank,
        t=t,
        process_cpu_pct=98.0 + rank,
        host_cpu_pct=41.0,
        host_mem_used_mb=48_000.0,
        host_mem_total_mb=257_000.0,
        gpu_util_pct=54.0 - rank if gpu else None,
        gpu_mem_used_mb=26_000.0 + 1_500 * rank if gpu else None,
        gpu_mem_total_mb=GPU_MB if gpu else None,
        gpu_power_w=310.0 - 5 * rank if gpu else None,
        gpu_temp_c=67.0 + rank if gpu else None,
    )


def fill(store: RunStore, run: CannedRun, first: int = 0) -> None:
    """Add steps first..run.steps-1 of every rank, their infos and one system sample each."""
    rng = random.Random(first * 7919 + run.ranks)
    for rank in range(run.ranks):
        store.add_info(info(run, rank))
        store.add_steps([record(run, rank, s, rng) for s in range(first, run.steps)])
        store.add_system(sample(run, rank, T0 + run.steps * 0.027))


def store_of(run: CannedRun | None = None) -> RunStore:
    store = RunStore()
    fill(store, run or CannedRun())
    return store


def snapshot_of(run: CannedRun | None = None, *, store: RunStore | None = None) -> Snapshot:
    """A live snapshot taken just after the run's last step."""
    run = run or CannedRun()
    store = store or store_of(run)
    now = T0 + run.steps * 0.027 + 0.5
    return from_store(store, now=now, last_data_at=now - 0.2)


def finished_store(run: CannedRun | None = None, exit: str = "ok") -> RunStore:  # noqa: A002
    run = run or CannedRun()
    store = store_of(run)
    for rank in range(run.ranks):
        store.add_end(RankEnd(rank, exit, run.steps, T0 + 10))  # type: ignore[arg-type]
    return store


def summary_of(run: CannedRun | None = None) -> dict[str, Any]:
    """A final_summary.json object of the canned run, as the training side writes it."""
    run = run or CannedRun()
    return build_summary(
        finished_store(run),
        run_id=RUN_ID,
        script="train.py",
        argv=["--epochs", "3"],
        started=T0,
        duration_s=run.steps * 0.027,
        exit="ok",
        device="cuda" if run.cuda else "cpu",
        torch_version="2.13.0",
    )


class CannedSource:
    """A Source fed by the test: each pushed function changes the store once, on the feed thread."""

    def __init__(self) -> None:
        self.queue: queue.Queue[Callable[[RunStore], None] | None] = queue.Queue()
        """Changes to make, and None for a wake-up."""
        self.opened = False
        self.closed = False

    def push(self, change: Callable[[RunStore], None]) -> None:
        self.queue.put(change)

    def open(self) -> None:
        self.opened = True

    def pump(self, store: RunStore, timeout_s: float) -> bool:
        try:
            change = self.queue.get(timeout=timeout_s)
        except queue.Empty:
            return False
        if change is None:
            return False
        change(store)
        return True

    def wake(self) -> None:
        self.queue.put(None)

    def close(self) -> None:
        self.closed = True


async def until(pilot: Pilot[Any], check: Callable[[], bool], timeout: float = 5.0) -> None:
    """Let the app run until `check()` holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await pilot.pause(0.02)


def screen_of(app: App[Any]) -> Screen[Any]:
    """The app's current screen; a call, so an isinstance check on it narrows nothing after."""
    return app.screen


def charts_drawn(app: Any, steps: int) -> bool:
    """The main screen shows `steps` steps and both charts' pictures are built from that data
    (on a loaded host the view can be ahead of the charts' last build)."""
    main = app.main
    return (
        main.shown is not None
        and main.shown.view.total_steps == steps
        and main.chart.chart.current
        and main.memory.chart.current
    )

"""When the tx thread wakes. While someone listens: a tick (fold, publish, service) 4 times a
second and, half a tick after, the once-a-second work (system sample, heartbeat finding), never in
the same wake-up, so no step waits for both on the GIL. While nobody listens: a tick twice a
second, folding every other one, and the once-a-second work on the tick between two folds, so
the thread wakes twice a second in all."""

from __future__ import annotations

import itertools
import time
from collections import deque
from typing import Any

import pytest

from tests.unit._sinks import NullSink
from traceml.analysis.store import RunStore
from traceml.instrument import worker
from traceml.instrument.system import SystemSampler
from traceml.instrument.timer import StepTimer
from traceml.instrument.worker import TxWorker, WorkerParts, next_beat
from traceml.records import RankEnd, RankInfo, SystemSample


class Ticks(NullSink):
    """Notes the perf_counter_ns of each tick (service() runs once at the end of every tick)
    and of each fold's sending; `watched` says whether anyone listens."""

    def __init__(self, watched: bool = True) -> None:
        self.watched = watched
        self.at: list[int] = []
        self.sent: list[int] = []

    def service(self, now: float, **_: Any) -> None:
        self.at.append(time.perf_counter_ns())

    def send_steps(self, records: list[Any]) -> None:
        self.sent.append(time.perf_counter_ns())


class Samples(SystemSampler):
    """The real sampler, noting when each sample was taken."""

    def __init__(self) -> None:
        super().__init__(0, None)
        self.at: list[int] = []

    def sample(self) -> SystemSample:
        self.at.append(time.perf_counter_ns())
        return super().sample()


def test_samples_and_ticks_never_share_a_wake_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "TICK_S", 0.04)
    monkeypatch.setattr(worker, "SYSTEM_EVERY_S", 0.08)
    info = RankInfo(run_id="schedule-1", rank=0)
    raw: deque[Any] = deque(maxlen=100_000)
    timer = StepTimer(raw)
    ticks, samples = Ticks(), Samples()
    parts = WorkerParts(
        info=info, raw=raw, store=RunStore(), page_mb=0.004, wall_offset_ns=0,
        sampler=samples, sinks=[ticks],
    )  # fmt: skip
    tx = TxWorker(parts)
    tx.start()
    # Step until enough of both were seen (~0.5 s on an idle host). A count, never a fixed
    # duration: on a loaded CI host the thread can be starved for a second at a time.
    deadline = time.perf_counter() + 60.0
    while (len(samples.at) < 5 or len(ticks.at) < 10) and time.perf_counter() < deadline:
        timer.enter()
        time.sleep(0.001)
        timer.exit()
    assert tx.stop(RankEnd(0, "ok", timer.step, time.time()), timeout=10.0)
    spans = list(tx.busy._spans)  # one busy span per wake-up (a few records: one fold slice)
    assert len(samples.at) >= 5 and len(ticks.at) >= 10
    for start, stop in spans:
        sampled = any(start <= t <= stop for t in samples.at)
        ticked = any(start <= t <= stop for t in ticks.at)
        assert not (sampled and ticked), "a sample ran in a tick's wake-up"


def test_nobody_listening_the_sample_rides_on_the_tick_between_two_folds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker, "QUIET_TICK_S", 0.04)
    monkeypatch.setattr(worker, "QUIET_SERVICE_S", 0.04)
    monkeypatch.setattr(worker, "QUIET_FOLD_S", 0.08)
    monkeypatch.setattr(worker, "SYSTEM_EVERY_S", 0.08)
    raw: deque[Any] = deque(maxlen=100_000)
    timer = StepTimer(raw)
    ticks, samples = Ticks(watched=False), Samples()
    parts = WorkerParts(
        info=RankInfo(run_id="schedule-2", rank=0), raw=raw, store=RunStore(), page_mb=0.004,
        wall_offset_ns=0, sampler=samples, sinks=[ticks],
    )  # fmt: skip
    tx = TxWorker(parts)
    tx.start()
    deadline = time.perf_counter() + 60.0  # counted, never timed (see above)
    while (len(samples.at) < 5 or len(ticks.sent) < 5) and time.perf_counter() < deadline:
        timer.enter()
        time.sleep(0.001)
        timer.exit()
    assert tx.stop(RankEnd(0, "ok", timer.step, time.time()), timeout=10.0)
    spans = list(tx.busy._spans)[:-1]  # the last: the final drain at stop
    assert len(samples.at) >= 5 and len(ticks.sent) >= 5
    for span in spans:
        assert inside(span, ticks.at), "a wake-up that was no tick (a sample's own)"
        assert not (inside(span, samples.at) and inside(span, ticks.sent)), "a sample in a fold's"
    gaps = [b - a for a, b in itertools.pairwise(samples.at)]
    assert min(gaps) >= 0.75 * worker.SYSTEM_EVERY_S * 1e9, gaps


def inside(span: tuple[int, int], times: list[int]) -> bool:
    return any(span[0] <= t <= span[1] for t in times)


def test_beats_stay_on_their_grid_and_skip_what_was_missed() -> None:
    assert next_beat(1.0, 0.25, 1.1) == 1.25
    assert next_beat(1.0, 0.25, 1.25) == 1.5  # strictly after now
    assert next_beat(1.0, 0.25, 2.0) == 2.25  # three beats missed: skipped, still on the grid
    due = 0.125
    for now in (0.13, 0.2, 1.3, 1.3001, 7.0):  # late wake-ups do not shift the grid
        due = next_beat(due, 1.0, now)
        assert (due - 0.125) % 1.0 == pytest.approx(0.0, abs=1e-9) and due > now


def test_a_fold_holds_the_gil_once_a_slice_and_sleeps_between_them() -> None:
    """A drain of several slices is one busy span a slice, with a YIELD_S sleep between them
    (the training thread takes the GIL there); the last drain, at exit, sleeps nowhere."""
    raw: deque[Any] = deque(maxlen=100_000)
    timer = StepTimer(raw)
    for _ in range(3 * worker.SLICE_RECORDS + 1):
        timer.enter()
        timer.exit()
    parts = WorkerParts(
        info=RankInfo(run_id="slices-1", rank=0), raw=raw, store=RunStore(), page_mb=0.004,
        wall_offset_ns=0, sinks=[NullSink()],
    )  # fmt: skip
    tx = TxWorker(parts)
    tx._busy_from = time.perf_counter_ns()
    tx._drain(final=False)
    tx._busy_end()
    spans = list(tx.busy._spans)
    assert len(spans) == 4, "one GIL hold a slice"
    gaps = [nxt[0] - prev[1] for prev, nxt in itertools.pairwise(spans)]
    assert min(gaps) >= worker.YIELD_S * 1e9, f"gaps of {gaps} ns between the slices"
    assert tx.last_step == 3 * worker.SLICE_RECORDS
    for _ in range(2 * worker.SLICE_RECORDS):
        timer.enter()
        timer.exit()
    tx._busy_from = time.perf_counter_ns()
    tx._drain(final=True)  # the last drain, at exit: nothing is left to wait for, no sleep
    tx._busy_end()
    assert len(tx.busy._spans) == 5

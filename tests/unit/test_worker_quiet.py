"""While nobody listens, the tx thread ticks every QUIET_TICK_S, services the sinks every tick and
folds every other one (a fast loop: every 0.25 s, servicing every other tick and folding every
fourth); a listener, a filling queue or a flush make it fold at once."""

from __future__ import annotations

import time
from collections import deque
from types import SimpleNamespace
from typing import Any

import pytest

from tests.unit._sinks import NullSink, started_worker
from traceml.analysis.store import RunStore
from traceml.instrument import worker
from traceml.instrument.worker import TxWorker, WorkerParts
from traceml.records import RankEnd, RankInfo, StepRecord

TICKS = 12
FOLD_EVERY = 2
"""Ticks between two folds while nobody listens, with the fixture's periods."""


class Listened(NullSink):
    """A sink that says whether anyone listens, and notes the tick (counted from 1) of each of
    its services and each of its sends."""

    def __init__(self, watched: bool) -> None:
        self.watched = watched
        self.tick = 0
        """The tick under way; counted by the `_tick` wrapper below."""
        self.services: list[int] = []
        self.sends: list[int] = []
        self.records = 0

    def send_steps(self, records: list[StepRecord]) -> None:
        self.sends.append(self.tick)
        self.records += len(records)

    def service(self, now: float, **_: Any) -> None:
        self.services.append(self.tick)


def run_ticks(sink: Listened, queue: int = 10_000, per_tick: int = 5) -> TxWorker:
    """A tx thread with a fast tick, stepped `per_tick` times a tick until TICKS ticks passed."""
    tx, timer = started_worker(sink, "quiet-1", queue)
    deadline = time.perf_counter() + 60.0  # ticks are counted, never timed: CI hosts stall
    seen = 0
    while sink.tick < TICKS and time.perf_counter() < deadline:
        if sink.tick > seen:
            seen = sink.tick
            for _ in range(per_tick):
                timer.enter()
                timer.exit()
        time.sleep(0.002)
    assert sink.tick >= TICKS
    assert tx.stop(RankEnd(0, "ok", timer.step, time.time()), timeout=30.0)
    return tx


@pytest.fixture(autouse=True)
def fast_ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "TICK_S", 0.02)
    monkeypatch.setattr(worker, "QUIET_TICK_S", 0.02)
    monkeypatch.setattr(worker, "QUIET_FOLD_S", FOLD_EVERY * 0.02)
    monkeypatch.setattr(worker, "QUIET_SERVICE_S", 0.02)
    monkeypatch.setattr(worker, "SYSTEM_EVERY_S", 60.0)
    real = TxWorker._tick

    def counted(self: TxWorker, final: bool, asked: bool = False) -> bool:
        for sink in self.p.sinks:
            sink.tick += 1  # type: ignore[attr-defined]
        return real(self, final, asked)

    monkeypatch.setattr(TxWorker, "_tick", counted)


def test_nobody_listening_folds_every_other_tick_and_services_every_tick() -> None:
    sink = Listened(watched=False)
    run_ticks(sink)
    sends = [t for t in sink.sends if t <= TICKS]  # the final fold at stop comes after
    services = [t for t in sink.services if t <= TICKS]
    assert sends, sink.sends
    assert all(t % FOLD_EVERY == 0 for t in sends), sink.sends
    assert len(sends) <= TICKS // FOLD_EVERY
    assert services == list(range(1, TICKS + 1)), sink.services
    assert sink.records > 0


def test_a_listener_gets_a_fold_and_a_service_every_tick() -> None:
    sink = Listened(watched=True)
    run_ticks(sink)
    sends = sorted(set(t for t in sink.sends if t <= TICKS))
    assert len(sends) >= TICKS - 2, sink.sends  # the first ticks may come before any step
    assert [t for t in sink.services if t <= TICKS] == list(range(1, TICKS + 1)), sink.services


def test_a_queue_filling_up_is_folded_every_tick_and_drops_nothing() -> None:
    sink = Listened(watched=False)
    tx = run_ticks(sink, queue=64, per_tick=20)  # a quarter of the queue every tick
    sends = sorted(set(t for t in sink.sends if t <= TICKS))
    assert len(sends) >= TICKS - 2, sink.sends
    assert tx.dropped == 0


def test_the_primary_finding_is_diagnosed_every_15_s_unwatched_and_every_5_s_watched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    clock = SimpleNamespace(**{k: getattr(time, k) for k in ("time", "perf_counter_ns")})
    clock.monotonic = lambda: now[0]
    monkeypatch.setattr(worker, "time", clock)  # the worker module's clock alone
    sink = Listened(watched=False)
    asked: list[float] = []

    def primary() -> str:
        asked.append(now[0])
        return "INPUT_BOUND"

    parts = WorkerParts(
        info=RankInfo(run_id="primary-1", rank=0), raw=deque(), store=RunStore(), page_mb=0.004,
        wall_offset_ns=0, sinks=[sink], primary=primary,
    )  # fmt: skip
    tx = TxWorker(parts)  # not started: its once-a-second work is called here, a second apart
    tx._sample()
    assert asked == []  # no step yet: nothing to diagnose
    tx.last_step = 0

    def seconds(n: int) -> None:
        for _ in range(n):
            tx._sample()
            now[0] += 1.0

    seconds(31)
    assert asked == [100.0, 115.0, 130.0]
    sink.watched = True
    seconds(11)
    assert asked[3:] == [135.0, 140.0]
    assert tx._primary == "INPUT_BOUND"


@pytest.mark.parametrize(
    ("fast", "folds", "services"),
    [(False, [2, 4, 6, 8], [1, 2, 3, 4, 5, 6, 7, 8]), (True, [4, 8], [2, 4, 6, 8])],
    ids=["slow loop: 0.5 s ticks", "fast loop: 0.25 s ticks"],
)
def test_the_quiet_cadence_folds_once_a_second_and_services_twice(
    monkeypatch: pytest.MonkeyPatch, fast: bool, folds: list[int], services: list[int]
) -> None:
    """The real periods, ticks called in turn: whatever the tick, nobody listening gets a fold a
    second and a service every half second."""
    monkeypatch.undo()  # the real periods and the real _tick
    sink = Listened(watched=False)
    raw: deque[Any] = deque(maxlen=16_384)
    parts = WorkerParts(
        info=RankInfo(run_id="cadence-1", rank=0), raw=raw, store=RunStore(), page_mb=0.004,
        wall_offset_ns=0, sinks=[sink],
    )  # fmt: skip
    tx = TxWorker(parts)  # not started: its ticks are called here
    tx._fast = fast
    tx._period = tx._tick_s()
    assert tx._period == (worker.TICK_S if fast else worker.QUIET_TICK_S)
    done = []
    for tick in range(1, 9):
        sink.tick = tick
        if tx._tick(final=False):
            done.append(tick)
    assert done == folds
    assert sink.services == services

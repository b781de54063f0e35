"""While nobody listens, the tx thread folds every QUIET_FOLD_TICKS-th tick and only services the
sinks on the others; a listener, a filling queue or a flush make it fold at once."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.unit._sinks import NullSink, started_worker
from traceml.instrument import worker
from traceml.instrument.worker import TxWorker
from traceml.records import RankEnd, StepRecord

TICKS = 12


class Listened(NullSink):
    """A sink that says whether anyone listens, and notes each service (tick) and each send,
    as the tick number it came in."""

    def __init__(self, watched: bool) -> None:
        self.watched = watched
        self.ticks = 0
        self.sends: list[int] = []
        self.records = 0

    def send_steps(self, records: list[StepRecord]) -> None:
        self.sends.append(self.ticks)
        self.records += len(records)

    def service(self, now: float, **_: Any) -> None:
        self.ticks += 1


def run_ticks(sink: Listened, queue: int = 10_000, per_tick: int = 5) -> TxWorker:
    """A tx thread with a fast tick, stepped `per_tick` times a tick until TICKS ticks passed."""
    tx, timer = started_worker(sink, "quiet-1", queue)
    deadline = time.perf_counter() + 60.0  # ticks are counted, never timed: CI hosts stall
    seen = 0
    while sink.ticks < TICKS and time.perf_counter() < deadline:
        if sink.ticks > seen:
            seen = sink.ticks
            for _ in range(per_tick):
                timer.enter()
                timer.exit()
        time.sleep(0.002)
    assert sink.ticks >= TICKS
    assert tx.stop(RankEnd(0, "ok", timer.step, time.time()), timeout=30.0)
    return tx


@pytest.fixture(autouse=True)
def fast_ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "TICK_S", 0.02)
    monkeypatch.setattr(worker, "SYSTEM_EVERY_S", 60.0)


def test_nobody_listening_folds_every_fourth_tick_and_services_every_tick() -> None:
    sink = Listened(watched=False)
    run_ticks(sink)
    during = [t for t in sink.sends if t < TICKS]  # the final fold at stop comes after
    assert during, sink.sends
    # Sent in the tick before its service: ticks 4, 8, 12 fold (counted from 1), i.e. seen as
    # 3, 7, 11 services done before.
    assert all((t + 1) % worker.QUIET_FOLD_TICKS == 0 for t in during), sink.sends
    assert len(during) <= TICKS // worker.QUIET_FOLD_TICKS
    assert sink.records > 0


def test_a_listener_gets_a_fold_every_tick() -> None:
    sink = Listened(watched=True)
    run_ticks(sink)
    during = sorted(set(t for t in sink.sends if t < TICKS))
    assert len(during) >= TICKS - 2, sink.sends  # the first ticks may come before any step


def test_a_queue_filling_up_is_folded_every_tick_and_drops_nothing() -> None:
    sink = Listened(watched=False)
    tx = run_ticks(sink, queue=64, per_tick=20)  # a quarter of the queue every tick
    during = sorted(set(t for t in sink.sends if t < TICKS))
    assert len(during) >= TICKS - 2, sink.sends
    assert tx.dropped == 0

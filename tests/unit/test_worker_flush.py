"""`TxWorker.flush`: the tx thread folds the queued steps now, not at its next tick, so
`traceml.summary()` asked right after a step counts it."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.unit._sinks import NullSink, started_worker
from traceml.instrument import worker
from traceml.instrument.timer import StepTimer
from traceml.instrument.worker import TxWorker
from traceml.records import RankEnd, StepRecord


class Sent(NullSink):
    """The records the tx thread sent, and what a flush() asked from its own thread returned."""

    def __init__(self) -> None:
        self.records: list[StepRecord] = []
        self.tx: TxWorker | None = None
        self.own_flush: list[tuple[bool, float]] = []

    def send_steps(self, records: list[StepRecord]) -> None:
        self.records.extend(records)

    def service(self, now: float, **_: Any) -> None:
        if self.tx is not None and not self.own_flush:
            t0 = time.perf_counter()
            self.own_flush.append((self.tx.flush(5.0), time.perf_counter() - t0))


def steps(timer: StepTimer, n: int) -> None:
    for _ in range(n):
        timer.enter()
        timer.exit()


def test_flush_folds_the_queued_steps_before_the_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "TICK_S", 60.0)  # no tick of its own during the test
    monkeypatch.setattr(worker, "SYSTEM_EVERY_S", 60.0)
    sink = Sent()
    tx, timer = started_worker(sink, "flush-1")
    try:
        steps(timer, 25)
        time.sleep(0.2)
        assert sink.records == []  # the tick is a minute away: nothing folded yet
        assert tx.flush(30.0)
        assert [r.step for r in sink.records] == list(range(25))
        steps(timer, 5)
        assert tx.flush(30.0)  # a second flush takes the steps since the first
        assert [r.step for r in sink.records] == list(range(30))
        assert tx.last_step == 29
    finally:
        assert tx.stop(RankEnd(0, "ok", timer.step, time.time()), timeout=30.0)


def test_flush_is_refused_after_the_end_and_on_the_tx_thread_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker, "TICK_S", 0.01)
    sink = Sent()
    tx, timer = started_worker(sink, "flush-1")
    sink.tx = tx  # its service() (on the tx thread, each tick) asks for a flush once
    deadline = time.perf_counter() + 30.0
    while not sink.own_flush and time.perf_counter() < deadline:
        time.sleep(0.01)
    ok, took = sink.own_flush[0]
    assert not ok and took < 1.0  # it would wait for itself: refused at once, not after 5 s
    assert tx.stop(RankEnd(0, "ok", timer.step, time.time()), timeout=30.0)
    t0 = time.perf_counter()
    assert not tx.flush(5.0)  # no thread left to fold: at once
    assert time.perf_counter() - t0 < 1.0


def test_a_flush_waiting_when_the_thread_dies_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "TICK_S", 60.0)
    monkeypatch.setattr(worker, "SYSTEM_EVERY_S", 60.0)

    class Broken(Sent):
        def send_steps(self, records: list[StepRecord]) -> None:
            raise_in_tick.wait(10.0)
            raise RuntimeError("sink broke")

    raise_in_tick = threading.Event()
    monkeypatch.setattr(worker, "warn_once", lambda *a, **k: None)
    sink = Broken()
    tx, timer = started_worker(sink, "flush-1")
    steps(timer, 3)
    out: list[bool] = []
    asker = threading.Thread(target=lambda: out.append(tx.flush(30.0)))
    asker.start()
    time.sleep(0.1)
    t0 = time.perf_counter()
    raise_in_tick.set()  # the flush's tick raises: the thread steps aside, done is set
    asker.join(30.0)
    assert out == [False] and time.perf_counter() - t0 < 5.0
    assert tx.done.is_set()

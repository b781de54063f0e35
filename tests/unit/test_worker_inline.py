"""Beats on the training thread: while steps end, the step timer runs the tx worker's due beat
(fold, publish, service, samples) at the end of the first step past it, and the tx thread sleeps;
it beats itself only when no step ends in time, when a beat broke, and at the end."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import pytest

from tests.unit._sinks import NullSink, started_worker
from traceml.instrument import worker
from traceml.instrument.timer import StepTimer, native
from traceml.instrument.worker import TxWorker
from traceml.records import RankEnd

C = native()
TIMERS = [StepTimer] + ([C.StepTimer] if C is not None else [])


class Clock:
    """A settable clock for the timer (ns)."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


@pytest.mark.parametrize("timer_type", TIMERS, ids=lambda t: t.__module__)
def test_timer_calls_beat_at_the_first_step_end_then_when_due(timer_type: Any) -> None:
    clock, raw = Clock(), deque[Any](maxlen=100)
    timer = timer_type(raw, clock=clock)
    called: list[int] = []

    def beat(t: int) -> int:
        called.append(t)
        return t + 100

    timer.use_beat(beat)
    for t in (10, 20, 50, 109, 110, 150, 209, 215):
        clock.now = t - 1
        timer.enter()
        clock.now = t
        timer.exit()
    assert called == [10, 110, 215]
    assert len(raw) == 8  # the step is queued before its beat runs
    timer.use_beat(None)
    clock.now = 1000
    timer.enter()
    timer.exit()
    assert called == [10, 110, 215]


@pytest.mark.parametrize("timer_type", TIMERS, ids=lambda t: t.__module__)
def test_a_beat_interrupted_by_keyboardinterrupt_reaches_the_loop_and_is_retried(
    timer_type: Any,
) -> None:
    clock, raw = Clock(), deque[Any](maxlen=100)
    timer = timer_type(raw, clock=clock)
    calls: list[int] = []

    def beat(t: int) -> int:
        calls.append(t)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return t + 10

    timer.use_beat(beat)
    clock.now = 5
    with pytest.raises(KeyboardInterrupt):
        timer.exit()
    for t in (500_000_000, 1_000_000_004, 1_000_000_005):
        clock.now = t
        timer.exit()
    assert calls == [5, 1_000_000_005]  # a second later, not at every step end meanwhile


class Beats(NullSink):
    """Notes which thread serviced the sinks (once a beat's tick) and when; `fail_on` makes a
    service on that thread raise once."""

    def __init__(self) -> None:
        self.watched = True
        self.by: list[tuple[int, float]] = []
        self.fail_on: int | None = None

    def service(self, now: float, **_: Any) -> None:
        me = threading.get_ident()
        self.by.append((me, time.monotonic()))
        if me == self.fail_on:
            self.fail_on = None
            raise RuntimeError("sink broke")


def started(sink: Beats, **parts: Any) -> tuple[TxWorker, StepTimer]:
    """A started worker over `sink` whose timer runs the due beats at its steps' ends."""
    tx, timer = started_worker(sink, "inline-1", queue=100_000, **parts)
    timer.use_beat(tx.beat)
    return tx, timer


def steps_until(timer: StepTimer, done: Any, limit_s: float = 60.0) -> None:
    """1 ms steps until done() (a count, never a fixed time: a loaded host starves threads)."""
    deadline = time.monotonic() + limit_s
    while not done() and time.monotonic() < deadline:
        timer.enter()
        time.sleep(0.001)
        timer.exit()


def test_steps_that_end_run_the_beats_and_the_tx_thread_sleeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker, "TICK_S", 0.05)
    sink = Beats()
    tx, timer = started(sink)
    me = threading.get_ident()
    steps_until(timer, lambda: len(sink.by) >= 12)
    assert tx.stop(RankEnd(0, "ok", timer.step, time.time()), timeout=10.0)
    loop = [who for who, _ in sink.by[:12]]
    assert loop.count(me) >= 10, "the training thread did not run the beats"
    assert (tx.last_step + 1, tx.dropped) == (timer.step, 0)  # every step folded


def test_the_tx_thread_beats_while_no_step_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "TICK_S", 0.05)
    monkeypatch.setattr(worker, "INLINE_GRACE_S", 0.3)
    sink = Beats()
    tx, timer = started(sink)
    me = threading.get_ident()
    steps_until(timer, lambda: sum(who == me for who, _ in sink.by) >= 3)
    paused = time.monotonic()
    deadline = paused + 60.0
    while not any(who == tx.ident for who, _ in sink.by) and time.monotonic() < deadline:
        time.sleep(0.01)  # a step that does not end: a stall, or a pause between steps
    took_over = [at for who, at in sink.by if who == tx.ident]
    assert took_over, "nothing beat while no step ended"
    steps_until(timer, lambda: sum(who == me for who, _ in sink.by) >= 6)
    assert tx.stop(RankEnd(0, "ok", timer.step, time.time()), timeout=10.0)
    assert sum(who == me for who, _ in sink.by) >= 6, "the loop did not take the beats back"


def test_a_beat_that_raises_moves_the_beats_to_the_tx_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker, "TICK_S", 0.05)
    monkeypatch.setattr(worker, "INLINE_GRACE_S", 0.1)
    warned: list[str] = []
    monkeypatch.setattr(worker, "warn_once", lambda key, message: warned.append(message))
    sink = Beats()
    sink.fail_on = threading.get_ident()
    tx, timer = started(sink)
    # No exception reaches the loop; the beats go on, on the tx thread.
    steps_until(timer, lambda: sum(who == tx.ident for who, _ in sink.by) >= 4)
    assert tx.stop(RankEnd(0, "ok", timer.step, time.time()), timeout=10.0)
    assert warned == ["beats moved to the background (RuntimeError: sink broke)"]
    me = threading.get_ident()
    assert [who for who, _ in sink.by].count(me) == 1  # the one that broke
    assert (tx.last_step + 1, tx.dropped) == (timer.step, 0)


def test_stop_from_a_signal_handler_inside_a_beat_still_finishes() -> None:
    """SIGTERM's handler runs shutdown on the training thread, possibly in the middle of its
    beat (holding the beat lock): the end must not wait for that lock, or the summary is lost."""
    finished: list[RankEnd] = []

    def finish(end: RankEnd) -> str:
        finished.append(end)
        return "summary.json"

    tx, timer = started(Beats(), finish=finish)
    steps_until(timer, lambda: tx._ready)
    tx._lock.acquire()  # as the interrupted beat holds it
    tx._beater = threading.get_ident()
    try:
        assert tx.stop(RankEnd(0, "signal", timer.step, time.time()), timeout=10.0)
    finally:
        tx._beater = None
        tx._lock.release()
    assert [e.exit for e in finished] == ["signal"] and tx.summary_path == "summary.json"
    assert tx.beat(time.perf_counter_ns()) == worker.NEVER_NS  # no beat after the end


def test_a_sink_that_says_no_keeps_every_beat_on_the_tx_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The job link says no while rank 0 collects the job in-process (every rank's records
    decoded and folded in its service): that work stays off the training thread."""
    monkeypatch.setattr(worker, "TICK_S", 0.05)
    sink = Beats()
    sink.inline = False  # type: ignore[attr-defined]
    tx, timer = started(sink)
    steps_until(timer, lambda: len(sink.by) >= 6)
    assert tx.stop(RankEnd(0, "ok", timer.step, time.time()), timeout=10.0)
    assert {who for who, _ in sink.by} == {tx.ident}

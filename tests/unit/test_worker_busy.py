"""The tx thread's own work, seen from the steps it slows: a real tx thread holding the GIL in
Python while a real training thread runs steps. Those steps carry the overlap (held_ms) and are
not called spikes for it, though they are several times slower than their neighbours."""

from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Any

from tests.unit._sinks import NullSink
from traceml.analysis.store import RunStore
from traceml.config import DEFAULT_THRESHOLDS
from traceml.instrument.timer import StepTimer
from traceml.instrument.worker import TxWorker, WorkerParts
from traceml.records import RankEnd, RankInfo

SPIN_S = 0.04
"""Python work per tick on the tx thread: far longer than the interpreter's switch interval
(5 ms), so the training thread waits for the GIL several times in each."""


class SpinningSink(NullSink):
    """A sink whose service runs pure Python for SPIN_S each tick: a slow fold, as a fast loop
    on a loaded host makes it."""

    def service(self, now: float, **_: Any) -> None:
        end = time.perf_counter() + SPIN_S
        while time.perf_counter() < end:
            pass


def _python_step() -> int:
    # ~0.3 ms of interpreter work: it needs the GIL throughout. Long beside what handing the GIL
    # back costs a step (50-300 µs on a loaded host, none of it inside the tx thread's span), so
    # a slowed step's own time stays clearly typical; at ~10 µs a step, a loaded host's hand-offs
    # made every slowed step's own time a spike's, and the test found nothing to check.
    return sum(range(10_000))


def test_steps_slowed_by_the_tx_thread_carry_the_overlap_and_are_no_spikes() -> None:
    info = RankInfo(run_id="busy-1", rank=0)
    store = RunStore(history_steps=1_000_000)
    store.add_info(info)
    raw: deque[Any] = deque(maxlen=1_000_000)
    timer = StepTimer(raw)
    parts = WorkerParts(
        info=info, raw=raw, store=store, page_mb=0.004, wall_offset_ns=0, sinks=[SpinningSink()]
    )
    worker = TxWorker(parts)
    worker.start()
    end = time.perf_counter() + 1.2
    while time.perf_counter() < end:
        timer.enter()
        _python_step()
        timer.exit()
    assert worker.stop(RankEnd(0, "ok", timer.step, time.time()), timeout=10.0)

    records = store.recent(0, 1_000_000)
    assert len(records) == timer.step
    typical = statistics.median(r.step_ms for r in records)
    factor = DEFAULT_THRESHOLDS.spike_factor
    held = [r for r in records if r.held_ms is not None]
    assert held, "the tx thread's spins overlapped no step"
    assert all(0 < r.held_ms <= r.step_ms + 1e-6 for r in held)  # type: ignore[operator]
    # Slowed steps that would be spikes by their whole time, and whose own time (less the
    # overlap) is clearly typical. held_ms covers the tx thread's span only: handing the GIL
    # back after it costs the step more, which the spike judgement sees against its rolling
    # median of the last 64 steps. So "clearly" leaves room for both: above 1.5 times the spike
    # threshold of the run's median by the whole time, below half of it by the own time.
    own_typical = {
        r.step
        for r in held
        if r.step_ms > 1.5 * factor * typical and r.step_ms - r.held_ms <= factor * typical / 2  # type: ignore[operator]
    }
    assert own_typical, "no step waited for the GIL: the test did not exercise what it is about"
    spikes = store.summary_view().ranks[0].spikes
    listed = {s.step for s in spikes.listed} if spikes is not None else set()
    assert not listed & own_typical
    assert store.held_totals()[0] == len(held)

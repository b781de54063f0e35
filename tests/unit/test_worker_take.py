"""How the tx thread takes a tick's steps: host steps convert at once, a CUDA step waits for its
events and holds back the steps after it, so records leave in step order with nothing lost."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from tests.unit._sinks import NullSink
from traceml.analysis.store import RunStore
from traceml.instrument.resolve import host_records_for, segment_ms
from traceml.instrument.timer import N_PHASES, RawStep, native
from traceml.instrument.worker import TxWorker, WorkerParts
from traceml.records import RankInfo, StepRecord

NS = 1_000_000
ALL_SEEN = (1 << N_PHASES) - 1


class Event:
    """What CudaMarker.try_resolve asks of an event: whether it is done, and ms between two."""

    def __init__(self, at_ms: float, done: bool = True) -> None:
        self.at_ms, self.done = at_ms, done

    def query(self) -> bool:
        return self.done

    def elapsed_time(self, end: Event) -> float:
        return end.at_ms - self.at_ms


class Marker:
    """The tx thread's side of CudaMarker, with the events above in place of CUDA's."""

    def try_resolve(self, marks: Sequence[tuple[int, Any]]) -> list[float] | None:
        if not marks[-1][1].query():
            return None
        return segment_ms(marks, lambda a, b: float(a.elapsed_time(b)))


class Sent(NullSink):
    def __init__(self) -> None:
        self.records: list[StepRecord] = []

    def send_steps(self, records: list[StepRecord]) -> None:
        self.records.extend(records)


def raw(step: int, marks: Any = None) -> RawStep:
    start = step * 4 * NS
    return RawStep(step, start, start + 4 * NS, (NS,) * N_PHASES, ALL_SEEN, -1, marks, None)


def worker(raws: list[RawStep]) -> tuple[TxWorker, Sent]:
    sink = Sent()
    info = RankInfo(run_id="take-1", rank=0)
    store = RunStore(history_steps=64)
    store.add_info(info)
    parts = WorkerParts(
        info=info,
        raw=deque(raws),
        store=store,
        page_mb=0.004,
        wall_offset_ns=0,
        sinks=[sink],
        cuda=Marker(),  # type: ignore[arg-type]
        host_records=host_records_for(native()),
    )
    return TxWorker(parts), sink


def test_host_steps_and_steps_without_marks_convert_at_once() -> None:
    tx, sink = worker([raw(0), raw(1, marks=()), raw(2)])
    tx._tick(final=False)
    assert [(r.step, r.clock) for r in sink.records] == [(0, "host"), (1, "host"), (2, "host")]
    assert not tx.p.raw


def test_a_cuda_step_waits_for_its_events_and_holds_back_the_steps_after_it() -> None:
    pending = Event(9.0, done=False)
    marks = ((0, Event(0.0)), (2, Event(1.5)), (3, pending))
    tx, sink = worker([raw(0), raw(1, marks=marks), raw(2)])
    tx._tick(final=False)
    assert [r.step for r in sink.records] == [0]  # step 2 waits behind step 1's events
    pending.done = True
    tx._tick(final=False)
    assert [(r.step, r.clock) for r in sink.records] == [(0, "host"), (1, "cuda"), (2, "host")]
    assert sink.records[1].phases[0] == 1.5 and sink.records[1].phases[2] == 7.5  # device time
    assert tx.dropped == 0

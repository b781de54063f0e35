"""Turning raw steps into records: host conversion, CUDA segment attribution, the event pool."""

from __future__ import annotations

import random

import pytest

from traceml.instrument.cuda import CudaMarker, EventPool
from traceml.instrument.resolve import host_records, phases_or_none, segment_ms, to_record
from traceml.instrument.timer import (
    BACKWARD,
    BETWEEN,
    DATALOADER,
    FORWARD,
    N_PHASES,
    OTHER,
    RawStep,
)
from traceml.records import PHASES


class FakeEvent:
    """Stands for torch.cuda.Event: a device timestamp in ms and whether the GPU reached it."""

    def __init__(self, t_ms: float, done: bool = True) -> None:
        self.t_ms = t_ms
        self.done = done
        self.recorded = 0

    def record(self) -> None:
        self.recorded += 1

    def query(self) -> bool:
        return self.done

    def elapsed_time(self, other: FakeEvent) -> float:
        return other.t_ms - self.t_ms


def test_segments_are_labelled_by_their_opening_mark() -> None:
    marks = [
        (BETWEEN, 0.0),
        (DATALOADER, 1.0),
        (OTHER, 4.0),
        (FORWARD, 5.0),
        (OTHER, 9.0),
        (BETWEEN, 10.0),
    ]
    acc = segment_ms(marks, lambda a, b: b - a)
    assert acc[BETWEEN] == 1.0
    assert acc[DATALOADER] == 3.0
    assert acc[OTHER] == 2.0
    assert acc[FORWARD] == 4.0
    assert sum(acc) == 10.0


def test_phases_never_seen_are_none_not_zero() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 5.0]
    seen = (1 << BETWEEN) | (1 << FORWARD) | (1 << OTHER)
    out = phases_or_none(values, seen)
    assert out[DATALOADER] is None
    assert out[BACKWARD] is None
    assert out[FORWARD] == 3.0


def raw(step: int = 0, marks: tuple[object, ...] | None = None, rss: int = -1) -> RawStep:
    ns = (2_000_000, 1_000_000, 3_000_000, 0, 0, 0, 4_000_000)
    return RawStep(step, 10_000_000, 20_000_000, ns, 0b1000111, rss, marks, None)


def test_host_record_sums_to_wall_time() -> None:
    rec = to_record(raw(rss=256), rank=3, wall_offset_ns=1_000_000_000, page_mb=4096 / 2**20)
    assert rec.clock == "host"
    assert rec.step_ms == pytest.approx(10.0)
    assert sum(p for p in rec.phases if p is not None) == pytest.approx(rec.step_ms)
    assert rec.host_rss_mb == pytest.approx(1.0)
    assert rec.wall_start == pytest.approx(1.01)
    assert rec.rank == 3
    assert rec.phase("backward") is None


def test_cuda_record_uses_device_time() -> None:
    phases = [0.0, 0.5, 7.0, 0.0, 0.0, 0.0, 1.5]
    rec = to_record(raw(), rank=0, wall_offset_ns=0, page_mb=1.0, phases_ms=phases)
    assert rec.clock == "cuda"
    assert rec.step_ms == pytest.approx(9.0)
    assert rec.host_rss_mb is None


def test_marker_waits_for_the_last_event_and_recycles_events() -> None:
    made: list[FakeEvent] = []

    def factory() -> FakeEvent:
        made.append(FakeEvent(float(len(made))))
        return made[-1]

    pool = EventPool(factory)
    marker = CudaMarker(pool)
    events = [marker.record() for _ in range(4)]
    assert all(e.recorded == 1 for e in events)
    events[-1].done = False
    marks = [(BETWEEN, events[0]), (FORWARD, events[1]), (OTHER, events[2]), (BETWEEN, events[3])]
    assert marker.try_resolve(marks) is None
    events[-1].done = True
    phases = marker.try_resolve(marks)
    assert phases is not None
    assert phases[FORWARD] == 1.0
    assert sum(phases) == 3.0
    again = [marker.record() for _ in range(3)]
    assert {id(e) for e in again} == {id(e) for e in events[:3]}  # the last one stays in use
    assert pool.created == 4


def test_pool_keeps_a_bounded_free_list() -> None:
    pool = EventPool(lambda: object(), max_free=2)
    pool.release([object() for _ in range(5)])
    assert pool.acquire() is not None
    assert pool.created == 0
    pool.acquire()
    pool.acquire()
    assert pool.created == 1
    assert PHASES[0] == "dataloader"


def test_host_records_of_a_batch_equal_to_record_of_each() -> None:
    rng = random.Random(3)
    raws = []
    for step in range(500):
        phase_ns = tuple(rng.randrange(0, 10**6) for _ in range(N_PHASES))
        start = step * 10**6
        dev = (rng.random(), rng.random(), None) if step % 3 == 0 else None
        raws.append(
            RawStep(
                step,
                start,
                start + sum(phase_ns),
                phase_ns,
                rng.randrange(0, 1 << N_PHASES),
                rng.randrange(1000, 2000) if step % 4 == 0 else -1,
                None,
                dev,
                rng.randrange(0, 10**6) if step % 2 else -1,
            )
        )
    assert host_records(raws, 3, 17, 0.004) == [to_record(r, 3, 17, 0.004) for r in raws]

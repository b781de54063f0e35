"""apply_events: events reach the store in order, consecutive step batches in one call."""

from __future__ import annotations

from collections.abc import Sequence

from traceml.records import RankEnd, RankInfo, StepRecord, SystemSample
from traceml.transport.subscribe.fold import apply_events
from traceml.transport.wire.events import EndEvent, Event, RankState, StateEvent, StepsEvent


class Recorder:
    """An EventStore that logs each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def add_steps(self, records: Sequence[StepRecord]) -> None:
        self.calls.append(("steps", [(r.rank, r.step) for r in records]))

    def add_system(self, sample: SystemSample) -> None:
        self.calls.append(("system", sample.rank))

    def add_info(self, info: RankInfo) -> None:
        self.calls.append(("info", info.rank))

    def add_end(self, end: RankEnd) -> None:
        self.calls.append(("end", end.rank))

    def set_dropped(self, rank: int, dropped: int) -> None:
        self.calls.append(("dropped", rank))

    def set_phase(self, rank: int, phase: str | None) -> None:
        self.calls.append(("phase", rank))

    def set_rank_state(self, rank: int, state: RankState) -> None:
        self.calls.append(("state", (rank, state)))


def steps(rank: int, *numbers: int) -> StepsEvent:
    records = tuple(StepRecord(rank, s, 0.0, 1.0, (None,) * 7) for s in numbers)
    return StepsEvent(rank, records, numbers[0])


def test_consecutive_steps_are_folded_in_one_call_and_order_is_kept() -> None:
    store = Recorder()
    events: list[Event] = [
        steps(0, 1, 2),
        steps(1, 1),
        EndEvent(RankEnd(1, "ok", 2, 0.0)),
        steps(0, 3),
    ]
    assert apply_events(store, events) is True
    assert store.calls == [
        ("steps", [(0, 1), (0, 2), (1, 1)]),
        ("end", 1),
        ("steps", [(0, 3)]),
    ]


def test_states_alone_are_not_news_from_the_run() -> None:
    store = Recorder()
    assert apply_events(store, [StateEvent(0, "stalled")]) is False
    assert apply_events(store, []) is False
    assert store.calls == [("state", (0, "stalled"))]

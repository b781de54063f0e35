"""Fold transport events into a store: the one place that maps each event to a store call.

Used by the viewer's feed and by rank 0's job collector. The store is anything with RunStore's
methods (a Protocol, so the transport never imports the analysis package or torch).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from traceml.records import RankEnd, RankInfo, StepRecord, SystemSample
from traceml.transport.wire.events import (
    EndEvent,
    Event,
    HeartbeatEvent,
    InfoEvent,
    RankState,
    StateEvent,
    StepsEvent,
    SystemEvent,
    TimelineEvent,
)


class EventStore(Protocol):
    """The part of analysis.store.RunStore that events feed."""

    def add_steps(self, records: Sequence[StepRecord]) -> None: ...
    def add_system(self, sample: SystemSample) -> None: ...
    def add_info(self, info: RankInfo) -> None: ...
    def add_end(self, end: RankEnd) -> None: ...
    def set_dropped(self, rank: int, dropped: int) -> None: ...
    def set_phase(self, rank: int, phase: str | None) -> None: ...
    def set_rank_state(self, rank: int, state: RankState) -> None: ...


def apply_event(store: EventStore, event: Event) -> bool:
    """Apply one event; True when it came from the run itself (not a state the subscriber
    inferred locally, e.g. from silence)."""
    if isinstance(event, StepsEvent):
        store.add_steps(event.records)
    elif isinstance(event, SystemEvent):
        store.add_system(event.sample)
    elif isinstance(event, InfoEvent):
        store.add_info(event.info)
    elif isinstance(event, EndEvent):
        store.add_end(event.end)
    elif isinstance(event, HeartbeatEvent):
        store.set_dropped(event.rank, event.dropped)
        store.set_phase(event.rank, event.phase)
    elif isinstance(event, TimelineEvent):
        # Optional: RunStore.seed_timeline; a store without a timeline has nothing to seed.
        seed = getattr(store, "seed_timeline", None)
        if seed is not None:
            seed(event.rank, event.windows)
    elif isinstance(event, StateEvent):
        store.set_rank_state(event.rank, event.state)
        return False
    return True


def apply_events(store: EventStore, events: Iterable[Event]) -> bool:
    """Apply events in order; the records of consecutive StepsEvents go in one add_steps call
    (one lock, one pass). True when any event came from the run itself (see apply_event)."""
    arrived = False
    batch: list[StepRecord] = []
    for event in events:
        if isinstance(event, StepsEvent):
            batch.extend(event.records)
            arrived = True
            continue
        if batch:
            store.add_steps(batch)
            batch = []
        arrived = apply_event(store, event) or arrived
    if batch:
        store.add_steps(batch)
    return arrived

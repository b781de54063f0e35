"""What a Subscriber hands to its reader: small frozen events, one per fact, in arrival order.

For each rank, StepsEvents come in seq order, each record exactly once; a GapEvent marks records
that are lost for good (they fell out of the rank's history before anyone could fetch them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from traceml.records import Finding, RankEnd, RankInfo, StepRecord, SystemSample

RankState = Literal["live", "stalled", "dead", "finished"]


@dataclass(frozen=True, slots=True)
class StepsEvent:
    """New step records of one rank, in seq order, none seen before."""

    rank: int
    records: tuple[StepRecord, ...]
    first_seq: int = 0
    """Seq of records[0]; the others follow without holes."""


@dataclass(frozen=True, slots=True)
class SystemEvent:
    """A system sample of one rank (about 1 Hz)."""

    sample: SystemSample

    @property
    def rank(self) -> int:
        return self.sample.rank


@dataclass(frozen=True, slots=True)
class InfoEvent:
    """Who a rank is: at attach, and again when torchelastic restarts it (new incarnation)."""

    info: RankInfo

    @property
    def rank(self) -> int:
        return self.info.rank


@dataclass(frozen=True, slots=True)
class EndEvent:
    """A rank shut TraceML down; no more records will come from it."""

    end: RankEnd
    summary_path: str | None = None
    """Where the run's final_summary.json went, when the rank knows (local rank 0)."""

    @property
    def rank(self) -> int:
        return self.end.rank


@dataclass(frozen=True, slots=True)
class HeartbeatEvent:
    """The rank's once-a-second sign of life."""

    rank: int
    last_step: int
    """Highest step index reached; -1 before the first step."""
    dropped: int
    """Records the rank lost for every viewer so far (its training-side buffer overflowed, or a
    record could not be sent); not the per-viewer queue drops that a re-sync repairs."""
    primary: str | None
    """Kind of the rank's current primary finding; None before any."""
    t: float
    """Epoch seconds at which the rank sent it."""
    phase: str | None = None
    """The phase the rank's training thread is in (`between` outside a step); None: unknown."""


@dataclass(frozen=True, slots=True)
class FindingEvent:
    """A diagnosis the rank published."""

    rank: int
    finding: Finding


@dataclass(frozen=True, slots=True)
class GapEvent:
    """Records `from_seq`..`to_seq` (inclusive) of `rank` are lost: no snapshot still holds them."""

    rank: int
    from_seq: int
    to_seq: int


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    """The rank's whole run so far, as its store keeps it (from an attach snapshot): it
    replaces the subscriber's timeline of the rank, and covers the snapshot's records."""

    rank: int
    windows: tuple[object, ...]
    """TimelineWindow wire lists, oldest first (decoded by the store: TimelineWindow.from_wire)."""


@dataclass(frozen=True, slots=True)
class StateEvent:
    """The rank's state changed (live, stalled, dead, finished)."""

    rank: int
    state: RankState


Event: TypeAlias = (
    StepsEvent
    | SystemEvent
    | InfoEvent
    | EndEvent
    | HeartbeatEvent
    | FindingEvent
    | GapEvent
    | StateEvent
    | TimelineEvent
)

"""One rank's records in seq order, each exactly once, from a snapshot plus the live stream.

The ZeroMQ Clone pattern: live frames that arrive while a snapshot is pending are buffered
(bounded), then the snapshot is applied and the buffer replayed; a hole in the live stream or a
new incarnation asks for a re-snapshot. Pure: no sockets, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence

from traceml.records import StepRecord
from traceml.transport.wire.events import Event, GapEvent, StepsEvent

BUFFER_LIMIT = 100_000
"""Live records kept while a snapshot is pending; past this the buffer is dropped (re-synced)."""


class Stitcher:
    """Seq bookkeeping of one rank; `want_resync` tells the caller to ask for a snapshot."""

    def __init__(self, rank: int, buffer_limit: int = BUFFER_LIMIT) -> None:
        self.rank = rank
        self.inc: int | None = None
        self.next_seq = 0
        """Seq of the next record to hand out."""
        self.next_event = 0
        """Lowest event id not yet handed out."""
        self.syncing = True
        """A snapshot is awaited; live records are buffered meanwhile."""
        self.want_resync = True
        self.resyncs = 0
        """Re-snapshots asked for after the first (gaps, new incarnations, reconnects)."""
        self.lost = 0
        """Records lost for good (reported as GapEvents)."""
        self.delivered = False
        """Records were handed out: a first attach that starts past seq 0 (the oldest ones fell
        out of the rank's bounded history) is not a gap, a hole after that is."""
        self._buffer: list[tuple[int, Sequence[StepRecord]]] = []
        self._buffered = 0
        self._buffer_limit = buffer_limit
        self._seen_events: set[int] = set()

    def lose_sync(self) -> None:
        """Ask for a re-snapshot from `next_seq` (a hole, a reconnect, a failed reply)."""
        if not self.syncing or not self.want_resync:
            self.resyncs += 1
        self.syncing = True
        self.want_resync = True

    def _new_inc(self, inc: int) -> bool:
        if self.inc is None:
            self.inc = inc
            return False
        if inc == self.inc:
            return False
        self.inc = inc
        self.next_seq = 0
        self.delivered = False
        self.next_event = 0
        self._seen_events.clear()
        self._buffer, self._buffered = [], 0
        self.lose_sync()
        return True

    def live(self, inc: int, first: int, records: Sequence[StepRecord]) -> list[Event]:
        """A live `rec` frame whose first record has seq `first`."""
        self._new_inc(inc)
        if self.syncing:
            self._keep(first, records)
            return []
        return self._accept(first, records)

    def tail(self, inc: int, last_seq: int) -> None:
        """Any other live frame: it says the rank has assigned seqs up to `last_seq`.

        Frames of one rank arrive in order, so a `last_seq` we have not seen means lost records.
        """
        if not self._new_inc(inc) and not self.syncing and last_seq >= self.next_seq:
            self.lose_sync()

    def snapshot(
        self, inc: int, first: int, last: int, records: Sequence[StepRecord]
    ) -> list[Event]:
        """Apply a complete snapshot (records `first`..`last`), then replay the buffer.

        A snapshot from a new incarnation answered a question about the old one: it is dropped
        and a fresh one asked for.
        """
        if self._new_inc(inc):
            return []
        out: list[Event] = []
        if first > self.next_seq and self.delivered:
            out.append(GapEvent(self.rank, self.next_seq, first - 1))
            self.lost += first - self.next_seq
        self.next_seq = max(self.next_seq, first)
        if records:
            out += self._accept(first, records)
        self.next_seq = max(self.next_seq, last + 1)
        self.syncing = self.want_resync = False
        pending, self._buffer, self._buffered = self._buffer, [], 0
        for seq, recs in pending:
            out += self._keep(seq, recs) if self.syncing else self._accept(seq, recs)
        return out

    def _accept(self, first: int, records: Sequence[StepRecord]) -> list[Event]:
        end = first + len(records)
        if end <= self.next_seq:
            return []
        if first > self.next_seq:
            self.lose_sync()
            return self._keep(first, records)
        skip = self.next_seq - first
        self.next_seq = end
        self.delivered = True
        return [StepsEvent(self.rank, tuple(records[skip:]), first + skip)]

    def _keep(self, first: int, records: Sequence[StepRecord]) -> list[Event]:
        if self._buffered + len(records) > self._buffer_limit:
            self._buffer, self._buffered = [], 0
        self._buffer.append((first, records))
        self._buffered += len(records)
        return []

    def event_is_new(self, inc: int, event_id: int, live: bool = True) -> bool:
        """True the first time event `event_id` is seen; a hole in live ids asks to re-sync."""
        self._new_inc(inc)
        if event_id < self.next_event or event_id in self._seen_events:
            return False
        if live and event_id > self.next_event and not self.syncing:
            self.lose_sync()
        self._seen_events.add(event_id)
        while self.next_event in self._seen_events:
            self._seen_events.discard(self.next_event)
            self.next_event += 1
        return True

    def skip_events_to(self, event_id: int) -> None:
        """Events before `event_id` are gone from the rank's history: stop waiting for them."""
        if event_id > self.next_event:
            self.next_event = event_id
            self._seen_events = {e for e in self._seen_events if e >= event_id}
            while self.next_event in self._seen_events:
                self._seen_events.discard(self.next_event)
                self.next_event += 1

"""Seq stitching: snapshot then live, no duplicates, holes re-synced, lost records reported."""

from __future__ import annotations

from traceml.records import StepRecord
from traceml.transport.subscribe.stitcher import Stitcher
from traceml.transport.wire.events import Event, GapEvent, StepsEvent


def recs(first: int, n: int) -> list[StepRecord]:
    return [StepRecord(0, i, 0.0, 1.0, (None,) * 7) for i in range(first, first + n)]


def seqs(events: list[Event]) -> list[int]:
    out: list[int] = []
    for e in events:
        if isinstance(e, StepsEvent):
            out += range(e.first_seq, e.first_seq + len(e.records))
    return out


def synced(n: int = 10) -> Stitcher:
    s = Stitcher(0)
    assert seqs(s.snapshot(0, 0, n - 1, recs(0, n))) == list(range(n))
    assert not s.syncing and not s.want_resync
    return s


def test_live_frames_during_the_snapshot_are_replayed_once() -> None:
    s = Stitcher(0)
    assert s.live(0, 8, recs(8, 4)) == []
    assert s.live(0, 12, recs(12, 2)) == []
    out = s.snapshot(0, 0, 9, recs(0, 10))
    assert seqs(out) == list(range(14))
    assert s.next_seq == 14


def test_duplicates_and_overlaps_are_dropped() -> None:
    s = synced(10)
    assert seqs(s.live(0, 5, recs(5, 3))) == []
    assert seqs(s.live(0, 8, recs(8, 5))) == [10, 11, 12]


def test_a_hole_asks_for_a_resync_and_the_snapshot_fills_it() -> None:
    s = synced(10)
    assert s.live(0, 15, recs(15, 2)) == []
    assert s.syncing and s.want_resync and s.resyncs == 1
    out = s.snapshot(0, 10, 16, recs(10, 7))
    assert seqs(out) == list(range(10, 17))
    assert not any(isinstance(e, GapEvent) for e in out)


def test_records_gone_from_the_history_are_reported_lost() -> None:
    s = synced(10)
    s.live(0, 50, recs(50, 1))
    out = s.snapshot(0, 40, 50, recs(40, 11))
    assert out[0] == GapEvent(0, 10, 39)
    assert seqs(out) == list(range(40, 51))
    assert s.lost == 30


def test_a_first_attach_past_the_oldest_record_is_not_a_gap() -> None:
    s = Stitcher(0)
    out = s.snapshot(0, 5904, 9999, recs(5904, 4096))
    assert seqs(out) == list(range(5904, 10_000))
    assert s.lost == 0 and not any(isinstance(e, GapEvent) for e in out)


def test_a_heartbeat_ahead_of_us_reveals_lost_tail_records() -> None:
    s = synced(10)
    s.tail(0, 9)
    assert not s.want_resync
    s.tail(0, 12)
    assert s.want_resync


def test_a_new_incarnation_starts_over() -> None:
    s = synced(10)
    assert s.live(1, 0, recs(0, 3)) == []
    assert s.want_resync and s.next_seq == 0
    assert seqs(s.snapshot(1, 0, 4, recs(0, 5))) == list(range(5))


def test_a_snapshot_of_another_incarnation_is_dropped() -> None:
    s = synced(10)
    s.lose_sync()
    s.want_resync = False
    assert s.snapshot(1, 0, 2, recs(0, 3)) == []
    assert s.want_resync and s.next_seq == 0


def test_the_buffer_is_bounded() -> None:
    s = Stitcher(0, buffer_limit=5)
    s.live(0, 0, recs(0, 4))
    s.live(0, 4, recs(4, 4))
    assert seqs(s.snapshot(0, 0, 3, recs(0, 4))) == [0, 1, 2, 3, 4, 5, 6, 7]


def test_events_are_handed_out_once_and_holes_resync() -> None:
    s = synced(1)
    assert s.event_is_new(0, 0)
    assert not s.event_is_new(0, 0)
    assert s.event_is_new(0, 2)
    assert s.want_resync
    assert s.event_is_new(0, 1, live=False)
    assert s.next_event == 3


def test_events_that_fell_out_are_not_waited_for() -> None:
    s = synced(1)
    s.skip_events_to(100)
    assert not s.event_is_new(0, 50)
    assert s.event_is_new(0, 100, live=False) and s.next_event == 101

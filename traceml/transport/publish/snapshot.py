"""Attach snapshots, served by the tx thread in parts: requests in, bounded work per call.

A job holds references to the history as it was when the request came (the viewer stitches live
records after that point by seq) and builds one part at a time, so the tx thread never holds the
GIL for long. Malformed or oversized requests are dropped and counted; a job that makes no
progress for JOB_TIMEOUT_S, or whose viewer left, is abandoned. A request beyond MAX_JOBS gets a
one-part BUSY reply at once, so its viewer asks again soon instead of waiting for a timeout.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from traceml.errors import SchemaError
from traceml.transport.publish.channels import Channels
from traceml.transport.publish.counters import PublisherStats
from traceml.transport.publish.history import RecordHistory
from traceml.transport.wire.codec import Header, pack, pack_array
from traceml.transport.wire.control import OversizedRequest, Request, parse_request

CHUNK_RECORDS = 2048
"""Records per snapshot part (about 200 KB)."""
JOB_TIMEOUT_S = 10.0
MAX_JOBS = 8
"""Snapshots served at once; further requests are answered BUSY (the viewer asks again)."""
BUSY: dict[str, Any] = {"busy": True}
"""Body of the reply to a request over MAX_JOBS: part 0, done, and nothing else."""
MAX_REQUESTS_PER_CALL = 64
SERVICE_BUDGET_S = 0.002
"""Time one serve() call may spend sending parts."""


@dataclass(frozen=True, slots=True)
class StreamId:
    """The fields every header of a rank repeats."""

    run: str
    rank: int
    inc: int


class SnapshotJob:
    """Part 0 is the metadata map; parts 1.. are chunks of packed step records."""

    def __init__(
        self,
        identity: bytes,
        req: int,
        stream: StreamId,
        meta: dict[str, Any],
        items: list[bytes],
        now: float,
    ) -> None:
        self.identity = identity
        self.req = req
        self.touched = now
        self._stream = stream
        self._meta = meta
        self._first: int = meta["first"]
        self._items = items
        self._parts = 1 + -(-len(items) // CHUNK_RECORDS)
        self._part = 0

    @property
    def done(self) -> bool:
        return self._part >= self._parts

    def frames(self, t: float) -> list[bytes]:
        """`[identity, header, body]` of the current part."""
        if self._part == 0:
            seq, body = int(self._meta["last"]), pack(self._meta)
        else:
            lo = (self._part - 1) * CHUNK_RECORDS
            seq, body = self._first + lo, pack_array(self._items[lo : lo + CHUNK_RECORDS])
        s = self._stream
        last = self._part == self._parts - 1
        header = Header(s.run, s.rank, s.inc, seq, t, req=self.req, part=self._part, done=last)
        return [self.identity, header.pack(), body]

    def advance(self, now: float) -> None:
        self._part += 1
        self.touched = now

    def expired(self, now: float) -> bool:
        return now - self.touched > JOB_TIMEOUT_S


class SnapshotServer:
    """The ROUTER side of a publisher: reads requests, queues jobs, sends their parts."""

    def __init__(
        self,
        channels: Channels,
        stream: StreamId,
        history: RecordHistory,
        meta: Callable[[Request], dict[str, Any]],
        stats: PublisherStats,
    ) -> None:
        self._channels = channels
        self._stream = stream
        self._history = history
        self._meta = meta
        self._stats = stats
        self._jobs: deque[SnapshotJob] = deque()

    @property
    def pending(self) -> bool:
        """Whether a snapshot still has parts to send."""
        return bool(self._jobs)

    def take_requests(self, now: float) -> None:
        """Read up to MAX_REQUESTS_PER_CALL requests and queue their replies."""
        for _ in range(MAX_REQUESTS_PER_CALL):
            msg = self._channels.read_ctl()
            if msg is None:
                return
            request = self._parse(msg)
            if request is not None:
                self._queue(msg[0], request, now)

    def _parse(self, msg: list[bytes]) -> Request | None:
        try:
            if len(msg) != 2:
                raise SchemaError(f"request of {len(msg) - 1} frames, expected 1")
            return parse_request(msg[1])
        except OversizedRequest:
            self._stats.oversized += 1
        except SchemaError:
            pass
        self._stats.rejected += 1
        return None

    def _queue(self, identity: bytes, request: Request, now: float) -> None:
        """A snapshot job, or for "ping" a job of just the metadata part."""
        # A viewer asked: pack what waits first, so every seq this reply names is final (a
        # record that does not pack closes the seqs up behind it).
        self._history.pack_pending()
        if len(self._jobs) >= MAX_JOBS:
            self._busy(identity, request)
            return
        meta = self._meta(request)
        items: list[bytes] = []
        if request.verb == "snapshot":
            if request.since > 0:
                self._channels.caught_up()
            first, items = self._history.since(request.since)
            meta |= {"first": first, "count": len(items)}
        self._jobs.append(SnapshotJob(identity, request.req, self._stream, meta, items, now))

    def _busy(self, identity: bytes, request: Request) -> None:
        """Tell the viewer to ask again soon; a reply that cannot go out now is not retried."""
        s = self._stream
        seq = self._history.next_seq - 1
        header = Header(s.run, s.rank, s.inc, seq, time.time(), req=request.req, part=0, done=True)
        self._channels.reply([identity, header.pack(), pack(BUSY)])
        self._stats.busy += 1

    def serve(self, now: float) -> None:
        """Send parts round-robin until every queue is full or SERVICE_BUDGET_S is spent."""
        deadline = time.perf_counter() + SERVICE_BUDGET_S
        progressed = True
        while self._jobs and progressed and time.perf_counter() < deadline:
            progressed = False
            for job in list(self._jobs):
                progressed |= self._serve_one(job, now)
        for job in [j for j in self._jobs if j.expired(now)]:
            self._jobs.remove(job)
            self._stats.abandoned += 1

    def _serve_one(self, job: SnapshotJob, now: float) -> bool:
        outcome = self._channels.reply(job.frames(time.time()))
        if outcome == "full":
            return False
        if outcome == "sent":
            job.advance(now)
        if outcome == "gone" or job.done:
            self._jobs.remove(job)
            if outcome == "gone":
                self._stats.abandoned += 1
            else:
                self._stats.snapshots += 1
        return outcome == "sent"

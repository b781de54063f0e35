"""A viewer's connection to one rank: a SUB for the live stream, a DEALER for snapshots.

Runs in the viewer's feed thread only. Frames that cannot be decoded are dropped and counted;
a frame of another wire version raises WireVersionError (a clear SchemaError). Sends never
block: a request that cannot go out now is retried on a later tick.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import zmq

from traceml.errors import SchemaError, TransportError
from traceml.records import Finding, RankEnd, RankInfo, StepRecord, SystemSample
from traceml.transport.runfiles.runfile import RankFile, read_rank_file
from traceml.transport.subscribe.liveness import HEARTBEAT_S, RankLiveness
from traceml.transport.subscribe.stitcher import Stitcher
from traceml.transport.wire.codec import (
    WELCOME,
    Header,
    WireVersionError,
    decode_steps,
    parse_topic,
    unpack,
)
from traceml.transport.wire.control import Request
from traceml.transport.wire.events import (
    EndEvent,
    Event,
    FindingEvent,
    HeartbeatEvent,
    InfoEvent,
    StepsEvent,
    SystemEvent,
    TimelineEvent,
)
from traceml.transport.wire.security import make_client

SUB_RCVHWM = 10_000
DEALER_RCVHWM = 64
DEALER_SNDHWM = 4
REQUEST_TIMEOUT_S = 3.0
"""A snapshot with no part for this long is asked for again."""
BUSY_RETRY_S = (0.2, 0.5)
"""A rank that answered BUSY (serving its maximum of snapshots) is asked again after a random
delay in this range, so the viewers it turned away do not come back all at once."""
WELCOME_WAIT_S = 1.0
"""Ask for the first snapshot after this long even if no XPUB welcome came."""
FILE_CHECK_S = 1.0
ENDED_FILE_CHECK_S = 3.0
"""An ended rank's file is re-read this often: torchelastic may restart it (a new process)."""

Handler = Callable[[Header, bytes, float], list[Event]]


def _connect(ctx: zmq.Context[zmq.Socket[bytes]], rank: RankFile) -> list[zmq.Socket[bytes]]:
    socks: list[zmq.Socket[bytes]] = []
    try:
        socks += [ctx.socket(zmq.SUB), ctx.socket(zmq.DEALER)]
        for sock, name in zip(socks, ("pub", "ctl"), strict=True):
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVHWM, SUB_RCVHWM if name == "pub" else DEALER_RCVHWM)
            sock.setsockopt(zmq.SNDHWM, DEALER_SNDHWM)
            if rank.curve_key:
                make_client(sock, rank.curve_key)
            if name == "pub":
                sock.setsockopt(zmq.SUBSCRIBE, b"")
            sock.connect(rank.endpoints[name])
    except (zmq.ZMQError, KeyError, TransportError) as e:
        for sock in socks:
            sock.close(linger=0)
        if isinstance(e, TransportError):
            raise
        raise TransportError(
            f"cannot connect to rank {rank.rank}: {e} (raise `ulimit -n` for a job this large)"
        ) from e
    return socks


class RankLink:
    """Sockets, seq stitching and liveness of one rank."""

    def __init__(
        self, ctx: zmq.Context[zmq.Socket[bytes]], rank: RankFile, now: float, local: bool
    ) -> None:
        self.file = rank
        self.rank = rank.rank
        self.stitch = Stitcher(self.rank)
        # A relayed rank's process is on another node: only its heartbeats tell (the relay's
        # own process being alive says nothing about it).
        relayed = rank.relayed_by is not None
        self.liveness = RankLiveness(now, rank.pid, rank.pid_start, local and not relayed)
        self.malformed = 0
        self.unknown_events = 0
        self.replaced: RankFile | None = None
        """Set when the rank file names another process (a restart): the caller relinks."""
        self.sub, self.ctl = _connect(ctx, rank)
        self._created = now
        self._welcomed = False
        self._req = 0
        self._inflight: int | None = None
        self._heard_reply = 0.0
        self._retry_at = 0.0
        self._part = 0
        self._meta: dict[str, Any] | None = None
        self._chunks: list[StepRecord] = []
        self._info = rank.info
        self._system_t = -math.inf
        self._file_checked = now
        self._gone_read = False
        """Whether the file was read since the process was found gone."""
        self._handlers: dict[str, Handler] = {
            "rec": self._on_rec,
            "hb": self._on_hb,
            "sys": self._on_sys,
            "evt": self._on_evt,
        }

    def close(self) -> None:
        self.sub.close(linger=0)
        self.ctl.close(linger=0)

    # -- periodic --------------------------------------------------------------------------

    def tick(self, now: float) -> list[Event]:
        """Retry or send snapshot requests, check the process, re-read a silent rank's file."""
        self.liveness.check_process(now)
        if self._request_lost(now):
            self._abort()
        self._maybe_request(now)
        gone = self.liveness.proc == "gone"
        quiet = self.liveness.silent(now) > 1.5 * HEARTBEAT_S or gone
        every = ENDED_FILE_CHECK_S if self.liveness.ended else FILE_CHECK_S
        # A process just found gone may have written its end into its file and exited before
        # its end message was read (or sent at all: a rank's sockets close with linger 0). Its
        # file is read at once, so a rank that finished is never reported dead meanwhile.
        first_gone = gone and not self._gone_read
        if first_gone or (quiet and now - self._file_checked >= every):
            self._gone_read = self._gone_read or gone
            self._file_checked = now
            return self._check_file()
        return []

    def _maybe_request(self, now: float) -> None:
        if self._inflight is not None or not self.stitch.want_resync or self.liveness.ended:
            return
        if not self._welcomed and now - self._created < WELCOME_WAIT_S:
            return
        if now < self._retry_at:
            return
        self._req += 1
        s = self.stitch
        request = Request("snapshot", self._req, since=s.next_seq, events_since=s.next_event)
        try:
            self.ctl.send(request.pack(), zmq.NOBLOCK)
        except zmq.Again:
            return
        self._inflight, self._heard_reply, self._part = self._req, now, 0
        s.want_resync = False

    def _request_lost(self, now: float) -> bool:
        """No reply part for REQUEST_TIMEOUT_S while the rank keeps talking. A silent rank
        (stopped, busy) answers when it resumes: asking again would only queue copies."""
        if self._inflight is None or now - self._heard_reply <= REQUEST_TIMEOUT_S:
            return False
        return self.liveness.silent(now) < REQUEST_TIMEOUT_S

    def _abort(self) -> None:
        self._inflight, self._meta, self._chunks = None, None, []
        self.stitch.lose_sync()

    def _check_file(self) -> list[Event]:
        path = self.file.path
        try:
            fresh = read_rank_file(path) if path is not None else None
        except (OSError, TransportError, SchemaError):
            return []
        if fresh is None:
            return []
        if fresh.pid != self.file.pid or fresh.endpoints != self.file.endpoints:
            self.replaced = fresh
            return []
        if fresh.end is not None and not self.liveness.ended:
            self.liveness.ended = True
            return [EndEvent(fresh.end, fresh.summary_path)]
        return []

    # -- live stream -----------------------------------------------------------------------

    def on_pub(self, frames: list[bytes], now: float) -> list[Event]:
        """Events from one SUB message (nothing for duplicates, junk or a welcome)."""
        if len(frames) == 1 and frames[0] == WELCOME:
            self._welcome(now)
            return []
        try:
            return self._note_steps(self._live_frame(frames, now), now)
        except WireVersionError:
            raise
        except SchemaError:
            self.malformed += 1
            return []

    def _welcome(self, now: float) -> None:
        if self._welcomed:
            self._abort()
        self._welcomed = True
        self._maybe_request(now)

    def _live_frame(self, frames: list[bytes], now: float) -> list[Event]:
        if len(frames) != 3:
            raise SchemaError(f"live message of {len(frames)} frames, expected 3")
        kind, rank = parse_topic(frames[0])
        header = Header.unpack(frames[1])
        if rank != self.rank or header.rank != self.rank:
            raise SchemaError(f"frame of rank {header.rank} on rank {self.rank}'s socket")
        self.liveness.heard(now)
        return self._handlers[kind](header, frames[2], now)

    def _on_rec(self, header: Header, body: bytes, now: float) -> list[Event]:
        return self.stitch.live(header.inc, header.seq, decode_steps(body))

    def _on_hb(self, header: Header, body: bytes, now: float) -> list[Event]:
        self.stitch.tail(header.inc, header.seq)
        event = self._heartbeat(header, unpack(body, "heartbeat"))
        self.liveness.progress(event.last_step, now)
        return [event]

    def _on_sys(self, header: Header, body: bytes, now: float) -> list[Event]:
        sample = SystemSample.from_wire(unpack(body, "system sample"))
        self.stitch.tail(header.inc, header.seq)
        self._system_t = max(self._system_t, sample.t)
        return [SystemEvent(sample)]

    def _on_evt(self, header: Header, body: bytes, now: float) -> list[Event]:
        self.stitch.tail(header.inc, header.seq)
        return self._event(header.inc, unpack(body, "event"), live=True)

    def _event(self, inc: int, raw: Any, live: bool) -> list[Event]:
        event = _map(raw, "event")
        event_id = event.get("id")
        if not isinstance(event_id, int):
            raise SchemaError("event: id must be an integer")
        if not self.stitch.event_is_new(inc, event_id, live):
            return []
        return self._event_of(str(event.get("kind")), event.get("payload"))

    def _event_of(self, kind: str, payload: Any) -> list[Event]:
        if kind == "finding":
            return [FindingEvent(self.rank, Finding.from_json(_map(payload, "finding")))]
        if kind == "end":
            end_wire = payload.get("end") if isinstance(payload, dict) else payload
            summary = payload.get("summary_path") if isinstance(payload, dict) else None
            self.liveness.ended = True
            return [EndEvent(RankEnd.from_wire(end_wire), summary)]
        if kind == "info":
            info_wire = payload.get("info") if isinstance(payload, dict) else payload
            self._info = RankInfo.from_wire(info_wire)
            return [InfoEvent(self._info)]
        self.unknown_events += 1
        return []

    def _note_steps(self, events: list[Event], now: float) -> list[Event]:
        for event in events:
            if isinstance(event, StepsEvent) and event.records:
                self.liveness.step_times(r.step_ms for r in event.records[-101:])
                self.liveness.progress(event.records[-1].step, now)
        return events

    # -- snapshots -------------------------------------------------------------------------

    def on_ctl(self, frames: list[bytes], now: float) -> list[Event]:
        """Events from one snapshot part (all of them at the last part)."""
        try:
            return self._note_steps(self._reply(frames, now), now)
        except WireVersionError:
            raise
        except SchemaError:
            self.malformed += 1
            self._abort()
            return []

    def _reply(self, frames: list[bytes], now: float) -> list[Event]:
        if len(frames) != 2:
            raise SchemaError(f"snapshot part of {len(frames)} frames, expected 2")
        header = Header.unpack(frames[0])
        if header.req is None or header.req != self._inflight:
            return []
        if header.part != self._part:
            raise SchemaError(f"snapshot part {header.part}, expected {self._part}")
        self.liveness.heard(now)
        self._heard_reply = now
        if header.part == 0:
            self._meta, self._chunks = _map(unpack(frames[1], "snapshot"), "snapshot"), []
            if header.done and self._meta.get("busy") is True:
                return self._busy(now)
        else:
            self._chunks.extend(decode_steps(frames[1]))
        self._part += 1
        return self._finish(header) if header.done else []

    def _busy(self, now: float) -> list[Event]:
        """The rank is serving its maximum of snapshots: ask again shortly."""
        self._inflight, self._meta = None, None
        self._retry_at = now + random.uniform(*BUSY_RETRY_S)
        self.stitch.want_resync = True
        return []

    def _finish(self, header: Header) -> list[Event]:
        meta, chunks = self._meta, self._chunks
        self._inflight, self._meta, self._chunks = None, None, []
        if meta is None or meta.get("count") != len(chunks):
            raise SchemaError("snapshot: record count does not match")
        out: list[Event] = []
        info = RankInfo.from_wire(meta.get("info"))
        if info != self._info:
            self._info = info
            out.append(InfoEvent(info))
        first, last = meta.get("first"), meta.get("last")
        if not isinstance(first, int) or not isinstance(last, int):
            raise SchemaError("snapshot: first and last must be integers")
        timeline = meta.get("timeline")
        if isinstance(timeline, list) and timeline:
            out.append(TimelineEvent(self.rank, tuple(timeline)))  # before the records it covers
        out += self.stitch.snapshot(header.inc, first, last, chunks)
        return out + self._meta_events(header, meta)

    def _meta_events(self, header: Header, meta: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        events = meta.get("events") or []
        if events and isinstance(events[0], dict) and isinstance(events[0].get("id"), int):
            self.stitch.skip_events_to(events[0]["id"])
        for raw in events:
            out += self._event(header.inc, raw, live=False)
        if meta.get("system") is not None:
            sample = SystemSample.from_wire(meta["system"])
            if sample.t > self._system_t:
                self._system_t = sample.t
                out.append(SystemEvent(sample))
        out.append(self._heartbeat(header, meta.get("hb")))
        if meta.get("end") is not None and not self.liveness.ended:
            self.liveness.ended = True
            out.append(EndEvent(RankEnd.from_wire(meta["end"])))
        return out

    def _heartbeat(self, header: Header, raw: Any) -> HeartbeatEvent:
        hb = _map(raw, "heartbeat")
        last_step, dropped, primary = hb.get("last_step"), hb.get("dropped"), hb.get("primary")
        if not isinstance(last_step, int) or not isinstance(dropped, int):
            raise SchemaError("heartbeat: last_step and dropped must be integers")
        primary = primary if isinstance(primary, str) else None
        phase = hb.get("phase")
        phase = phase if isinstance(phase, str) else None
        return HeartbeatEvent(self.rank, last_step, dropped, primary, header.t, phase)


def _map(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SchemaError(f"{what}: not a map")
    return value

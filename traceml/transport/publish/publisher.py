"""A rank's live publisher: binds XPUB + ROUTER, streams records, serves attach snapshots.

Everything here runs in the rank's beats (instrument.worker: on the training thread between
two steps, or on the tx thread, one at a time) and never blocks: sends are non-blocking and drop
(counted) when a viewer's queue is full, and service() does bounded work per call. Only open() may
raise (TransportError); every other method counts its failures and carries on. A forked child
(a DataLoader worker) that inherits the object finds every method a no-op: it must never touch
the parent's sockets. Its few warnings (one line per kind of failure) go to fd 2 with os.write,
never through `logging`: at shutdown the thread that waits for the tx thread may be a SIGTERM
handler that interrupted a thread holding a logging lock.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import zmq

from traceml.config import Settings
from traceml.errors import SchemaError, TransportError
from traceml.records import RankEnd, RankInfo, StepRecord, SystemSample
from traceml.transport.publish.channels import MAX_HELD_SUBSCRIPTIONS, Channels
from traceml.transport.publish.counters import PublisherStats
from traceml.transport.publish.endpoints import plan_endpoints
from traceml.transport.publish.history import History, RecordHistory
from traceml.transport.publish.progress import Progress
from traceml.transport.publish.snapshot import SnapshotServer, StreamId
from traceml.transport.runfiles.lock import RankLock
from traceml.transport.runfiles.rundir import RunDir, resolve_runtime_dir
from traceml.transport.runfiles.runfile import (
    RankFile,
    RunFile,
    read_rank_file,
    write_json_atomic,
)
from traceml.transport.runfiles.runid import process_start
from traceml.transport.wire.codec import KINDS, Header, Kind, Packer, pack, pack_array, topic
from traceml.transport.wire.control import Request
from traceml.transport.wire.security import KeyPair, new_keypair

HEARTBEAT_S = 1.0
HEARTBEAT_MAX_S = 5.0
"""While step records flow (they prove the rank alive and carry its progress) a heartbeat goes
out only this often, for the counters records do not carry: a 1,000-rank run at a step a second
sends a third fewer frames."""
FILE_UPDATE_S = 2.0
"""The rank file is rewritten at most this often (and once more at close)."""
MAX_FRAME_RECORDS = 256
SYSTEM_SAMPLES_PER_S = 256
"""System samples a whole job publishes per second at most: a rank of a job bigger than this
publishes every n-th sample (a 1,000-rank job: one in four), so a viewer's frames stay bounded;
every sample is still taken, kept for snapshots and counted in the summary."""
PUBLISH_EVERY_S = 0.1
"""Step records wait at most this long to leave together. A viewer's cost is per frame: 64 ranks
at 100 steps/s published every 20 ms tick make 3,200 frames of two records a second, this way
640 of ten. A display that redraws at most 10 times a second loses nothing by it, and every
other frame (heartbeat, sample, event) first sends the records before it, so seqs stay in order."""
EVENT_HISTORY = 256
"""Events (findings, end) kept for snapshots."""
MAX_INBOUND_PER_CALL = 64


class Publisher:
    """The live side of one rank; see the module docstring for the threading contract."""

    def __init__(
        self,
        info: RankInfo,
        settings: Settings,
        runtime_dir: Path | None = None,
        *,
        relay: bool = False,
        context: zmq.Context[zmq.Socket[bytes]] | None = None,
        timeline: Callable[[], list[Any]] | None = None,
    ) -> None:
        """Cheap: no sockets, no files until open().

        `relay=True` serves a rank of another node for this node's viewers (the job collector
        does): the rank file says who relays it, run.json is never written, and heartbeats go
        out only when `service(heartbeat=True)` passes one on, so a silent rank looks silent.
        `context`: a zmq context shared with other publishers of this thread (the caller terms
        it); by default each publisher has its own.
        `timeline`: returns the rank's whole-run timeline (TimelineWindow wire lists) from the
        store this thread folds into; attach snapshots carry it, so a viewer that attaches at
        step 1,000,000 sees the whole run. Called on this thread only.
        """
        self._timeline = timeline
        self._info = info
        self._relay = relay
        self._settings = settings
        self._runtime_dir = runtime_dir if runtime_dir is not None else settings.runtime_dir
        self._pid = os.getpid()
        self._stream = StreamId(info.run_id, info.rank, info.incarnation)
        self._topics = {kind: topic(kind, info.rank) for kind in KINDS}
        self._packer = Packer()
        """Reused for step records (half the cost of packb); this thread's alone."""
        self._history = RecordHistory(
            max(1, settings.history_steps), lambda records: self._pack_steps(records)[1]
        )
        self._unsent: list[bytes] = []
        """Packed records in the history, not published yet (at most PUBLISH_EVERY_S old)."""
        self._unsent_first = 0
        self._published_at = -math.inf
        self._events: History[dict[str, Any]] = History(EVENT_HISTORY)
        self._progress = Progress()
        self._phase: str | None = None
        """The phase the training thread was in at the last service() (heartbeat, rank file)."""
        self._server: SnapshotServer | None = None
        self._system: SystemSample | None = None
        self._system_every = max(1.0, info.world_size / SYSTEM_SAMPLES_PER_S)
        """Seconds between two published system samples of this rank."""
        self._system_at = -math.inf
        self._end: RankEnd | None = None
        self._summary: str | None = None
        self._ctx: zmq.Context[zmq.Socket[bytes]] | None = None
        self._shared_ctx = context
        self._channels: Channels | None = None
        self._lock: RankLock | None = None
        self._run_dir: RunDir | None = None
        self._keys: KeyPair | None = None
        self._pid_start: float | None = None
        self._closed = False
        self._last_hb = -1e18
        self._last_write = -1e18
        self._run_written: RunFile | None = None
        """run.json as last written (its `updated` is when its content last changed)."""
        self._logged: set[str] = set()
        self.stats = PublisherStats()

    # -- lifecycle -------------------------------------------------------------------------

    def open(self) -> None:
        """Bind XPUB + ROUTER, then write rank-<N>.json (and run.json on local rank 0).

        Raises:
            TransportError: the runtime dir is unsafe, the run rank is live in another process,
                binding failed, or this is a forked copy; the caller then runs without publishing.
        """
        if not self._mine():
            raise TransportError("this publisher belongs to the parent process, not to a fork")
        if self._closed:
            raise TransportError("this publisher is closed: create a new one")
        if self._channels is not None:
            return
        run_dir = RunDir(resolve_runtime_dir(self._runtime_dir), self._info.run_id).create()
        lock = self._take_lock(run_dir)
        try:
            self._bind(run_dir)
            # The rank's process: this one, unless it serves a rank of its own host's from
            # outside it (the beats process, TRACEML_BEATS=process); a relay's is itself.
            self._pid_start = process_start(self._pid if self._relay else self._info.pid)
            self._write_files()
        except BaseException:
            self._teardown()
            lock.release()
            raise

    def _take_lock(self, run_dir: RunDir) -> RankLock:
        rank = self._info.rank
        try:
            self._lock = RankLock.acquire(run_dir.lock_path(rank))
        except TransportError as e:
            raise TransportError(
                f"run {run_dir.run_id} rank {rank} is already live{_owner(run_dir, rank)}:"
                " set TRACEML_RUN_ID to another id",
            ) from e
        self._run_dir = run_dir
        return self._lock

    def _bind(self, run_dir: RunDir) -> None:
        plan = plan_endpoints(run_dir, self._info.rank, self._settings)
        self._keys = new_keypair() if plan.curve else None
        try:
            self._ctx = self._shared_ctx if self._shared_ctx is not None else zmq.Context()
        except zmq.ZMQError as e:
            raise TransportError(f"cannot start ZeroMQ: {e.strerror}") from e
        self._channels = Channels.open(self._ctx, plan, self._keys)
        self._server = SnapshotServer(
            self._channels, self._stream, self._history, self._meta, self.stats
        )

    def close(self, end: RankEnd, summary_path: Path | None) -> None:
        """Send the "end" event, record it (and the summary path) in the run files, close
        sockets with linger 0 and remove the socket files. Idempotent; never raises."""
        if not self._mine() or self._closed:
            return
        self._closed = True
        if self._channels is None:
            return
        self._end = end
        self._summary = os.path.abspath(summary_path) if summary_path is not None else None
        self._safely("close: run files", self._write_files)
        if summary_path is not None and self._owns_run_file and self._run_dir:
            run_dir = self._run_dir
            self._safely("close: summary link", lambda: run_dir.link_summary(summary_path))
        payload = {"end": end.to_wire(), "summary_path": self._summary}
        self._safely("close: end event", lambda: self._send_event("end", payload))
        self._safely("close: sockets", self._teardown)

    def _teardown(self) -> None:
        if self._channels is not None:
            self._channels.close()
        if self._ctx is not None and self._ctx is not self._shared_ctx:
            self._ctx.term()
        self._channels, self._ctx, self._server = None, None, None
        if self._run_dir is not None:
            self._run_dir.remove_sockets(self._info.rank)
        if self._lock is not None:
            self._lock.release()

    # -- streaming -------------------------------------------------------------------------

    def send_steps(self, records: Sequence[StepRecord]) -> None:
        """Assign seqs, keep the records in the bounded history, publish without blocking.
        While nobody is `watched`, nothing is published and the history keeps them unpacked
        until a viewer comes for them (RecordHistory)."""
        if self._live():
            self._safely("send_steps", lambda: self._send_steps(records))

    def send_system(self, sample: SystemSample) -> None:
        if self._live():
            self._safely("send_system", lambda: self._send_system(sample))

    def send_info(self, info: RankInfo) -> None:
        """The rank's info changed (a new optimizer class): viewers and later snapshots get it."""
        self._info = info
        self.send_event("info", {"info": info.to_wire()})

    def send_event(self, kind: str, payload: dict[str, Any]) -> None:
        """Publish an event, e.g. kind="finding" with Finding.to_json(); kept for snapshots."""
        if self._live():
            self._safely("send_event", lambda: self._send_event(kind, payload))

    def detach(self) -> None:
        """Close the sockets without an end: the rank file stays as it was, so viewers see the
        rank fall silent (a relay whose rank never said goodbye). Idempotent; never raises."""
        if not self._mine() or self._closed:
            return
        self._closed = True
        self._safely("detach: sockets", self._teardown)

    def service(
        self,
        now: float,
        *,
        last_step: int,
        dropped: int,
        primary: str | None,
        phase: str | None = None,
        heartbeat: bool | None = None,
    ) -> None:
        """Periodic work, bounded per call: inbound frames, snapshot parts, the heartbeat, and
        the rank file every FILE_UPDATE_S. `now` may be any clock; only differences count.
        `heartbeat`: None sends one every HEARTBEAT_S (HEARTBEAT_MAX_S while records flow),
        True sends one now, False none."""
        if not self._live():
            return
        if self._unsent and time.monotonic() - self._published_at >= PUBLISH_EVERY_S:
            self._safely("send_steps", self._publish_steps)
        self._progress.note(last_step, dropped, primary)
        self._phase = phase
        self._safely("read subscriptions", self._drain_pub)
        if self._server is not None:
            server = self._server
            self._safely("read requests", lambda: server.take_requests(now))
            self._safely("serve snapshots", lambda: server.serve(now))
        due = self._heartbeat_due(now) if heartbeat is None else heartbeat
        if due:
            self._last_hb = now
            self._safely("heartbeat", self._heartbeat)
        if now - self._last_write >= FILE_UPDATE_S:
            self._last_write = now
            self._safely("rank file", self._write_files)

    def _heartbeat_due(self, now: float) -> bool:
        since = now - self._last_hb
        if since < HEARTBEAT_S:
            return False
        quiet = time.monotonic() - self._published_at >= HEARTBEAT_S
        return quiet or since >= HEARTBEAT_MAX_S

    # -- properties ------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """Whether an attach snapshot is being sent: the tx thread then services more often."""
        return self._server is not None and self._server.pending

    @property
    def watched(self) -> bool:
        """Whether a viewer is subscribed or being sent a snapshot: records are then wanted
        promptly (the tx thread folds every tick, not every QUIET_FOLD_TICKS-th)."""
        return self._live() and (self.busy or self._ch.watched)

    @property
    def dropped(self) -> int:
        """Step records the publisher failed to deliver to some viewer: sends refused by a full
        viewer queue (that viewer re-syncs from the history) plus unpackable records."""
        return self.stats.dropped + self.stats.unpackable

    @property
    def endpoints(self) -> dict[str, str]:
        """{"pub": ..., "ctl": ...} once open; empty before."""
        return dict(self._channels.endpoints) if self._channels is not None else {}

    @property
    def run_dir(self) -> RunDir | None:
        return self._run_dir

    @property
    def curve_key(self) -> str | None:
        """Public CURVE key of the sockets; None when they are not encrypted."""
        return self._keys.public if self._keys is not None else None

    # -- internals -------------------------------------------------------------------------

    @property
    def _ch(self) -> Channels:
        if self._channels is None:
            raise RuntimeError("the publisher is not open")
        return self._channels

    def _mine(self) -> bool:
        return os.getpid() == self._pid

    def _live(self) -> bool:
        return self._channels is not None and not self._closed and self._mine()

    def _safely(self, what: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as err:  # noqa: BLE001 - the contract: never raise into training
            self.stats.errors += 1
            if what not in self._logged:
                self._logged.add(what)
                _warn(f"{what} failed ({err}); training goes on")

    def _publish(self, kind: Kind, seq: int, body: bytes, records: int = 0) -> None:
        if kind != "rec":
            # A frame's seq says which records came before it: they go first, and so do those
            # kept while nobody listened once someone does, or at the end (a viewer racing its
            # subscription would otherwise see the end past records it never got).
            if self._history.unpublished and not self._unsent and (self._closed or self.watched):
                self._take_waiting()
            if self._unsent:
                self._publish_steps()
        s = self._stream
        header = Header(s.run, s.rank, s.inc, seq, time.time()).pack()
        if self._ch.publish([self._topics[kind], header, body]):
            self.stats.records += records
        elif records:
            self.stats.dropped += records
        else:
            self.stats.dropped_frames += 1

    def _send_steps(self, records: Sequence[StepRecord]) -> None:
        if not self._unsent and not self.watched:
            # Nobody listens: there is no frame to publish, and the history packs its records
            # only if a viewer comes for them (most fall out unread): 0.5 µs a step of the tx
            # thread's GIL in a 0.7 ms loop.
            self._history.extend_unpacked(records)
            self._progress.record_many(records, time.time())
            return
        if not self._unsent:
            self._take_waiting()
        records, packed = self._pack_steps(records)
        self._history.extend(packed)
        self._progress.record_many(records, time.time())
        self._unsent.extend(packed)
        late = time.monotonic() - self._published_at >= PUBLISH_EVERY_S
        if self._unsent and (late or len(self._unsent) >= MAX_FRAME_RECORDS):
            self._publish_steps()

    def _take_waiting(self) -> None:
        """Start the frames to publish (`_unsent`, empty) with the records kept while nobody
        listened, if any: a viewer whose snapshot was taken before its subscription was read
        has not got those that came after it. Nothing is kept so while `_unsent` holds any."""
        late = self._history.take_unpublished()
        self._unsent_first = self._history.next_seq - len(late)
        self._unsent = late

    def _pack_steps(
        self, records: Sequence[StepRecord]
    ) -> tuple[Sequence[StepRecord], list[bytes]]:
        """The records that pack and their bytes, in C when it can; the others are counted."""
        try:
            return records, self._packer.pack_steps(records)
        except (TypeError, ValueError, AttributeError):
            return self._packable(records)

    def _packable(self, records: Sequence[StepRecord]) -> tuple[list[StepRecord], list[bytes]]:
        """The records that pack, and their bytes; the others are counted as unpackable."""
        kept: list[StepRecord] = []
        packed: list[bytes] = []
        for rec in records:
            try:
                item = pack(rec.to_wire())
            except (TypeError, ValueError, AttributeError):
                self.stats.unpackable += 1
                continue
            kept.append(rec)
            packed.append(item)
        return kept, packed

    def _publish_steps(self) -> None:
        """Publish the records not sent yet, MAX_FRAME_RECORDS a frame."""
        packed, first = self._unsent, self._unsent_first
        self._unsent = []
        self._published_at = time.monotonic()
        for lo in range(0, len(packed), MAX_FRAME_RECORDS):
            chunk = packed[lo : lo + MAX_FRAME_RECORDS]
            self._publish("rec", first + lo, pack_array(chunk), len(chunk))

    def _send_system(self, sample: SystemSample) -> None:
        self._system = sample
        now = time.monotonic()
        # Samples come about once a second: 0.9 x the period keeps every n-th one despite jitter.
        if self._system_every > 1.0 and now - self._system_at < 0.9 * self._system_every:
            return
        self._system_at = now
        self._publish("sys", self._history.next_seq - 1, pack(sample.to_wire()))

    def _send_event(self, kind: str, payload: dict[str, Any]) -> None:
        event = {"id": self._events.next_seq, "kind": kind, "payload": payload}
        body = pack(event)
        self._events.append(event)
        self._publish("evt", self._history.next_seq - 1, body)

    def _heartbeat_body(self) -> dict[str, Any]:
        p = self._progress
        return {
            "last_step": -1 if p.last_step is None else p.last_step,
            "dropped": self._lost(),
            "queue_dropped": self.stats.dropped,
            "primary": p.primary,
            "phase": self._phase,
            "pid": self._pid,
        }

    def _lost(self) -> int:
        """Records no viewer will ever see: dropped by the training side or unpackable."""
        return self._progress.training_dropped + self.stats.unpackable

    def _heartbeat(self) -> None:
        self._publish("hb", self._history.next_seq - 1, pack(self._heartbeat_body()))

    def _drain_pub(self) -> None:
        for _ in range(MAX_INBOUND_PER_CALL):
            msg = self._ch.read_pub()
            if msg is None:
                break
            if not self._ch.apply_subscription(msg):
                self.stats.rejected += 1
            elif msg[0][:1] == b"\x01":
                self.stats.subscriptions += 1
            else:
                self._ch.caught_up()
        if not self._ch.keep_bounded():
            return
        self.stats.resets += 1
        if "flood" not in self._logged:
            self._logged.add("flood")
            _warn(
                f"a peer sent over {MAX_HELD_SUBSCRIPTIONS} subscriptions to no topic; the live"
                " socket was reset to bound memory (viewers re-sync); training goes on"
            )

    def _meta(self, request: Request) -> dict[str, Any]:
        _, events = self._events.since(request.events_since)
        last = self._history.next_seq - 1
        return {
            "info": self._info.to_wire(),
            "first": last + 1,
            "last": last,
            "count": 0,
            "events": events if request.verb == "snapshot" else [],
            "system": None if self._system is None else self._system.to_wire(),
            "hb": self._heartbeat_body(),
            "end": None if self._end is None else self._end.to_wire(),
            "timeline": self._timeline() if self._timeline and request.verb == "snapshot" else [],
        }

    def _rank_file(self) -> RankFile:
        p = self._progress
        return RankFile(
            info=self._info,
            pid_start=self._pid_start,
            endpoints=self.endpoints,
            curve_key=self.curve_key,
            updated=time.time(),
            last_step=p.last_step,
            last_step_ms=p.last_step_ms,
            median_step_ms=p.median_ms(),
            last_step_t=p.last_step_t,
            primary=p.primary,
            phase=self._phase,
            dropped=self._lost(),
            end=self._end,
            summary_path=self._summary,
            relayed_by=self._pid if self._relay else None,
        )

    @property
    def _owns_run_file(self) -> bool:
        return self._info.local_rank == 0 and not self._relay

    def _run_file(self) -> RunFile:
        i = self._info
        return RunFile(
            run_id=i.run_id,
            script=i.script,
            argv=i.argv,
            host=i.host,
            pid=i.pid,
            pid_start=self._pid_start,
            started=i.started,
            world_size=i.world_size,
            updated=time.time(),
            summary_path=self._summary,
            end=self._end,
        )

    def _write_files(self) -> None:
        """The rank file every time (its progress and `updated` say the rank is alive); run.json
        only when it changed: it holds the run's fixed facts until `end` and `summary_path`, and
        rewriting it unchanged cost the tx thread about 0.2 ms (a rename) every FILE_UPDATE_S."""
        assert self._run_dir is not None
        write_json_atomic(self._run_dir.rank_json(self._info.rank), self._rank_file().to_json())
        if not self._owns_run_file:
            return
        run, last = self._run_file(), self._run_written
        if last is None or dataclasses.replace(run, updated=last.updated) != last:
            write_json_atomic(self._run_dir.run_json, run.to_json())
            self._run_written = run

    def stats_dict(self) -> dict[str, int]:
        """The counters as a plain dict (for logs, tests and benchmarks)."""
        return self.stats.as_dict()


def _warn(text: str) -> None:
    """One `traceml: publisher: ...` line on fd 2, taking no Python lock; never raises."""
    data = f"traceml: publisher: {text}\n".encode("utf-8", "backslashreplace")
    try:
        while data:
            data = data[os.write(2, data) :]
    except OSError:
        return


def _owner(run_dir: RunDir, rank: int) -> str:
    try:
        pid = read_rank_file(run_dir.rank_json(rank)).pid
    except (OSError, TransportError, SchemaError):
        return ""
    return f" in pid {pid}"

"""Attach to a run: snapshot then live for every rank, as one stream of events.

Used by the viewer's feed thread and by tests; must never import torch. A Subscriber is owned by
one thread. poll() never waits longer than its timeout plus a bounded decoding budget; a frame of
another wire version raises WireVersionError (a SchemaError whose line says what to do), anything
else malformed is dropped and counted.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import socket
import threading
import time
from types import TracebackType

import zmq

from traceml.errors import SchemaError, TransportError
from traceml.transport.runfiles.runfile import RankFile, read_rank_file
from traceml.transport.subscribe.ranklink import RankLink
from traceml.transport.subscribe.runs import RunEntry
from traceml.transport.wire.events import EndEvent, Event, InfoEvent, RankState, StateEvent

MAX_MESSAGES_PER_SOCKET = 2000
"""Messages read from one socket per poll(), so one busy rank cannot starve the others."""
DRAIN_BUDGET_S = 0.05
"""Decoding time one poll() may spend; the rest waits for the next call (sockets stay ready)."""
RESCAN_S = 1.0
ENDED_RESCAN_S = 3.0
"""How often the files of ranks that had ended when we attached are looked at again: torchelastic
may restart them (a new process rewrites the file)."""
MAINTAIN_S = 0.1
"""Least time between two passes over every rank (snapshot requests, process checks, states):
a pass is O(ranks), and nothing it looks at changes on a shorter time scale."""
MAINTAIN_PER_RANK_S = 300e-6
"""...and at least this much per rank (a pass costs about 12 µs a rank: 0.3 s at 1,000 ranks,
still far inside the 1 s heartbeat that liveness is measured in)."""
_RANK_FILE = re.compile(r"rank-(\d+)\.json")


def raise_fd_limit() -> None:
    """Lift this process's soft limit on open files to the hard limit (viewers of big jobs)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


class Subscriber:
    """Connections to every rank of `run` on this host; context-managed, close() idempotent."""

    def __init__(self, run: RunEntry) -> None:
        """Connect a SUB and a DEALER per rank that has not ended (TransportError if unusable)."""
        self.run = run
        try:
            self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
            # Two sockets per rank: libzmq's default of 1,023 per context caps a viewer at 511
            # ranks; the fds they need are raised to the hard limit once per process.
            self._ctx.set(zmq.MAX_SOCKETS, max(1024, 2 * len(run.ranks) + 64))
            raise_fd_limit()
        except zmq.ZMQError as e:
            raise TransportError(f"cannot start ZeroMQ: {e.strerror}") from e
        self._poller = zmq.Poller()
        self._wake_lock = threading.Lock()
        # A pipe in the poll set, so another thread can cut a long wait short (wake): a
        # viewer leaving must not wait out its feed's poll.
        try:
            self._wake_r, self._wake_w = os.pipe()
        except OSError as e:
            self._ctx.term()
            raise TransportError(f"cannot open a pipe: {e.strerror}") from e
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._poller.register(self._wake_r, zmq.POLLIN)
        self._links: dict[int, RankLink] = {}
        self._by_socket: dict[zmq.Socket[bytes], RankLink] = {}
        self._ended: dict[int, RankFile] = {}
        self._pending: list[Event] = []
        self._states: dict[int, RankState] = {}
        self._host = socket.gethostname()
        self._scanned = 0.0
        self._ended_scanned = 0.0
        self._ended_mtime: dict[int, int] = {}
        self._maintained = -math.inf
        self._closed = False
        self._turn = 0
        now = time.time()
        try:
            for rank in run.ranks:
                self._add(rank, now)
        except TransportError:
            self.close()
            raise

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- public ----------------------------------------------------------------------------

    def poll(self, timeout_ms: int) -> list[Event]:
        """Wait up to `timeout_ms` for traffic, then return the events it produced.

        Decoding is bounded too (about DRAIN_BUDGET_S per call), so a big snapshot arrives over
        several calls and the caller stays responsive.

        Raises:
            SchemaError: a rank speaks another wire version (WireVersionError).
            TransportError: the sockets failed.
        """
        if self._closed:
            raise RuntimeError("poll() on a closed Subscriber: create a new one")
        events, self._pending = self._pending, []
        now = time.time()
        every = max(MAINTAIN_S, MAINTAIN_PER_RANK_S * len(self._links))
        due = not 0 <= now - self._maintained < every
        if due:
            self._maintained = now
            events += self._maintain(now)
        try:
            ready = self._poller.poll(0 if events else max(0, timeout_ms))
        except zmq.ZMQError as e:
            raise TransportError(f"polling the run's sockets failed: {e.strerror}") from e
        deadline = time.perf_counter() + DRAIN_BUDGET_S
        self._turn += 1
        for i in range(len(ready)):
            sock = ready[(i + self._turn) % len(ready)][0]
            if sock == self._wake_r:
                with contextlib.suppress(OSError):
                    os.read(self._wake_r, 4096)
                continue
            events += self._drain(sock, time.time(), deadline)
        return events + self._state_changes(time.time()) if due else events

    def rank_states(self, now: float) -> dict[int, RankState]:
        """ "live" | "stalled" | "dead" | "finished" per rank; `now` is epoch seconds."""
        states: dict[int, RankState] = {rank: "finished" for rank in self._ended}
        for rank, link in self._links.items():
            states[rank] = link.liveness.state(now)
        return dict(sorted(states.items()))

    @property
    def stats(self) -> dict[str, int]:
        """Counters over all ranks: malformed frames, re-snapshots, records lost for good."""
        links = list(self._links.values())
        return {
            "malformed": sum(link.malformed for link in links),
            "resyncs": sum(link.stitch.resyncs for link in links),
            "lost": sum(link.stitch.lost for link in links),
            "unknown_events": sum(link.unknown_events for link in links),
        }

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for link in self._links.values():
            link.close()
        self._links.clear()
        self._by_socket.clear()
        self._ctx.term()
        with self._wake_lock:  # no wake() writes to a closed (or reused) descriptor
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)
            self._wake_w = -1

    def wake(self) -> None:
        """Return the poll() under way (or the next) at once. Any thread may call it, also
        after close()."""
        with self._wake_lock:
            if self._wake_w >= 0:
                with contextlib.suppress(OSError):  # full: a wake is pending already
                    os.write(self._wake_w, b"w")

    # -- internals -------------------------------------------------------------------------

    def _add(self, rank: RankFile, now: float) -> None:
        self._pending.append(InfoEvent(rank.info))
        if rank.end is not None:
            self._ended[rank.rank] = rank
            if rank.path is not None:
                with contextlib.suppress(OSError):
                    self._ended_mtime[rank.rank] = os.stat(rank.path).st_mtime_ns
            self._pending.append(EndEvent(rank.end, rank.summary_path))
            return
        link = RankLink(self._ctx, rank, now, local=not rank.host or rank.host == self._host)
        self._links[rank.rank] = link
        for sock in (link.sub, link.ctl):
            self._by_socket[sock] = link
            self._poller.register(sock, zmq.POLLIN)

    def _remove(self, link: RankLink) -> None:
        for sock in (link.sub, link.ctl):
            self._poller.unregister(sock)
            self._by_socket.pop(sock, None)
        link.close()
        self._links.pop(link.rank, None)

    def _maintain(self, now: float) -> list[Event]:
        events: list[Event] = []
        for link in list(self._links.values()):
            events += link.tick(now)
            if link.replaced is not None:
                self._remove(link)
                self._add(link.replaced, now)
        if now - self._scanned >= RESCAN_S:
            self._scanned = now
            self._rescan(now)
        return events

    def _rescan(self, now: float) -> None:
        """Pick up ranks whose files appeared after attach (ranks start at different times)."""
        try:
            names = os.listdir(self.run.dir)
        except OSError:
            return
        for name in names:
            m = _RANK_FILE.fullmatch(name)
            if m is None or int(m[1]) in self._links or int(m[1]) in self._ended:
                continue
            try:
                self._add(read_rank_file(self.run.dir / name), now)
            except (OSError, TransportError, SchemaError):
                continue
        if now - self._ended_scanned >= ENDED_RESCAN_S:
            self._ended_scanned = now
            self._follow_restarts(now)

    def _follow_restarts(self, now: float) -> None:
        """A rank that had ended when we attached and whose file now names another, running
        process was restarted: follow it like any live rank (its InfoEvent says the incarnation).
        Files are read again only when their mtime moved."""
        for rank, old in list(self._ended.items()):
            if old.path is None:
                continue
            try:
                mtime = os.stat(old.path).st_mtime_ns
                if self._ended_mtime.get(rank) == mtime:
                    continue
                self._ended_mtime[rank] = mtime
                fresh = read_rank_file(old.path)
            except (OSError, TransportError, SchemaError):
                continue
            if fresh.end is None and fresh.pid != old.pid:
                del self._ended[rank]
                self._ended_mtime.pop(rank, None)
                self._add(fresh, now)

    def _drain(self, sock: zmq.Socket[bytes], now: float, deadline: float) -> list[Event]:
        link = self._by_socket.get(sock)
        if link is None:
            return []
        handle = link.on_pub if sock is link.sub else link.on_ctl
        events: list[Event] = []
        for _ in range(MAX_MESSAGES_PER_SOCKET):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            except zmq.ZMQError as e:
                raise TransportError(f"reading rank {link.rank} failed: {e.strerror}") from e
            events += handle(frames, now)
            if time.perf_counter() > deadline:
                break
        return events

    def _state_changes(self, now: float) -> list[Event]:
        events: list[Event] = []
        for rank, state in self.rank_states(now).items():
            if self._states.get(rank) != state:
                self._states[rank] = state
                events.append(StateEvent(rank, state))
        return events

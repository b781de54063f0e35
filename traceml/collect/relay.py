"""Rank 0's node serves the whole job: one relay publisher per rank of another node.

Every rank of a multi-node job pushes its frames to the collector on global rank 0
(collector.py). The ranks on rank 0's own node already serve this node's viewers themselves; a
rank of another node cannot be reached from here. For each of those the collector opens a relay:
a Publisher in relay mode, bound in this node's run dir as `rank-<N>.json`, that re-publishes what
the rank pushed (history and snapshots included) and passes its heartbeats on. So `traceml ls` and
`traceml attach` on rank 0's node show every rank of the job, through the same files, sockets and
liveness rules as a local rank, with nothing new in the viewer.

Runs in rank 0's tx thread and never raises: a relay that cannot open (its rank is served in this
run dir already, the dir is unusable) is skipped, and the rank stays in the job's summary.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq

from traceml.config import Settings
from traceml.errors import TransportError
from traceml.transport.publish.publisher import Publisher
from traceml.transport.subscribe.subscriber import raise_fd_limit
from traceml.transport.wire.events import (
    EndEvent,
    Event,
    HeartbeatEvent,
    InfoEvent,
    StepsEvent,
    SystemEvent,
)

RELAYED_RECORDS = 262_144
"""Records kept for snapshots by all relays together (about 40 MB), shared out by world size:
a 1,000-rank job keeps 262 steps per remote rank, a 16-rank job the rank's full history."""
MIN_HISTORY = 64

_log = logging.getLogger("traceml.transport")


@dataclass
class _Relay:
    publisher: Publisher
    last_step: int = -1
    dropped: int = 0
    primary: str | None = None
    phase: str | None = None


class Relays:
    """The relays of one collector, keyed by rank. One thread only.

    All relays share one zmq context (one I/O thread, however many ranks), sized for
    `world_size` ranks.

    Args:
        settings: The job's settings (endpoints: ipc by default, tcp when `--listen` says so).
        runtime_dir: This node's runtime dir (the run dir is `<runtime_dir>/<run id>`).
        remote: Tells whether a rank runs on another node (the collector knows from its hello).
        world_size: Ranks in the job, to size the shared context and the histories.
        timeline: A rank's whole-run timeline from the job's store (TimelineWindow wire
            lists), for the relays' attach snapshots; None leaves it out.
    """

    def __init__(
        self,
        settings: Settings,
        runtime_dir: Path | None,
        remote: Callable[[int], bool],
        world_size: int,
        timeline: Callable[[int], list[Any]] | None = None,
    ) -> None:
        self._timeline = timeline
        history = max(MIN_HISTORY, RELAYED_RECORDS // max(1, world_size))
        self._settings = dataclasses.replace(
            settings, history_steps=min(settings.history_steps, history)
        )
        self._runtime_dir = runtime_dir
        self._remote = remote
        self._world_size = world_size
        self._ctx: zmq.Context[zmq.Socket[bytes]] | None = None
        self._relays: dict[int, _Relay] = {}
        self._skipped: set[int] = set()
        """Ranks that need no relay or could not have one; never retried (ended ones too)."""

    @property
    def ranks(self) -> list[int]:
        """Ranks relayed now."""
        return sorted(self._relays)

    def route(self, events: Iterable[Event], now: float) -> None:
        """Pass what the collector decoded on to the relays (opening one at a rank's hello)."""
        for event in events:
            if isinstance(event, InfoEvent):
                self._open(event)
                continue
            relay = self._relays.get(event.rank)
            if relay is None:
                continue
            pub = relay.publisher
            if isinstance(event, StepsEvent):
                pub.send_steps(event.records)
            elif isinstance(event, SystemEvent):
                pub.send_system(event.sample)
            elif isinstance(event, HeartbeatEvent):
                relay.last_step, relay.dropped = event.last_step, event.dropped
                relay.primary, relay.phase = event.primary, event.phase
                self._service(relay, now, heartbeat=True)
            elif isinstance(event, EndEvent):
                pub.close(event.end, None)
                del self._relays[event.rank]
                self._skipped.add(event.rank)

    def service(self, now: float) -> None:
        """Subscriptions, snapshot requests and rank files of every relay; no heartbeat of
        their own: a rank that stops talking must look silent to the viewer."""
        for relay in self._relays.values():
            self._service(relay, now, heartbeat=False)

    def close(self) -> None:
        """Rank 0 is leaving: ranks that did not end fall silent (their files stay)."""
        for relay in self._relays.values():
            relay.publisher.detach()
        self._skipped.update(self._relays)
        self._relays.clear()
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None

    def _context(self) -> zmq.Context[zmq.Socket[bytes]]:
        if self._ctx is None:
            self._ctx = zmq.Context()
            # Two sockets per relay, past libzmq's default cap of 1,023 for big jobs.
            self._ctx.set(zmq.MAX_SOCKETS, max(1024, 2 * self._world_size + 64))
            raise_fd_limit()
        return self._ctx

    def _service(self, relay: _Relay, now: float, *, heartbeat: bool) -> None:
        relay.publisher.service(
            now,
            last_step=relay.last_step,
            dropped=relay.dropped,
            primary=relay.primary,
            phase=relay.phase,
            heartbeat=heartbeat,
        )

    def _open(self, event: InfoEvent) -> None:
        rank = event.info.rank
        if rank in self._relays or rank in self._skipped:
            return
        if not self._remote(rank):
            self._skipped.add(rank)
            return
        try:
            line = self._timeline
            pub = Publisher(
                event.info,
                self._settings,
                self._runtime_dir,
                relay=True,
                context=self._context(),
                timeline=None if line is None else (lambda: line(rank)),
            )
            pub.open()
        except (TransportError, zmq.ZMQError) as e:
            # Most often the rank is served in this run dir already (two agents sharing one
            # runtime dir): nothing is lost, this node's viewers reach it directly.
            self._skipped.add(rank)
            _log.debug("traceml: no relay for rank %d: %s", rank, e)
            return
        self._relays[rank] = _Relay(pub)

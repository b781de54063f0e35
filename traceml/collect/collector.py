"""The job collector: rank 0's tx thread receives every other rank's frames on one PULL socket.

Ranks push the same `[topic, header, body]` frames they publish (plus one `info` event when they
connect) through a `CollectorFeed`. The collector decodes them into transport events for rank 0
to fold into the job's RunStore, so the job's final_summary.json has every rank's row, on one
node or several. It never blocks: `poll()` reads what is there, within a frame budget. Malformed
frames are dropped and counted. Over TCP it is a CURVE server unless the run is `--insecure`.
Must never import torch.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import Any

import zmq

from traceml.errors import SchemaError, TransportError
from traceml.records import RankEnd, RankInfo, SystemSample
from traceml.transport.wire.address import CollectorAddress
from traceml.transport.wire.codec import Header, decode_steps, parse_topic, unpack
from traceml.transport.wire.events import (
    EndEvent,
    Event,
    HeartbeatEvent,
    InfoEvent,
    StepsEvent,
    SystemEvent,
)
from traceml.transport.wire.node import node_key
from traceml.transport.wire.security import KeyPair, make_server, new_keypair

RCVHWM = 100_000
MAX_FRAMES_PER_POLL = 4000
MAX_FRAME_BYTES = 4 * 1024 * 1024
"""A pushed frame larger than this is dropped and counted (a rank sends at most 256 records)."""


@dataclass
class RankSeen:
    """What the collector knows of one pushing rank."""

    last_frame: float
    end: RankEnd | None = None
    """The rank's last word, once it said it."""
    node: str | None = None
    """The rank's node (node.node_key), from its hello; None until then."""


class Collector:
    """Binds a PULL socket and turns pushed frames into events. One thread only."""

    def __init__(self, run_id: str, endpoint: str, *, curve: bool) -> None:
        self.run_id = run_id
        self._endpoint = endpoint
        self._keys: KeyPair | None = new_keypair() if curve else None
        self._ctx: zmq.Context[zmq.Socket[bytes]] | None = None
        self._sock: zmq.Socket[bytes] | None = None
        self.ranks: dict[int, RankSeen] = {}
        self.node = node_key()
        self.received = 0
        self.rejected = 0

    def open(self) -> CollectorAddress:
        """Bind and return the address to announce. Raises TransportError."""
        try:
            self._ctx = zmq.Context()
            sock = self._ctx.socket(zmq.PULL)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVHWM, RCVHWM)
            sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
            if self._keys is not None:
                make_server(sock, self._keys)
            sock.bind(self._endpoint)
            self._sock = sock
            bound = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        except zmq.ZMQError as e:
            self.close()
            raise TransportError(f"cannot bind the job collector on {self._endpoint}: {e}") from e
        return CollectorAddress(bound, self._keys.public if self._keys else None, self.run_id)

    def poll(self, max_frames: int = MAX_FRAMES_PER_POLL) -> list[Event]:
        """Decode whatever frames are waiting (never waits)."""
        out: list[Event] = []
        sock = self._sock
        if sock is None:
            return out
        for _ in range(max_frames):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            except zmq.ZMQError:
                self.rejected += 1
                break
            try:
                out.extend(self._decode(frames))
                self.received += 1
            except SchemaError:
                self.rejected += 1
        return out

    def _decode(self, frames: list[bytes]) -> list[Event]:
        if len(frames) != 3:
            raise SchemaError("collector: expected [topic, header, body]")
        kind, rank = parse_topic(frames[0])
        header = Header.unpack(frames[1])
        if header.run != self.run_id or header.rank != rank:
            raise SchemaError("collector: frame of another run or rank")
        now = time.time()
        seen = self.ranks.setdefault(rank, RankSeen(now))
        seen.last_frame = now
        if kind == "rec":
            return [StepsEvent(rank, decode_steps(frames[2]))]
        if kind == "sys":
            return [SystemEvent(SystemSample.from_wire(unpack(frames[2], "system sample")))]
        body = unpack(frames[2], "collector body")
        if not isinstance(body, dict):
            raise SchemaError("collector: body is not a map")
        if kind == "hb":
            return [_heartbeat(rank, header, body)]
        return self._event(rank, seen, body)

    def _event(self, rank: int, seen: RankSeen, body: dict[str, Any]) -> list[Event]:
        payload = body.get("payload")
        if body.get("kind") == "info":
            node = body.get("node")
            seen.node = node if isinstance(node, str) else None
            return [InfoEvent(RankInfo.from_wire(payload))]
        if body.get("kind") == "end" and isinstance(payload, dict):
            seen.end = RankEnd.from_wire(payload.get("end"))
            return [EndEvent(seen.end, payload.get("summary_path"))]
        return []

    def remote(self, rank: int) -> bool:
        """The rank said hello from another node than the collector's."""
        seen = self.ranks.get(rank)
        return seen is not None and seen.node is not None and seen.node != self.node

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None
            if self._endpoint.startswith("ipc://"):
                # libzmq leaves the socket file behind; it lives in the run's private dir.
                with contextlib.suppress(OSError):
                    os.unlink(self._endpoint[len("ipc://") :])
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None


def _heartbeat(rank: int, header: Header, body: dict[str, Any]) -> HeartbeatEvent:
    last = body.get("last_step")
    dropped = body.get("dropped")
    primary, phase = body.get("primary"), body.get("phase")
    return HeartbeatEvent(
        rank=rank,
        last_step=last if isinstance(last, int) else -1,
        dropped=dropped if isinstance(dropped, int) else 0,
        primary=primary if isinstance(primary, str) else None,
        t=header.t,
        phase=phase if isinstance(phase, str) else None,
    )

"""A rank's push link to the job collector: the frames it publishes, also sent to rank 0.

Runs in the rank's beats. Sends never block: a full queue (collector slow, gone, or not yet
reachable) drops the frame and counts it. The first frame is the rank's `info`, so the
collector knows who is talking before any record arrives. Must never import torch.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import zmq

from traceml.errors import TransportError
from traceml.records import RankEnd, RankInfo, StepRecord, SystemSample
from traceml.transport.wire.address import CollectorAddress
from traceml.transport.wire.codec import Header, Kind, Packer, pack, pack_array, topic
from traceml.transport.wire.node import node_key
from traceml.transport.wire.security import make_client

SNDHWM = 10_000
CHUNK = 256
"""Records per pushed frame."""
CLOSE_LINGER_MS = 500
"""At close, queued frames (the final records and the end event) get this long to leave."""


class CollectorFeed:
    """PUSH socket connected to the collector; one thread only."""

    def __init__(self, address: CollectorAddress, info: RankInfo) -> None:
        self._address = address
        self._info = dataclasses.replace(info, run_id=address.run_id)
        self._ctx: zmq.Context[zmq.Socket[bytes]] | None = None
        self._sock: zmq.Socket[bytes] | None = None
        self.sent = 0
        self.dropped = 0
        self._seq = 0
        self._packer = Packer()

    def open(self) -> None:
        """Connect (asynchronous in zmq: never waits for the peer) and queue the hello."""
        try:
            self._ctx = zmq.Context()
            sock = self._ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, SNDHWM)
            if self._address.server_key is not None:
                make_client(sock, self._address.server_key)
            sock.connect(self._address.endpoint)
            self._sock = sock
        except zmq.ZMQError as e:
            self.close(linger_ms=0)
            raise TransportError(f"cannot reach the job collector: {e}") from e

    def send_info(self, info: RankInfo) -> None:
        """The rank's info changed: the collector's store gets it like the first hello."""
        self._info = dataclasses.replace(info, run_id=self._info.run_id)
        self.hello()

    def hello(self) -> None:
        """Say who this rank is; the collector needs it before the records."""
        hello = {"id": -1, "kind": "info", "payload": self._info.to_wire(), "node": node_key()}
        self._push("evt", self._seq - 1, pack(hello))

    def send_steps(self, records: Sequence[StepRecord]) -> None:
        for lo in range(0, len(records), CHUNK):
            chunk = records[lo : lo + CHUNK]
            self._push("rec", self._seq, pack_array(self._packer.pack_steps(chunk)))
            self._seq += len(chunk)

    def send_system(self, sample: SystemSample) -> None:
        self._push("sys", self._seq - 1, pack(sample.to_wire()))

    def heartbeat(self, body: dict[str, Any]) -> None:
        self._push("hb", self._seq - 1, pack(body))

    def send_end(self, end: RankEnd) -> None:
        payload = {"end": end.to_wire(), "summary_path": None}
        self._push("evt", self._seq - 1, pack({"id": -2, "kind": "end", "payload": payload}))

    def _push(self, kind: Kind, seq: int, body: bytes) -> None:
        info = self._info
        header = Header(info.run_id, info.rank, info.incarnation, seq, time.time())
        self.send([topic(kind, info.rank), header.pack(), body])

    def send(self, frames: list[bytes]) -> bool:
        """Queue one message; False (and counted) when it had to be dropped."""
        if self._sock is None:
            return False
        try:
            self._sock.send_multipart(frames, zmq.NOBLOCK)
        except zmq.ZMQError:
            self.dropped += 1
            return False
        self.sent += 1
        return True

    def close(self, linger_ms: int = CLOSE_LINGER_MS) -> None:
        if self._sock is not None:
            self._sock.close(linger_ms)
            self._sock = None
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None

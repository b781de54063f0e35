"""The job collector's work, wherever it runs: receive every rank, fold it, relay it, settle it.

A `JobCollector` binds the PULL socket (collector.py), folds what the ranks push into a RunStore
(the job's, from which the job's final_summary.json is built), passes the other nodes' ranks on
to relays (relay.py) when the job spans nodes, and at the end waits briefly for the ranks' last
records and marks the ones that never said goodbye as dead. It runs in the collector process
(collectord.py) or, when that process cannot start, in rank 0's tx thread. One thread only;
never imports torch.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from traceml.collect.collector import Collector
from traceml.collect.relay import Relays
from traceml.config import Settings
from traceml.records import RankEnd, RankInfo
from traceml.transport.subscribe.fold import apply_events
from traceml.transport.wire.address import CollectorAddress
from traceml.transport.wire.events import Event

DEAD_AFTER_S = 2.0
"""At settle, a rank that has not ended and sent nothing for this long is dead."""
SETTLE_POLL_S = 0.02


def collector_endpoint(multi: bool, run_dir: Path | None, master: tuple[str, int] | None) -> str:
    """TCP on the interface that reaches MASTER_ADDR when the job spans nodes, else ipc in the
    run dir (tcp on loopback when that path is too long for a socket)."""
    if multi and master is not None:
        return f"tcp://{local_address(*master)}:*"
    if run_dir is not None:
        path = run_dir / "collector.sock"
        if len(str(path)) < 100:
            return f"ipc://{path}"
    return "tcp://127.0.0.1:*"


def local_address(master: str, port: int) -> str:
    """This host's address on the interface that reaches MASTER_ADDR (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((master, port))
        return str(s.getsockname()[0])


class JobCollector:
    """Collector + the job's store + relays; see the module docstring.

    Args:
        run_id: The job's run id (rank 0's); frames of another run are rejected.
        endpoint: Where to bind (`collector_endpoint`).
        curve: Encrypt (TCP across nodes, unless the run is `--insecure`).
        world_size: Ranks in the job.
        settings: The job's settings (relays' endpoints and history).
        store: The job's RunStore (rank 0's own store when running in rank 0).
        relay: Re-serve the other nodes' ranks on this node (multi-node jobs).
    """

    def __init__(
        self,
        run_id: str,
        endpoint: str,
        *,
        curve: bool,
        world_size: int,
        settings: Settings,
        store: Any,
        relay: bool,
    ) -> None:
        self.run_id = run_id
        self.world_size = world_size
        self.store = store
        self.collector = Collector(run_id, endpoint, curve=curve)
        self._relays = (
            Relays(
                settings,
                settings.runtime_dir,
                self.collector.remote,
                world_size,
                timeline=getattr(store, "timeline_wire", None),
            )
            if relay
            else None
        )

    def open(self) -> CollectorAddress:
        """Bind; raises TransportError."""
        return self.collector.open()

    def tick(self, now: float) -> int:
        """Take what arrived (bounded), fold and relay it; returns the events taken."""
        events = self.collector.poll()
        self.take(events, now)
        if self._relays is not None:
            self._relays.service(now)
        return len(events)

    def take(self, events: list[Event], now: float) -> None:
        apply_events(self.store, events)
        if self._relays is not None and events:
            self._relays.route(events, now)

    def end(self, rank: int) -> RankEnd | None:
        """The rank's last word, once it said it."""
        seen = self.collector.ranks.get(rank)
        return seen.end if seen is not None else None

    def ended(self, rank: int) -> bool:
        return self.end(rank) is not None

    def settle(self, expected: Iterable[int], timeout_s: float) -> None:
        """Wait up to `timeout_s` for the `expected` ranks' ends (a rank on this host whose
        process is gone is not waited for), then mark the missing ones dead."""
        waiting = set(expected)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.tick(time.time())
            if all(self.ended(r) or self._local_pid_gone(r) for r in waiting):
                break
            time.sleep(SETTLE_POLL_S)
        self._mark_missing(waiting)

    def close(self) -> None:
        if self._relays is not None:
            self._relays.close()
            self._relays = None
        self.collector.close()

    def _mark_missing(self, expected: set[int]) -> None:
        now = time.time()
        for rank in sorted(expected):
            seen = self.collector.ranks.get(rank)
            if seen is not None and seen.end is not None:
                continue
            if seen is None and self.store.info(rank) is None:
                self.store.add_info(RankInfo(self.run_id, rank, world_size=self.world_size))
            if seen is None or now - seen.last_frame >= DEAD_AFTER_S or self._local_pid_gone(rank):
                self.store.set_rank_state(rank, "dead")

    def _local_pid_gone(self, rank: int) -> bool:
        info = self.store.info(rank)
        if info is None or not info.pid or info.host != socket.gethostname():
            return False
        try:
            os.kill(info.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

"""The whole job, for multi-rank runs: rank 0 collects every rank, so its summary has them all.

Global rank 0 binds a Collector (ipc on one node; TCP with CURVE on the training interface when
the job spans nodes) and announces it in the job's own c10d TCPStore (MASTER_ADDR:MASTER_PORT).
Every other rank looks the address up and pushes its records through a CollectorFeed. All of it
is a Sink of the tx thread; only the store calls, which can wait on the network, run in a
short-lived helper thread. Nothing here can block or fail the training thread.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import deque
from datetime import timedelta
from pathlib import Path
from typing import Any

from traceml.config import Settings
from traceml.instrument.probe import warn_once
from traceml.records import RankEnd, RankInfo, StepRecord, SystemSample
from traceml.transport.collector import Collector, CollectorAddress
from traceml.transport.events import (
    Event,
)
from traceml.transport.feed import CollectorFeed
from traceml.transport.fold import apply_events
from traceml.transport.relay import Relays

STORE_TIMEOUT_S = 10.0
LOOKUP_EVERY_S = 0.5
HEARTBEAT_S = 1.0
SETTLE_S = 1.0
"""At the end, rank 0 waits at most this long for the other ranks' last records and end (a
rank on this host whose process is gone is not waited for). Shutdown as a whole has 2 s."""
DEAD_AFTER_S = 2.0
PENDING_MAX = 20_000
"""Records a rank keeps for the collector (while it is not found yet, and between flushes);
older ones are dropped."""
FLUSH_S = 0.25
"""Records go to the collector in batches this far apart: rank 0 decodes frames, not records."""


def store_key(incarnation: int) -> str:
    """One collector per job incarnation: the c10d store is the job's own, so no run id is
    needed (ranks on other nodes may even have derived another one), and a torchelastic
    restart announces a fresh collector under a fresh key."""
    return f"traceml/collector/{incarnation}"


def is_multi_node(env: dict[str, str] | os._Environ[str]) -> bool:
    try:
        return int(env.get("WORLD_SIZE", "1")) > int(env.get("LOCAL_WORLD_SIZE", "0") or 0) > 0
    except ValueError:
        return False


def local_address(master: str, port: int) -> str:
    """This host's address on the interface that reaches MASTER_ADDR (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((master, port))
        return str(s.getsockname()[0])


class StoreCall(threading.Thread):
    """One c10d store operation off the tx thread; `result` is set when it finished."""

    def __init__(self, fn: Any) -> None:
        super().__init__(name="traceml-store", daemon=True)
        self._fn = fn
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self._fn()
        except Exception as e:  # noqa: BLE001 - reported by the caller, once
            self.error = e


def _client() -> Any:
    import torch.distributed as dist

    return dist.TCPStore(  # type: ignore[attr-defined]
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=False,
        timeout=timedelta(seconds=STORE_TIMEOUT_S),
        wait_for_workers=False,
    )


def _announce(incarnation: int, address: CollectorAddress) -> bool:
    _client().set(store_key(incarnation), address.encode())
    return True


def _lookup(incarnation: int) -> CollectorAddress | None:
    store = _client()
    key = store_key(incarnation)
    deadline = time.monotonic() + STORE_TIMEOUT_S
    while time.monotonic() < deadline:
        if store.check([key]):
            return CollectorAddress.decode(store.get(key).decode())
        time.sleep(LOOKUP_EVERY_S)
    return None


class JobLink:
    """A Sink of the tx thread that joins this rank to the job's collector."""

    def __init__(
        self, info: RankInfo, settings: Settings, store: Any, run_dir: Path | None
    ) -> None:
        self.info = info
        self._settings = settings
        self._store = store
        self._run_dir = run_dir
        self._collector: Collector | None = None
        self._relays: Relays | None = None
        self._feed: CollectorFeed | None = None
        self._call: StoreCall | None = None
        self._pending: deque[StepRecord] = deque(maxlen=PENDING_MAX)
        self._last_hb = 0.0
        self._last_flush = 0.0
        self._gave_up = False

    @property
    def is_collector(self) -> bool:
        return self.info.rank == 0

    # -- Sink --------------------------------------------------------------------------------
    def open(self) -> None:
        if self.is_collector:
            self._open_collector()
        else:
            self._start_lookup()

    def send_steps(self, records: list[StepRecord]) -> None:
        if not self.is_collector:
            self._pending.extend(records)

    def send_system(self, sample: SystemSample) -> None:
        if self._feed is not None:
            self._feed.send_system(sample)

    def service(self, now: float, *, last_step: int, dropped: int, primary: str | None) -> None:
        if self._collector is not None:
            self._take(self._collector.poll(), now)
            if self._relays is not None:
                self._relays.service(now)
            return
        if self._feed is None:
            self._try_connect()
            return
        if now - self._last_flush >= FLUSH_S:
            self._flush(now)
        if now - self._last_hb >= HEARTBEAT_S:
            self._last_hb = now
            body = {"last_step": last_step, "dropped": dropped, "primary": primary}
            self._feed.heartbeat(body | {"pid": os.getpid()})

    def _flush(self, now: float) -> None:
        """Push what accumulated as a few big frames: the collector's cost is per frame."""
        self._last_flush = now
        if self._feed is not None and self._pending:
            self._feed.send_steps(list(self._pending))
            self._pending.clear()

    def close(self, end: RankEnd, summary_path: Any) -> None:
        if self._feed is not None:
            self._flush(time.time())
            self._feed.send_end(end)
            self._feed.close()
            self._feed = None
        if self._relays is not None:
            self._relays.close()
            self._relays = None
        if self._collector is not None:
            self._collector.close()
            self._collector = None

    # -- rank 0 --------------------------------------------------------------------------------
    def _open_collector(self) -> None:
        multi = is_multi_node(os.environ)
        curve = multi and not self._settings.insecure
        endpoint = self._endpoint(multi)
        collector = Collector(self.info.run_id, endpoint, curve=curve)
        self._collector = collector
        address = collector.open()
        if multi:
            # Viewers on this node reach the other nodes' ranks through relays.
            self._relays = Relays(
                self._settings, self._settings.runtime_dir, collector.remote, self.info.world_size
            )
        self._call = StoreCall(lambda: _announce(self.info.incarnation, address))
        self._call.start()

    def _endpoint(self, multi: bool) -> str:
        if multi:
            master, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
            return f"tcp://{local_address(master, port)}:*"
        if self._run_dir is not None:
            path = self._run_dir / "collector.sock"
            if len(str(path)) < 100:
                return f"ipc://{path}"
        return "tcp://127.0.0.1:*"

    def fold(self, events: list[Event]) -> None:
        """Rank 0: put what the other ranks sent into the job's store."""
        apply_events(self._store, events)

    def _take(self, events: list[Event], now: float) -> None:
        """Rank 0: fold what arrived, and pass the other nodes' ranks on to their relays."""
        self.fold(events)
        if self._relays is not None and events:
            self._relays.route(events, now)

    def settle(self) -> None:
        """Rank 0, before the summary: wait briefly for the others' ends; the rest are dead."""
        collector = self._collector
        if collector is None:
            return
        deadline = time.monotonic() + SETTLE_S
        expected = set(range(self.info.world_size)) - {0}
        while time.monotonic() < deadline:
            self._take(collector.poll(), time.time())
            if all(self._settled(collector, r) for r in expected):
                break
            time.sleep(0.02)
        self._mark_missing(collector, expected)

    def _settled(self, collector: Collector, rank: int) -> bool:
        seen = collector.ranks.get(rank)
        return (seen is not None and seen.ended) or _local_pid_gone(self._store, rank)

    def _mark_missing(self, collector: Collector, expected: set[int]) -> None:
        now = time.time()
        for rank in sorted(expected):
            seen = collector.ranks.get(rank)
            if seen is not None and seen.ended:
                continue
            if seen is None:
                self._store.add_info(
                    RankInfo(self.info.run_id, rank, world_size=self.info.world_size)
                )
            if (
                seen is None
                or now - seen.last_frame >= DEAD_AFTER_S
                or _local_pid_gone(self._store, rank)
            ):
                self._store.set_rank_state(rank, "dead")

    # -- other ranks ---------------------------------------------------------------------------
    def _start_lookup(self) -> None:
        if not os.environ.get("MASTER_ADDR") or not os.environ.get("MASTER_PORT"):
            self._gave_up = True
            return
        self._call = StoreCall(lambda: _lookup(self.info.incarnation))
        self._call.start()

    def _try_connect(self) -> None:
        call = self._call
        if self._gave_up or call is None or call.is_alive():
            return
        self._call = None
        if call.error is not None or call.result is None:
            warn_once(
                "job collector",
                "rank 0's collector was not found: the job summary will "
                f"lack rank {self.info.rank} ({call.error or 'not announced in time'})",
            )
            self._gave_up = True
            return
        feed = CollectorFeed(call.result, self.info)
        feed.open()
        feed.hello()
        self._feed = feed
        self._flush(time.time())


def _local_pid_gone(store: Any, rank: int) -> bool:
    info = store.info(rank)
    if info is None or not info.pid or info.host != socket.gethostname():
        return False
    try:
        os.kill(info.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False

"""A rank without torch for transport tests: a Publisher driven by a tx thread, synthetic steps.

As a script: `python _publisher_proc.py --run-id ID [--rank N] [--backlog N] [--rate HZ] ...`
with TRACEML_RUNTIME_DIR set; prints `ready <endpoints json>` once open (or `error <line>`, exit
3), publishes `--backlog` steps at once and then `--rate` steps per second, and closes cleanly
(an "end" event, run files updated) on SIGTERM or after `--steps`. Tests import TxLoop too.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from traceml.config import Settings
from traceml.errors import TransportError
from traceml.records import RankEnd, RankInfo, StepRecord
from traceml.transport.publish.publisher import Publisher


def make_info(
    run_id: str, rank: int = 0, *, world_size: int = 1, local_rank: int | None = None
) -> RankInfo:
    return RankInfo(
        run_id=run_id,
        rank=rank,
        local_rank=rank if local_rank is None else local_rank,
        world_size=max(world_size, rank + 1),
        host=socket.gethostname(),
        pid=os.getpid(),
        started=time.time(),
        script="train.py",
    )


def make_step(i: int, rank: int = 0, ms: float = 10.0) -> StepRecord:
    return StepRecord(
        rank=rank,
        step=i,
        wall_start=1.7e9 + i * ms / 1000,
        step_ms=ms,
        phases=(ms * 0.3, None, ms * 0.2, ms * 0.4, ms * 0.1, None, 0.0),
        host_rss_mb=100.0 + i * 0.001,
    )


class TxLoop:
    """Drives a Publisher as the instrumentation's tx thread does: open, drain, service, close."""

    def __init__(self, publisher: Publisher, rank: int = 0, period: float = 0.02) -> None:
        self.publisher = publisher
        self.rank = rank
        self.period = period
        self.error: BaseException | None = None
        self.primary: str | None = "INPUT_BOUND"
        self.summary: Path | None = None
        self.next_step = 0
        self.published = 0
        self._queue: deque[StepRecord] = deque()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="traceml-tx-test", daemon=True)

    def start(self, timeout: float = 10.0) -> TxLoop:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("publisher did not open")
        if self.error is not None:
            raise self.error
        return self

    def steps(self, n: int) -> None:
        """Queue `n` synthetic steps, as the training thread would."""
        self.push([make_step(self.next_step + i, self.rank) for i in range(n)])

    def push(self, records: Sequence[StepRecord]) -> None:
        """Queue records for the tx thread (the only thread that may touch the publisher)."""
        self._queue.extend(records)
        self.next_step = max([self.next_step, *(r.step + 1 for r in records)])

    def wait_published(self, n: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self.published < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"published {self.published} of {n}")
            time.sleep(0.005)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def __enter__(self) -> TxLoop:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            self.publisher.open()
        except TransportError as e:
            self.error = e
            self._ready.set()
            return
        self._ready.set()
        while not self._stop.is_set():
            self._tick()
            self._stop.wait(self.period)
        self._tick()
        end = RankEnd(self.rank, "ok", self.next_step, time.time())
        self.publisher.close(end, self.summary)

    def _tick(self) -> None:
        batch: list[StepRecord] = []
        while self._queue:
            batch.append(self._queue.popleft())
        if batch:
            self.publisher.send_steps(batch)
            self.published += len(batch)
        self.publisher.service(
            time.monotonic(), last_step=self.next_step - 1, dropped=0, primary=self.primary
        )


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--run-id", required=True)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--backlog", type=int, default=0)
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--steps", type=int, default=-1)
    p.add_argument("--history", type=int, default=4096)
    p.add_argument("--listen", choices=("ipc", "tcp"), default="ipc")
    p.add_argument("--insecure", action="store_true")
    return p.parse_args(argv)


def main(argv: Sequence[str]) -> int:
    args = _parse(argv)
    settings = Settings(history_steps=args.history, listen=args.listen, insecure=args.insecure)
    loop = TxLoop(Publisher(make_info(args.run_id, args.rank), settings), args.rank)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        loop.start()
    except TransportError as e:
        print(f"error {e.msg}", flush=True)
        return 3
    loop.steps(args.backlog)
    loop.wait_published(args.backlog)
    print("ready " + json.dumps(loop.publisher.endpoints), flush=True)
    while not stop.wait(1.0 / args.rate if args.rate > 0 else 0.05):
        if args.rate > 0 and (args.steps < 0 or loop.next_step < args.steps):
            loop.steps(1)
    loop.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

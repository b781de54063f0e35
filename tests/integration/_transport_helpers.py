"""Shared pieces of the transport integration tests: publisher processes and event collection."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from traceml.transport.subscribe.runs import resolve_run
from traceml.transport.subscribe.subscriber import Subscriber
from traceml.transport.wire.events import Event, StateEvent, StepsEvent

HELPER = Path(__file__).with_name("_publisher_proc.py")


@dataclass
class Seen:
    """What a subscriber delivered: (rank, seq) of every record, in order, and all events."""

    seqs: dict[int, list[int]] = field(default_factory=dict)
    steps: dict[int, list[int]] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)

    def add(self, events: list[Event]) -> None:
        self.events += events
        for e in events:
            if isinstance(e, StepsEvent):
                self.seqs.setdefault(e.rank, []).extend(
                    range(e.first_seq, e.first_seq + len(e.records))
                )
                self.steps.setdefault(e.rank, []).extend(r.step for r in e.records)

    def count(self, rank: int = 0) -> int:
        return len(self.seqs.get(rank, []))

    def states(self, rank: int = 0) -> list[str]:
        return [e.state for e in self.events if isinstance(e, StateEvent) and e.rank == rank]


def poll_until(
    sub: Subscriber, seen: Seen, done: Callable[[], bool], timeout: float = 10.0
) -> None:
    """Poll `sub` into `seen` until `done()`; AssertionError at the deadline."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out; seen {seen.count()} records"
        seen.add(sub.poll(50))


def wait_for(check: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@contextmanager
def publisher_process(runtime: Path, run_id: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """A `_publisher_proc.py` process that has opened its publisher; killed at exit."""
    env = dict(os.environ, TRACEML_RUNTIME_DIR=str(runtime))
    proc = subprocess.Popen(
        [sys.executable, str(HELPER), "--run-id", run_id, *args],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ready"), f"publisher process said {line!r}"
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def attach(runtime: Path, ref: str | None) -> Subscriber:
    return Subscriber(resolve_run(ref, runtime))

"""Where the feed reads a run from: the transport's Subscriber for a live run, the summary for a
finished one.

Everything here runs on the feed thread (it may wait and block briefly); it only reads run files
and sockets, never writes to a run, and never imports torch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from traceml.analysis.summary import load_summary
from traceml.errors import RunNotFoundError
from traceml.transport.runfiles.rundir import RunDir
from traceml.transport.subscribe.fold import apply_event, apply_events
from traceml.transport.subscribe.runs import RunEntry, resolve_run
from traceml.transport.wire.events import Event
from traceml_tui.files_snapshot import from_entry
from traceml_tui.summary_snapshot import from_summary

if TYPE_CHECKING:
    from traceml.analysis.store import RunStore
    from traceml.transport.subscribe.subscriber import Subscriber
    from traceml_tui.feed import Source
    from traceml_tui.snapshot import Snapshot

WAIT_POLL_S = 0.25
"""How often `traceml run` looks for its run's files while the script starts."""
PUMP_EVERY_S = 0.02
"""Least time between two reads of the run's sockets. Each read costs O(ranks) whatever it
brings, so records wait in ZeroMQ's queues meanwhile and are folded in batches (20 ms of 64
ranks at 100 steps/s is 128 records, far below any queue's limit)."""
PUMP_PER_RANK_S = 50e-6
"""...and at least this much per rank: polling two sockets costs about 2.5 µs of CPU, so a
1,000-rank run is read every 50 ms, its polling kept near 5 % of a core."""


def fold(store: RunStore, event: Event) -> bool:
    """Apply one subscriber event to the store (traceml.transport.subscribe.fold.apply_event)."""
    return apply_event(store, event)


class SubscriberSource:
    """A live run through the transport's Subscriber (snapshot, then live, stitched by seq)."""

    def __init__(self, run: RunEntry) -> None:
        self.run = run
        self._sub: Subscriber | None = None
        self._next_read = 0.0
        """time.monotonic() before which the sockets are not read again."""
        self._woken = threading.Event()

    @property
    def known_steps(self) -> int | None:
        """Steps the run files say the run has made (the feed shows it until the history
        arrives); None before the first step."""
        last = self.run.last_step
        return None if last is None else last + 1

    def open(self) -> None:
        from traceml.transport.subscribe.subscriber import Subscriber

        self._sub = Subscriber(self.run)

    def pump(self, store: RunStore, timeout_s: float) -> bool:
        if self._sub is None:
            raise RuntimeError("pump() before open(): open the source first")
        wait = min(self._next_read - time.monotonic(), timeout_s)
        if wait > 0:
            if self._woken.wait(wait):
                self._woken.clear()
                return False
            timeout_s -= wait
        every = max(PUMP_EVERY_S, PUMP_PER_RANK_S * len(self.run.ranks))
        self._next_read = time.monotonic() + every
        return apply_events(store, self._sub.poll(round(timeout_s * 1000)))

    def wake(self) -> None:
        sub = self._sub
        self._woken.set()
        if sub is not None:
            sub.wake()

    def close(self) -> None:
        if self._sub is not None:
            self._sub.close()


def find_run(
    ref: str | None, runtime_dir: Path | None, *, wait: bool, cancelled: Callable[[], bool]
) -> RunEntry:
    """Resolve `ref`; with `wait`, retry until the run's files appear (or `cancelled()`).

    Raises:
        RunNotFoundError: no such run (and not waiting, or cancelled while waiting).
    """
    while True:
        try:
            return resolve_run(ref, runtime_dir)
        except RunNotFoundError:
            if not wait or cancelled():
                raise
        time.sleep(WAIT_POLL_S)


def log_path(run: RunEntry) -> Path:
    """Where `traceml run` writes the script's output for `run` (it may not exist)."""
    return RunDir(run.dir.parent, run.run_id).log_path


def open_run(
    ref: str | None,
    *,
    runtime_dir: Path | None = None,
    wait: bool = False,
    cancelled: Callable[[], bool] = lambda: False,
) -> Source | Snapshot:
    """The run named `ref` for the feed: a Source while it may still publish, else a fixed
    Snapshot: of its summary (finished), or of its run files (dead without a summary).

    Raises:
        RunNotFoundError: see `find_run`.
        SchemaError: the finished run's summary is unreadable or of another version.
        TransportError: the run's sockets cannot be used.
    """
    run = find_run(ref, runtime_dir, wait=wait, cancelled=cancelled)
    summary = run.summary_path
    if run.state == "finished" and summary is not None and summary.is_file():
        return from_summary(load_summary(summary))
    if run.rank_states and all(s in ("dead", "finished") for s in run.rank_states.values()):
        return from_entry(run)  # nobody is left to answer: show what the files know
    return SubscriberSource(run)

"""The one feed loop: it owns the run's Source and the RunStore, and pushes frozen snapshots.

Choice: **push**: the UI sees only the frozen snapshots posted to it, never the store. The loop
runs on one thread (the app's `@work(thread=True, exclusive=True, group="feed")` worker), folds
whatever the source received into its RunStore, and at most every `interval_s` (once a second by
default, also when nothing arrives, so ages and states move; slower when snapshots are costly to
build or draw, see BUILD_SHARE and DRAW_SHARE) calls `post(snapshot)` with a complete, frozen
Snapshot. The app posts it as a `SnapshotReady` message whose `can_replace` collapses a backlog to
the newest one. This is the only code that changes the store; it never touches a widget.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Protocol

from traceml.analysis.store import RunStore
from traceml.config import DEFAULT_THRESHOLDS, Thresholds
from traceml_tui.snapshot import Snapshot, from_store

INTERVAL_S = 1.0
"""Least time between two snapshots while data flows. The header draws each one; the panels, whose
redraw costs the UI thread 20-40 ms, one every screens.main.PANELS_S. Beside one 0.4 ms-a-step
rank the launcher used 7.0 % of a core drawing everything at 2 snapshots a second and 5.0 % at 1
(28 and 20 µs a step; the fold of the records themselves is about 1 %). Once a second is what
`top` and `nvidia-smi -l` show; keys and resizes still redraw at once."""
IDLE_S = 1.0
"""Most time between two snapshots when nothing arrives, so ages, uptime and states move."""
PUMP_MAX_S = 0.25
"""Longest the loop waits on the source at once. It waits until records arrive or the next
snapshot is due, so beside a rank that publishes four times a second it wakes 5-10 times a
second, not 20 (each wake-up of an idle poll cost about 0.1 ms of CPU here: 0.25 % of a core).
The app wakes it when it leaves (`wake`), so this bounds only how late a source that cannot be
woken sees the cancellation, and how often the source's own upkeep runs."""
BUILD_SHARE = 0.15
"""Most of the feed thread's time spent building snapshots: a snapshot that took 0.3 s to build
(1,000 ranks) spaces the next ones 2 s apart, so the viewer never falls behind its source.
With DRAW_SHARE this keeps the viewer under half a core (benchmarks/viewer.py)."""
DRAW_SHARE = 0.15
"""Most of a core the UI thread may spend per snapshot: when it spent 60 ms of CPU between the
last two (drawing a big rank table that changed everywhere), the next ones come 0.4 s apart."""
MAX_INTERVAL_S = 3.0
"""The display moves at least this often however costly its snapshots: one very costly draw
(the first of a 1,000-row table) must not freeze it for long."""


class Source(Protocol):
    """Where a live run's records come from (the transport's subscriber, or a canned test run)."""

    def open(self) -> None:
        """Connect; raise TraceMLError with one line when the run cannot be reached."""

    def pump(self, store: RunStore, timeout_s: float) -> bool:
        """Wait up to `timeout_s`, fold what arrived into `store` (records, rank infos, system
        samples, rank ends and liveness states); True when anything arrived."""

    def wake(self) -> None:
        """Make a `pump` under way (or the next one) return at once; called from another
        thread, also before `open` and after `close`."""

    def close(self) -> None:
        """Disconnect; must be idempotent and must not block for long."""


class Feed:
    """Folds a Source into a RunStore and posts snapshots at a bounded rate.

    Args:
        source: The run's source; opened and closed by `run`, touched by this thread only.
        post: Called with each new snapshot (from the feed thread; must be thread-safe).
        store: The store to fold into; a fresh one by default.
        clock: Epoch seconds; tests pass a fake.
        timer: A monotonic timer measuring how long snapshots take to build; tests pass a fake.
        thresholds: Live window and diagnosis thresholds.
        draw_s: CPU seconds the display spent per snapshot lately (called from this thread;
            must be thread-safe); None = drawing is free.
        focus: The rank the user looks at (called from this thread; must be thread-safe); its
            recent steps ride along in each snapshot for the charts. None = the worst rank only.
        known_steps: Steps the run's files announced before its history arrived; None = unknown.
    """

    def __init__(
        self,
        source: Source,
        post: Callable[[Snapshot], object],
        *,
        store: RunStore | None = None,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.perf_counter,
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
        draw_s: Callable[[], float] | None = None,
        focus: Callable[[], int | None] | None = None,
        known_steps: int | None = None,
    ) -> None:
        self.source = source
        self.post = post
        self.store = store if store is not None else RunStore(thresholds=thresholds)
        self.clock = clock
        self.timer = timer
        self.thresholds = thresholds
        self.draw_s = draw_s
        self.focus = focus
        self.known_steps = known_steps
        self.last_data_at: float | None = None
        self._posted_at: float | None = None
        self._dirty = True
        self._build_s = 0.0
        """Seconds the last snapshot took to build, by `timer`."""

    def run(self, cancelled: Callable[[], bool]) -> None:
        """Open the source, feed until `cancelled()` is true, then close it.

        Raises:
            TraceMLError: the source could not be opened or failed for good.
        """
        self.source.open()
        try:
            while not cancelled():
                self.tick()
        finally:
            self.source.close()

    def tick(self) -> None:
        """Pump the source once and post a snapshot if one is due."""
        if self.source.pump(self.store, self.wait_s(self.clock())):
            self.last_data_at = self.clock()
            self._dirty = True
        now = self.clock()
        if self._due(now):
            self.post(self.snapshot(now))

    def wake(self) -> None:
        """Cut the source's wait short, so `run` sees its cancellation now (any thread)."""
        self.source.wake()

    def wait_s(self, now: float) -> float:
        """How long the next pump may wait for records: until the next snapshot is due, at most
        PUMP_MAX_S."""
        return min(PUMP_MAX_S, max(0.0, self._due_at() - now))

    def snapshot(self, now: float) -> Snapshot:
        """Build the snapshot of the store as it is now (and remember when and how long)."""
        self._posted_at, self._dirty = now, False
        started = self.timer()
        snap = from_store(
            self.store,
            now=now,
            last_data_at=self.last_data_at,
            thresholds=self.thresholds,
            focus=self.focus() if self.focus is not None else None,
            known_steps=self.known_steps,
        )
        self._build_s = self.timer() - started
        return snap

    @property
    def interval_s(self) -> float:
        """Least time between snapshots now: INTERVAL_S, or more when building or drawing them
        is costly."""
        drawing = self.draw_s() / DRAW_SHARE if self.draw_s is not None else 0.0
        return min(MAX_INTERVAL_S, max(INTERVAL_S, self._build_s / BUILD_SHARE, drawing))

    def _due_at(self) -> float:
        """When the next snapshot is due (`clock` time): an interval after the last one when
        new data came, else IDLE_S (or a longer interval) after it; at once before the first."""
        if self._posted_at is None:
            return -math.inf
        interval = self.interval_s
        return self._posted_at + (interval if self._dirty else max(IDLE_S, interval))

    def _due(self, now: float) -> bool:
        return now >= self._due_at()

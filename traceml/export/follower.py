"""Follower: attaches to one run, or to every live run as they come and go, on one daemon thread.

The headless sibling of the viewer's feed: one Subscriber per run (snapshot, then live, stitched
by seq), folded into a RunStore and a StepHistogram. Only the follower's thread touches the
subscribers; exporters read the stores and histograms from their own threads (both lock). It
reads run files and sockets and never writes to a run, so a slow, killed or failing exporter costs
the job nothing. Memory is bounded: a store's history per rank, and runs that ended are dropped
after LINGER_S.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from traceml.analysis.store import RunStore
from traceml.config import DEFAULT_THRESHOLDS, Thresholds
from traceml.errors import RunNotFoundError, TraceMLError
from traceml.export.histogram import StepHistogram
from traceml.records import RankEnd, RankInfo, StepRecord, SystemSample
from traceml.transport.subscribe.fold import apply_events
from traceml.transport.subscribe.runs import RunEntry, list_runs, resolve_run
from traceml.transport.subscribe.subscriber import Subscriber
from traceml.transport.wire.events import RankState

PUMP_S = 0.1
"""Least time between two reads of the sockets: records wait in ZeroMQ's queues meanwhile and
are folded in batches (an exporter is scraped every few seconds)."""
PUMP_PER_RANK_S = 100e-6
"""...and at least this much per rank followed, so polling stays a few % of a core at 1,000."""
DISCOVER_S = 2.0
"""How often `--all` looks for new runs in the runtime dir."""
LINGER_S = 120.0
"""How long a run whose every rank finished or died stays exported (`--all`), so scrapers see
how it ended before its series go away."""
HISTORY_STEPS = 256
"""Step records kept per rank: the live window needs 100 (and metrics.LATEST_OF looks back 64);
a record takes ~0.4 KB, so a 1,000-rank job costs ~100 MB here, a 64-rank one ~6 MB."""
OVER: frozenset[RankState] = frozenset({"finished", "dead"})

StepsHook = Callable[["Followed", Sequence[StepRecord]], None]
"""Called on the follower thread with each batch of records not seen before."""


@dataclass
class Followed:
    """One run the follower attached to."""

    entry: RunEntry
    store: RunStore
    histogram: StepHistogram = field(default_factory=StepHistogram)
    sub: Subscriber | None = None
    over_since: float | None = None
    """time.monotonic() since every rank finished or died; None while any runs."""
    on_steps: StepsHook | None = None
    states: dict[int, RankState] = field(default_factory=dict)
    """Each rank's latest liveness state, as the subscriber and the rank's end said."""

    @property
    def run_id(self) -> str:
        return self.entry.run_id

    # The EventStore protocol of transport.subscribe.fold: the store, plus the histogram.
    def add_steps(self, records: Sequence[StepRecord]) -> None:
        fresh = self.histogram.observe(records)
        self.store.add_steps(records)
        if fresh and self.on_steps is not None:
            self.on_steps(self, fresh)

    def add_system(self, sample: SystemSample) -> None:
        self.store.add_system(sample)

    def add_info(self, info: RankInfo) -> None:
        self.store.add_info(info)

    def add_end(self, end: RankEnd) -> None:
        self.store.add_end(end)
        self.states[end.rank] = "finished"

    def set_dropped(self, rank: int, dropped: int) -> None:
        self.store.set_dropped(rank, dropped)

    def set_phase(self, rank: int, phase: str | None) -> None:
        self.store.set_phase(rank, phase)

    def set_rank_state(self, rank: int, state: RankState) -> None:
        self.store.set_rank_state(rank, state)
        self.states[rank] = state

    def is_over(self) -> bool:
        """True when every rank seen has finished or died (without building a view)."""
        return bool(self.states) and all(s in OVER for s in self.states.values())


class Follower:
    """Follows `ref` (id, unique prefix, None = newest live run) or, with `follow_all`, every
    live run of this user.

    Args:
        ref: The run to follow; ignored with `follow_all`.
        follow_all: Follow every live run, picking up new ones every DISCOVER_S.
        runtime_dir: Where runs live; default TRACEML_RUNTIME_DIR or /tmp/traceml-<uid>.
        thresholds: Live window and diagnosis thresholds of the stores.
        on_steps: Called on the follower thread with new step records (the OTLP histogram).
        warn: Where one-line problems go (a run that cannot be read is skipped, not fatal).
    """

    def __init__(
        self,
        ref: str | None = None,
        *,
        follow_all: bool = False,
        runtime_dir: Path | None = None,
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
        on_steps: StepsHook | None = None,
        warn: Callable[[str], object] = lambda line: print(line, file=sys.stderr),
    ) -> None:
        self.ref = ref
        self.follow_all = follow_all
        self.runtime_dir = runtime_dir
        self.thresholds = thresholds
        self.on_steps = on_steps
        self.warn = warn
        self.error: TraceMLError | None = None
        """Why the thread stopped early (one run followed, and it failed); None otherwise."""
        self._runs: dict[str, Followed] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._discovered = -float("inf")

    def runs(self) -> list[Followed]:
        """The runs followed now (any thread)."""
        with self._lock:
            return list(self._runs.values())

    def open(self) -> None:
        """Attach to the named run now, so that a wrong name fails on the caller's thread.

        Raises:
            RunNotFoundError: no such run, or it has already ended.
            TransportError: its sockets cannot be used.
        """
        if self.follow_all:
            return
        entry = resolve_run(self.ref, self.runtime_dir)
        if not entry.live:
            raise RunNotFoundError(
                f"run {entry.run_id} is {entry.state}: nothing live to export"
                " (see `traceml show` for its summary)"
            )
        self._attach(entry)

    def start(self) -> Follower:
        """Open (if not yet) and follow on a daemon thread until close()."""
        if not self.follow_all and not self._runs:
            self.open()
        self._thread = threading.Thread(target=self._loop, name="traceml-export", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread, then read once more on the caller's thread (what arrived since its
        last pass); the subscribers stay open. Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
            if self.error is None:
                try:
                    self.pump()
                except TraceMLError:
                    pass

    def close(self) -> None:
        """Stop (see stop()) and close every subscriber; idempotent. The runs stay readable, so
        an exporter's last export after close() still has the final states."""
        self.stop()
        for run in self.runs():
            sub, run.sub = run.sub, None
            if sub is not None:
                sub.close()

    def __enter__(self) -> Follower:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def pump(self) -> bool:
        """One pass: discover runs (`--all`), read every subscriber, drop runs long over.
        True when anything arrived. Called by the thread; tests may call it directly."""
        now = time.monotonic()
        if self.follow_all and now - self._discovered >= DISCOVER_S:
            self._discovered = now
            self._discover()
        arrived = False
        for run in self.runs():
            arrived = self._read(run, now) or arrived
        return arrived

    # -- internals -------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.pump()
            except TraceMLError as e:
                self.error = e
                return
            except Exception as e:
                # A bug: the exporter must not go on serving frozen numbers. The CLI exits 2
                # with this line; threading's excepthook prints the traceback.
                self.error = TraceMLError(f"the exporter failed: {type(e).__name__}: {e}")
                raise
            ranks = sum(len(r.entry.ranks) for r in self.runs())
            self._stop.wait(max(PUMP_S, PUMP_PER_RANK_S * ranks))

    def _attach(self, entry: RunEntry) -> Followed:
        store = RunStore(history_steps=HISTORY_STEPS, thresholds=self.thresholds)
        run = Followed(entry, store, on_steps=self.on_steps)
        run.sub = Subscriber(entry)
        with self._lock:
            self._runs[entry.run_id] = run
        return run

    def _discover(self) -> None:
        try:
            found = list_runs(self.runtime_dir)
        except TraceMLError as e:
            self.warn(f"traceml export: cannot list runs: {e.msg}")
            return
        known = set(self._runs)
        for entry in found:
            if entry.run_id in known:
                continue
            try:
                self._attach(entry)
            except TraceMLError as e:
                self.warn(f"traceml export: skipping run {entry.run_id}: {e.msg}")

    def _read(self, run: Followed, now: float) -> bool:
        if run.sub is None:
            return False
        try:
            arrived = apply_events(run, run.sub.poll(0))
        except TraceMLError as e:
            if not self.follow_all:
                raise
            self.warn(f"traceml export: dropping run {run.run_id}: {e.msg}")
            self._drop(run)
            return False
        if self.follow_all:
            self._linger(run, now)
        return arrived

    def _linger(self, run: Followed, now: float) -> None:
        if not run.is_over():
            run.over_since = None
        elif run.over_since is None:
            run.over_since = now
        elif now - run.over_since >= LINGER_S:
            self._drop(run)

    def _drop(self, run: Followed) -> None:
        with self._lock:
            self._runs.pop(run.run_id, None)
        if run.sub is not None:
            run.sub.close()

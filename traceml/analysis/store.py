"""RunStore: folds the records of every rank into bounded history and builds RunViews from it.

Memory is O(history_steps) per rank, whatever the run's length. The store does no I/O and never
blocks for long: one internal lock guards each call, so a feed thread may write while another
thread takes views. It must never import torch or textual.

Warm-up for the summary (the first 5 steps or 5 %, whichever is more): a rank with n steps skips
its first max(warmup_steps, ceil(warmup_fraction * n)) steps. While every step from there on is
still in the full-resolution ring, that cut is exact. For longer runs the ring no longer holds
them, so the store keeps aggregates of disjoint segments that start at doubling step indices
(0, 5, 10, 20, 40, ...; at most `MAX_WARMUP_SEGMENTS`) and merges the segments from the one whose
start is the smallest >= the cut. Each step lands in exactly one segment, and segments that end
before the cut are dropped (the cut never moves back), so only a handful live at a time. When
fewer than `min_steps` steps would remain after the cut (a 3- or 6-step run), the summary uses
every step, so a short run still has numbers.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import itertools
import math
import operator
import threading
from collections import deque
from typing import TYPE_CHECKING, Any

from traceml.analysis.batch import BatchFacts, facts_of
from traceml.analysis.comm import CommTotals
from traceml.analysis.spikes import (
    LOG_KEPT,
    SLOWEST_KEPT,
    Baseline,
    SlowStep,
    SpikeTotals,
    spike_window,
)
from traceml.analysis.stats import (
    SERIES_POINTS,
    PhaseTotals,
    RecentStats,
    SystemTotals,
    WindowStats,
    quantile,
)
from traceml.analysis.timeline import Timeline, TimelineWindow
from traceml.analysis.view import RankState, RankWindow, RunView, ViewKind
from traceml.config import DEFAULT_THRESHOLDS, Thresholds

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from traceml.records import RankEnd, RankInfo, StepRecord, SystemSample

Stats = tuple["WindowStats | RecentStats", "list[float] | None", SpikeTotals, "list[SlowStep]"]
"""What a RankWindow is built from: aggregates, exact sorted step ms (or None), spikes, listed."""

PRUNE_EVERY_MASK = 63
"""Prune dead warm-up segments once every 64 steps: pruning only frees memory (summary_stats
skips segments before the cut anyway), and doing it per record cost more than the record."""
BATCH_MIN = 4
"""Fewer records than this are folded one at a time (column-wise folding has a fixed cost)."""
MAX_WARMUP_SEGMENTS = 24
"""Segment starts are 0 and warmup_steps * 2^k for k < this (5 .. ~42 M); the last is open-ended."""


def warmup_target(total_steps: int, thresholds: Thresholds) -> int:
    """Steps to skip as warm-up: max(warmup_steps, ceil(warmup_fraction * total_steps))."""
    return max(thresholds.warmup_steps, math.ceil(thresholds.warmup_fraction * total_steps))


def summary_start(total_steps: int, thresholds: Thresholds) -> int:
    """First step index of the summary window; 0 when too few steps would remain after warm-up."""
    target = warmup_target(total_steps, thresholds)
    return 0 if total_steps - target < thresholds.min_steps else target


class _Rank:
    """Everything the store keeps about one rank."""

    __slots__ = (
        "baseline",
        "comm",
        "covered",
        "dropped",
        "end",
        "evicted_max",
        "held_ms",
        "held_steps",
        "history",
        "info",
        "last_step",
        "last_system",
        "live",
        "phase",
        "rare",
        "ring",
        "segments",
        "spike_log",
        "spike_steps",
        "spikes",
        "starts",
        "state",
        "system",
        "timeline",
        "version",
    )

    def __init__(self, history: int, starts: tuple[int, ...], rare: float) -> None:
        self.history = history
        self.rare = rare
        """Thresholds.spike_rare: the most spikes (fraction of steps) left out of typical."""
        self.starts = starts
        self.ring: deque[StepRecord] = deque(maxlen=history)
        """The last `history` steps in step order; the deque drops the oldest as it fills."""
        self.evicted_max = -1
        """Highest step index pushed out of the ring; older or equal late records are ignored."""
        self.last_step = -1
        self.segments: dict[int, WindowStats] = {}
        self.comm: dict[int, CommTotals] = {}
        """DDP all-reduce wait totals per segment start, beside `segments` (DDP runs only)."""
        """Aggregates of [start, next start) by start; ones before the warm-up cut are dropped."""
        self.spikes: dict[int, SpikeTotals] = {}
        """Spike totals and slowest steps per segment start, beside `segments`."""
        self.baseline = Baseline()
        self.held_steps = 0
        """Steps folded that overlapped a beat of TraceML's own work (StepRecord.held_ms)."""
        self.held_ms = 0.0
        """Their overlap in all, ms: an upper bound on what TraceML's beats delayed them."""
        self.spike_steps: set[int] = set()
        """Steps in the ring judged spikes when folded (so exact windows agree with segments)."""
        self.spike_log: deque[SlowStep] = deque(maxlen=LOG_KEPT)
        """The last LOG_KEPT spikes, in arrival order."""
        self.info: RankInfo | None = None
        self.end: RankEnd | None = None
        self.state: RankState = "live"
        self.dropped = 0
        self.phase: str | None = None
        """The phase the rank's last heartbeat said it was in; None when not told."""
        self.system = SystemTotals()
        self.last_system: SystemSample | None = None
        self.timeline = Timeline()
        """The whole run in at most TIMELINE_WINDOWS windows (warm-up included)."""
        self.covered = -1
        """Last step of a timeline received in a snapshot; steps up to it are already in it."""
        self.version = 0
        """Bumped by every change a RankWindow shows (steps, info, end, state, dropped)."""
        self.live: tuple[int, int, RankWindow] | None = None
        """(version, window, RankWindow) of the last live window built: reused while current."""

    @property
    def total_steps(self) -> int:
        ended = self.end.steps if self.end is not None else 0
        return max(self.last_step + 1, ended)

    def add(self, rec: StepRecord, thresholds: Thresholds) -> None:
        if rec.step <= self.evicted_max or self._in_ring(rec.step):
            return
        self._push(rec)
        if rec.step > self.covered:
            self.timeline.add(rec)
        self.version += 1
        self.last_step = max(self.last_step, rec.step)
        start = self.starts[bisect.bisect_right(self.starts, rec.step) - 1]
        segment = self.segments.get(start)
        if segment is None:
            segment = self.segments[start] = WindowStats(start)
        segment.add(rec)
        self._judge(rec, start, thresholds)
        if rec.held_ms is not None:
            self.held_steps += 1
            self.held_ms += rec.held_ms
        if rec.comm_wait_ms is not None:
            comm = self.comm.get(start)
            if comm is None:
                comm = self.comm[start] = CommTotals()
            comm.add(rec)
        if not rec.step & PRUNE_EVERY_MASK:
            self._prune(warmup_target(self.total_steps, thresholds))

    def add_many(
        self,
        records: Sequence[StepRecord],
        thresholds: Thresholds,
        facts: BatchFacts | None = None,
    ) -> None:
        """`add` of each record, for the common batch (new steps, ascending), column by column.

        A rank folds every step it runs, and a viewer every step of every rank: one record at a
        time that cost 5-6 µs of Python per step. This path gives the same state (same floats,
        same spikes, same slowest steps) several times cheaper; any other batch (late, repeated
        or unordered steps) goes through `add` one record at a time. `facts`: the batch's, when
        the caller has them already.
        """
        # Too few records for the batched path's fixed cost: one at a time.
        batched = len(records) >= BATCH_MIN
        facts = (facts or facts_of(records, PRUNE_EVERY_MASK)) if batched else None
        if facts is None or not facts.ascending or records[0].step <= self.last_step:
            for rec in records:
                self.add(rec, thresholds)
            return
        first = records[0].step
        self._push_many(records)
        if facts.held:
            held = [r.held_ms for r in records if r.held_ms is not None]
            self.held_steps += len(held)
            self.held_ms += sum(held)
        if first > self.covered:
            self.timeline.extend(records)
        else:
            self.timeline.extend(r for r in records if r.step > self.covered)
        self.version += 1
        self.last_step = records[-1].step
        starts, i, n = self.starts, 0, len(records)
        while i < n:
            at = bisect.bisect_right(starts, records[i].step) - 1
            j = n
            if at + 1 < len(starts):
                j = bisect.bisect_left(records, starts[at + 1], i, n, key=_STEP)
            self._fold_segment(starts[at], records[i:j], thresholds, facts.comm)
            i = j
        if facts.due >= 0:  # the batch's last prune (the cut never moves back: it covers the rest)
            ended = self.end.steps if self.end is not None else 0
            self._prune(warmup_target(max(facts.due + 1, ended), thresholds))

    def _fold_segment(
        self, start: int, records: Sequence[StepRecord], thresholds: Thresholds, comm_seen: bool
    ) -> None:
        """Records of one warm-up segment: its stats, spikes and (`comm_seen`: some records of
        the batch measured the all-reduce wait) comm totals."""
        segment = self.segments.get(start)
        if segment is None:
            segment = self.segments[start] = WindowStats(start)
        segment.add_many(records)
        self._judge_many(records, start, thresholds)
        comm = [r for r in records if r.comm_wait_ms is not None] if comm_seen else None
        if comm:
            totals = self.comm.get(start)
            if totals is None:
                totals = self.comm[start] = CommTotals()
            for rec in comm:
                totals.add(rec)

    def _judge_many(
        self, records: Sequence[StepRecord], start: int, thresholds: Thresholds
    ) -> None:
        """`_judge` of each record: the spikes found in one C pass (Baseline.scan) or chunk by
        chunk (_judge_chunks), then the slowest steps offered."""
        totals = self.spikes.get(start)
        if totals is None:
            totals = self.spikes[start] = SpikeTotals()
        factor = thresholds.spike_factor
        scanned = self.baseline.scan(records, factor) if isinstance(records, list) else None
        found, top = scanned or (self._judge_chunks(records, factor), None)
        slow: dict[int, SlowStep] = {}
        for i, step in found:
            rec = records[i]
            slow[rec.step] = step
            totals.add_spike(rec)
            self.spike_steps.add(rec.step)
            self.spike_log.append(step)
        heap = totals.slowest
        floor = heap[0][0] if len(heap) >= SLOWEST_KEPT else -math.inf
        above = top > floor if top is not None else _above([r.step_ms for r in records], floor)
        if above:
            for rec in records:
                if rec.step_ms > floor:  # offer() keeps only these; it checks again as it goes
                    totals.offer(rec, slow.get(rec.step))

    def _judge_chunks(
        self, records: Sequence[StepRecord], factor: float
    ) -> list[tuple[int, SlowStep]]:
        """The spikes of a batch, as (index, SlowStep), the Baseline moved past it: records
        between two recomputations of its median are judged against the same one, so only
        spikes (rare) cost a step of Python each. The reference of Baseline.scan (C)."""
        baseline = self.baseline
        ms = [r.step_ms for r in records]
        found: list[tuple[int, SlowStep]] = []
        i, n = 0, len(records)
        while i < n:
            chunk = records[i : i + baseline.steady()]
            if baseline.ms is not None and _above(ms[i : i + len(chunk)], factor * baseline.ms):
                limit = factor * baseline.ms
                for k, rec in enumerate(chunk):
                    if _own_ms(rec) > limit:
                        found.append((i + k, baseline.slow(rec, factor, chunk[:k])))
            baseline.observe_many(chunk)
            i += len(chunk)
        return found

    def _judge(self, rec: StepRecord, start: int, thresholds: Thresholds) -> None:
        """Judge `rec` against the rolling typical step (before it joins it) and keep it."""
        totals = self.spikes.get(start)
        if totals is None:
            totals = self.spikes[start] = SpikeTotals()
        slow = None
        if self.baseline.is_spike(_own_ms(rec), thresholds.spike_factor):
            slow = self.baseline.slow(rec, thresholds.spike_factor)
            totals.add_spike(rec)
            self.spike_steps.add(rec.step)
            self.spike_log.append(slow)
        self.baseline.observe(rec)
        totals.offer(rec, slow)

    def spikes_of(self, records: Sequence[StepRecord]) -> SpikeTotals:
        """Spike totals of ring records (a live window, an exact summary): built for every
        changed rank of every viewer snapshot, so the slowest steps are picked at C speed."""
        totals = SpikeTotals()
        if self.spike_steps:
            for rec in records:
                if rec.step in self.spike_steps:
                    totals.add_spike(rec)
        top = heapq.nlargest(SLOWEST_KEPT, records, key=operator.attrgetter("step_ms"))
        logged = {s.step: s for s in self.spike_log} if self.spike_log else {}
        for rec in top:
            totals.offer(rec, logged.get(rec.step))
        return totals

    def listed(self, start: int, stop: int | None = None) -> list[SlowStep]:
        """Logged spikes with start <= step (< stop), in step order."""
        return sorted(
            (s for s in self.spike_log if s.step >= start and (stop is None or s.step < stop)),
            key=lambda s: s.step,
        )

    def _in_ring(self, step: int) -> bool:
        """Whether `step` is in the ring (sorted by step): a bisect, for the rare late record."""
        ring = self.ring
        if not ring or step > ring[-1].step or step < ring[0].step:
            return False
        at = bisect.bisect_left(ring, step, key=_STEP)
        return at < len(ring) and ring[at].step == step

    def _push(self, rec: StepRecord) -> None:
        ring = self.ring
        if len(ring) == ring.maxlen:  # full (history >= 1): the oldest of the ring and `rec` leaves
            if rec.step < ring[0].step:
                self._evicted(rec.step)
                return
            self._evicted(ring.popleft().step)
        if not ring or rec.step > ring[-1].step:
            ring.append(rec)
        else:
            bisect.insort(ring, rec, key=_STEP)

    def _push_many(self, records: Sequence[StepRecord]) -> None:
        """`_push` of new, ascending records: the bounded deque drops the oldest in C, and the
        highest step it drops is read before (a per-step set of ring steps cost more than the
        rest of the ring's work)."""
        ring = self.ring
        extra = len(ring) + len(records) - self.history
        if extra > 0:
            kept = len(ring)
            self._evicted((ring[extra - 1] if extra <= kept else records[extra - kept - 1]).step)
        ring.extend(records)

    def _evicted(self, step: int) -> None:
        """Steps up to `step` left the ring: late copies of them are ignored from now on."""
        if step > self.evicted_max:
            self.evicted_max = step
            if self.spike_steps:
                self.spike_steps = {s for s in self.spike_steps if s > step}

    def _prune(self, target: int) -> None:
        """Drop segments that end at or before the cut: no later summary can start in them."""
        if len(self.segments) < 2 or min(self.segments) >= target:
            return
        for start in sorted(self.segments):
            nxt = self.starts.index(start) + 1
            if nxt < len(self.starts) and self.starts[nxt] <= target:
                del self.segments[start]
                self.comm.pop(start, None)
                self.spikes.pop(start, None)

    def summary_stats(self, thresholds: Thresholds) -> Stats:
        """Post-warm-up aggregates, the sorted step times when they are exact, and spikes."""
        start = summary_start(self.total_steps, thresholds)
        if self.evicted_max < start:
            records = [r for r in self.ring if r.step >= start]
            return (*_exact(records), self.spikes_of(records), self.listed(start))
        first = min((s for s in self.segments if s >= start), default=None)
        keep = [s for s in sorted(self.segments) if first is None or s >= first]
        parts = [self.segments[s] for s in keep]
        spikes = SpikeTotals.merged(self.spikes[s] for s in keep if s in self.spikes)
        stats = WindowStats.merged(parts) if parts else WindowStats()
        return stats, None, spikes, self.listed(keep[0] if keep else start)

    def comm_summary(self, thresholds: Thresholds) -> CommTotals:
        """All-reduce wait over the summary window (after warm-up)."""
        start = summary_start(self.total_steps, thresholds)
        if self.evicted_max < start:
            return CommTotals.of(r for r in self.ring if r.step >= start)
        first = min((s for s in self.segments if s >= start), default=None)
        return CommTotals.merged(c for s, c in self.comm.items() if first is None or s >= first)

    def recent(self, window: int) -> list[StepRecord]:
        """The last `window` steps kept, oldest first (the live view's window)."""
        newest_first = list(itertools.islice(reversed(self.ring), window)) if window > 0 else []
        return newest_first[::-1]

    def live_window(self, rank: int, window: int) -> RankWindow:
        """The live RankWindow of the last `window` steps, rebuilt only after a change."""
        cached = self.live
        if cached is not None and cached[0] == self.version and cached[1] == window:
            return cached[2]
        recent = self.recent(window)
        first = recent[0].step if recent else 0
        spikes = self.spikes_of(recent)
        built = _window(rank, self, *_live_stats(recent), spikes, self.listed(first))
        comm = CommTotals.of(recent)
        if comm.steps:
            built = dataclasses.replace(
                built, comm_wait_share=comm.share, comm_wait_ms=comm.mean_ms
            )
        self.live = (self.version, window, built)
        return built


_RANK = operator.attrgetter("rank")
_STEP = operator.attrgetter("step")


def _own_ms(rec: StepRecord) -> float:
    """The step's time less its overlap with TraceML's own work: what spikes are judged on, so
    that a beat's fold is never diagnosed as the loop's spike (the record keeps step_ms
    whole; the summary counts the overlap apart, as TraceML's)."""
    return rec.step_ms if rec.held_ms is None else rec.step_ms - rec.held_ms


def _above(values: Sequence[float], limit: float) -> bool:
    """Whether a value may be above `limit`: max() at C speed (a NaN first makes it say yes)."""
    top = max(values)
    return top > limit or top != top


def _exact(records: Sequence[StepRecord]) -> tuple[WindowStats, list[float]]:
    return WindowStats.of(records), sorted(r.step_ms for r in records)


def _typical(
    stats: WindowStats | RecentStats, spikes: SpikeTotals, rare: float
) -> tuple[PhaseTotals, int, float | None]:
    """Phase totals, step count and mean step ms of the typical steps: spikes left out while
    they are rare (at most `rare` of the steps), else every step."""
    typical = stats.count - spikes.count
    if not spikes.count or typical <= 0 or spikes.count > rare * stats.count:
        return stats.phases, stats.count, stats.mean_ms
    return (
        stats.phases.minus(spikes.phases),
        typical,
        (stats.step_total_ms - spikes.total_ms) / typical,
    )


def _live_stats(recent: list[StepRecord]) -> tuple[WindowStats | RecentStats, list[float] | None]:
    """Stats of a live window (oldest first): column-built while it fits SERIES_POINTS."""
    if len(recent) > SERIES_POINTS:
        return _exact(recent)
    stats = RecentStats(recent)
    return stats, stats.sorted_ms


def _window(
    rank: int,
    data: _Rank,
    stats: WindowStats | RecentStats,
    exact: list[float] | None,
    spikes: SpikeTotals,
    listed: list[SlowStep],
) -> RankWindow:
    info, series = data.info, stats.series
    phases, typical, mean = _typical(stats, spikes, data.rare)
    slowest = spikes.top()
    if exact is None and isinstance(stats, WindowStats):
        mid, p95 = stats.step_hist.quantile(0.5), stats.step_hist.quantile(0.95)
    else:
        mid, p95 = quantile(exact or [], 0.5), quantile(exact or [], 0.95)
    return RankWindow(
        rank=rank,
        host=info.host if info else "",
        steps=stats.count,
        total_steps=data.total_steps,
        median_ms=mid,
        p95_ms=p95,
        mean_ms=mean,
        phase_ms=phases.means(),
        phase_share=phases.shares(),
        typical_steps=typical,
        max_ms=slowest[0].ms if slowest else None,
        slowest=slowest,
        spikes=spike_window(spikes, stats.step_total_ms, listed, phases.means())
        if spikes.count
        else None,
        step_series=series.points(0),
        host_rss=series.points(1),
        device_allocated=series.points(2),
        device_peak_allocated_mb=stats.device_peak_allocated_mb,
        device_peak_reserved_mb=stats.device_peak_reserved_mb,
        device_capacity_mb=info.device_capacity_mb if info else None,
        host_rss_peak_mb=stats.host_rss_peak_mb,
        state=data.state,
        clock=stats.clock,
        dropped=data.dropped,
        phase=data.phase,
        exit=data.end.exit if data.end else None,
        timeline=data.timeline.windows(),
    )


class RunStore:
    """Bounded per-rank history plus whole-run aggregates of every rank of one run.

    Args:
        history_steps: Full-resolution step records kept per rank (for `recent` and live views).
        thresholds: Warm-up and live-window sizes, shared with the diagnosis.
    """

    def __init__(
        self, history_steps: int = 4096, thresholds: Thresholds = DEFAULT_THRESHOLDS
    ) -> None:
        if history_steps < 1:
            raise ValueError(f"history_steps must be >= 1, got {history_steps}")
        self.history_steps = history_steps
        self.thresholds = thresholds
        base = max(1, thresholds.warmup_steps)
        self._starts = (0, *(base << k for k in range(MAX_WARMUP_SEGMENTS)))
        self._ranks: dict[int, _Rank] = {}
        self._lock = threading.RLock()

    def frozen(self) -> threading.RLock:
        """Hold it (`with store.frozen():`) to read several views of one instant of the run:
        folding waits meanwhile. Reentrant, so the store's own methods work inside it."""
        return self._lock

    def _rank(self, rank: int) -> _Rank:
        data = self._ranks.get(rank)
        if data is None:
            data = self._ranks[rank] = _Rank(
                self.history_steps, self._starts, self.thresholds.spike_rare
            )
        return data

    def add_info(self, info: RankInfo) -> None:
        with self._lock:
            data = self._rank(info.rank)
            data.info = info
            data.version += 1

    def add_steps(self, records: Sequence[StepRecord]) -> None:
        """Fold step records of any ranks, in any order; a repeated (rank, step) is ignored."""
        if not records:
            return
        if not isinstance(records, list):  # decoded frames are tuples: the C folds take lists
            records = list(records)
        with self._lock:
            facts = facts_of(records, PRUNE_EVERY_MASK)
            if facts.rank >= 0:  # one rank's (the usual batch)
                self._rank(records[0].rank).add_many(records, self.thresholds, facts)
                return
            for rank, group in itertools.groupby(records, key=_RANK):
                self._rank(rank).add_many(list(group), self.thresholds)

    def add_system(self, sample: SystemSample) -> None:
        with self._lock:
            data = self._rank(sample.rank)
            data.system.add(sample)
            data.last_system = sample

    def add_end(self, end: RankEnd) -> None:
        """Record how a rank ended; its state becomes "finished"."""
        with self._lock:
            data = self._rank(end.rank)
            data.end = end
            data.state = "finished"
            data.version += 1

    def set_rank_state(self, rank: int, state: RankState) -> None:
        with self._lock:
            data = self._rank(rank)
            if data.state != state:
                data.state = state
                data.version += 1

    def set_phase(self, rank: int, phase: str | None) -> None:
        """The phase a rank's heartbeat says it is in (shown when it stalls)."""
        with self._lock:
            data = self._rank(rank)
            if data.phase != phase:
                data.phase = phase
                data.version += 1

    def set_dropped(self, rank: int, dropped: int) -> None:
        with self._lock:
            data = self._rank(rank)
            if data.dropped != dropped:
                data.dropped = dropped
                data.version += 1

    def ranks(self) -> list[int]:
        with self._lock:
            return sorted(self._ranks)

    def total_steps(self, rank: int) -> int:
        """Steps `rank` has run (highest step index + 1, or its RankEnd count); 0 if unknown."""
        with self._lock:
            data = self._ranks.get(rank)
            return data.total_steps if data else 0

    def recent(self, rank: int, n: int) -> list[StepRecord]:
        """The last `n` full-resolution records of `rank`, oldest first."""
        with self._lock:
            data = self._ranks.get(rank)
            return list(data.ring)[-n:] if data and n > 0 else []

    def last_system(self, rank: int) -> SystemSample | None:
        with self._lock:
            data = self._ranks.get(rank)
            return data.last_system if data else None

    def info(self, rank: int) -> RankInfo | None:
        with self._lock:
            data = self._ranks.get(rank)
            return data.info if data else None

    def timeline_wire(self, rank: int) -> list[Any]:
        """The rank's timeline as TimelineWindow wire lists (for attach snapshots)."""
        with self._lock:
            data = self._ranks.get(rank)
            return [w.to_wire() for w in data.timeline.windows()] if data else []

    def seed_timeline(self, rank: int, wire: Sequence[object]) -> None:
        """Replace the rank's timeline with one received in a snapshot; steps up to its last
        are not folded into it again (the snapshot's records are already in it).

        Raises:
            SchemaError: a window is malformed.
        """
        windows = [TimelineWindow.from_wire(w) for w in wire]
        with self._lock:
            data = self._rank(rank)
            data.timeline = Timeline()
            data.timeline.seed(windows)
            data.covered = max((w.last_step for w in windows), default=-1)
            data.version += 1

    def end_errors(self) -> list[tuple[str, str]]:
        """(type, message) of the exceptions that ended ranks, in rank order."""
        with self._lock:
            ends = (d.end for _, d in sorted(self._ranks.items()))
            return [e.error for e in ends if e is not None and e.error is not None]

    def system_totals(self) -> list[SystemTotals]:
        """Whole-run system means and peaks, one per rank that sent samples, in rank order."""
        with self._lock:
            return [d.system for _, d in sorted(self._ranks.items()) if d.system.samples]

    def live_view(self, window: int | None = None) -> RunView:
        """The last `window` steps per rank (default `thresholds.live_window`)."""
        size = self.thresholds.live_window if window is None else window
        with self._lock:
            windows = [d.live_window(r, size) for r, d in sorted(self._ranks.items())]
            return self._view(windows, "live")

    def held_totals(self) -> tuple[int, float]:
        """(steps, ms) of every rank's steps that overlapped TraceML's own work (its beats)."""
        with self._lock:
            ranks = self._ranks.values()
            return sum(d.held_steps for d in ranks), sum(d.held_ms for d in ranks)

    def comm_totals(self, kind: ViewKind = "summary") -> dict[int, CommTotals]:
        """DDP all-reduce wait per rank, over the summary window or the live window."""
        th = self.thresholds
        with self._lock:
            if kind == "live":
                return {r: CommTotals.of(d.recent(th.live_window)) for r, d in self._ranks.items()}
            return {r: d.comm_summary(th) for r, d in self._ranks.items()}

    def summary_view(self) -> RunView:
        """The whole run of every rank after warm-up (see the module docstring)."""
        th = self.thresholds
        with self._lock:
            windows = [_window(r, d, *d.summary_stats(th)) for r, d in sorted(self._ranks.items())]
            return self._view(windows, "summary")

    def _view(self, windows: Iterable[RankWindow], kind: ViewKind) -> RunView:
        infos = [d.info for _, d in sorted(self._ranks.items()) if d.info is not None]
        first = infos[0] if infos else None
        hosts = {i.host for i in infos if i.host}
        return RunView(
            run_id=first.run_id if first else "",
            script=first.script if first else "",
            world_size=max([1, len(self._ranks), *(i.world_size for i in infos)]),
            hosts=max(1, len(hosts)),
            device=first.device if first else "cpu",
            ranks=tuple(windows),
            kind=kind,
            optimizers=tuple(dict.fromkeys(o for i in infos for o in i.optimizers)),
        )

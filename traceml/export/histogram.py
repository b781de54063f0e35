"""Step-time histogram per rank: cumulative bucket counts of every step an exporter saw.

A Prometheus histogram is a counter: it must only grow, and each step must be counted once even
when a re-snapshot sends it again. So each rank remembers the step indices it counted (bounded:
the newest SEEN_STEPS, and everything at or below the oldest of those is taken as counted).
Steps the run ran before the exporter attached and that its snapshot no longer holds are not
counted: `_count` is the steps seen, `traceml_steps_total` the steps run. Pure, no I/O.
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from traceml.records import StepRecord

BUCKETS_S: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
"""Upper bounds in seconds (+Inf is implied): 1 ms steps of a tiny model to minute-long ones."""
SEEN_STEPS = 256
"""Step indices remembered per rank to drop repeats (~20 KB a rank). Older repeats fall at or
below the floor and are dropped too; a record older than the floor that was never seen (lost
in a gap, then re-sent by a snapshot) is not counted: the histogram may undercount, never
count a step twice."""


@dataclass(frozen=True, slots=True)
class Buckets:
    """One rank's histogram: non-cumulative counts per bucket (the last one is +Inf)."""

    counts: tuple[int, ...]
    sum_s: float

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        """(le, cumulative count) pairs, Prometheus style, ending with "+Inf"."""
        out, total = [], 0
        for bound, n in zip((*map(str, BUCKETS_S), "+Inf"), self.counts, strict=True):
            total += n
            out.append((bound, float(total)))
        return out


class _Rank:
    __slots__ = ("counts", "floor", "order", "seen", "sum_s")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS_S) + 1)
        self.sum_s = 0.0
        self.seen: set[int] = set()
        self.order: deque[int] = deque()
        self.floor = -1
        """Steps at or below this index count as seen (they left `seen`)."""

    def add(self, rec: StepRecord) -> bool:
        if rec.step <= self.floor or rec.step in self.seen:
            return False
        self.seen.add(rec.step)
        self.order.append(rec.step)
        if len(self.order) > SEEN_STEPS:
            old = self.order.popleft()
            self.seen.discard(old)
            self.floor = max(self.floor, old)
        seconds = rec.step_ms / 1000.0
        self.counts[bisect.bisect_left(BUCKETS_S, seconds)] += 1
        self.sum_s += seconds
        return True


class StepHistogram:
    """Histograms of every rank of one run; `observe` from the follower thread, `buckets` from
    any thread (one lock)."""

    def __init__(self) -> None:
        self._ranks: dict[int, _Rank] = {}
        self._lock = threading.Lock()

    def observe(self, records: Sequence[StepRecord]) -> list[StepRecord]:
        """Count the records not counted before; return those (in the given order)."""
        fresh = []
        with self._lock:
            for rec in records:
                data = self._ranks.get(rec.rank)
                if data is None:
                    data = self._ranks[rec.rank] = _Rank()
                if data.add(rec):
                    fresh.append(rec)
        return fresh

    def buckets(self) -> dict[int, Buckets]:
        with self._lock:
            return {r: Buckets(tuple(d.counts), d.sum_s) for r, d in sorted(self._ranks.items())}

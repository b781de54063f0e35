"""What the step-time and memory charts plot, as plain numbers: pure functions of a Snapshot.

Two scopes: "recent" (the rank's last steps, one point per step, from the snapshot's recent
records) and "run" (the whole run, one point per timeline window, from RankWindow.timeline, so a
viewer that attached at step 1,000,000 still sees the first minutes). Points are bucketed down to
at most the chart's width: a picture's cost grows with its points, not with the run. No
I/O, no widgets, no torch; a None number (not measured) is never drawn as 0.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from traceml.records import PHASES

if TYPE_CHECKING:
    from traceml.analysis.timeline import TimelineWindow
    from traceml.records import StepRecord
    from traceml_tui.snapshot import Snapshot

ChartScope = Literal["recent", "run"]
SCOPE_WORDS: dict[ChartScope, str] = {"recent": "last 100 steps", "run": "whole run"}
MEMORY_SPAN_FLOOR = 0.2
"""The memory chart's y-range spans at least this share of its top value: a 2 % wobble fills a
tenth of the height, not all of it (a chart stretches any range to its full height)."""


@dataclass(frozen=True, slots=True)
class Point:
    """One plotted x: a step, or a bucket of steps (means over its steps)."""

    step: float
    """Step count at the point's last step (1-based), the x axis."""
    weight: int
    """Steps behind the point."""
    step_ms: float
    phase_ms: tuple[float | None, ...]
    """Mean ms per phase in PHASES order; None = not measured."""
    host_rss_mb: float | None
    device_mb: float | None
    max_ms: float
    """Slowest single step behind the point."""


@dataclass(frozen=True, slots=True)
class ChartData:
    """The points of one rank in one scope, oldest first."""

    rank: int
    scope: ChartScope
    points: tuple[Point, ...]
    steps: int
    """Steps behind all the points."""

    @property
    def phases(self) -> tuple[str, ...]:
        """Phases measured at some point, in PHASES order (the stacking order, bottom up)."""
        return tuple(
            p for i, p in enumerate(PHASES) if any(pt.phase_ms[i] is not None for pt in self.points)
        )

    def stacked(self) -> list[tuple[str, list[float]]]:
        """(phase, running total of the phases up to it, per point), bottom phase first."""
        totals = [0.0] * len(self.points)
        out = []
        for phase in self.phases:
            i = PHASES.index(phase)
            totals = [
                t + (pt.phase_ms[i] or 0.0) for t, pt in zip(totals, self.points, strict=True)
            ]
            out.append((phase, totals))
        return out

    def slowest(self) -> Point | None:
        return max(self.points, key=lambda p: p.max_ms, default=None)

    def describe(self) -> str:
        """ "last 100 steps" / "whole run, 1,234 steps (8 a point)"."""
        if self.scope == "recent":
            return f"last {self.steps} steps"
        per = max(1, round(self.steps / len(self.points)))
        each = "" if per == 1 else f" ({per} a point)"
        return f"whole run, {self.steps:,} steps{each}"


def _from_record(rec: StepRecord) -> Point:
    return Point(
        step=rec.step + 1,
        weight=1,
        step_ms=rec.step_ms,
        phase_ms=tuple(rec.phases),
        host_rss_mb=rec.host_rss_mb,
        device_mb=rec.device_allocated_mb,
        max_ms=rec.step_ms,
    )


def _from_window(w: TimelineWindow) -> Point:
    return Point(
        step=w.last_step + 1,
        weight=w.steps,
        step_ms=w.mean_ms,
        phase_ms=w.phase_ms,
        host_rss_mb=w.host_rss_mb,
        device_mb=w.device_allocated_mb,
        max_ms=w.max_ms,
    )


def _mean(values: Sequence[tuple[float | None, int]]) -> float | None:
    """Weighted mean of the measured values; None when none is."""
    known = [(v, n) for v, n in values if v is not None]
    weight = sum(n for _, n in known)
    return sum(v * n for v, n in known) / weight if weight else None


def merge(points: Sequence[Point]) -> Point:
    """One point for consecutive points: step-weighted means, the largest max."""
    weights = [p.weight for p in points]
    phases = tuple(_mean([(p.phase_ms[i], p.weight) for p in points]) for i in range(len(PHASES)))
    return Point(
        step=points[-1].step,
        weight=sum(weights),
        step_ms=_mean([(p.step_ms, p.weight) for p in points]) or 0.0,
        phase_ms=phases,
        host_rss_mb=_mean([(p.host_rss_mb, p.weight) for p in points]),
        device_mb=_mean([(p.device_mb, p.weight) for p in points]),
        max_ms=max(p.max_ms for p in points),
    )


def bucket(points: Sequence[Point], most: int) -> tuple[Point, ...]:
    """At most `most` points: consecutive runs of points merged, evenly."""
    n = len(points)
    if n <= most or most <= 0:
        return tuple(points)
    edges = [round(i * n / most) for i in range(most + 1)]
    return tuple(merge(points[a:b]) for a, b in itertools.pairwise(edges) if b > a)


def chart_data(snap: Snapshot, rank: int, scope: ChartScope, most: int) -> ChartData | None:
    """The points of `rank` in `scope`, at most `most` of them; None when there is none.

    Args:
        snap: The snapshot drawn.
        rank: The rank charted (the focused one, by default the worst).
        scope: "recent" (snapshot.recent) or "run" (the rank's timeline).
        most: Most points (the chart's width in cells).
    """
    window = snap.rank(rank)
    if scope == "run":
        raw = [_from_window(w) for w in window.timeline] if window is not None else []
    else:
        raw = [_from_record(r) for r in snap.recent.get(rank, ())]
    if not raw:
        return None
    return ChartData(rank, scope, bucket(raw, most), sum(p.weight for p in raw))


def memory_range(values: Sequence[float]) -> tuple[float, float]:
    """The y-range of a memory series: its own, widened to MEMORY_SPAN_FLOOR of its top around
    its middle (never below 0), so small wobbles stay small."""
    lo, hi = min(values), max(values)
    floor = MEMORY_SPAN_FLOOR * max(abs(hi), 1.0)
    if hi - lo >= floor:
        return lo, hi
    mid = (lo + hi) / 2
    low = max(0.0, mid - floor / 2)
    return low, low + floor

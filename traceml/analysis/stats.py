"""Streaming statistics whose memory stays bounded however many steps a run has.

Pure arithmetic over records: no I/O, no clocks, no threads, and never torch. A long run is
summarised by a log-bucketed histogram (quantiles within ~1 %), running phase sums and a
block-averaged series of at most `SERIES_POINTS` points.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from collections import Counter
from functools import reduce
from typing import TYPE_CHECKING, cast

from traceml.analysis.native import fold_module
from traceml.records import PHASES, Clock, StepRecord, SystemSample

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

SERIES_POINTS = 256
"""Most points a BlockSeries keeps; on overflow neighbouring blocks merge and the stride doubles."""

SLOPE_POINTS = 64
"""Points a series slope samples at most (2,016 pairs), so many-rank views stay cheap."""

Point = tuple[int, float]
"""(step index, value) of a series."""


_C = fold_module()
"""_fold.c (stats_fold, block_fold) when built and allowed; None: the Python folds below."""


def total(values: Iterable[float]) -> float:
    """0.0 plus each value in turn: the same float as a running `+=`, at C speed."""
    return reduce(operator.add, values, 0.0)


def max_opt(a: float | None, b: float | None) -> float | None:
    """The larger of two optional values; None only when both are None."""
    if a is None:
        return b
    return b if b is not None and b > a else a


def quantile(sorted_values: Sequence[float], q: float) -> float | None:
    """Exact quantile with linear interpolation (numpy's default); None for no values."""
    if not sorted_values:
        return None
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def median(values: Iterable[float | None]) -> float | None:
    """Median of the values that are not None; None when there are none."""
    return quantile(sorted(v for v in values if v is not None), 0.5)


def theil_sen_slope(points: Sequence[tuple[float, float]]) -> float | None:
    """Median of the pairwise slopes: robust to outliers and single spikes.

    Returns None with fewer than two distinct x. O(n^2) in points, so callers pass decimated
    series (at most SERIES_POINTS).
    """
    slopes = [
        (y2 - y1) / (x2 - x1)
        for i, (x1, y1) in enumerate(points)
        for (x2, y2) in points[i + 1 :]
        if x2 != x1
    ]
    return median(slopes)


class _SlopeCache:
    """Slopes of recently seen series, so that a viewer re-diagnosing 1,000 ranks several times
    a second fits only the ranks whose series changed. Two generations of at most `size` each:
    a series not asked for during a whole generation is forgotten."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._new: dict[tuple[tuple[Point, ...], int], tuple[float | None]] = {}
        self._old: dict[tuple[tuple[Point, ...], int], tuple[float | None]] = {}

    def slope(self, series: tuple[Point, ...], limit: int) -> float | None:
        key = (series, limit)
        hit = self._new.get(key) or self._old.get(key)
        if hit is None:
            hit = (_slope(series, limit),)
        if len(self._new) >= self.size:
            self._old, self._new = self._new, {}
        self._new[key] = hit
        return hit[0]


_SLOPES = _SlopeCache()


def series_slope(series: Sequence[Point], limit: int = SLOPE_POINTS) -> float | None:
    """Theil-Sen slope (value per step) of a series thinned to `limit` evenly spaced points.

    Tuples (as RankWindow holds them) are remembered: the same series is fitted once.
    """
    if isinstance(series, tuple):
        return _SLOPES.slope(series, limit)
    return _slope(series, limit)


def _slope(series: Sequence[Point], limit: int) -> float | None:
    if len(series) > limit:
        stride = (len(series) - 1) / (limit - 1)
        series = [series[round(i * stride)] for i in range(limit)]
    return theil_sen_slope([(float(x), y) for x, y in series])


class LogHistogram:
    """Counts values in logarithmic buckets, DDSketch-style, for quantiles within ~1 %.

    Bucket k holds (gamma^(k-1), gamma^k]; its representative value is within
    `relative_accuracy` of every value in it. Values <= 0 are counted apart as 0.
    """

    __slots__ = ("_buckets", "_gamma", "_log_gamma", "_zeros", "count")

    def __init__(self, relative_accuracy: float = 0.01) -> None:
        self._gamma = (1 + relative_accuracy) / (1 - relative_accuracy)
        self._log_gamma = math.log(self._gamma)
        self._buckets: dict[int, int] = {}
        self._zeros = 0
        self.count = 0
        """Values added, including zeros."""

    def add(self, value: float) -> None:
        if not math.isfinite(value):
            return
        self.count += 1
        if value <= 0:
            self._zeros += 1
            return
        key = math.ceil(math.log(value) / self._log_gamma)
        self._buckets[key] = self._buckets.get(key, 0) + 1

    def add_many(self, values: Sequence[float]) -> None:
        """`add` of each value, bucketed in one pass (C-speed maps, one dict update per key)."""
        if not all(map(math.isfinite, values)):
            values = [v for v in values if math.isfinite(v)]
        self.count += len(values)
        if min(values, default=1.0) <= 0:
            positive = [v for v in values if v > 0]
            self._zeros += len(values) - len(positive)
            values = positive
        buckets = self._buckets
        logs = map(operator.truediv, map(math.log, values), itertools.repeat(self._log_gamma))
        for key, n in Counter(map(math.ceil, logs)).items():
            buckets[key] = buckets.get(key, 0) + n

    def merge(self, other: LogHistogram) -> None:
        """Add the counts of `other` (same relative accuracy) to this histogram."""
        self.count += other.count
        self._zeros += other._zeros
        for key, n in other._buckets.items():
            self._buckets[key] = self._buckets.get(key, 0) + n

    def quantile(self, q: float) -> float | None:
        """Value at quantile q in [0, 1] (lower rank on ties); None when empty."""
        if self.count == 0:
            return None
        rank = q * (self.count - 1)
        seen = self._zeros
        if rank < seen:
            return 0.0
        for key in sorted(self._buckets):
            seen += self._buckets[key]
            if seen > rank:
                return 2 * self._gamma**key / (self._gamma + 1)
        return 2 * self._gamma ** max(self._buckets) / (self._gamma + 1)


class PhaseTotals:
    """Running sums per phase; a phase never measured stays None, never 0."""

    __slots__ = ("_counts", "_ms", "_step_ms")

    def __init__(self) -> None:
        self._ms = [0.0] * len(PHASES)
        self._step_ms = [0.0] * len(PHASES)
        self._counts = [0] * len(PHASES)

    def add(self, phases: Sequence[float | None], step_ms: float) -> None:
        for i, value in enumerate(phases):
            if value is not None:
                self._ms[i] += value
                self._step_ms[i] += step_ms
                self._counts[i] += 1

    def add_many(self, rows: Sequence[Sequence[float | None]], step_ms: Sequence[float]) -> None:
        """`add(rows[k], step_ms[k])` for every k, column by column: the same additions in the
        same order, so the same floats, at a fraction of the cost."""
        for i, column in enumerate(zip(*rows, strict=True)):
            try:
                self._ms[i] = reduce(operator.add, cast("tuple[float, ...]", column), self._ms[i])
            except TypeError:  # a None (reduce stopped before assigning): measured in some steps
                pairs = [(v, s) for v, s in zip(column, step_ms, strict=True) if v is not None]
                self._ms[i] = reduce(operator.add, [v for v, _ in pairs], self._ms[i])
                self._step_ms[i] = reduce(operator.add, [s for _, s in pairs], self._step_ms[i])
                self._counts[i] += len(pairs)
                continue
            self._step_ms[i] = reduce(operator.add, step_ms, self._step_ms[i])
            self._counts[i] += len(column)

    @classmethod
    def of_columns(cls, records: Sequence[StepRecord], step_ms: Sequence[float]) -> PhaseTotals:
        """The totals `add` would reach over `records` (step times `step_ms`), column by column."""
        out = cls()
        every_step: float | None = None
        for i, column in enumerate(zip(*(r.phases for r in records), strict=False)):
            try:
                out._ms[i] = total(cast("tuple[float, ...]", column))
            except TypeError:  # a None: this phase was measured in some steps only
                pairs = [(v, s) for v, s in zip(column, step_ms, strict=True) if v is not None]
                out._ms[i] = total([v for v, _ in pairs])
                out._step_ms[i] = total([s for _, s in pairs])
                out._counts[i] = len(pairs)
                continue
            every_step = total(step_ms) if every_step is None else every_step
            out._step_ms[i] = every_step
            out._counts[i] = len(column)
        return out

    def merge(self, other: PhaseTotals) -> None:
        for i in range(len(PHASES)):
            self._ms[i] += other._ms[i]
            self._step_ms[i] += other._step_ms[i]
            self._counts[i] += other._counts[i]

    def minus(self, other: PhaseTotals) -> PhaseTotals:
        """The totals of the steps in self but not in `other` (a subset of them)."""
        out = PhaseTotals()
        for i in range(len(PHASES)):
            out._ms[i] = self._ms[i] - other._ms[i]
            out._step_ms[i] = self._step_ms[i] - other._step_ms[i]
            out._counts[i] = self._counts[i] - other._counts[i]
        return out

    def means(self) -> tuple[float | None, ...]:
        """Mean ms per phase over the steps that measured it."""
        return tuple(ms / n if n else None for ms, n in zip(self._ms, self._counts, strict=True))

    def shares(self) -> tuple[float | None, ...]:
        """Fraction of step time per phase, over the steps that measured that phase."""
        return tuple(
            ms / step if n and step > 0 else None
            for ms, step, n in zip(self._ms, self._step_ms, self._counts, strict=True)
        )


class BlockSeries:
    """Block means of `width` channels over steps, at most `capacity` blocks for the whole run.

    Steps are grouped in aligned blocks of `stride` steps (a power of two). When the blocks
    outnumber `capacity`, pairs merge and the stride doubles, so memory is O(capacity).
    """

    __slots__ = ("_blocks", "capacity", "stride", "width")

    def __init__(self, width: int, capacity: int = SERIES_POINTS) -> None:
        self.width = width
        self.capacity = max(2, capacity)
        self.stride = 1
        """Steps per block; doubles on each merge."""
        self._blocks: list[list[float]] = []
        """Each block: [block id, sum of steps, steps, then sum and count per channel]."""

    def add(self, step: int, values: Sequence[float | None]) -> None:
        block = self._block(step // self.stride)
        block[1] += step
        block[2] += 1
        for c, value in enumerate(values):
            if value is not None:
                block[3 + 2 * c] += value
                block[4 + 2 * c] += 1
        if len(self._blocks) > self.capacity:
            self._halve()

    def add_many(self, steps: Sequence[int], columns: Sequence[Sequence[float | None]]) -> None:
        """`add(steps[k], [c[k] for c in columns])` for every k; `steps` must be ascending.

        The steps of one block are added column by column, in the same order as `add` would, so
        the sums are the same floats. A step that opens a block too many is added alone and the
        blocks halve before the next, exactly as one `add` at a time does.
        """

        def fold(block: list[float], i: int, j: int) -> None:
            _add_columns(block, steps[i:j], [column[i:j] for column in columns])

        self._add_blocks(steps, fold)

    def add_records(self, records: list[StepRecord]) -> None:
        """`add_many(steps, (step ms, host RSS, device allocated))` of `records` (ascending
        steps; a width-3 series, as WindowStats keeps). In C when it is built: the whole batch
        in one call (series_fold), back here only to halve; else block by block, each block's
        share in C (block_fold) where it takes it. A fresh warm-up segment's series has a
        small stride, so a 0.4 ms loop's tick spans tens of its blocks: one Python call per
        block was a sixth of a rank's fold."""
        lo, n = 0, len(records)
        series_fold = getattr(_C, "series_fold", None) if self.width == 3 else None
        while series_fold is not None and lo < n:
            got = series_fold(self._blocks, records, lo, n, self.stride, self.capacity)
            if got is None:  # declined, nothing changed: the rest goes block by block
                break
            if len(self._blocks) > self.capacity:
                self._halve()
            lo = got
        if lo < n:
            self._add_records_by_block(records[lo:] if lo else records)

    def _add_records_by_block(self, records: list[StepRecord]) -> None:
        c_fold = _C.block_fold if _C is not None else None
        steps = [r.step for r in records]

        def fold(block: list[float], i: int, j: int) -> None:
            if c_fold is None or not c_fold(block, records, i, j):
                part = records[i:j]
                columns: list[list[float | None]] = [[r.step_ms for r in part]]
                columns.append([r.host_rss_mb for r in part])
                columns.append([r.device_allocated_mb for r in part])
                _add_columns(block, steps[i:j], columns)

        self._add_blocks(steps, fold)

    def _add_blocks(
        self, steps: Sequence[int], fold: Callable[[list[float], int, int], None]
    ) -> None:
        """Call `fold(block, i, j)` for each run of steps i..j that one block takes, halving
        the blocks as one `add` at a time would."""
        i, n = 0, len(steps)
        while i < n:
            bid = steps[i] // self.stride
            j = bisect.bisect_left(steps, (bid + 1) * self.stride, i, n)
            block = self._block(bid)
            if len(self._blocks) > self.capacity:
                j = i + 1
            fold(block, i, j)
            if len(self._blocks) > self.capacity:
                self._halve()
            i = j

    def points(self, channel: int) -> tuple[Point, ...]:
        """(mean step, mean value) of each block that measured `channel`, in step order."""
        i = 3 + 2 * channel
        return tuple((round(b[1] / b[2]), b[i] / b[i + 1]) for b in self._blocks if b[i + 1] > 0)

    def _block(self, bid: int) -> list[float]:
        blocks = self._blocks
        pos = len(blocks)
        while pos > 0 and blocks[pos - 1][0] > bid:
            pos -= 1
        if pos > 0 and blocks[pos - 1][0] == bid:
            return blocks[pos - 1]
        block = [float(bid)] + [0.0] * (2 + 2 * self.width)
        blocks.insert(pos, block)
        return block

    def _halve(self) -> None:
        self._blocks = _coalesce(self._blocks, 2)
        self.stride *= 2

    @classmethod
    def merged(cls, parts: Sequence[BlockSeries]) -> BlockSeries:
        """One series over the steps of all `parts` (same width), re-binned to a common stride."""
        out = cls(parts[0].width, max(p.capacity for p in parts))
        out.stride = max(p.stride for p in parts)
        blocks = [b for p in parts for b in _coalesce(p._blocks, out.stride // p.stride)]
        out._blocks = _coalesce(sorted(blocks, key=lambda b: b[0]), 1)
        while len(out._blocks) > out.capacity:
            out._halve()
        return out


def _add_columns(
    block: list[float], steps: Sequence[int], columns: Sequence[Sequence[float | None]]
) -> None:
    """One block takes `steps` and the values of `columns` beside them (None: not measured):
    the reference that _fold.c's block_fold follows to the bit."""
    block[1] = reduce(operator.add, steps, block[1])
    block[2] += len(steps)
    for c, part in enumerate(columns):
        if None in part:
            part = [v for v in part if v is not None]
        if part:
            at = 3 + 2 * c
            block[at] = reduce(operator.add, cast("list[float]", part), block[at])
            block[at + 1] += len(part)


def _coalesce(blocks: list[list[float]], factor: int) -> list[list[float]]:
    """Blocks (sorted by id) re-keyed to id // factor, summing blocks that land on the same id:
    in C when it is built (_fold.coalesce, the same floats), else `_coalesce_blocks`."""
    c = getattr(_C, "coalesce", None)
    got = c(blocks, factor) if c is not None else None
    return got if got is not None else _coalesce_blocks(blocks, factor)


def _coalesce_blocks(blocks: list[list[float]], factor: int) -> list[list[float]]:
    """The reference of `_coalesce` (and of _fold.c's coalesce)."""
    merged: list[list[float]] = []
    for block in blocks:
        bid = float(int(block[0]) // factor)
        if merged and merged[-1][0] == bid:
            merged[-1][1:] = [a + b for a, b in zip(merged[-1][1:], block[1:], strict=True)]
        else:
            merged.append([bid, *block[1:]])
    return merged


class WindowStats:
    """Aggregates of one rank's steps from step index `start` on, in O(1) memory.

    Channels of `series`: 0 = step ms, 1 = host RSS MB, 2 = device allocated MB.
    """

    __slots__ = (
        "clock",
        "count",
        "device_peak_allocated_mb",
        "device_peak_reserved_mb",
        "host_rss_peak_mb",
        "phases",
        "series",
        "start",
        "step_hist",
        "step_total_ms",
    )

    def __init__(self, start: int = 0, capacity: int = SERIES_POINTS) -> None:
        self.start = start
        """First step index this aggregate takes; earlier steps are warm-up."""
        self.count = 0
        self.step_total_ms = 0.0
        self.step_hist = LogHistogram()
        self.phases = PhaseTotals()
        self.series = BlockSeries(3, capacity)
        self.host_rss_peak_mb: float | None = None
        self.device_peak_allocated_mb: float | None = None
        self.device_peak_reserved_mb: float | None = None
        self.clock: Clock = "host"
        """Clock of the latest record added."""

    def add(self, rec: StepRecord) -> None:
        self.count += 1
        self.step_total_ms += rec.step_ms
        self.step_hist.add(rec.step_ms)
        self.phases.add(rec.phases, rec.step_ms)
        self.series.add(rec.step, (rec.step_ms, rec.host_rss_mb, rec.device_allocated_mb))
        self.host_rss_peak_mb = max_opt(self.host_rss_peak_mb, rec.host_rss_mb)
        peak = max_opt(rec.device_peak_mb, rec.device_allocated_mb)
        self.device_peak_allocated_mb = max_opt(self.device_peak_allocated_mb, peak)
        self.device_peak_reserved_mb = max_opt(self.device_peak_reserved_mb, rec.device_reserved_mb)
        self.clock = rec.clock

    def add_many(self, records: Sequence[StepRecord]) -> None:
        """`add` of each record (in ascending step order), column by column: the same values as
        one at a time, several times cheaper (a rank folds every step it runs)."""
        if not records:
            return
        if _C is not None and isinstance(records, list) and self._add_many_c(records):
            return
        step_ms = [r.step_ms for r in records]
        rss = [r.host_rss_mb for r in records]
        allocated = [r.device_allocated_mb for r in records]
        self.count += len(records)
        self.step_total_ms = reduce(operator.add, step_ms, self.step_total_ms)
        self.step_hist.add_many(step_ms)
        self.phases.add_many([r.phases for r in records], step_ms)
        self.series.add_many([r.step for r in records], (step_ms, rss, allocated))
        self.host_rss_peak_mb = max_opt(self.host_rss_peak_mb, _peak(rss))
        n = len(records)
        peaks = [r.device_peak_mb for r in records]
        reserved = [r.device_reserved_mb for r in records]
        if allocated.count(None) != n or peaks.count(None) != n or reserved.count(None) != n:
            self._add_device_peaks(allocated, peaks, reserved)
        self.clock = records[-1].clock

    def _add_device_peaks(
        self,
        allocated: Sequence[float | None],
        peaks: Sequence[float | None],
        reserved: Sequence[float | None],
    ) -> None:
        """The device columns of a batch into the peaks (called only when one was measured)."""
        peak = max_opt(_peak(peaks), _peak(allocated))
        self.device_peak_allocated_mb = max_opt(self.device_peak_allocated_mb, peak)
        self.device_peak_reserved_mb = max_opt(self.device_peak_reserved_mb, _peak(reserved))

    def _add_many_c(self, records: list[StepRecord]) -> bool:
        """`add_many` with its per-step arithmetic in C (the same floats); False, nothing
        changed, when the C fold declines the records (then Python folds them)."""
        assert _C is not None
        hist, phases = self.step_hist, self.phases
        got = _C.stats_fold(
            records,
            0,
            len(records),
            self.step_total_ms,
            hist._buckets,
            hist._log_gamma,
            phases._ms,
            phases._step_ms,
            phases._counts,
        )
        if got is None:
            return False
        self.step_total_ms, n, zeros, rss_peak, device = got
        self.count += n
        hist.count += n
        hist._zeros += zeros
        self.series.add_records(records)
        self.host_rss_peak_mb = max_opt(self.host_rss_peak_mb, rss_peak)
        if device:
            self._add_device_peaks(
                [r.device_allocated_mb for r in records],
                [r.device_peak_mb for r in records],
                [r.device_reserved_mb for r in records],
            )
        self.clock = records[-1].clock
        return True

    @property
    def mean_ms(self) -> float | None:
        return self.step_total_ms / self.count if self.count else None

    @classmethod
    def merged(cls, parts: Sequence[WindowStats]) -> WindowStats:
        """The aggregate of consecutive `parts` (in step order) as if built in one pass."""
        out = cls(min(p.start for p in parts), parts[0].series.capacity)
        for part in parts:
            out.count += part.count
            out.step_total_ms += part.step_total_ms
            out.step_hist.merge(part.step_hist)
            out.phases.merge(part.phases)
            out.host_rss_peak_mb = max_opt(out.host_rss_peak_mb, part.host_rss_peak_mb)
            out.device_peak_allocated_mb = max_opt(
                out.device_peak_allocated_mb, part.device_peak_allocated_mb
            )
            out.device_peak_reserved_mb = max_opt(
                out.device_peak_reserved_mb, part.device_peak_reserved_mb
            )
            out.clock = part.clock if part.count else out.clock
        out.series = BlockSeries.merged([p.series for p in parts])
        return out

    @classmethod
    def of(cls, records: Iterable[StepRecord], capacity: int = SERIES_POINTS) -> WindowStats:
        """Aggregate a finite batch of records (a live window, a warm-up-trimmed ring)."""
        stats = cls(capacity=capacity)
        for rec in records:
            stats.add(rec)
        return stats


class StepSeries:
    """The series of a few consecutive steps at stride 1: one (step, value) point per step."""

    __slots__ = ("_points",)

    def __init__(self, points: tuple[tuple[Point, ...], ...]) -> None:
        self._points = points

    def points(self, channel: int) -> tuple[Point, ...]:
        return self._points[channel]


def _points(steps: Sequence[int], values: Sequence[float | None]) -> tuple[Point, ...]:
    """As BlockSeries.points at stride 1 (a block's mean is 0.0 + its one value)."""
    if None in values:
        return tuple((s, 0.0 + v) for s, v in zip(steps, values, strict=True) if v is not None)
    means = map(operator.add, itertools.repeat(0.0), cast("list[float]", values))
    return tuple(zip(steps, means, strict=False))


def _peak(values: Sequence[float | None]) -> float | None:
    """As folding max_opt over `values`: the first largest, None when none was measured."""
    if None in values:
        return max((v for v in values if v is not None), default=None)
    return max(cast("list[float]", values), default=None)


class RecentStats:
    """`WindowStats.of(records)` for at most SERIES_POINTS records in step order (a live window),
    built column by column: the same additions in the same order, so the same values, at a
    fraction of the cost (the viewer rebuilds one per changed rank per snapshot).

    `sorted_ms` (the exact step times, sorted) stands in for WindowStats' histogram. Keep this
    in step with `WindowStats.add` (tests/unit/test_stats.py compares the two).
    """

    __slots__ = (
        "clock",
        "count",
        "device_peak_allocated_mb",
        "device_peak_reserved_mb",
        "host_rss_peak_mb",
        "phases",
        "series",
        "sorted_ms",
        "step_total_ms",
    )

    def __init__(self, records: Sequence[StepRecord]) -> None:
        if len(records) > SERIES_POINTS:
            raise ValueError(f"RecentStats takes at most {SERIES_POINTS} records: use WindowStats")
        step_ms = [r.step_ms for r in records]
        steps = [r.step for r in records]
        rss = [r.host_rss_mb for r in records]
        allocated = [r.device_allocated_mb for r in records]
        self.count = len(records)
        self.step_total_ms = total(step_ms)
        self.sorted_ms = sorted(step_ms)
        self.phases = PhaseTotals.of_columns(records, step_ms)
        self.series = StepSeries(
            (_points(steps, step_ms), _points(steps, rss), _points(steps, allocated))
        )
        self.host_rss_peak_mb = _peak(rss)
        peaks = _peak([r.device_peak_mb for r in records])
        self.device_peak_allocated_mb = max_opt(peaks, _peak(allocated))
        self.device_peak_reserved_mb = _peak([r.device_reserved_mb for r in records])
        self.clock: Clock = records[-1].clock if records else "host"

    @property
    def mean_ms(self) -> float | None:
        return self.step_total_ms / self.count if self.count else None


class RunningMean:
    """Mean of the values that were measured; None until one was."""

    __slots__ = ("count", "total")

    def __init__(self) -> None:
        self.total = 0.0
        self.count = 0

    def add(self, value: float | None) -> None:
        if value is not None:
            self.total += value
            self.count += 1

    @property
    def value(self) -> float | None:
        return self.total / self.count if self.count else None


SYSTEM_MEANS: tuple[str, ...] = (
    "process_cpu_pct",
    "host_cpu_pct",
    "gpu_util_pct",
    "gpu_power_w",
    "traceml_cpu_pct",
)
"""SystemSample fields averaged over the run."""
SYSTEM_PEAKS: tuple[str, ...] = ("gpu_temp_c", "host_mem_used_mb", "gpu_mem_used_mb")
"""SystemSample fields whose maximum over the run is kept."""


class SystemTotals:
    """Whole-run means and peaks of one rank's system samples."""

    __slots__ = ("_means", "_peaks", "samples")

    def __init__(self) -> None:
        self.samples = 0
        self._means = {name: RunningMean() for name in SYSTEM_MEANS}
        self._peaks: dict[str, float | None] = dict.fromkeys(SYSTEM_PEAKS)

    def add(self, sample: SystemSample) -> None:
        self.samples += 1
        for name, mean in self._means.items():
            mean.add(getattr(sample, name))
        for name in SYSTEM_PEAKS:
            self._peaks[name] = max_opt(self._peaks[name], getattr(sample, name))

    def mean(self, name: str) -> float | None:
        """Run mean of a SYSTEM_MEANS field; None when never measured."""
        return self._means[name].value

    def peak(self, name: str) -> float | None:
        """Run maximum of a SYSTEM_PEAKS field; None when never measured."""
        return self._peaks[name]

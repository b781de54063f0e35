"""Streaming statistics: exact where promised, within 1 % where approximate, bounded in memory."""

from __future__ import annotations

import random

import pytest

from traceml.analysis.stats import (
    SERIES_POINTS,
    BlockSeries,
    LogHistogram,
    PhaseTotals,
    RecentStats,
    SystemTotals,
    WindowStats,
    max_opt,
    median,
    quantile,
    series_slope,
    theil_sen_slope,
)
from traceml.records import StepRecord, SystemSample


def rec(step: int, step_ms: float = 10.0, **kw: object) -> StepRecord:
    phases = kw.pop("phases", (2.0, None, 3.0, 4.0, 1.0, None, 0.0))
    return StepRecord(0, step, 0.0, step_ms, phases, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [(None, None, None), (None, 2.0, 2.0), (3.0, None, 3.0), (1.0, 2.0, 2.0), (5.0, 2.0, 5.0)],
)
def test_max_opt(a: float | None, b: float | None, expected: float | None) -> None:
    assert max_opt(a, b) == expected


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([], 0.5, None),
        ([4.0], 0.95, 4.0),
        ([1.0, 2.0, 3.0], 0.5, 2.0),
        ([1.0, 2.0, 3.0, 4.0], 0.5, 2.5),
        ([0.0, 10.0], 0.95, 9.5),
    ],
)
def test_quantile_interpolates_like_numpy(values: list[float], q: float, expected: float) -> None:
    assert quantile(values, q) == expected


def test_median_skips_none() -> None:
    assert median([None, 3.0, None, 1.0, 2.0]) == 2.0
    assert median([None, None]) is None


@pytest.mark.parametrize(
    ("points", "expected"),
    [
        ([(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)], 2.0),
        ([(0.0, 1.0), (1.0, 1.0), (2.0, 1.0)], 0.0),
        ([(0.0, 0.0), (1.0, 1.0), (2.0, 2.0), (3.0, 300.0), (4.0, 4.0)], 1.0),
        ([(1.0, 1.0), (1.0, 5.0)], None),
        ([(0.0, 1.0)], None),
    ],
)
def test_theil_sen_is_robust_to_one_spike(
    points: list[tuple[float, float]], expected: float | None
) -> None:
    assert theil_sen_slope(points) == expected


def test_series_slope_thins_long_series_and_keeps_slope() -> None:
    series = [(i, 3.0 * i + 7.0) for i in range(1000)]
    assert series_slope(series, limit=16) == pytest.approx(3.0)


@pytest.mark.parametrize("q", [0.5, 0.95, 0.99])
def test_histogram_quantiles_within_one_percent(q: float) -> None:
    rng = random.Random(7)
    values = [rng.lognormvariate(3.0, 0.6) for _ in range(20_000)]
    hist = LogHistogram()
    for v in values:
        hist.add(v)
    exact = quantile(sorted(values), q)
    assert exact is not None
    assert hist.quantile(q) == pytest.approx(exact, rel=0.011)


def test_histogram_memory_does_not_grow_with_count() -> None:
    hist = LogHistogram()
    for i in range(100_000):
        hist.add(50.0 + (i % 100) / 10)
    assert hist.count == 100_000
    assert len(hist._buckets) < 30


def test_histogram_zeros_empty_and_non_finite() -> None:
    hist = LogHistogram()
    assert hist.quantile(0.5) is None
    for v in (0.0, 0.0, 0.0, 10.0, float("nan"), float("inf")):
        hist.add(v)
    assert hist.count == 4
    assert hist.quantile(0.5) == 0.0
    assert hist.quantile(1.0) == pytest.approx(10.0, rel=0.01)


def test_histogram_merge_equals_single_pass() -> None:
    a, b, both = LogHistogram(), LogHistogram(), LogHistogram()
    for i in range(1, 200):
        (a if i % 3 else b).add(float(i))
        both.add(float(i))
    a.merge(b)
    assert a.count == both.count
    assert a.quantile(0.95) == both.quantile(0.95)


def test_phase_totals_keep_unmeasured_as_none() -> None:
    totals = PhaseTotals()
    totals.add((10.0, None, 30.0, 40.0, 20.0, None, 0.0), 100.0)
    totals.add((30.0, None, 30.0, 40.0, 0.0, None, 0.0), 100.0)
    assert totals.means() == (20.0, None, 30.0, 40.0, 10.0, None, 0.0)
    assert totals.shares() == (0.2, None, 0.3, 0.4, 0.1, None, 0.0)


def test_phase_share_counts_only_steps_that_measured_the_phase() -> None:
    totals = PhaseTotals()
    totals.add((None, None, None, None, None, None, None), 1000.0)
    totals.add((25.0, None, None, None, None, None, None), 100.0)
    assert totals.shares()[0] == 0.25


def test_block_series_is_raw_below_capacity() -> None:
    series = BlockSeries(1, capacity=8)
    for step in range(5):
        series.add(step, (float(step * 10),))
    assert series.points(0) == ((0, 0.0), (1, 10.0), (2, 20.0), (3, 30.0), (4, 40.0))
    assert series.stride == 1


def test_block_series_halves_and_stays_bounded() -> None:
    series = BlockSeries(2, capacity=16)
    for step in range(10_000):
        series.add(step, (float(step), None))
    points = series.points(0)
    assert 8 <= len(points) <= 16
    assert series.points(1) == ()
    assert all(abs(x - y) <= 0.5 for x, y in points)
    assert [x for x, _ in points] == sorted(x for x, _ in points)


def test_block_series_accepts_late_steps() -> None:
    series = BlockSeries(1, capacity=8)
    for step in (0, 1, 3, 2):
        series.add(step, (float(step),))
    assert series.points(0) == ((0, 0.0), (1, 1.0), (2, 2.0), (3, 3.0))


def test_block_series_merge_matches_one_pass() -> None:
    first, second, both = (BlockSeries(1, capacity=16) for _ in range(3))
    for step in range(300):
        (first if step < 40 else second).add(step, (2.0 * step,))
        both.add(step, (2.0 * step,))
    merged = BlockSeries.merged([first, second])
    assert merged.stride == both.stride
    assert merged.points(0) == both.points(0)


def test_window_stats_peaks_and_means() -> None:
    stats = WindowStats.of(
        [
            rec(0, 10.0, host_rss_mb=100.0, device_allocated_mb=50.0, device_peak_mb=80.0),
            rec(1, 20.0, host_rss_mb=120.0, device_allocated_mb=60.0, device_reserved_mb=200.0),
            rec(2, 30.0, clock="cuda"),
        ]
    )
    assert stats.count == 3
    assert stats.mean_ms == 20.0
    assert stats.host_rss_peak_mb == 120.0
    assert stats.device_peak_allocated_mb == 80.0
    assert stats.device_peak_reserved_mb == 200.0
    assert stats.clock == "cuda"
    assert stats.series.points(1) == ((0, 100.0), (1, 120.0))


def test_window_stats_merge_matches_one_pass() -> None:
    records = [rec(i, 10.0 + i % 5, host_rss_mb=float(i)) for i in range(500)]
    parts = [WindowStats.of(records[:100]), WindowStats.of(records[100:])]
    merged, single = WindowStats.merged(parts), WindowStats.of(records)
    assert merged.count == single.count
    assert merged.mean_ms == single.mean_ms
    assert merged.phases.shares() == single.phases.shares()
    assert merged.step_hist.quantile(0.5) == single.step_hist.quantile(0.5)
    assert merged.series.points(1) == single.series.points(1)


def test_window_stats_empty() -> None:
    stats = WindowStats()
    assert stats.mean_ms is None
    assert stats.step_hist.quantile(0.5) is None
    assert stats.phases.means() == (None,) * 7


def test_system_totals_means_and_peaks_skip_unmeasured() -> None:
    totals = SystemTotals()
    totals.add(SystemSample(0, 1.0, process_cpu_pct=50.0, gpu_temp_c=60.0))
    totals.add(SystemSample(0, 2.0, process_cpu_pct=100.0, gpu_temp_c=70.0))
    assert totals.samples == 2
    assert totals.mean("process_cpu_pct") == 75.0
    assert totals.mean("gpu_util_pct") is None
    assert totals.peak("gpu_temp_c") == 70.0
    assert totals.peak("gpu_mem_used_mb") is None


def random_records(n: int, seed: int) -> list[StepRecord]:
    rng = random.Random(seed)

    def maybe(value: float) -> float | None:
        return None if rng.random() < 0.3 else value

    out = []
    for step in range(n):
        phases = (*(maybe(rng.uniform(0, 20)) for _ in range(6)), None)
        out.append(
            rec(
                step * 3 + 1,
                rng.uniform(5, 50),
                phases=phases,
                host_rss_mb=maybe(rng.uniform(100, 200)),
                device_allocated_mb=maybe(rng.uniform(1000, 2000)),
                device_reserved_mb=maybe(rng.uniform(2000, 3000)),
                device_peak_mb=maybe(rng.uniform(1500, 2500)),
                clock=rng.choice(["host", "cuda"]),
            )
        )
    return out


@pytest.mark.parametrize(("n", "seed"), [(0, 0), (1, 1), (7, 2), (100, 3), (256, 4)])
def test_recent_stats_equal_window_stats(n: int, seed: int) -> None:
    records = random_records(n, seed)
    fast, slow = RecentStats(records), WindowStats.of(records)
    assert (fast.count, fast.step_total_ms, fast.mean_ms) == (
        slow.count,
        slow.step_total_ms,
        slow.mean_ms,
    )
    assert fast.phases.means() == slow.phases.means()
    assert fast.phases.shares() == slow.phases.shares()
    for channel in range(3):
        assert fast.series.points(channel) == slow.series.points(channel)
    assert fast.host_rss_peak_mb == slow.host_rss_peak_mb
    assert fast.device_peak_allocated_mb == slow.device_peak_allocated_mb
    assert fast.device_peak_reserved_mb == slow.device_peak_reserved_mb
    assert fast.clock == slow.clock
    assert fast.sorted_ms == sorted(r.step_ms for r in records)


def test_recent_stats_refuse_more_than_a_series_holds() -> None:
    with pytest.raises(ValueError, match="WindowStats"):
        RecentStats([rec(s) for s in range(SERIES_POINTS + 1)])


def test_a_remembered_slope_is_the_slope() -> None:
    series = tuple((s, 100.0 + 2.0 * s + (s % 3)) for s in range(100))
    expected = series_slope(list(series))
    assert series_slope(series) == expected
    assert series_slope(series) == expected, "second call answered from the cache"
    assert series_slope(series, limit=8) == series_slope(list(series), limit=8)
    assert series_slope(((1, 1.0),)) is None

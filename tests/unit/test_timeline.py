"""Timeline: a fixed number of windows over any run length, honest quantiles, wire round trip."""

from __future__ import annotations

import itertools
import random

import pytest

from tests.unit._sketches import random_sketch
from traceml.analysis.stats import quantile
from traceml.analysis.store import RunStore
from traceml.analysis.timeline import (
    SKETCH_ACCURACY,
    SortedSketch,
    Timeline,
    TimelineWindow,
    _bucket_value,
)
from traceml.errors import SchemaError
from traceml.records import PHASES, StepRecord


def rec(step: int, ms: float = 10.0, rss: float | None = 100.0) -> StepRecord:
    phases = (ms * 0.2, None, ms * 0.3, ms * 0.5, None, None, 0.0)
    return StepRecord(0, step, 0.0, ms, phases, host_rss_mb=rss)


def test_a_short_run_has_one_window_per_step() -> None:
    tl = Timeline()
    tl.extend(rec(i, 10.0 + i) for i in range(5))
    windows = tl.windows()
    assert [w.first_step for w in windows] == [0, 1, 2, 3, 4]
    assert windows[2].mean_ms == windows[2].max_ms == 12.0
    assert windows[2].phase_ms[PHASES.index("forward")] == pytest.approx(3.6)
    assert windows[2].phase_ms[PHASES.index("between")] is None
    assert windows[2].host_rss_mb == 100.0
    assert windows[2].device_allocated_mb is None


@pytest.mark.parametrize("steps", [513, 5_000, 100_000])
def test_windows_stay_bounded_and_cover_the_whole_run(steps: int) -> None:
    tl = Timeline(capacity=512)
    tl.extend(rec(i) for i in range(steps))
    windows = tl.windows()
    assert 256 < len(windows) <= 512
    assert windows[0].first_step == 0
    assert windows[-1].last_step == steps - 1
    assert sum(w.steps for w in windows) == steps
    assert all(a.last_step < b.first_step for a, b in itertools.pairwise(windows))


def test_merged_quantiles_stay_within_the_sketch_accuracy() -> None:
    rng = random.Random(7)
    values = [rng.lognormvariate(3, 0.4) for _ in range(40_000)]
    tl = Timeline(capacity=4)
    for i, v in enumerate(values):
        tl.add(rec(i, v))
    for w in tl.windows():
        exact = sorted(values[w.first_step : w.last_step + 1])
        for got, q in ((w.p50_ms, 0.5), (w.p95_ms, 0.95)):
            want = quantile(exact, q)
            assert want is not None
            assert abs(got - want) <= 2.5 * SKETCH_ACCURACY * want
        assert w.max_ms == max(exact)


def test_a_spike_shows_in_max_but_not_in_p50() -> None:
    tl = Timeline(capacity=2)
    tl.extend(rec(i, 2000.0 if i == 50 else 10.0) for i in range(100))
    slow = next(w for w in tl.windows() if w.first_step <= 50 <= w.last_step)
    assert slow.max_ms == 2000.0
    assert slow.p50_ms == pytest.approx(10.0, rel=SKETCH_ACCURACY)


def test_steps_out_of_order_land_in_their_window() -> None:
    tl = Timeline()
    for i in (3, 1, 2, 0):
        tl.add(rec(i, float(i + 1)))
    assert [w.mean_ms for w in tl.windows()] == [1.0, 2.0, 3.0, 4.0]


def test_wire_round_trip_and_seed_continue_the_run() -> None:
    source = Timeline(capacity=16)
    source.extend(rec(i, 5.0 + i % 3) for i in range(100))
    sent = [TimelineWindow.from_wire(w.to_wire()) for w in source.windows()]
    assert tuple(sent) == source.windows()
    receiver = Timeline(capacity=16)
    receiver.seed(sent)
    receiver.extend(rec(i, 5.0 + i % 3) for i in range(100, 200))
    source.extend(rec(i, 5.0 + i % 3) for i in range(100, 200))
    assert receiver.windows() == source.windows()


def test_bad_wire_is_a_schema_error() -> None:
    with pytest.raises(SchemaError):
        TimelineWindow.from_wire([1, 2])
    good = rec(0).to_wire()
    with pytest.raises(SchemaError):
        TimelineWindow.from_wire(good)


def test_summary_json_is_coarsened_and_small() -> None:
    tl = Timeline()
    tl.extend(rec(i) for i in range(10_000))
    coarse = tl.windows(limit=128)
    assert len(coarse) <= 128
    assert sum(w.steps for w in coarse) == 10_000
    assert "sketch" not in coarse[0].to_json()


def test_store_views_carry_the_whole_run_timeline() -> None:
    store = RunStore(history_steps=256)
    store.add_steps([rec(i) for i in range(1_000)])
    live = store.live_view().ranks[0]
    assert live.steps == 100
    assert sum(w.steps for w in live.timeline) == 1_000
    assert store.summary_view().ranks[0].timeline == live.timeline


def test_summary_columns_read_back_as_windows() -> None:
    from traceml.analysis.timeline_json import timeline_columns, windows_of_columns

    tl = Timeline()
    tl.extend(rec(i, 10.0 + i % 5) for i in range(300))
    windows = tl.windows(limit=64)
    back = windows_of_columns(timeline_columns(windows))
    assert [w["first_step"] for w in back] == [w.first_step for w in windows]
    assert back[3]["phase_ms"]["between"] is None
    assert back[3]["mean_ms"] == pytest.approx(windows[3].mean_ms, rel=0.01)
    assert windows_of_columns(None) == []


def test_a_two_step_window_puts_p95_near_its_slow_step() -> None:
    """The compile step and the next one: p95 interpolates as stats.quantile does."""
    tl = Timeline(capacity=2)
    for step, ms in enumerate((1071.9, 14.9, 14.9, 15.0)):
        tl.add(rec(step, ms))
    first = tl.windows()[0]
    assert (first.first_step, first.steps) == (0, 2)
    want = quantile([14.9, 1071.9], 0.95)
    assert want is not None and want > 1000
    assert abs(first.p95_ms - want) <= 2.5 * SKETCH_ACCURACY * want


def test_sketch_quantiles_are_those_of_the_expanded_buckets() -> None:
    """Every quantile, at every rank, equals stats.quantile over the sketch written out value by
    value (zero, negative and positive bucket keys; one bucket; many)."""
    rng = random.Random(11)
    for _ in range(200):
        sketch = random_sketch(rng, range(-40, 400), buckets=12, most=5)
        count = sum(sketch.values())
        values = [_bucket_value(k) for k in sorted(sketch) for _ in range(sketch[k])]
        for q in (0.0, 0.05, 0.5, 0.95, 0.99, 1.0, rng.random()):
            want = quantile(values, q)
            assert want is not None
            assert SortedSketch(sketch).quantile(count, q) == pytest.approx(want, rel=1e-12)

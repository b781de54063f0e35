"""The C folds (_fold.c) against their Python references: the same state to the bit.

Both folds run the same random runs (ordered ticks, late and repeated steps, phases measured in
some steps only, missing memory, zero and negative step times, a timeline seeded from a
snapshot); every open window's numbers and sketch must be equal, and so must the frozen windows.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import math
import random
import sys
import types
from collections import deque
from collections.abc import Callable
from typing import Any

import pytest

from tests.unit._sketches import random_sketch
from traceml.analysis import batch, native, spikes, stats, timeline
from traceml.analysis.stats import PhaseTotals, WindowStats
from traceml.analysis.store import RunStore
from traceml.analysis.timeline import Timeline
from traceml.records import PHASES, StepRecord

c_fold = timeline._c_slots("timeline_fold")


def test_the_c_fold_is_built_and_chosen() -> None:
    assert c_fold is not None, "the C fold is not built: run `make install`"
    assert timeline._C_FOLD is c_fold


def test_without_the_c_build_the_python_fold_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "traceml.analysis._fold", None)  # import -> ImportError
    assert timeline._c_slots("timeline_fold") is None
    assert spikes._c_scan() is None


def test_a_build_that_reads_records_elsewhere_is_not_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A .so built for another StepRecord layout would fold the wrong fields."""
    real = native.fold_module()
    assert real is not None and ("step", 1) in real.RECORD_LAYOUT
    for layout in ((("step", 2),), (("step_ms", 40),), ()):
        stale = types.ModuleType("traceml.analysis._fold")
        stale.RECORD_LAYOUT = layout  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "traceml.analysis._fold", stale)
        assert native.fold_module() is None


def stale_build(monkeypatch: pytest.MonkeyPatch, slots: int, n_phases: int) -> types.ModuleType:
    """A stand-in for a .so built from other constants, reading records where they are."""
    real = native.fold_module()
    assert real is not None
    stale = types.ModuleType("traceml.analysis._fold")
    stale.RECORD_LAYOUT = real.RECORD_LAYOUT  # type: ignore[attr-defined]
    stale.SLOTS, stale.N_PHASES, stale.timeline_fold = slots, n_phases, c_fold  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "traceml.analysis._fold", stale)
    return stale


def test_a_build_for_another_window_layout_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """A .so built for another window layout would write sums into the wrong slots."""
    stale = stale_build(monkeypatch, slots=22, n_phases=len(PHASES))
    assert native.fold_module() is stale, "its record layout and phases are right"
    assert timeline._c_slots("timeline_fold") is None
    assert timeline._c_slots("window_merge") is None
    assert timeline._c_window() is None
    assert spikes._c_scan() is None, "a build from before spike_scan: the chunks judge"


def test_a_build_for_other_phases_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    stale_build(monkeypatch, slots=timeline._SIZE, n_phases=len(PHASES) - 1)
    assert native.fold_module() is None
    assert timeline._c_slots("timeline_fold") is None
    assert spikes._c_median() is None
    assert spikes._c_scan() is None


def random_record(step: int, rng: random.Random) -> StepRecord:
    ms = rng.choice([0.0, -0.5, 1e-9, rng.uniform(0.1, 500.0), rng.lognormvariate(0, 2)])
    measured = rng.random() < 0.8
    phases = tuple(
        rng.uniform(0, ms) if measured and (k % 3 or rng.random() < 0.7) else None
        for k in range(len(PHASES))
    )
    rss = rng.choice([None, rng.uniform(100, 9000)])
    dev = rng.choice([None, None, rng.uniform(0, 80_000)])
    return StepRecord(0, step, 0.0, ms, phases, "host", rss, dev)


def random_run(rng: random.Random, steps: int) -> list[list[StepRecord]]:
    """Ticks of records: mostly ascending, sometimes late, repeated or shuffled."""
    order = list(range(steps))
    for _ in range(steps // 50):
        i, j = rng.randrange(steps), rng.randrange(steps)
        order[i], order[j] = order[j], order[i]
    order += rng.sample(range(steps), steps // 100)  # repeats
    records = [random_record(s, rng) for s in order]
    ticks, i = [], 0
    while i < len(records):
        n = rng.choice([1, 3, 40, 255, 256, 700])
        ticks.append(records[i : i + n])
        i += n
    return ticks


def fold(
    ticks: list[list[StepRecord]],
    fold_fn: Callable[..., bool] | None,
    seed: Timeline | None,
    monkeypatch: pytest.MonkeyPatch,
) -> Timeline:
    monkeypatch.setattr(timeline, "_C_FOLD", fold_fn)
    out = Timeline(capacity=16)
    if seed is not None:
        out.seed(seed.windows())
    for tick in ticks:
        out.extend(tick)
        out.windows()  # reads flush the pending steps mid-run, as viewers do
    return out


def state(t: Timeline) -> list[tuple[list[float], dict[int, int]]]:
    t.windows()
    return [(list(o.nums), dict(o.sketch)) for o in t._open]


def same(a: object, b: object) -> bool:
    """Equal, NaN included (a NaN sum is the same NaN whichever fold made it)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


@pytest.mark.parametrize("seed", range(12))
def test_c_and_python_folds_make_the_same_windows(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    ticks = random_run(rng, rng.choice([30, 900, 5000]))
    start = None
    if seed % 3 == 0:  # a viewer that attached: windows thawed from a snapshot, ints in counts
        start = fold(random_run(rng, 300), None, None, monkeypatch)
        ticks = [[r._replace(step=r.step + 300) for r in tick] for tick in ticks]
    py = fold(ticks, None, start, monkeypatch)
    c = fold(ticks, c_fold, start, monkeypatch)
    assert py.stride == c.stride
    for (py_nums, py_sketch), (c_nums, c_sketch) in zip(state(py), state(c), strict=True):
        assert all(map(same, py_nums, c_nums)), (py_nums, c_nums)
        assert py_sketch == c_sketch
        assert list(py_sketch) == list(c_sketch), "keys in the same order"
    assert py.windows() == c.windows()


def test_input_it_does_not_model_is_declined_untouched() -> None:
    assert c_fold is not None
    good = StepRecord(0, 1, 0.0, 2.0, (1.0,) * len(PHASES))
    for bad in (
        good._replace(step_ms=math.nan),
        good._replace(step_ms=math.inf),
        good._replace(phases=(1.0,) * (len(PHASES) - 1)),
        good._replace(phases=("x",) * len(PHASES)),  # type: ignore[arg-type]
        good._replace(host_rss_mb="12"),  # type: ignore[arg-type]
        (0, 1),
    ):
        window = timeline._Open(0)
        nums, sketch = list(window.nums), dict(window.sketch)
        assert c_fold(window.nums, window.sketch, [good, bad], 0, 2, 1.0) is False
        assert window.nums == nums and window.sketch == sketch


def test_the_python_fold_raises_what_the_c_fold_declines(monkeypatch: pytest.MonkeyPatch) -> None:
    """A NaN step time reaches the Python fold, which refuses it as before (the tx thread then
    steps aside): the C path neither hides nor changes that."""
    monkeypatch.setattr(timeline, "_C_FOLD", c_fold)
    t = Timeline()
    t.extend([StepRecord(0, 0, 0.0, math.nan, (None,) * len(PHASES))])
    with pytest.raises(ValueError, match="NaN"):
        t.windows()


def test_trace_ml_c_timer_0_turns_the_c_fold_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEML_C_TIMER", "0")
    assert timeline._c_slots("timeline_fold") is None
    monkeypatch.setenv("TRACEML_C_TIMER", "1")
    assert timeline._c_slots("timeline_fold") is c_fold


def stats_state(ws: WindowStats) -> tuple[object, ...]:
    hist, phases = ws.step_hist, ws.phases
    return (
        ws.count,
        ws.step_total_ms,
        list(hist._buckets.items()),  # keys in the same order too
        hist._zeros,
        hist.count,
        phases._ms,
        phases._step_ms,
        phases._counts,
        ws.series.stride,
        ws.series._blocks,
        ws.host_rss_peak_mb,
        ws.device_peak_allocated_mb,
        ws.device_peak_reserved_mb,
        ws.clock,
    )


def with_device(rec: StepRecord, rng: random.Random) -> StepRecord:
    if rng.random() < 0.7:
        return rec
    return rec._replace(
        clock="cuda",
        device_allocated_mb=rng.choice([None, rng.uniform(0, 9e4)]),
        device_reserved_mb=rng.choice([None, rng.uniform(0, 9e4)]),
        device_peak_mb=rng.choice([None, rng.uniform(0, 9e4)]),
    )


@pytest.mark.parametrize("seed", range(12))
def test_c_and_python_folds_make_the_same_window_stats(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    records = [with_device(random_record(s, rng), rng) for s in range(rng.choice([40, 3000]))]
    if seed % 4 == 0:  # a NaN step time: the C fold declines that batch, Python takes it
        records[7] = records[7]._replace(step_ms=math.nan)
    folded = []
    for module in (None, native.fold_module()):
        monkeypatch.setattr(stats, "_C", module)
        ws, i = WindowStats(capacity=8), 0
        while i < len(records):
            n = rng.choice([1, 5, 64, 700])
            ws.add_many(records[i : i + n])
            i += n
        folded.append(stats_state(ws))
    for py, c in zip(*folded, strict=True):
        if isinstance(py, list) and py and isinstance(py[0], list):
            assert all(map(same, itertools.chain(*py), itertools.chain(*c))), (py, c)
        elif isinstance(py, list):
            assert all(map(same, py, c)), (py, c)
        else:
            assert same(py, c), (py, c)


def test_the_stats_fold_declines_untouched() -> None:
    c = native.fold_module()
    assert c is not None
    good = StepRecord(0, 1, 0.0, 2.0, (1.0,) * len(PHASES), "host", 5.0)
    odd = good._replace(host_rss_mb="12")  # type: ignore[arg-type]
    for bad in (good._replace(step_ms=math.inf), odd, (0, 1)):
        ws = WindowStats()
        before = stats_state(ws)
        hist = ws.step_hist
        args = (ws.step_total_ms, hist._buckets, hist._log_gamma, *vars_of(ws.phases))
        assert c.stats_fold([good, bad], 0, 2, *args) is None
        block = [0.0] * 9
        assert c.block_fold(block, [good, bad], 0, 2) is False
        assert stats_state(ws) == before and block == [0.0] * 9


def vars_of(phases: PhaseTotals) -> tuple[list[float], list[float], list[int]]:
    return phases._ms, phases._step_ms, phases._counts


def test_a_run_folds_to_the_same_summary_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end: one rank's store, folded by ticks with every C fold and with none."""
    rng = random.Random(5)
    records = [random_record(s, rng) for s in range(20_000)]
    for r in rng.sample(range(20_000), 40):  # spikes
        records[r] = records[r]._replace(step_ms=records[r].step_ms * 20 + 50)
    for r in rng.sample(range(20_000), 200):  # held by TraceML's work, or waiting on all-reduce
        records[r] = records[r]._replace(held_ms=0.3, comm_wait_ms=rng.choice([None, 0.7]))
    seen = []
    c_sketch, c_window, c_merge = timeline._C_FREEZE, timeline._C_WINDOW, timeline._C_MERGE
    assert c_sketch is not None and c_window is not None and c_merge is not None
    for on in (False, True):
        monkeypatch.setattr(batch, "_C_FACTS", batch._C_FACTS if on else None)
        monkeypatch.setattr(stats, "_C", native.fold_module() if on else None)
        monkeypatch.setattr(timeline, "_C_FOLD", c_fold if on else None)
        monkeypatch.setattr(spikes, "_C_SCAN", spikes._c_scan() if on else None)
        monkeypatch.setattr(spikes, "_C_MEDIAN", spikes._c_median() if on else None)
        monkeypatch.setattr(timeline, "_C_FREEZE", c_sketch if on else None)
        monkeypatch.setattr(timeline, "_C_WINDOW", c_window if on else None)
        monkeypatch.setattr(timeline, "_C_MERGE", c_merge if on else None)
        store = RunStore(history_steps=512)
        for lo in range(0, len(records), 625):
            store.add_steps(records[lo : lo + 625])
        seen.append((store.summary_view(), store.live_view(), store.timeline_wire(0)))
    assert seen[0] == seen[1]


@pytest.mark.parametrize("c_on", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_a_series_of_records_is_the_series_of_their_columns(
    c_on: bool, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BlockSeries.add_records (C for the whole batch, series_fold, or Python block by block when
    the C fold is absent) against add_many of the same columns, across halvings; batches of
    every size, some going back before blocks already there."""
    monkeypatch.setattr(stats, "_C", native.fold_module() if c_on else None)
    rng = random.Random(seed)
    records = [random_record(s, rng) for s in range(2000)]
    batches, lo = [], 0
    while lo < len(records):
        n = rng.choice([1, 2, 9, 64, 300, 700])
        batches.append(records[lo : lo + n])
        lo += n
    batches.insert(0, [random_record(s, rng) for s in range(1500, 1530, 3)])  # blocks go before
    batches.insert(len(batches) // 2, [random_record(s, rng) for s in range(3, 40, 2)])
    by_records, by_columns = stats.BlockSeries(3, 8), stats.BlockSeries(3, 8)
    for part in batches:
        by_records.add_records(part)
        columns = ([r.step_ms for r in part], [r.host_rss_mb for r in part])
        by_columns.add_many(
            [r.step for r in part], (*columns, [r.device_allocated_mb for r in part])
        )
    assert by_records.stride == by_columns.stride > 1
    assert by_records._blocks == by_columns._blocks
    assert all(type(v) is float for b in by_records._blocks for v in b)


def test_the_c_series_fold_declines_untouched() -> None:
    c = native.fold_module()
    assert c is not None
    good = StepRecord(0, 1, 0.0, 2.0, (1.0,) * len(PHASES))
    series = stats.BlockSeries(3, 8)
    series.add_records([good._replace(step=s) for s in range(20)])
    before = [list(b) for b in series._blocks]
    not_a_number: Any = "x"
    odd = [good._replace(step=-5), good._replace(step_ms=math.nan)]
    odd.append(good._replace(host_rss_mb=not_a_number))
    for bad in odd:
        assert c.series_fold(series._blocks, [good._replace(step=30), bad], 0, 2, 4, 8) is None
    assert c.series_fold(series._blocks, [good], 1, 1, 4, 8) is None  # an empty slice
    assert c.series_fold(series._blocks, [good], 0, 1, 0, 8) is None  # no stride
    assert series._blocks == before


@pytest.mark.parametrize("seed", range(20))
def test_the_c_median_is_the_python_median(seed: int) -> None:
    rng = random.Random(seed)
    c_median = spikes._c_median()
    assert c_median is not None
    n = rng.choice([1, 2, 7, 8, 63, 64])
    records = [random_record(s, rng) for s in range(n)]
    if seed % 5 == 0:  # ties
        records = [r._replace(step_ms=float(round(r.step_ms))) for r in records]
    recent = deque(records, maxlen=64)
    assert c_median(recent) == spikes.median_step_ms(recent)


def test_the_c_median_declines_what_it_does_not_model() -> None:
    c_median = spikes._c_median()
    assert c_median is not None
    good = StepRecord(0, 1, 0.0, 2.0, (1.0,) * len(PHASES))
    for odd in (math.nan, math.inf, -0.0, 3):
        assert c_median([good, good._replace(step_ms=odd)]) is None
    assert c_median([]) is None


def spiky_batches(rng: random.Random, steps: int) -> list[list[StepRecord]]:
    """Ascending batches of a run with spikes, ties and steps TraceML's own work overlapped
    (held_ms: some small, some hiding a spike, some longer than the step)."""
    records = []
    for s in range(steps):
        rec = random_record(s, rng)
        if rng.random() < 0.5:
            rec = rec._replace(step_ms=float(round(rec.step_ms)))  # ties
        if rng.random() < 0.05:
            rec = rec._replace(step_ms=rec.step_ms * 30 + 100)
        if rng.random() < 0.1:
            rec = rec._replace(held_ms=rng.choice([0.01, rec.step_ms * 0.9, rec.step_ms + 1]))
        records.append(rec)
    batches, i = [], 0
    while i < steps:
        n = rng.choice([1, 3, 7, 8, 9, 15, 16, 17, 40, 64, 65, 255, 700])
        batches.append(records[i : i + n])
        i += n
    return batches


def baseline_state(b: spikes.Baseline) -> tuple[object, ...]:
    return list(b._recent), b._since, b.ms


@pytest.mark.parametrize("seed", range(12))
def test_the_c_spike_scan_finds_what_the_chunks_find(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Baseline.scan (C) against RunStore._judge_chunks (Python): the same spikes with the same
    SlowSteps, and the same Baseline after every batch. Some seeds change the window, the
    recomputation interval and the warm-up, so medians of odd windows are checked too."""
    keep, every, least = [(64, 16, 8), (63, 5, 3), (7, 3, 7)][seed % 3]
    monkeypatch.setattr(spikes, "BASELINE_STEPS", keep)
    monkeypatch.setattr(spikes, "BASELINE_EVERY", every)
    monkeypatch.setattr(spikes, "BASELINE_MIN", least)
    rng = random.Random(seed)
    factor = rng.choice([1.5, 3.0, 3])
    by_c, by_python = RunStore(), RunStore()
    b_c, b_py = by_c._rank(0).baseline, by_python._rank(0).baseline
    found = 0
    for part in spiky_batches(rng, 3000):
        scanned = b_c.scan(part, factor)
        assert scanned is not None
        assert scanned[0] == by_python._rank(0)._judge_chunks(part, factor)
        assert scanned[1] == max(r.step_ms for r in part)
        assert baseline_state(b_c) == baseline_state(b_py)
        found += len(scanned[0])
    assert found > 20  # spikes were there to find


def test_the_c_spike_scan_declines_untouched() -> None:
    good = StepRecord(0, 1, 0.0, 2.0, (1.0,) * len(PHASES))
    baseline = spikes.Baseline()
    assert baseline.scan([good._replace(step=s) for s in range(20)], 3.0) == ([], 2.0)
    before = baseline_state(baseline)
    odd_records = [good._replace(step_ms=odd) for odd in (math.nan, math.inf, -0.0, 3)]
    odd_records.append(good._replace(held_ms=1))
    for odd in odd_records:
        assert baseline.scan([good, odd], 3.0) is None
        assert baseline_state(baseline) == before
    assert baseline.scan([], 3.0) is None
    baseline._recent.append(odd_records[0])  # a NaN already in the window: declined too
    assert baseline.scan([good], 3.0) is None


def test_decoded_frames_take_the_c_folds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A viewer or the job collector folds frames decoded as tuples: they go through the same C
    parts as a rank's lists (they went to Python, 1.6 against 0.45 µs a record), same state."""
    called: list[str] = []

    def spy(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any) -> Any:
            called.append(name)
            return fn(*args)

        return wrapped

    assert batch._C_FACTS is not None and spikes._C_SCAN is not None and stats._C is not None
    monkeypatch.setattr(batch, "_C_FACTS", spy("facts", batch._C_FACTS))
    monkeypatch.setattr(spikes, "_C_SCAN", spy("scan", spikes._C_SCAN))
    rng = random.Random(2)
    records = [random_record(s, rng)._replace(step_ms=rng.uniform(1, 2)) for s in range(600)]
    as_tuples, as_lists = RunStore(), RunStore()
    for lo in range(0, 600, 200):
        as_tuples.add_steps(tuple(records[lo : lo + 200]))
    by_tuples, called[:] = list(called), []
    for lo in range(0, 600, 200):
        as_lists.add_steps(records[lo : lo + 200])
    assert by_tuples == called and "facts" in called and "scan" in called
    assert as_tuples.summary_view() == as_lists.summary_view()


@pytest.mark.parametrize("seed", range(10))
def test_the_c_batch_facts_are_the_python_ones(seed: int) -> None:
    c_facts = batch._C_FACTS
    assert c_facts is not None
    rng = random.Random(seed)
    for _ in range(200):
        n = rng.choice([1, 2, 5, 64, 130])
        first = rng.choice([0, 1, 63, 64, 1000, -70])
        steps = list(range(first, first + n))
        if rng.random() < 0.3 and n > 1:  # late, repeated or unordered
            i, j = rng.randrange(n), rng.randrange(n)
            steps[i] = steps[j]
        ranks = [0] * n if rng.random() < 0.7 else [rng.choice([0, 1]) for _ in range(n)]
        records = [
            random_record(s, rng)._replace(
                rank=r,
                held_ms=rng.choice([None, None, None, 0.5]),
                comm_wait_ms=rng.choice([None] * 20 + [1.0]),
            )
            for s, r in zip(steps, ranks, strict=True)
        ]
        mask = rng.choice([0, 63, 1023])
        assert batch.BatchFacts(*c_facts(records, mask)) == batch.batch_facts(records, mask)


def test_the_c_batch_facts_decline_what_they_do_not_model() -> None:
    c_facts = batch._C_FACTS
    assert c_facts is not None
    good = StepRecord(0, 1, 0.0, 2.0, (1.0,) * len(PHASES))
    a_float: Any = 1.0
    no_rank: Any = None
    odd: list[Any] = [good._replace(step=a_float), good._replace(rank=no_rank), good[:5]]
    odd.append(good._replace(step=2**70))
    for rec in odd:
        assert c_facts([good, rec], 63) is None
    assert c_facts([], 63) is None
    assert batch.facts_of([good, odd[3]], 63).due == 2**70  # Python answers instead


def _python_freeze(sketch: dict[int, int], count: int) -> tuple[float, float, tuple[object, ...]]:
    ref = timeline.SortedSketch(sketch)
    return ref.quantile(count, 0.5), ref.quantile(count, 0.95), tuple(ref.items)


@pytest.mark.parametrize("seed", range(20))
def test_the_c_sketch_freeze_is_the_python_one(seed: int) -> None:
    """p50, p95 and the sorted buckets to the bit: zero, negative and positive keys, one bucket
    or many, the count the sketch holds or (a late step's window) another."""
    c_freeze = timeline._C_FREEZE
    assert c_freeze is not None, "the C fold is not built: run `make install`"
    rng = random.Random(seed)
    for _ in range(50):
        sketch = random_sketch(rng, range(-300, 3000), buckets=70, most=40)
        held = sum(sketch.values())
        for count in (held, 1, max(1, held - 1), held + 5):
            assert c_freeze(sketch, count, timeline._GAMMA) == _python_freeze(sketch, count)


def test_the_c_sketch_freezes_buckets_the_collector_never_traverses() -> None:
    """(bucket, count) pairs of ints cannot close a cycle: a heartbeat's live view freezes a
    few hundred windows of up to 64 pairs each, which the next collection would traverse."""
    c_freeze = timeline._C_FREEZE
    assert c_freeze is not None
    got = c_freeze({3: 2, -1: 1, 0: 4}, 7, timeline._GAMMA)
    assert got is not None
    pairs = got[2]
    assert pairs == ((-1, 1), (0, 4), (3, 2))
    assert not gc.is_tracked(pairs)
    assert not any(gc.is_tracked(pair) for pair in pairs)


def test_the_c_sketch_freeze_declines_what_it_does_not_model() -> None:
    c_freeze = timeline._C_FREEZE
    assert c_freeze is not None
    gamma = timeline._GAMMA
    for sketch, count in (({}, 1), ({1: 2}, 0), ({1.5: 2}, 2), ({1: 2.0}, 2), ({2**70: 1}, 1)):
        assert c_freeze(sketch, count, gamma) is None  # type: ignore[arg-type]
    assert c_freeze({1: 2}, 2, 1) is None


def test_a_timeline_freezes_the_same_windows_without_the_c_freeze(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(3)
    line = Timeline(capacity=16)
    line.extend(random_record(s, rng) for s in range(5_000))
    with_c = line.windows()
    monkeypatch.setattr(timeline, "_C_FREEZE", None)
    monkeypatch.setattr(timeline, "_C_WINDOW", None)
    line._stale = None
    assert line.windows() == with_c


def bits(window: timeline.TimelineWindow) -> list[object]:
    """A window's fields with every float as its exact bits, and each field's type."""

    def exact(v: object) -> object:
        if isinstance(v, float):
            return v.hex()
        if isinstance(v, tuple):
            return tuple(exact(x) for x in v)
        return v

    return [(type(v).__name__, exact(v)) for v in dataclasses.astuple(window)]


@pytest.mark.parametrize("seed", range(8))
def test_the_c_window_freeze_is_the_python_one(seed: int) -> None:
    """Every window of random runs (late steps, unmeasured phases, RSS and device memory or
    not, zero and negative step times) freezes to the same TimelineWindow, bit for bit, still
    frozen, equal and with the same hash."""
    assert timeline._C_WINDOW is not None, "the C fold is not built: run `make install`"
    window_type = (timeline.TimelineWindow, timeline._WINDOW_FIELDS)
    rng = random.Random(seed)
    line = Timeline(capacity=rng.choice((4, 16, 256)))
    for tick in random_run(rng, 3_000):
        line.extend(tick)
        line.windows()
        for part in line._open:
            got = timeline._C_WINDOW(part.nums, part.sketch, timeline._GAMMA, *window_type)
            assert got is not None, "C declined a window the timeline made"
            expected = part.freeze_py()
            assert type(got) is timeline.TimelineWindow
            assert bits(got) == bits(expected)
            assert got == expected and hash(got) == hash(expected)
    frozen = line._open[0].freeze()
    with pytest.raises(dataclasses.FrozenInstanceError):
        frozen.steps = 0  # type: ignore[misc]


def copy_window(part: timeline._Open) -> timeline._Open:
    out = timeline._Open(0)
    out.nums, out.sketch = list(part.nums), dict(part.sketch)
    return out


def exact_nums(nums: list[float]) -> list[tuple[str, object]]:
    return [(type(v).__name__, v.hex() if isinstance(v, float) else v) for v in nums]


@pytest.mark.parametrize("seed", range(8))
def test_the_c_window_merge_is_the_python_one(seed: int) -> None:
    """Any two windows of random runs merge to the same slots (each value's type and bits:
    the id, first and last steps stay the objects min() and max() pick) and the same sketch,
    bucket order included, collapsed or not."""
    c_merge = timeline._C_MERGE
    assert c_merge is not None, "the C fold is not built: run `make install`"
    rng = random.Random(seed)
    line = Timeline(capacity=rng.choice((4, 16, 256)))
    line.extend(random_record(s, rng) for s in range(4_000))
    line.windows()
    parts = line._open
    for _ in range(200):
        a, b = rng.choice(parts), rng.choice(parts)
        ours, ref = copy_window(a), copy_window(a)
        ours.merge(copy_window(b))
        ref.merge_py(copy_window(b))
        assert exact_nums(ours.nums) == exact_nums(ref.nums)
        assert list(ours.sketch.items()) == list(ref.sketch.items())
    merged = copy_window(parts[0])
    assert c_merge(merged.nums, merged.sketch, list(parts[-1].nums), dict(parts[-1].sketch))


def eight_windows() -> list[timeline._Open]:
    """The open windows of a timeline of steps 1-8, one window each (stride 1), folded."""
    line = Timeline()
    line.extend(random_record(s, random.Random(s)) for s in range(1, 9))
    line.windows()
    return line._open


def test_the_c_window_merge_declines_what_it_does_not_model() -> None:
    c_merge = timeline._C_MERGE
    assert c_merge is not None
    a, b, *_ = eight_windows()
    before = (list(a.nums), dict(a.sketch))
    for args in (
        (a.nums[:-1], a.sketch, b.nums, b.sketch),  # another window layout
        (a.nums, a.sketch, [*b.nums[:4], "x", *b.nums[5:]], b.sketch),
        (a.nums, a.sketch, b.nums, {1.5: 1}),
        (a.nums, a.sketch, b.nums, {1: 1.0}),
        (a.nums, a.sketch, a.nums, b.sketch),  # a window into itself
        (tuple(a.nums), a.sketch, b.nums, b.sketch),
    ):
        assert c_merge(*args) is False
    assert (a.nums, a.sketch) == before


def test_the_c_window_freeze_declines_what_it_does_not_model() -> None:
    c_window = timeline._C_WINDOW
    assert c_window is not None
    part = eight_windows()[0]
    names, cls, gamma = timeline._WINDOW_FIELDS, timeline.TimelineWindow, timeline._GAMMA
    assert c_window(part.nums, part.sketch, gamma, cls, names) is not None
    empty = timeline._Open(0)
    no_float = [*part.nums[:4], 2, *part.nums[5:]]  # an int sum
    for args in (
        (empty.nums, {1: 1}, gamma, cls, names),  # no step yet
        (part.nums[:-1], part.sketch, gamma, cls, names),  # another window layout
        (no_float, part.sketch, gamma, cls, names),
        (part.nums, {}, gamma, cls, names),
        (part.nums, {1.5: 2}, gamma, cls, names),
        (part.nums, part.sketch, gamma, cls, names[:-1]),
        (part.nums, part.sketch, 1, cls, names),
    ):
        assert c_window(*args) is None


def random_blocks(rng: random.Random, n: int, width: int) -> list[list[float]]:
    """Blocks as a BlockSeries keeps them: ascending whole ids (gaps too), then sums/counts."""
    ids = sorted(rng.sample(range(3 * n + 1), n))
    return [[float(i), *(rng.uniform(-1e3, 1e6) for _ in range(width - 1))] for i in ids]


@pytest.mark.parametrize("seed", range(10))
def test_the_c_coalesce_is_the_python_one(seed: int) -> None:
    """The same blocks, ids and float bits for any factor, and the input left as it was."""
    c_coalesce = getattr(native.fold_module(), "coalesce", None)
    assert c_coalesce is not None, "the C fold is not built: run `make install`"
    rng = random.Random(seed)
    for n, factor in ((0, 2), (1, 2), (257, 2), (300, 4), (64, 1), (129, 1024)):
        blocks = random_blocks(rng, n, rng.choice((9, 3, 1)))
        before = [list(b) for b in blocks]
        got = c_coalesce(blocks, factor)
        assert got is not None
        expected = stats._coalesce_blocks(blocks, factor)
        assert [[v.hex() for v in b] for b in got] == [[v.hex() for v in b] for b in expected]
        assert blocks == before


def test_the_c_coalesce_declines_what_it_does_not_model() -> None:
    c_coalesce = getattr(native.fold_module(), "coalesce", None)
    assert c_coalesce is not None
    ok = [[0.0, 1.0], [1.0, 2.0]]
    for blocks, factor in (
        (ok, 0),
        ((tuple(b) for b in ok), 2),
        ([[0.0, 1.0], [1.0, 2]], 2),  # an int where floats are
        ([[0.0, 1.0], [1.0]], 2),  # widths differ
        ([[-2.0, 1.0]], 2),  # a negative id
        ([[0.5, 1.0]], 2),  # an id that is not whole
        ([[math.inf, 1.0]], 2),
        ([[]], 2),
    ):
        assert c_coalesce(blocks, factor) is None


def test_a_series_halves_to_the_same_blocks_without_the_c_coalesce(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the series itself: 20,000 steps halve a 16-block series ten times."""
    rng = random.Random(5)
    records = [random_record(s, rng) for s in range(20_000)]
    got = []
    built = native.fold_module()
    for c_on in (True, False):
        module: Any = built
        if not c_on:
            module = types.SimpleNamespace(
                **{k: getattr(built, k) for k in dir(built) if k != "coalesce"}
            )
        monkeypatch.setattr(stats, "_C", module)
        series = stats.BlockSeries(3, capacity=16)
        for lo in range(0, len(records), 625):
            series.add_records(records[lo : lo + 625])
        got.append((series.stride, [[v.hex() for v in b] for b in series._blocks]))
    assert got[0] == got[1]
    assert got[0][0] == 2048

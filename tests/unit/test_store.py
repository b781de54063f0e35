"""RunStore: folding, de-duplication, bounded memory, warm-up and the views it builds."""

from __future__ import annotations

import random
import threading

import pytest

from traceml.analysis.store import RunStore, summary_start, warmup_target
from traceml.config import DEFAULT_THRESHOLDS, Thresholds
from traceml.records import RankEnd, RankInfo, StepRecord, SystemSample

PHASES_MS = (10.0, 5.0, 30.0, 40.0, 10.0, None, 5.0)


def rec(rank: int, step: int, step_ms: float = 100.0, **kw: object) -> StepRecord:
    phases = kw.pop("phases", PHASES_MS)
    return StepRecord(rank, step, float(step), step_ms, phases, **kw)  # type: ignore[arg-type]


def run(store: RunStore, steps: int, rank: int = 0, **kw: object) -> None:
    store.add_steps([rec(rank, s, **kw) for s in range(steps)])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("total", "target", "start"),
    [
        (0, 5, 0),
        (3, 5, 0),
        (6, 5, 0),
        (7, 5, 5),
        (100, 5, 5),
        (101, 6, 6),
        (200, 10, 10),
        (1000, 50, 50),
    ],
)
def test_warmup_is_max_of_steps_and_fraction(total: int, target: int, start: int) -> None:
    assert warmup_target(total, DEFAULT_THRESHOLDS) == target
    assert summary_start(total, DEFAULT_THRESHOLDS) == start


def test_duplicates_ignored_and_ranks_interleave() -> None:
    store = RunStore()
    store.add_steps([rec(1, 0), rec(0, 0), rec(1, 1), rec(0, 1)])
    store.add_steps([rec(0, 1, step_ms=999.0), rec(1, 0, step_ms=999.0)])
    assert store.ranks() == [0, 1]
    assert store.total_steps(0) == 2
    assert [r.step_ms for r in store.recent(0, 10)] == [100.0, 100.0]


def test_recent_is_sorted_even_when_steps_arrive_late() -> None:
    store = RunStore()
    store.add_steps([rec(0, s) for s in (0, 1, 4, 2, 3)])
    assert [r.step for r in store.recent(0, 3)] == [2, 3, 4]
    assert store.recent(0, 0) == []
    assert store.recent(7, 5) == []
    assert store.total_steps(7) == 0


def test_ring_is_bounded_and_old_late_records_are_ignored() -> None:
    store = RunStore(history_steps=8)
    run(store, 20)
    assert len(store.recent(0, 100)) == 8
    store.add_steps([rec(0, 3, step_ms=1e6)])
    assert [r.step for r in store.recent(0, 100)] == list(range(12, 20))
    assert store.summary_view().ranks[0].p95_ms == pytest.approx(100.0, rel=0.01)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("batch", [1, 5, 40])
def test_the_ring_keeps_the_newest_steps_whatever_order_they_come_in(seed: int, batch: int) -> None:
    """Gaps, late steps (inside the ring, before its oldest step, after it left), repeats and
    batches: the ring holds what a plain sorted list of the newest `history` steps would."""
    rng = random.Random(seed)
    history = 16
    arrivals = [s for s in range(120) if rng.random() > 0.15]
    for _ in range(40):  # late and repeated steps, some of them never seen before
        at = rng.randrange(len(arrivals))
        arrivals.insert(at + rng.randrange(1, 30), rng.randrange(max(1, arrivals[at] + 1)))
    store = RunStore(history_steps=history)
    kept: list[int] = []
    gone = -1
    for lo in range(0, len(arrivals), batch):
        chunk = arrivals[lo : lo + batch]
        store.add_steps([rec(0, s) for s in chunk])
        for s in chunk:  # the reference: a sorted list, the oldest dropped past `history`
            if s > gone and s not in kept:
                kept = sorted([*kept, s])
                if len(kept) > history:
                    gone = max(gone, kept.pop(0))
        assert [r.step for r in store.recent(0, 100)] == kept


def test_a_batch_as_long_as_the_ring_replaces_it_and_a_late_step_still_fits() -> None:
    store = RunStore(history_steps=16)
    run(store, 16)
    store.add_steps([rec(0, s) for s in range(16, 33) if s != 25])  # 16 steps: all of the ring
    store.add_steps([rec(0, 25)])
    assert [r.step for r in store.recent(0, 100)] == list(range(17, 33))


def test_history_must_be_positive() -> None:
    with pytest.raises(ValueError, match="history_steps"):
        RunStore(history_steps=0)


def test_live_view_is_the_last_window_with_exact_quantiles() -> None:
    store = RunStore()
    store.add_steps([rec(0, s, step_ms=float(s)) for s in range(200)])
    view = store.live_view()
    rank = view.ranks[0]
    assert view.kind == "live"
    assert rank.steps == DEFAULT_THRESHOLDS.live_window
    assert rank.total_steps == 200
    assert rank.median_ms == 149.5
    assert rank.p95_ms == pytest.approx(194.05)
    assert store.live_view(window=10).ranks[0].median_ms == 194.5


@pytest.mark.parametrize(
    ("steps", "history", "expected"),
    [
        (3, 4096, 3),
        (6, 4096, 6),
        (7, 4096, 2),
        (100, 4096, 95),
        (1000, 4096, 950),
        (1000, 64, 920),
        (10_000, 64, 10_000 - 640),
        (1000, 4, 920),
    ],
)
def test_summary_window_skips_warmup(steps: int, history: int, expected: int) -> None:
    store = RunStore(history_steps=history)
    run(store, steps)
    assert store.summary_view().ranks[0].steps == expected


def test_summary_of_long_run_is_bounded_and_approximate() -> None:
    store = RunStore(history_steps=64)
    store.add_steps([rec(0, s, step_ms=100.0 + s % 10) for s in range(20_000)])
    data = store._ranks[0]
    assert len(data.ring) == 64
    assert len(data.segments) <= 6
    rank = store.summary_view().ranks[0]
    assert rank.median_ms == pytest.approx(104.5, rel=0.011)
    assert rank.mean_ms == pytest.approx(104.5)
    assert len(rank.step_series) <= 256
    assert rank.phase_ms[5] is None


def test_warmup_steps_do_not_count_in_summary() -> None:
    store = RunStore()
    store.add_steps([rec(0, s, step_ms=1000.0 if s < 5 else 100.0) for s in range(100)])
    assert store.summary_view().ranks[0].mean_ms == 100.0
    assert store.live_view(window=100).ranks[0].mean_ms == pytest.approx(145.0)


def test_phases_and_memory_reach_the_window() -> None:
    store = RunStore()
    store.add_steps(
        [
            rec(0, s, host_rss_mb=500.0 + s, device_allocated_mb=100.0, device_reserved_mb=300.0)
            for s in range(10)
        ]
    )
    rank = store.live_view().ranks[0]
    assert rank.phase_ms == PHASES_MS
    assert rank.share("dataloader") == pytest.approx(0.1)
    assert rank.share("h2d") is None
    assert rank.host_rss[-1] == (9, 509.0)
    assert rank.host_rss_peak_mb == 509.0
    assert rank.device_peak_reserved_mb == 300.0
    assert rank.memory_series == rank.device_allocated


def test_info_end_state_dropped_and_system() -> None:
    store = RunStore()
    store.add_info(RankInfo("run-1", 0, world_size=2, host="a", script="t.py", device="cuda:0"))
    store.add_info(RankInfo("run-1", 1, world_size=2, host="b", device_capacity_mb=1000.0))
    run(store, 3, rank=0)
    store.add_end(RankEnd(0, "error", 5, 9.0))
    store.set_rank_state(1, "stalled")
    store.set_dropped(1, 12)
    sample = SystemSample(1, 1.0, process_cpu_pct=80.0)
    store.add_system(sample)
    view = store.live_view()
    r0, r1 = view.ranks
    assert (view.run_id, view.script, view.world_size, view.hosts) == ("run-1", "t.py", 2, 2)
    assert view.device == "cuda:0"
    assert (r0.state, r0.exit, r0.total_steps) == ("finished", "error", 5)
    assert (r1.state, r1.dropped, r1.steps, r1.median_ms) == ("stalled", 12, 0, None)
    assert r1.device_capacity_mb == 1000.0
    assert store.last_system(1) is sample
    assert store.last_system(0) is None
    assert [t.mean("process_cpu_pct") for t in store.system_totals()] == [80.0]


def test_empty_store_gives_an_empty_view() -> None:
    view = RunStore().summary_view()
    assert view.ranks == ()
    assert view.steps == 0
    assert view.world_size == 1


def test_thresholds_change_the_live_window() -> None:
    store = RunStore(thresholds=Thresholds(live_window=7))
    run(store, 50)
    assert store.live_view().ranks[0].steps == 7


def test_views_can_be_taken_while_another_thread_writes() -> None:
    store = RunStore(history_steps=64)
    errors: list[BaseException] = []

    def write() -> None:
        for s in range(800):
            store.add_steps([rec(0, s), rec(1, s)])

    writer = threading.Thread(target=write)
    writer.start()
    try:
        while writer.is_alive():
            store.live_view()
            store.summary_view()
    except RuntimeError as e:  # pragma: no cover - the failure being tested for
        errors.append(e)
    writer.join()
    assert errors == []
    assert store.total_steps(1) == 800


def test_a_live_window_is_reused_until_its_rank_changes() -> None:
    store = RunStore()
    run(store, 10, rank=0)
    run(store, 10, rank=1)
    first = store.live_view()
    again = store.live_view()
    assert again.ranks[0] is first.ranks[0] and again.ranks[1] is first.ranks[1]
    store.add_steps([rec(1, 10, step_ms=300.0)])
    fresh = store.live_view()
    assert fresh.ranks[0] is first.ranks[0], "rank 0 did not change"
    assert fresh.ranks[1].steps == 11 and fresh.ranks[1].total_steps == 11
    assert fresh.ranks[1].p95_ms is not None and fresh.ranks[1].p95_ms > 100.0


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s.set_rank_state(0, "stalled"),
        lambda s: s.set_dropped(0, 3),
        lambda s: s.add_end(RankEnd(0, "ok", 5, 1.0)),
        lambda s: s.add_info(RankInfo("run", 0, 0, 1, "node-7", 1, 1.0, "x.py")),
        lambda s: s.add_steps([rec(0, 2)]),  # a late record inside the window
    ],
)
def test_a_cached_live_window_is_rebuilt_after_any_change(change: object) -> None:
    store = RunStore()
    store.add_steps([rec(0, s) for s in (0, 1, 3, 4)])
    before = store.live_view().ranks[0]
    change(store)  # type: ignore[operator]
    after = store.live_view().ranks[0]
    assert after is not before and after != before


def test_a_repeated_record_or_state_keeps_the_cached_window() -> None:
    store = RunStore()
    run(store, 5)
    store.set_rank_state(0, "live")
    store.set_dropped(0, 0)
    before = store.live_view().ranks[0]
    store.add_steps([rec(0, 3)])
    store.set_rank_state(0, "live")
    store.set_dropped(0, 0)
    assert store.live_view().ranks[0] is before


def test_other_window_sizes_are_not_served_from_the_cache() -> None:
    store = RunStore()
    run(store, 50)
    assert store.live_view(10).ranks[0].steps == 10
    assert store.live_view(20).ranks[0].steps == 20
    assert store.live_view(300).ranks[0].steps == 50


@pytest.mark.parametrize("batched", [True, False])
def test_a_step_slowed_only_by_tracemls_own_work_is_no_spike(batched: bool) -> None:
    """10 ms typical steps; step 60 takes 50 ms of which 45 overlapped TraceML's tx thread, and
    step 70 takes 50 ms of which only 5 did: the first is TraceML's cost (counted apart), the
    second the loop's own spike, with its whole time."""
    records = [rec(0, s, step_ms=10.0) for s in range(100)]
    records[60] = rec(0, 60, step_ms=50.0, held_ms=45.0)
    records[70] = rec(0, 70, step_ms=50.0, held_ms=5.0)
    store = RunStore()
    if batched:
        store.add_steps(records)
    else:
        for r in records:
            store.add_steps([r])
    spikes = store.summary_view().ranks[0].spikes
    assert spikes is not None
    assert (spikes.count, spikes.total_ms) == (1, 50.0)
    assert [s.step for s in spikes.listed] == [70]
    assert store.held_totals() == (2, 50.0)
    assert store.recent(0, 100)[60].step_ms == 50.0  # the record itself keeps its whole time

"""Spikes: judged once at fold time, the same in live, exact and long-run (segment) windows."""

from __future__ import annotations

import pytest

from traceml.analysis.spikes import SLOWEST_KEPT, Baseline, SlowStep, SpikeTotals, period, periodic
from traceml.analysis.store import RunStore
from traceml.config import DEFAULT_THRESHOLDS
from traceml.records import PHASES, StepRecord

BETWEEN = PHASES.index("between")


def rec(step: int, ms: float = 10.0, between: float = 0.0, rank: int = 0) -> StepRecord:
    phases = (0.5, between, ms * 0.4, ms * 0.5 - 0.5, ms * 0.1, None, 0.0)
    return StepRecord(rank, step, 0.0, ms + between, phases, host_rss_mb=100.0)


def checkpointed(steps: int, every: int = 20, cost: float = 200.0) -> list[StepRecord]:
    return [rec(i, between=cost if i % every == every - 1 else 0.0) for i in range(steps)]


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([19, 39, 59, 79], (20, 4)),
        ([19, 25, 39, 59, 71, 79, 99], (20, 5)),  # unrelated slow steps between checkpoints
        ([10, 13, 40, 90], None),
        ([10, 30], None),  # two spikes are no period
        ([], None),
    ],
)
def test_period(steps: list[int], expected: tuple[int, int] | None) -> None:
    assert period(steps) == expected


def test_baseline_judges_against_the_recent_median_and_follows_a_new_speed() -> None:
    base = Baseline()
    for i in range(7):
        base.observe(rec(i))
    assert not base.is_spike(1000.0, 3.0)  # no baseline before BASELINE_MIN steps
    base.observe(rec(7))
    assert base.is_spike(31.0, 3.0)
    assert not base.is_spike(29.0, 3.0)
    for i in range(8, 200):
        base.observe(rec(i, ms=50.0))
    assert not base.is_spike(100.0, 3.0)  # the run got slower: 100 ms is no spike any more


def test_a_spike_names_the_phase_above_its_typical_time() -> None:
    base = Baseline()
    for i in range(64):
        base.observe(rec(i))
    slow = base.slow(rec(64, between=300.0), 3.0)
    assert (slow.step, slow.phase) == (64, "between")


def test_totals_keep_the_slowest_steps_and_merge() -> None:
    a, b = SpikeTotals(), SpikeTotals()
    for i in range(20):
        a.offer(rec(i, ms=float(i)), None)
        b.offer(rec(100 + i, ms=float(50 + i)), None)
    a.add_spike(rec(19, ms=19.0))
    merged = SpikeTotals.merged([a, b])
    assert [s.step for s in merged.top()] == list(range(119, 119 - SLOWEST_KEPT, -1))
    assert merged.count == 1


def test_store_marks_spikes_out_of_the_typical_phases() -> None:
    store = RunStore()
    store.add_steps(checkpointed(300))
    rank = store.summary_view().ranks[0]
    assert rank.spikes is not None
    assert rank.spikes.period_steps == 20
    assert rank.spikes.phase == "between"
    assert rank.typical_steps == rank.steps - rank.spikes.count
    assert rank.phase_ms[BETWEEN] == pytest.approx(0.0)  # the checkpoints are not typical
    assert rank.mean_ms == pytest.approx(10.0)
    assert rank.max_ms == pytest.approx(210.0)
    assert rank.slowest[0].phase == "between"


def test_spikes_that_are_not_rare_stay_in_the_typical_step() -> None:
    store = RunStore()
    store.add_steps(checkpointed(300, every=4, cost=40.0))  # a quarter of the steps
    rank = store.summary_view().ranks[0]
    assert rank.typical_steps == rank.steps
    assert (rank.phase_ms[BETWEEN] or 0.0) > 5.0


def test_a_long_run_beyond_the_ring_agrees_with_an_exact_one() -> None:
    records = checkpointed(3_000)
    exact, segmented = RunStore(history_steps=4096), RunStore(history_steps=64)
    exact.add_steps(records)
    segmented.add_steps(records)
    a, b = exact.summary_view().ranks[0], segmented.summary_view().ranks[0]
    assert a.spikes is not None and b.spikes is not None
    assert b.spikes.period_steps == a.spikes.period_steps == 20
    assert b.spikes.count == pytest.approx(a.spikes.count, abs=8)  # segment starts differ
    assert b.mean_ms == pytest.approx(a.mean_ms, rel=0.01)
    assert b.max_ms == a.max_ms


def test_live_window_counts_its_own_spikes() -> None:
    store = RunStore()
    store.add_steps(checkpointed(1_000))
    live = store.live_view().ranks[0]
    assert live.steps == DEFAULT_THRESHOLDS.live_window
    assert live.spikes is not None and live.spikes.count == 5
    assert all(s.step >= 900 for s in live.spikes.listed)


def slow_steps(sizes: dict[int, float]) -> list[SlowStep]:
    return [SlowStep(step, ms, "between") for step, ms in sorted(sizes.items())]


def test_a_period_keeps_only_the_spikes_alike_in_size() -> None:
    found = periodic(slow_steps({19: 210.0, 39: 25_010.0, 59: 190.0, 79: 230.0}))
    assert found is not None
    assert found[0] == 20
    assert [s.step for s in found[1]] == [19, 59, 79]  # the hang on the lattice is not one
    assert periodic(slow_steps({30: 2_510.0, 37: 32.0, 44: 33.0})) is None

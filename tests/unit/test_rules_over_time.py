"""STEP_SPIKES, REGIME_CHANGE and the ranking across sections, on stores fed by hand."""

from __future__ import annotations

import pytest

from traceml.analysis.diagnose import diagnose
from traceml.analysis.killed import killed_summary
from traceml.analysis.rules_spikes import step_spikes
from traceml.analysis.rules_timeline import regime_change
from traceml.analysis.schema import validate_summary
from traceml.analysis.store import RunStore
from traceml.analysis.view import RankWindow, RunView
from traceml.config import DEFAULT_THRESHOLDS as TH
from traceml.records import Finding, StepRecord


def rec(step: int, ms: float = 10.0, between: float = 0.0, dataloader: float = 0.5) -> StepRecord:
    phases = (dataloader, between, ms * 0.4, ms * 0.5, ms * 0.1 - 0.5, None, 0.0)
    return StepRecord(0, step, 0.0, ms + between + dataloader - 0.5, phases, host_rss_mb=100.0)


def store_of(records: list[StepRecord]) -> RunStore:
    store = RunStore()
    store.add_steps(records)
    return store


def test_a_periodic_checkpoint_is_a_spike_with_its_period() -> None:
    store = store_of([rec(i, between=200.0 if i % 20 == 19 else 0.0) for i in range(400)])
    found = step_spikes(store.summary_view(), TH)
    assert found is not None
    assert found.evidence["period_steps"] == 20
    assert found.evidence["phase"] == "between"
    assert found.severity == "critical"
    assert found.summary.startswith("every 20 steps a step takes 210 ms (typical 10.0 ms)")
    assert "checkpoint or eval?" in found.summary
    assert "async_save" in found.action


def test_one_hang_names_its_step_and_leaves_the_verdict_alone() -> None:
    store = store_of([rec(i, between=2500.0 if i == 30 else 0.0) for i in range(60)])
    diag = diagnose(store.summary_view())
    assert diag.step.kind == diag.primary.kind == "COMPUTE_BOUND"
    spike = next(f for f in diag.findings if f.kind == "STEP_SPIKES")
    assert spike.summary.startswith("step 30 took 2510 ms")
    assert spike.evidence["steps"] == [30]
    assert diag.findings[1] is spike  # right after the primary


def test_a_hang_beside_two_slow_steps_on_its_lattice_is_no_period() -> None:
    """A CI run saw this: a 2.5 s hang at step 30 and two 16 ms steps 7 and 14 later read as
    "every 7 steps a step takes 16.2 ms" (typical 5 ms), filing the hang under a median."""
    slow = {30: 2500.0, 37: 22.0, 44: 23.0}  # typical 10 ms, spikes over 30
    store = store_of([rec(i, between=slow.get(i, 0.0)) for i in range(60)])
    found = step_spikes(store.summary_view(), TH)
    assert found is not None
    assert found.evidence["period_steps"] is None
    assert found.evidence["steps"] == [30, 37, 44]
    assert found.summary.startswith("3 slow steps of "), found.summary
    assert "slowest step 30, 2510 ms" in found.summary


@pytest.mark.parametrize("hang_at", [130, 139])  # between two checkpoints, and on one
def test_a_hang_among_periodic_checkpoints_is_named_beside_the_period(hang_at: int) -> None:
    between = {i: 200.0 for i in range(19, 400, 20)} | {hang_at: 25_000.0}
    store = store_of([rec(i, between=between.get(i, 0.0)) for i in range(400)])
    found = step_spikes(store.summary_view(), TH)
    assert found is not None
    assert found.evidence["period_steps"] == 20
    assert found.summary.startswith(
        f"every 20 steps a step takes 210 ms (typical 10.0 ms) in between (checkpoint or eval?)"
        f", and step {hang_at} took 25010 ms: "
    ), found.summary


def test_checkpoints_of_varied_cost_stay_one_period() -> None:
    between = {i: 100.0 + 40.0 * (i % 7) for i in range(19, 400, 20)}  # 110 to 350 ms steps
    store = store_of([rec(i, between=between.get(i, 0.0)) for i in range(400)])
    found = step_spikes(store.summary_view(), TH)
    assert found is not None
    assert found.evidence["period_steps"] == 20
    assert ", and step" not in found.summary


def test_small_spikes_cost_too_little_to_report() -> None:
    store = store_of([rec(i, between=25.0 if i % 100 == 99 else 0.0) for i in range(400)])  # 3 %
    assert step_spikes(store.summary_view(), TH) is None


def test_a_change_of_character_is_found_with_its_step() -> None:
    records = [rec(i, dataloader=0.5 if i < 2_000 else 9.0) for i in range(4_000)]
    found = regime_change(store_of(records).summary_view(), TH)
    assert found is not None
    assert found.evidence["before"] == "COMPUTE_BOUND"
    assert found.evidence["after"] == "INPUT_BOUND"
    assert abs(found.evidence["step"] - 2_000) <= 16  # a window's width at 4,000 steps
    assert found.severity == "warning"
    assert "input-bound (dataloader" in found.summary


def test_a_steady_run_has_no_regime_change() -> None:
    assert regime_change(store_of([rec(i) for i in range(2_000)]).summary_view(), TH) is None


def _finding(kind: str, severity: str, section: str, **evidence: object) -> Finding:
    return Finding(kind, section, severity, "s", "a", evidence)  # type: ignore[arg-type]


def test_memory_that_will_end_the_run_outranks_a_critical_bottleneck() -> None:
    rows = [rec(i, dataloader=9.0) for i in range(400)]
    grow = [r._replace(host_rss_mb=100.0 + 2.0 * r.step) for r in rows]
    diag = diagnose(store_of(grow).summary_view())
    assert diag.step.kind == "INPUT_BOUND" and diag.step.severity == "critical"
    assert diag.primary.kind == "GROWING"
    assert diag.primary.evidence["ends_run"] is True


def test_device_growth_far_from_capacity_does_not_end_the_run() -> None:
    rank = RankWindow(
        rank=0,
        steps=400,
        total_steps=400,
        device_capacity_mb=80_000.0,
        device_peak_reserved_mb=2_000.0,
        device_allocated=tuple((s, 1_000.0 + s * 0.5) for s in range(0, 400, 8)),
    )
    diag = diagnose(RunView(ranks=(rank,), kind="summary"))
    growing = next(f for f in diag.findings if f.kind == "GROWING")
    assert growing.evidence["ends_run"] is False
    assert growing.evidence["steps_to_full"] == pytest.approx(157_200, rel=0.05)


def test_a_killed_summary_is_valid_and_says_what_it_knows() -> None:
    s = killed_summary(
        run_id="r",
        script="t.py",
        argv=[],
        started=1.7e9,
        duration_s=3.0,
        steps=40,
        median_ms=12.0,
        last_primary="INPUT_BOUND",
    )
    validate_summary(s)
    assert s["run"]["exit"] == "killed"
    assert s["primary"]["kind"] == "KILLED"
    assert (
        "after 40 steps, median step 12.0 ms, last verdict INPUT_BOUND" in s["primary"]["summary"]
    )
    assert s["step_time"]["median_ms"] == 12.0
    assert s["step_memory"]["host_rss_peak_mb"] is None

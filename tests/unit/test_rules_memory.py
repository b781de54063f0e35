"""Memory rules on hand-built RunViews, at and around every threshold."""

from __future__ import annotations

import pytest

from traceml.analysis import rules_memory
from traceml.analysis.view import RankWindow, RunView, Series
from traceml.config import DEFAULT_THRESHOLDS as TH


def linear(start: float, per_step: float, steps: int = 101) -> Series:
    return tuple((i, start + per_step * i) for i in range(steps))


def rank(r: int = 0, steps: int = 100, **kw: object) -> RankWindow:
    return RankWindow(rank=r, steps=steps, total_steps=steps, median_ms=10.0, **kw)  # type: ignore[arg-type]


def view(*ranks: RankWindow) -> RunView:
    return RunView(world_size=len(ranks), ranks=ranks, kind="summary")


def wobble(series: Series, amplitude: float) -> Series:
    return tuple((x, y + amplitude * ((x * 7919) % 11 - 5) / 5) for x, y in series)


@pytest.mark.parametrize(
    ("series", "fires"),
    [
        (linear(1000.0, 0.5), True),
        (linear(1000.0, 0.49), False),
        (linear(1000.0, 0.0), False),
        (linear(1000.0, -2.0), False),
        (linear(40_000.0, 10.25), True),
        (linear(40_000.0, 10.2), False),
        (wobble(linear(1000.0, 1.0), 20.0), True),
        (tuple((i, 1000.0 + (500.0 if i == 50 else 0.0)) for i in range(101)), False),
        (tuple((i, 1000.0 + (300.0 if i >= 70 else 0.0)) for i in range(101)), False),
        (((0, 1000.0), (100, 2000.0)), False),
    ],
    ids=[
        "5% exactly",
        "4.9%",
        "flat",
        "falling",
        "just over 1 GiB on a big base",
        "just under 1 GiB on a big base",
        "noisy rise",
        "one spike",
        "one late jump",
        "two points",
    ],
)
def test_growing_on_device_allocated(series: Series, fires: bool) -> None:
    finding = rules_memory.growing(view(rank(device_allocated=series)), TH)
    assert (finding is not None) == fires
    if finding is not None:
        assert finding.kind == "GROWING"
        assert finding.summary.startswith("device allocated grows")
        assert "MB per 1k steps" in finding.summary
        assert "loss.item()" in finding.action


def test_growing_uses_host_rss_without_device_memory() -> None:
    finding = rules_memory.growing(view(rank(host_rss=linear(500.0, 1.0))), TH)
    assert finding is not None
    assert finding.summary.startswith("host RSS grows 100 MB over 100 steps (+20 %")
    assert "tracemalloc" in finding.action
    assert finding.evidence["mb_per_1k_steps"] == pytest.approx(1000.0)


def test_growing_judges_device_when_it_exists() -> None:
    r = rank(device_allocated=linear(1000.0, 0.0), host_rss=linear(500.0, 5.0))
    assert rules_memory.growing(view(r), TH) is None


@pytest.mark.parametrize(
    ("reserved", "steps", "expected"),
    [(500.0, 100, "warning"), (950.0, 100, "critical"), (950.0, 10, "warning")],
)
def test_growing_near_oom_is_critical(reserved: float, steps: int, expected: str) -> None:
    r = rank(
        steps=steps,
        device_allocated=linear(400.0, 1.0),
        device_peak_reserved_mb=reserved,
        device_capacity_mb=1000.0,
    )
    finding = rules_memory.growing(view(r), TH)
    assert finding is not None
    assert finding.severity == expected


def test_growing_names_every_growing_rank() -> None:
    ranks = [rank(i, device_allocated=linear(1000.0, 1.0 if i % 2 else 0.0)) for i in range(4)]
    finding = rules_memory.growing(view(*ranks), TH)
    assert finding is not None
    assert finding.summary.endswith("on ranks 1, 3")


@pytest.mark.parametrize(
    ("reserved", "steps", "expected"),
    [
        (919.0, 100, None),
        (920.0, 100, "warning"),
        (969.0, 100, "warning"),
        (970.0, 100, "critical"),
        (970.0, 19, "warning"),
        (None, 100, None),
    ],
)
def test_pressure(reserved: float | None, steps: int, expected: str | None) -> None:
    r = rank(steps=steps, device_peak_reserved_mb=reserved, device_capacity_mb=1000.0)
    finding = rules_memory.pressure(view(r), TH)
    assert (finding.severity if finding else None) == expected
    if finding is not None:
        assert f"({round(reserved or 0) / 10:.0f} %)" in finding.summary


def test_pressure_needs_capacity() -> None:
    r = rank(device_peak_reserved_mb=999.0, device_capacity_mb=None)
    assert rules_memory.pressure(view(r), TH) is None


@pytest.mark.parametrize(
    ("allocated", "reserved", "fires"),
    [
        (150.0, 300.0, True),
        (150.0, 299.0, False),
        (200.0, 399.0, False),
        (100.0, 299.0, False),
        (None, 600.0, False),
    ],
)
def test_fragmented(allocated: float | None, reserved: float, fires: bool) -> None:
    r = rank(
        device_peak_allocated_mb=allocated,
        device_peak_reserved_mb=reserved,
        device_capacity_mb=1000.0,
    )
    finding = rules_memory.fragmented(view(r), TH)
    assert (finding is not None) == fires
    if finding is not None:
        assert "2.0x the allocated peak 150 MB" in finding.summary
        assert "expandable_segments" in finding.action


@pytest.mark.parametrize(
    ("low", "reserved", "fires"),
    [(400.0, 500.0, True), (401.0, 500.0, False), (400.0, 299.0, False), (400.0, 300.0, True)],
)
def test_imbalanced(low: float, reserved: float, fires: bool) -> None:
    ranks = [
        rank(
            0,
            device_peak_allocated_mb=low,
            device_peak_reserved_mb=reserved,
            device_capacity_mb=1000.0,
        ),
        rank(
            1,
            device_peak_allocated_mb=500.0,
            device_peak_reserved_mb=reserved,
            device_capacity_mb=1000.0,
        ),
    ]
    finding = rules_memory.imbalanced(view(*ranks), TH)
    assert (finding is not None) == fires
    if finding is not None:
        assert "from 400 MB (rank 0) to 500 MB (rank 1), 20 % apart" in finding.summary


def test_imbalanced_needs_two_ranks() -> None:
    r = rank(
        device_peak_allocated_mb=10.0, device_peak_reserved_mb=900.0, device_capacity_mb=1000.0
    )
    assert rules_memory.imbalanced(view(r), TH) is None


@pytest.mark.parametrize(
    "rule",
    [rules_memory.growing, rules_memory.pressure, rules_memory.fragmented, rules_memory.imbalanced],
)
def test_memory_rules_skip_when_nothing_measured(rule: object) -> None:
    assert rule(view(rank(), rank(1)), TH) is None  # type: ignore[operator]


@pytest.mark.parametrize(
    ("r", "text"),
    [
        (
            rank(device_peak_reserved_mb=2048.0, host_rss_peak_mb=100.0),
            "device peak reserved 2.0 GB",
        ),
        (rank(host_rss_peak_mb=300.0), "host RSS peak 300 MB"),
    ],
)
def test_balanced_memory_says_what_was_measured(r: RankWindow, text: str) -> None:
    finding = rules_memory.balanced_memory(view(r), TH)
    assert finding.kind == "BALANCED"
    assert finding.summary.startswith(text)


def test_nothing_measured_is_not_called_balanced() -> None:
    finding = rules_memory.balanced_memory(view(rank()), TH)
    assert finding.kind == "NOT_MEASURED"
    assert finding.summary.startswith("memory not measured")


def test_memory_growth_reports_slope() -> None:
    growth = rules_memory.memory_growth(rank(3, host_rss=linear(100.0, 2.0)))
    assert growth is not None
    assert (growth.rank, growth.source, growth.span_steps) == (3, "host RSS", 100)
    assert growth.slope_mb_per_step == pytest.approx(2.0)
    assert growth.rise_mb == pytest.approx(200.0)
    assert rules_memory.memory_growth(rank()) is None

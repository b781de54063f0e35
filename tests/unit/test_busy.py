"""BusySpans: how long each step overlapped the tx thread's own work (StepRecord.held_ms)."""

from __future__ import annotations

import itertools

import pytest

from traceml.instrument.busy import BusySpans
from traceml.instrument.timer import RawStep


def steps(*bounds: int) -> list[RawStep]:
    """Consecutive steps between the given ns boundaries (step i: bounds[i]..bounds[i + 1])."""
    return [
        RawStep(i, a, b, (0,) * 7, 0, -1, None, None)
        for i, (a, b) in enumerate(itertools.pairwise(bounds))
    ]


@pytest.mark.parametrize(
    ("spans", "expected"),
    [
        ([], {}),
        ([(0, 5)], {}),  # before the first step
        ([(40, 50)], {}),  # after the last one
        ([(12, 18)], {0: 6}),  # inside one step
        ([(15, 25)], {0: 5, 1: 5}),  # across the boundary
        ([(5, 35)], {0: 10, 1: 10}),  # covers both steps whole
        ([(11, 12), (13, 15)], {0: 3}),  # two spans in one step add up
        ([(10, 10)], {}),  # an empty span is no span
    ],
)
def test_overlap_per_step(spans: list[tuple[int, int]], expected: dict[int, int]) -> None:
    busy = BusySpans()
    for start, end in spans:
        busy.add(start, end)
    assert busy.overlaps(steps(10, 20, 30)) == expected  # steps 0: 10..20, 1: 20..30


def test_steps_with_a_gap_between_them() -> None:
    """A step after a pause (a notebook between cells) starts later than the last one ended."""
    busy = BusySpans()
    busy.add(25, 45)
    raws = [RawStep(0, 10, 20, (0,) * 7, 0, -1, None, None)]
    raws.append(RawStep(1, 40, 50, (0,) * 7, 0, -1, None, None))
    assert busy.overlaps(raws) == {1: 5}


def test_only_the_last_spans_are_kept() -> None:
    busy = BusySpans(kept=2)
    for start in (10, 20, 30):
        busy.add(start, start + 2)
    assert len(busy) == 2
    assert busy.overlaps(steps(0, 40)) == {0: 4}

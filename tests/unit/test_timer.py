"""Both step timers on a fake clock: exact phase accounting, nesting, the sum-to-step invariant."""

from __future__ import annotations

from collections import deque

import pytest

from tests.unit._clock import FakeClock
from tests.unit._timers import TIMERS, MakeTimer, make_c, make_python, run_steps
from traceml.instrument.timer import (
    BACKWARD,
    BETWEEN,
    DATALOADER,
    FORWARD,
    OPTIMIZER,
    OTHER,
    RawStep,
    Timer,
)


@pytest.fixture(params=[make_python, make_c], ids=["python", "c"])
def rig(request: pytest.FixtureRequest) -> tuple[Timer, FakeClock, deque[RawStep]]:
    out: deque[RawStep] = deque(maxlen=100)
    clock = FakeClock()
    return request.param(out, clock=clock), clock, out


def run_step(timer: Timer, clock: FakeClock, dl: int = 0, gap: int = 0) -> None:
    timer.begin(DATALOADER)
    clock.advance(dl)
    timer.end(DATALOADER)
    clock.advance(gap)
    timer.enter()
    clock.advance(5)  # zero_grad
    timer.begin(FORWARD)
    clock.advance(30)
    timer.end(FORWARD)
    clock.advance(7)  # loss
    timer.begin(BACKWARD)
    clock.advance(40)
    timer.end(BACKWARD)
    timer.begin(OPTIMIZER)
    clock.advance(10)
    timer.end(OPTIMIZER)
    timer.exit()


def test_phases_of_a_typical_step(rig: tuple[Timer, FakeClock, deque[RawStep]]) -> None:
    timer, clock, out = rig
    run_step(timer, clock, dl=100, gap=3)
    clock.advance(20)  # logging after the step
    run_step(timer, clock, dl=50, gap=0)
    first, second = out
    assert first.phase_ns[DATALOADER] == 100
    assert first.phase_ns[BETWEEN] == 3
    assert first.phase_ns[OTHER] == 12
    assert (first.phase_ns[FORWARD], first.phase_ns[BACKWARD], first.phase_ns[OPTIMIZER]) == (
        30,
        40,
        10,
    )
    assert second.phase_ns[BETWEEN] == 20
    assert second.phase_ns[DATALOADER] == 50
    for raw in out:
        assert sum(raw.phase_ns) == raw.end_ns - raw.start_ns
    assert second.start_ns == first.end_ns
    assert [r.step for r in out] == [0, 1]


def test_first_step_starts_at_first_event_not_at_init(
    rig: tuple[Timer, FakeClock, deque[RawStep]],
) -> None:
    timer, clock, out = rig
    clock.advance(10_000)  # model construction before the loop: not part of any step
    run_step(timer, clock, dl=100)
    assert out[0].end_ns - out[0].start_ns == 100 + 5 + 30 + 7 + 40 + 10


def test_nested_phase_is_exclusive(rig: tuple[Timer, FakeClock, deque[RawStep]]) -> None:
    timer, clock, out = rig
    timer.enter()
    timer.begin(OPTIMIZER)  # e.g. LBFGS calling a closure with forward and backward inside
    clock.advance(4)
    timer.begin(FORWARD)
    clock.advance(10)
    timer.end(FORWARD)
    timer.begin(BACKWARD)
    clock.advance(20)
    timer.end(BACKWARD)
    clock.advance(6)
    timer.end(OPTIMIZER)
    timer.exit()
    raw = out[0]
    assert raw.phase_ns[OPTIMIZER] == 10
    assert raw.phase_ns[FORWARD] == 10
    assert raw.phase_ns[BACKWARD] == 20
    assert sum(raw.phase_ns) == 40


def test_phase_left_open_by_an_exception_is_closed_at_step_end(
    rig: tuple[Timer, FakeClock, deque[RawStep]],
) -> None:
    timer, clock, out = rig
    timer.enter()
    timer.begin(FORWARD)
    clock.advance(9)
    timer.exit()  # forward raised: its post hook never ran
    timer.enter()
    clock.advance(3)
    timer.exit()
    assert out[0].phase_ns[FORWARD] == 9
    assert out[1].phase_ns[FORWARD] == 0
    assert out[1].phase_ns[OTHER] == 3


def test_unseen_phases_are_flagged(rig: tuple[Timer, FakeClock, deque[RawStep]]) -> None:
    timer, clock, out = rig
    timer.enter()
    clock.advance(1)
    timer.exit()
    seen = out[0].seen
    assert not seen >> DATALOADER & 1
    assert seen >> BETWEEN & 1 and seen >> OTHER & 1
    run_step(timer, clock, dl=1)
    assert out[1].seen >> DATALOADER & 1


def test_unmatched_end_is_ignored(rig: tuple[Timer, FakeClock, deque[RawStep]]) -> None:
    timer, clock, out = rig
    timer.end(FORWARD)
    timer.enter()
    clock.advance(2)
    timer.exit()
    assert sum(out[0].phase_ns) == 2


@TIMERS
def test_bounded_buffer_drops_oldest(make_timer: MakeTimer) -> None:
    out: deque[RawStep] = deque(maxlen=3)
    clock = FakeClock()
    timer = make_timer(out, clock=clock)
    run_steps(timer, clock, 10)
    assert [r.step for r in out] == [7, 8, 9]


@TIMERS
def test_rss_is_read_at_most_every_interval(make_timer: MakeTimer) -> None:
    out: deque[RawStep] = deque(maxlen=100)
    clock = FakeClock()
    reads: list[int] = []

    def read() -> int:
        reads.append(clock.t)
        return 42

    timer = make_timer(out, clock=clock, read_rss=read)
    for _ in range(30):
        timer.enter()
        clock.advance(1_000_000)  # 1 ms steps
        timer.exit()
    assert 2 <= len(reads) <= 3
    assert sum(1 for r in out if r.rss_pages == 42) == len(reads)
    assert all(r.rss_pages in (42, -1) for r in out)


@TIMERS
def test_cuda_marks_chain_from_step_to_step(make_timer: MakeTimer) -> None:
    out: deque[RawStep] = deque(maxlen=100)
    clock = FakeClock()
    counter = iter(range(1000))
    timer = make_timer(out, clock=clock)
    timer.use_cuda(lambda: next(counter), lambda: (1.0, 2.0, 3.0))
    run_step(timer, clock, dl=5)
    run_step(timer, clock, dl=5)
    a, b = out
    assert a.marks is not None and b.marks is not None
    assert b.marks[0] == a.marks[-1]
    labels = [label for label, _ in b.marks]
    assert labels[0] == BETWEEN and DATALOADER in labels and FORWARD in labels
    assert a.device_mem == (1.0, 2.0, 3.0)

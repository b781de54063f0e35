"""DDP all-reduce wait: the comm hook with fake buckets and futures, a fake clock, the timer's
step field, the record it becomes (clamped to backward, never on CUDA) and the wire."""

from __future__ import annotations

import subprocess
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.unit._clock import FakeClock
from tests.unit._timers import TIMERS, MakeTimer
from traceml.instrument.comm import (
    MAX_BUCKETS,
    CommLink,
    CommWait,
    attach_ddp,
    traced_allreduce,
)
from traceml.instrument.hooks import Hooks
from traceml.instrument.resolve import to_record
from traceml.instrument.timer import BACKWARD, RawStep
from traceml.records import StepRecord

REPO = Path(__file__).resolve().parents[2]


class FakeTensor:
    def __init__(self, sparse: bool = False) -> None:
        self.is_sparse = sparse
        self.ops: list[tuple[str, float]] = []

    def mul_(self, x: float) -> FakeTensor:
        self.ops.append(("mul", x))
        return self

    def div_(self, x: float) -> FakeTensor:
        self.ops.append(("div", x))
        return self


class FakeFuture:
    """Runs `then` callbacks when `complete()` is called, like a torch Future."""

    def __init__(self, value: Any) -> None:
        self._value = value
        self.callbacks: list[Callable[[FakeFuture], Any]] = []
        self.results: list[Any] = []

    def value(self) -> Any:
        return self._value

    def then(self, cb: Callable[[FakeFuture], Any]) -> FakeFuture:
        self.callbacks.append(cb)
        return self

    def complete(self) -> None:
        self.results = [cb(self) for cb in self.callbacks]


class FakeGroup:
    def __init__(self, size: int) -> None:
        self._size = size
        self.calls: list[list[FakeTensor]] = []
        self.futures: list[FakeFuture] = []

    def size(self) -> int:
        return self._size

    def allreduce(self, tensors: list[FakeTensor]) -> FakeGroup:
        self.calls.append(tensors)
        self.futures.append(FakeFuture(tensors))
        return self

    def get_future(self) -> FakeFuture:
        return self.futures[-1]


class FakeBucket:
    def __init__(self, tensor: FakeTensor) -> None:
        self._tensor = tensor

    def buffer(self) -> FakeTensor:
        return self._tensor


@pytest.fixture
def rig() -> tuple[CommWait, FakeClock, FakeGroup, CommLink]:
    clock = FakeClock(1_000_000)
    comm = CommWait(clock)
    group = FakeGroup(4)
    return comm, clock, group, CommLink(group, comm)


def test_hook_does_ddps_reduction_and_stamps_ready_and_done(
    rig: tuple[CommWait, FakeClock, FakeGroup, CommLink],
) -> None:
    comm, clock, group, link = rig
    dense, sparse = FakeTensor(), FakeTensor(sparse=True)
    fut = traced_allreduce(link, FakeBucket(dense))
    clock.t += 500
    traced_allreduce(link, FakeBucket(sparse))
    assert dense.ops == [("mul", 0.25)], "dense: times 1/world size, as DDP's copy does"
    assert sparse.ops == [("div", 4)], "sparse: divided by world size, as DDP does"
    assert group.calls == [[dense], [sparse]]
    assert comm.ready == [1_000_000, 1_000_500]
    clock.t += 200
    fut.complete()
    assert fut.results == [dense], "the future's value is the reduced bucket tensor"
    assert comm.done == [1_000_700]


def test_exposed_wait_is_last_ready_to_last_done(
    rig: tuple[CommWait, FakeClock, FakeGroup, CommLink],
) -> None:
    comm, clock, group, link = rig
    for _ in range(3):
        traced_allreduce(link, FakeBucket(FakeTensor()))
        clock.t += 100
    last_ready = clock.t - 100
    clock.t += 4_000
    for fut in group.futures:
        fut.complete()
    clock.t += 300  # DDP copies the reduced buckets into .grad: compute, not waiting
    comm.backward_done()
    assert comm.take() == clock.t - 300 - last_ready
    assert comm.take() == 0, "take() resets"
    assert comm.ready == [] and comm.done == []


def test_wait_without_completion_stamp_ends_at_backward_end(
    rig: tuple[CommWait, FakeClock, FakeGroup, CommLink],
) -> None:
    comm, clock, _, link = rig
    traced_allreduce(link, FakeBucket(FakeTensor()))
    clock.t += 2_500
    comm.backward_done()
    assert comm.take() == 2_500


def test_waits_of_several_backwards_add_up_and_no_bucket_is_zero(
    rig: tuple[CommWait, FakeClock, FakeGroup, CommLink],
) -> None:
    comm, clock, _, link = rig
    comm.backward_done()  # a no_sync backward: nothing all-reduced
    for wait in (100, 250):
        traced_allreduce(link, FakeBucket(FakeTensor()))
        clock.t += wait
        comm.backward_done()
    assert comm.take() == 350


def test_timestamps_are_bounded_and_off_after_unlink(
    rig: tuple[CommWait, FakeClock, FakeGroup, CommLink],
) -> None:
    comm, _, group, link = rig
    comm.ready = [0] * MAX_BUCKETS
    traced_allreduce(link, FakeBucket(FakeTensor()))
    assert len(comm.ready) == MAX_BUCKETS
    comm.ready = []
    link.comm = None
    fut = traced_allreduce(link, FakeBucket(FakeTensor()))
    fut.complete()
    assert comm.ready == [] and comm.done == [], "inert: all-reduce only"
    assert len(group.calls) == 2


def test_attach_ignores_what_is_not_ddp() -> None:
    torch = pytest.importorskip("torch")
    assert attach_ddp(torch.nn.Linear(2, 2), CommWait()) is None


@TIMERS
def test_timer_carries_the_steps_wait(make_timer: MakeTimer) -> None:
    out: deque[RawStep] = deque()
    clock = FakeClock(1_000_000)
    timer = make_timer(out, clock=clock)
    timer.enter()
    timer.exit()
    waits = iter([7, 0])
    timer.use_comm(lambda: next(waits))
    timer.enter()
    timer.exit()
    timer.enter()
    timer.exit()
    timer.use_comm(None)
    timer.enter()
    timer.exit()
    assert [r.comm_ns for r in out] == [-1, 7, 0, -1]


def raw(comm_ns: int, backward_ns: int = 3_000_000) -> RawStep:
    phases = (0, 0, 1_000_000, backward_ns, 0, 0, 0)
    return RawStep(0, 0, 1_000_000 + backward_ns, phases, 0b1001111, -1, None, None, comm_ns)


@pytest.mark.parametrize(
    ("comm_ns", "phases_ms", "expected"),
    [
        (-1, None, None),
        (0, None, 0.0),
        (1_500_000, None, 1.5),
        (9_000_000, None, 3.0),  # clamped to backward
        (1_500_000, [0.0, 0.0, 1.0, 3.0, 0.0, 0.0, 0.0], None),  # CUDA: never a host number
    ],
)
def test_record_comm_wait(comm_ns: int, phases_ms: list[float] | None, expected: Any) -> None:
    rec = to_record(raw(comm_ns), 0, 0, 0.004, phases_ms)
    assert rec.comm_wait_ms == expected
    assert rec.phase("backward") == 3.0, "the wait stays inside backward, not a phase"
    assert sum(p or 0.0 for p in rec.phases) == pytest.approx(rec.step_ms)


def test_wire_carries_comm_wait_as_an_optional_trailing_field() -> None:
    base = StepRecord(1, 2, 3.0, 10.0, (1.0, 2.0, 3.0, 4.0, None, None, 0.0))
    assert len(base.to_wire()) == 11, "unmeasured: the version-1 shape, unchanged"
    assert StepRecord.from_wire(base.to_wire()) == base
    rec = StepRecord(1, 2, 3.0, 10.0, (1.0, 2.0, 3.0, 4.0, None, None, 0.0), comm_wait_ms=2.5)
    wire = rec.to_wire()
    assert len(wire) == 12 and wire[11] == 2.5
    assert StepRecord.from_wire(wire) == rec
    assert StepRecord.from_wire(wire[:11]).comm_wait_ms is None, "older writers"


@TIMERS
def test_backward_wrapper_reports_its_end_to_the_comm_wait(make_timer: MakeTimer) -> None:
    timer = make_timer(deque())
    hooks = Hooks(timer, on_error=lambda e: pytest.fail(str(e)))
    ends: list[int] = []
    wrapped = hooks._timed(BACKWARD, lambda: "grads")
    assert wrapped.after is None
    assert wrapped() == "grads"
    wrapped.after = lambda: ends.append(1)
    assert wrapped() == "grads"
    assert ends == [1]
    wrapped.after = None
    assert wrapped() == "grads"
    assert ends == [1], "after None again: no call"


@pytest.mark.parametrize("kind", ["python", "c"])
def test_backward_ends_the_comm_wait_only_once_a_ddp_model_is_attached(
    kind: str, tmp_path: Path
) -> None:
    """Without DDP, backward's wrapper makes no call after each backward; with a real
    (one-rank, gloo) DDP model attached, the comm wait is ended at each backward's end. In a
    process of its own (tests/unit/_ddp_backward.py): a gloo process group left threads in
    pytest's worker that aborted it later."""
    child = subprocess.run(
        [sys.executable, "-m", "tests.unit._ddp_backward", kind, str(tmp_path / "pg")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0 and child.stdout.strip() == "ok", child.stdout + child.stderr

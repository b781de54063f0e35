"""The C hot paths (traceml/instrument/_native.c) against their Python references.

test_timer.py runs every timer test on both; here: the same random call sequences give the same
records from both timers, the C clock is perf_counter_ns, the C wrappers keep the Python ones'
contract (result, exception, binding, failure handed to on_error, no reference leaked), and the
tx thread's conversion gives equal StepRecords.
"""

from __future__ import annotations

import gc
import random
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import pytest

from tests.unit._clock import FakeClock
from tests.unit._timers import make_c, make_python, run_steps
from traceml.config import Settings
from traceml.instrument.resolve import host_records, host_records_for
from traceml.instrument.timer import (
    BACKWARD,
    FORWARD,
    N_PHASES,
    OPTIMIZER,
    OTHER,
    RawStep,
    StepTimer,
    Timer,
    native,
    native_for,
    new_timer,
)
from traceml.instrument.worker import FILLING_PARTS
from traceml.records import StepRecord


def c_module() -> Any:
    c = native()
    assert c is not None, "the C timer is not built: run `make install`"
    return c


def test_the_c_timer_is_built_and_chosen_unless_turned_off() -> None:
    c = c_module()
    assert isinstance(new_timer(deque()), c.StepTimer)
    assert isinstance(new_timer(deque(), native_ok=False), StepTimer)


def test_without_the_c_build_the_python_timer_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    """An install without a compiler has no _native module: nothing fails, Python serves."""
    monkeypatch.setitem(sys.modules, "traceml.instrument._native", None)  # import -> ImportError
    assert native() is None
    timer = new_timer(deque())
    assert isinstance(timer, StepTimer)
    assert native_for(timer) is None
    assert host_records_for(native()) is host_records


def test_a_stale_build_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """A .so built from other phase constants than timer.py's would mislabel every phase."""
    monkeypatch.setattr(c_module(), "N_PHASES", N_PHASES + 1)
    assert native() is None


def drive(timer: Timer, clock: FakeClock, ops: list[tuple[str, int]]) -> list[Any]:
    """Apply `ops` to `timer`; what it exposes after each one."""
    seen: list[Any] = []
    for op, arg in ops:
        clock.advance(arg)
        if op == "begin":
            timer.begin(arg % N_PHASES)
        elif op == "end":
            timer.end(arg % N_PHASES)
        elif op == "cuda":
            timer.use_cuda(iter(range(10_000)).__next__, lambda: (1.0, None, 3.0))
        else:
            getattr(timer, op)()
        seen.append(
            (timer.open_phase, timer.in_phase(FORWARD), timer.inside, timer.seen, timer.step)
        )
    return seen


def random_ops(rng: random.Random, n: int, cuda_at: int | None) -> list[tuple[str, int]]:
    names = ["begin", "begin", "end", "end", "enter", "exit", "exit", "rest"]
    ops = [(rng.choice(names), rng.randrange(1, 50)) for _ in range(n)]
    if cuda_at is not None:
        ops.insert(cuda_at, ("cuda", 0))
    return ops


@pytest.mark.parametrize("seed", range(40))
def test_random_sequences_give_the_same_records_from_both(seed: int) -> None:
    rng = random.Random(seed)
    ops = random_ops(rng, 300, cuda_at=rng.choice([None, 0, 150]))
    results = []
    for make in (make_python, make_c):
        out: deque[RawStep] = deque(maxlen=1000)
        clock = FakeClock()
        timer = make(out, clock=clock, read_rss=iter(range(1_000_000)).__next__)
        results.append((drive(timer, clock, ops), list(out)))
    (py_seen, py_out), (c_seen, c_out) = results
    assert c_seen == py_seen
    assert len(c_out) == len(py_out) > 0
    for a, b in zip(py_out, c_out, strict=True):
        assert type(b) is c_module().RawStep
        assert b == a and tuple(b) == a and b.phase_ns == a.phase_ns
        assert sum(b.phase_ns) == b.end_ns - b.start_ns


def test_a_c_raw_step_reads_as_the_python_timers_tuple() -> None:
    """By name and by index in timer.RawStep's order (the tx thread's itemgetters), equal to
    the tuple of its values and to nothing else."""
    out: deque[RawStep] = deque()
    clock = FakeClock()
    timer = make_c(out, clock=clock, read_rss=lambda: 7)
    timer.use_comm(lambda: 4)
    run_steps(timer, clock, 1, 5)
    raw: Any = out[0]  # the C RawStep, which this deque's type does not name
    fields = (raw.step, raw.start_ns, raw.end_ns, raw.phase_ns, raw.seen, raw.rss_pages)
    assert fields[0] == 0 and fields[2] > fields[1] and fields[5] == 7 and raw.comm_ns == 4
    as_tuple = (*fields, None, None, 4)
    assert len(raw) == len(RawStep._fields) and tuple(raw) == as_tuple
    assert [raw[i] for i in range(len(raw))] == list(as_tuple)
    assert raw == as_tuple and raw == RawStep(*as_tuple) and raw.__ne__(as_tuple) is False
    assert raw != (*fields, None, None, 5) and raw != list(as_tuple) and raw != 5
    assert repr(raw) == f"RawStep{as_tuple!r}"
    with pytest.raises(IndexError):
        raw[len(raw)]
    with pytest.raises(TypeError):
        hash(raw)


def test_the_c_clock_is_perf_counter_ns() -> None:
    out: deque[RawStep] = deque()
    timer = make_c(out)
    before = time.perf_counter_ns()
    timer.enter()
    timer.exit()
    after = time.perf_counter_ns()
    assert before <= out[0].start_ns <= out[0].end_ns <= after


def test_a_deep_nesting_grows_the_stack() -> None:
    out: deque[RawStep] = deque()
    clock = FakeClock()
    timer = make_c(out, clock=clock)
    timer.enter()
    for _ in range(100):  # a recursive model: far past the first allocation
        timer.begin(FORWARD)
        clock.advance(1)
    for _ in range(100):
        timer.end(FORWARD)
    timer.exit()
    assert out[0].phase_ns[FORWARD] == 100


def test_a_bad_phase_index_raises_in_the_timer_itself() -> None:
    timer = make_c(deque())
    with pytest.raises(ValueError, match="out of range"):
        timer.begin(N_PHASES)


class Rig:
    """A C timer on a fake clock, and what its wrappers reported as TraceML's own failures."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.out: deque[RawStep] = deque()
        self.timer = make_c(self.out, clock=self.clock)
        self.errors: list[BaseException] = []
        self.c = c_module()

    def timed(self, idx: int, fn: Callable[..., Any], after: Any = None) -> Any:
        return self.c.Timed(self.timer, idx, fn, after, self.errors.append)


def test_timed_returns_the_result_and_times_the_call() -> None:
    rig = Rig()
    done: list[int] = []

    def work(a: int, *, b: int) -> int:
        rig.clock.advance(25)
        return a + b

    timed = rig.timed(BACKWARD, work, after=lambda: done.append(1))
    rig.timer.enter()
    assert timed(1, b=2) == 3
    rig.timer.exit()
    assert rig.out[0].phase_ns[BACKWARD] == 25
    assert done == [1]
    assert timed.__wrapped__ is work
    assert not rig.errors


def test_timed_after_can_be_set_and_cleared_later() -> None:
    """How the backward wrapper gets DDP's comm-wait call only once a DDP model is attached."""
    rig = Rig()
    done: list[int] = []
    timed = rig.timed(BACKWARD, lambda: "ok")
    assert timed.after is None
    mark = lambda: done.append(1)  # noqa: E731
    timed.after = mark
    assert timed.after is mark
    assert timed() == "ok"
    timed.after = None
    assert timed.after is None
    assert timed() == "ok"
    assert done == [1]
    with pytest.raises(AttributeError, match="cannot be deleted"):
        del timed.after
    assert not rig.errors


def test_timed_passes_the_calls_exception_through_and_still_ends_the_phase() -> None:
    rig = Rig()

    def work() -> None:
        rig.clock.advance(10)
        raise KeyError("from the user's code")

    timed = rig.timed(BACKWARD, work)
    rig.timer.enter()
    with pytest.raises(KeyError, match="from the user's code"):
        timed()
    rig.clock.advance(4)
    rig.timer.exit()
    assert rig.out[0].phase_ns[BACKWARD] == 10
    assert rig.out[0].phase_ns[OTHER] == 4
    assert not rig.errors


def test_timed_binds_as_a_method_in_a_class() -> None:
    """As `_BaseDataLoaderIter.__next__`: `next(it)` and `it.__next__()` get `self`."""
    rig = Rig()

    class It:
        def __init__(self) -> None:
            self.n = 0

        def __next__(self) -> int:
            self.n += 1
            return self.n

    It.__next__ = rig.timed(OPTIMIZER, It.__next__)  # type: ignore[method-assign]
    it = It()
    assert next(it) == 1
    assert it.__next__() == 2
    assert It.__next__(it) == 3
    assert not rig.errors


def test_a_failing_timer_is_handed_to_on_error_and_the_call_goes_on() -> None:
    rig = Rig()
    calls: list[int] = []

    def broken_after() -> None:
        raise RuntimeError("TraceML broke")

    def work() -> str:
        calls.append(1)
        return "ok"

    timed = rig.timed(BACKWARD, work, after=broken_after)
    assert timed() == "ok"
    assert calls == [1]
    assert [str(e) for e in rig.errors] == ["TraceML broke"]
    assert rig.errors[0].__traceback__ is not None


def test_edges_time_the_optimizer_and_note_each_new_class() -> None:
    rig = Rig()
    noted: list[str] = []

    class SGD:
        pass

    class Adam:
        pass

    pre = rig.c.Edge(
        rig.timer, OPTIMIZER, True, rig.errors.append, lambda o: noted.append(type(o).__name__)
    )
    post = rig.c.Edge(rig.timer, OPTIMIZER, False, rig.errors.append)
    rig.timer.enter()
    for opt in (SGD(), SGD(), Adam(), Adam()):
        pre(opt, (), {})
        rig.clock.advance(5)
        post(opt, (), {})
    rig.timer.exit()
    assert rig.out[0].phase_ns[OPTIMIZER] == 20
    assert noted == ["SGD", "Adam"]
    assert not rig.errors


def test_step_marks_one_step_and_ignores_a_nested_one() -> None:
    rig = Rig()
    nested: list[int] = []
    step = rig.c.Step(rig.timer, lambda: nested.append(1), rig.errors.append)
    with step:
        rig.clock.advance(3)
        with step:
            rig.clock.advance(4)
        rig.clock.advance(5)
    assert [sum(r.phase_ns[OTHER:]) for r in rig.out] == [12]
    assert nested == [1]
    with pytest.raises(ZeroDivisionError), step:  # the step never swallows the user's exception
        1 / 0  # noqa: B018
    assert len(rig.out) == 2


def test_a_failing_step_end_goes_to_on_error_not_the_loop() -> None:
    rig = Rig()

    def broken_comm() -> int:
        raise RuntimeError("comm broke")

    rig.timer.use_comm(broken_comm)
    with rig.c.Step(rig.timer, lambda: None, rig.errors.append):
        pass
    assert [str(e) for e in rig.errors] == ["comm broke"]


def test_no_reference_is_leaked_on_any_path() -> None:
    rig = Rig()
    arg, result = object(), object()

    def ok(x: object) -> object:
        return result

    def fails(x: object) -> object:
        raise ValueError(x)

    timed_ok, timed_fails = rig.timed(FORWARD, ok), rig.timed(FORWARD, fails)
    step = rig.c.Step(rig.timer, lambda: None, rig.errors.append)
    before = sys.getrefcount(arg), sys.getrefcount(result)
    for _ in range(1000):
        with step:
            timed_ok(arg)
            try:
                timed_fails(arg)
            except ValueError as e:
                e.__traceback__ = None
                del e
    rig.out.clear()
    assert (sys.getrefcount(arg), sys.getrefcount(result)) == before


def random_raw(rng: random.Random, step: int) -> RawStep:
    phase_ns = tuple(rng.choice([0, rng.randrange(1, 10**9)]) for _ in range(N_PHASES))
    start = rng.randrange(10**12, 10**13)
    dev = rng.choice([None, (1.5, None, 3.25), (None, None, None)])
    return RawStep(
        step,
        start,
        start + sum(phase_ns),
        phase_ns,
        rng.randrange(0, 1 << N_PHASES),
        rng.choice([-1, rng.randrange(0, 10**6)]),
        None,
        dev,
        rng.choice([-1, 0, rng.randrange(1, 2 * 10**9)]),  # longer than backward: clamped
    )


@pytest.mark.parametrize("seed", range(10))
def test_host_records_in_c_equal_the_python_ones(seed: int) -> None:
    rng = random.Random(seed)
    raws = [random_raw(rng, i) for i in range(200)]
    offset = time.time_ns() - time.perf_counter_ns()
    expected = host_records(raws, 3, offset, 0.00390625)
    got = host_records_for(c_module())(raws, 3, offset, 0.00390625)
    assert got == expected
    assert all(type(rec) is StepRecord for rec in got)
    assert [rec.phases for rec in got] == [rec.phases for rec in expected]  # None where unseen


def test_host_records_in_c_refuse_what_is_not_a_raw_step() -> None:
    convert = host_records_for(c_module())
    short: Any = (1, 2, 3)
    with pytest.raises(TypeError, match="RawStep"):
        convert([short], 0, 0, 1.0)
    assert convert([], 0, 0, 1.0) == []


def test_c_records_stay_out_of_the_garbage_collector() -> None:
    """They hold no reference that could close a cycle; tracked, each one that outlives a
    collection would move up to the oldest generation and bring full collections closer."""
    out: deque[RawStep] = deque()
    timer = make_c(out)
    timer.use_cuda(iter(range(100)).__next__, lambda: (1.0, 2.0, 3.0))  # marks: the CUDA shape
    timer.enter()
    timer.exit()
    assert not gc.is_tracked(out[0])
    plain = RawStep(0, 0, 1, (0,) * N_PHASES, 0b1000010, -1, None, None)
    (record,) = host_records_for(c_module())([plain], 0, 0, 1.0)
    assert not gc.is_tracked(record)
    # Its phases too: a tick's worth of them was most of what each collection on the tx thread
    # found in the young generation, and traversed.
    assert not gc.is_tracked(record.phases)
    assert gc.is_tracked(host_records([plain], 0, 0, 1.0)[0]), "Python cannot untrack its own"


def consume(out: deque[RawStep], timer: Timer | None) -> list[RawStep]:
    """What the tx thread does with a batch: copy what it needs, then hand the batch back."""
    batch = [out.popleft() for _ in range(len(out))]
    copies = [RawStep(*raw) for raw in batch]
    if timer is not None:
        timer.recycle(batch)  # type: ignore[attr-defined]
    return copies


@pytest.mark.parametrize("seed", range(10))
def test_recycled_raw_steps_give_the_same_records(seed: int) -> None:
    """The C timer refills RawSteps the tx thread handed back; what it emits stays what the
    Python timer emits, CUDA marks included."""
    rng = random.Random(seed)
    ops = random_ops(rng, 400, cuda_at=rng.choice([None, 200]))
    results = []
    for make, recycles in ((make_python, False), (make_c, True)):
        out: deque[RawStep] = deque(maxlen=1000)
        clock = FakeClock()
        timer = make(out, clock=clock, read_rss=iter(range(1_000_000)).__next__)
        got: list[RawStep] = []
        for lo in range(0, len(ops), 17):
            drive(timer, clock, ops[lo : lo + 17])
            got += consume(out, timer if recycles else None)
        results.append(got)
    assert len(results[0]) > 20
    assert results[1] == results[0]


def test_a_raw_step_held_elsewhere_is_never_refilled() -> None:
    out: deque[RawStep] = deque()
    clock = FakeClock()
    timer = make_c(out, clock=clock)
    run_steps(timer, clock, 3, 5)
    batch = list(out)
    out.clear()
    kept, copy = batch[1], RawStep(*batch[1])
    timer.recycle(batch)  # type: ignore[attr-defined]
    del batch
    run_steps(timer, clock, 5, 7)
    assert kept == copy, "a RawStep someone still holds keeps its values"
    assert [raw.step for raw in out] == [3, 4, 5, 6, 7]
    assert all(isinstance(v, int) for raw in out for v in raw.phase_ns)


def test_raw_steps_leave_the_collectors_count_alone() -> None:
    """A RawStep allocated on the training thread and freed on the tx thread raised the
    collector's gen-0 count by one a step between two ticks, past the threshold: the training
    thread paid a collection every tick. A C RawStep is not the collector's, pooled or not."""
    grown = []
    for recycles in (False, True):
        out: deque[RawStep] = deque()
        timer = make_c(out)
        during: list[int] = []
        gc.disable()
        try:
            for _ in range(10):
                before = gc.get_count()[0]
                for _ in range(200):
                    timer.enter()
                    timer.exit()
                during.append(gc.get_count()[0] - before)  # what the training thread added
                batch = [out.popleft() for _ in range(len(out))]
                if recycles:
                    timer.recycle(batch)  # type: ignore[attr-defined]
                del batch
        finally:
            gc.enable()
        grown.append(max(during[1:]))  # the first tick fills the pool
    assert grown == [0, 0]


def test_the_pool_reuses_the_largest_batch_a_quiet_fold_hands_back() -> None:
    """While nobody listens the tx thread folds once a second, or once a quarter of the buffer
    is queued: every RawStep of such a fold comes back to the pool and the next steps take
    them, so the training thread allocates none (a smaller pool ran dry every second on a loop
    faster than 0.5 ms a step)."""
    largest = Settings().buffer_steps // FILLING_PARTS
    out: deque[RawStep] = deque()
    timer = make_c(out)
    for _ in range(largest):
        timer.enter()
        timer.exit()
    batch = [out.popleft() for _ in range(largest)]
    timer.recycle(batch)  # type: ignore[attr-defined]
    del batch
    before = sys.getallocatedblocks()
    for _ in range(largest):
        timer.enter()
        timer.exit()
    assert len(out) == largest
    # A fresh RawStep is one block of the object allocator; a pooled one none.
    assert sys.getallocatedblocks() - before < largest // 10


def test_refilling_leaks_no_reference() -> None:
    """Pooled RawSteps hold None in their object fields: a refill or a recycle that lost or
    doubled a reference would move None's count from one round to the next."""
    out: deque[RawStep] = deque()
    timer = make_c(out, read_rss=lambda: 7)
    counts = []
    for _ in range(4):
        for _ in range(50):
            timer.enter()
            timer.exit()
        batch = [out.popleft() for _ in range(len(out))]
        timer.recycle(batch)  # type: ignore[attr-defined]
        del batch
        counts.append(sys.getrefcount(None))
    assert counts[1] == counts[2] == counts[3]

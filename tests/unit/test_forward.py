"""The root-forward wrapper with a fake clock: which module calls are forward time, which not."""

from __future__ import annotations

import textwrap
import threading
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from tests.unit._clock import FakeClock
from tests.unit._timers import MakeTimer, make_c, make_python
from traceml.instrument import forward
from traceml.instrument.forward import TORCH_CALL, RootState, make_call
from traceml.instrument.timer import BACKWARD, FORWARD, OPTIMIZER, OTHER, RawStep


@pytest.fixture(autouse=True, params=[make_python, make_c], ids=["python", "c"])
def timer_kind(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test here runs with each timer: the wrapper only uses the Timer protocol."""
    Rig.make = staticmethod(request.param)
    yield
    Rig.make = staticmethod(make_python)


class Rig:
    """A timer, a clock, and a stand-in for `nn.Module.__call__` that runs `body(module)`."""

    make: MakeTimer = staticmethod(make_python)

    def __init__(self, compiling: bool = False) -> None:
        self.clock = FakeClock()
        self.out: deque[RawStep] = deque(maxlen=10)
        self.timer = self.make(self.out, clock=self.clock)
        self.state = RootState()
        self.errors: list[BaseException] = []

        def original(module: Any, *args: Any, **kwargs: Any) -> Any:
            return module(self.call, *args, **kwargs)

        self.call = make_call(
            original, self.timer, self.state, self.errors.append, lambda: compiling
        )

    def module(self, ns: int, *children: Callable[..., Any]) -> Callable[..., Any]:
        """A module whose own work takes `ns` and which then calls its children."""

        def run(call: Callable[..., Any]) -> str:
            self.clock.advance(ns)
            for child in children:
                call(child)
            return "out"

        return run

    def step(self, body: Callable[[], None]) -> tuple[int, ...]:
        self.timer.enter()
        body()
        self.timer.exit()
        return self.out[-1].phase_ns


def test_a_root_and_its_children_are_one_forward() -> None:
    rig = Rig()
    model = rig.module(10, rig.module(20), rig.module(30, rig.module(5)))

    def step() -> None:
        rig.call(model)
        rig.clock.advance(7)  # the loss

    phases = rig.step(step)
    assert phases[FORWARD] == 65
    assert phases[OTHER] == 7
    assert not rig.state.busy and not rig.errors


def test_every_root_of_the_step_is_forward_whichever_model_was_named() -> None:
    rig = Rig()
    generator, discriminator = rig.module(40), rig.module(25)

    def gan_step() -> None:
        rig.call(discriminator)
        rig.call(generator)
        rig.clock.advance(3)  # a loss
        rig.call(discriminator)

    assert rig.step(gan_step)[FORWARD] == 90


def test_calls_outside_a_step_are_not_forward() -> None:
    rig = Rig()
    rig.timer.enter()
    rig.timer.exit()
    rig.call(rig.module(50))  # an eval forward between steps
    phases = rig.step(lambda: rig.clock.advance(1))
    assert phases[FORWARD] == 0


def test_a_forward_inside_the_optimizer_closure_is_forward() -> None:
    rig = Rig()

    def lbfgs_step() -> None:
        rig.timer.begin(OPTIMIZER)
        rig.clock.advance(4)
        rig.call(rig.module(30))
        rig.clock.advance(6)
        rig.timer.end(OPTIMIZER)

    phases = rig.step(lbfgs_step)
    assert (phases[FORWARD], phases[OPTIMIZER]) == (30, 10)


def test_a_recompute_inside_backward_stays_backward() -> None:
    rig = Rig()

    def checkpointed_backward() -> None:
        rig.timer.begin(BACKWARD)
        rig.call(rig.module(30))  # activation checkpointing re-runs the forward
        rig.timer.end(BACKWARD)

    phases = rig.step(checkpointed_backward)
    assert (phases[FORWARD], phases[BACKWARD]) == (0, 30)


def on_another_thread(fn: Callable[[], object]) -> None:
    other = threading.Thread(target=fn)
    other.start()
    other.join()


def test_another_threads_calls_are_not_timed() -> None:
    rig = Rig()
    rig.timer.enter()
    on_another_thread(lambda: rig.call(rig.module(50)))
    rig.timer.exit()
    assert rig.out[-1].phase_ns[FORWARD] == 0
    assert not rig.state.busy


def test_while_dynamo_traces_only_the_original_call_runs() -> None:
    rig = Rig(compiling=True)
    assert rig.step(lambda: rig.call(rig.module(50)))[FORWARD] == 0
    assert not rig.state.busy


def test_a_pass_through_once_the_owner_is_forgotten() -> None:
    rig = Rig()
    rig.state.owner = None  # shutdown, or a forked child
    assert rig.step(lambda: rig.call(rig.module(50)))[FORWARD] == 0


def test_an_exception_in_the_model_reaches_the_user_and_leaves_no_state() -> None:
    rig = Rig()

    def broken(_call: Callable[..., Any]) -> None:
        raise ValueError("shape mismatch")

    rig.timer.enter()
    with pytest.raises(ValueError, match="shape mismatch"):
        rig.call(broken)
    rig.timer.exit()
    assert not rig.state.busy and not rig.errors
    assert rig.step(lambda: rig.call(rig.module(8)))[FORWARD] == 8


class FailingClock(FakeClock):
    """A clock that raises while `failing` (a broken timer must never reach the user)."""

    failing = False

    def __call__(self) -> int:
        if self.failing:
            raise RuntimeError("clock broke")
        return self.t


def test_a_broken_timer_is_reported_and_the_models_result_returned() -> None:
    rig = Rig()
    clock = FailingClock()
    rig.timer = rig.make(rig.out, clock=clock)
    rig.call = make_call(
        lambda module, *a, **k: module(rig.call, *a, **k),
        rig.timer,
        rig.state,
        rig.errors.append,
        lambda: False,
    )
    rig.timer.enter()
    clock.failing = True
    assert rig.call(rig.module(5)) == "out"
    clock.failing = False
    rig.timer.exit()
    assert [str(e) for e in rig.errors] == ["clock broke", "clock broke"]  # begin, then end
    assert not rig.state.busy


def test_arguments_and_keywords_reach_the_module() -> None:
    rig = Rig()
    seen: list[Any] = []

    def module(_call: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
        seen.append((args, kwargs))
        return "out"

    assert rig.step(lambda: seen.append(rig.call(module, 1, 2, scale=3)))[FORWARD] == 0
    assert seen == [((1, 2), {"scale": 3}), "out"]


def test_nested_calls_and_calls_without_keywords_get_their_arguments() -> None:
    """The wrapper passes `args` alone when there is no keyword (one dict less a call): every
    path (root or nested, with or without keywords) hands the module what it was called with."""
    rig = Rig()
    seen: list[Any] = []

    def leaf(_call: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
        seen.append((args, kwargs))
        return "leaf"

    def parent(call: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
        seen.append((args, kwargs))
        seen.append(call(leaf, 7))
        seen.append(call(leaf, 8, bias=False))
        return "parent"

    rig.step(lambda: seen.append(rig.call(parent, 1)))
    rig.step(lambda: seen.append(rig.call(parent, 2, mask=None)))
    assert seen == [
        ((1,), {}),
        ((7,), {}),
        "leaf",
        ((8,), {"bias": False}),
        "leaf",
        "parent",
        ((2,), {"mask": None}),
        ((7,), {}),
        "leaf",
        ((8,), {"bias": False}),
        "leaf",
        "parent",
    ]


def test_an_interrupt_in_the_model_propagates_and_leaves_no_state() -> None:
    rig = Rig()

    def interrupted(_call: Callable[..., Any]) -> None:
        rig.clock.advance(4)
        raise KeyboardInterrupt

    rig.timer.enter()
    with pytest.raises(KeyboardInterrupt):
        rig.call(interrupted)
    rig.timer.exit()
    assert not rig.state.busy and not rig.errors
    assert rig.out[-1].phase_ns[FORWARD] == 4


FAKE_TORCH = (
    "class Module:\n"
    "    _compiled_call_impl = None\n"
    "\n"
    "    def _call_impl(self, *args, **kwargs):\n"
    "        return self.forward(*args, **kwargs)\n"
    "\n" + textwrap.indent(TORCH_CALL, "    ") + "\n"
    "    __call__ = _wrapped_call_impl\n"
)
"""nn.Module's calling machinery as torch 2.2 and later have it, in a file of its own (no
`from __future__` flag on its code, as in torch's)."""


def fake_torch(source: str = FAKE_TORCH) -> Any:
    scope: dict[str, Any] = {}
    exec(compile(source, "<fake torch>", "exec", dont_inherit=True), scope)
    compiler = SimpleNamespace(is_dynamo_compiling=lambda: False, is_compiling=lambda: False)
    return SimpleNamespace(nn=SimpleNamespace(Module=scope["Module"]), compiler=compiler)


def fail(error: BaseException) -> None:
    pytest.fail(f"the timer failed: {error!r}")


def layers(torch: Any, clock: FakeClock, depths: list[int]) -> Any:
    """A model of nested modules: each advances the clock by its `ns` and calls its children;
    the first leaf, four levels deep, notes how many frames deep its forward runs (and raises
    when asked to)."""

    class Layer(torch.nn.Module):  # type: ignore[misc]
        def __init__(self, ns: int, *children: Any) -> None:
            self.ns, self.children = ns, children

        def forward(self, fail: bool = False) -> str:
            clock.advance(self.ns)
            for child in self.children:
                child(fail=fail)
            if self.ns == 1:
                depths.append(len(traceback.extract_stack()))
                if fail:
                    raise ValueError("inner")
            return "out"

    return Layer(10, Layer(30, Layer(5, Layer(1))), Layer(20))


def test_torchs_own_call_runs_the_traced_code_with_no_frame_per_nested_call() -> None:
    torch, clock, out, depths = fake_torch(), FakeClock(), deque(maxlen=10), []  # type: ignore[var-annotated]
    call = torch.nn.Module.__dict__["__call__"]
    torch_code = call.__code__
    model = layers(torch, clock, depths)
    model()  # bare
    timer = Rig.make(out, clock=clock)
    state, undo = forward.install(torch, timer, fail)
    assert torch.nn.Module.__dict__["__call__"] is call and call.__code__ is not torch_code
    timer.enter()
    assert model() == "out"
    clock.advance(7)  # the loss
    timer.exit()
    assert (out[-1].phase_ns[FORWARD], out[-1].phase_ns[OTHER]) == (66, 7)
    assert not state.busy
    # The root's enter and leave are calls around torch's body in torch's own frame, with either
    # timer: no call adds a frame (a wrapper added one at each of four levels).
    assert depths[1] == depths[0]
    undo()
    assert call.__code__ is torch_code and "_traceml_state" not in call.__globals__
    model()
    assert depths[2] == depths[0]


def test_a_traceback_through_the_traced_code_reads_as_torchs() -> None:
    """Every frame, the root's included, reports torch's file, lines and columns: nothing is
    left out, and there is nothing to leave out."""
    torch, clock = fake_torch(), FakeClock()
    model = layers(torch, clock, [])

    def frames() -> list[tuple[str, int | None, int | None, int | None]]:
        with pytest.raises(ValueError, match="inner") as got:
            model(fail=True)
        tb = traceback.extract_tb(got.value.__traceback__)
        # Columns: Python 3.11 and later, where a traceback underlines the failing call.
        return [
            (f.filename, f.lineno, getattr(f, "colno", None), getattr(f, "end_colno", None))
            for f in tb
        ]

    bare = frames()
    timer = Rig.make(deque(maxlen=10), clock=clock)
    _, undo = forward.install(torch, timer, fail)
    timer.enter()
    traced = frames()
    timer.exit()
    undo()
    assert traced == bare
    assert sum(1 for f in bare if f[0] == "<fake torch>") == 2 * 4  # four levels, two each


def test_a_call_that_is_not_torchs_known_one_gets_the_wrapper() -> None:
    mine = "            impl = self._call_impl\n            return impl(*args, **kwargs)"
    torch = fake_torch(
        FAKE_TORCH.replace("            return self._call_impl(*args, **kwargs)", mine)
    )
    call = torch.nn.Module.__dict__["__call__"]
    assert not forward.inlinable(call)
    clock, out, depths = FakeClock(), deque(maxlen=10), []  # type: ignore[var-annotated]
    model = layers(torch, clock, depths)
    timer = Rig.make(out, clock=clock)
    _, undo = forward.install(torch, timer, fail)
    ours = torch.nn.Module.__dict__["__call__"]
    assert ours is not call and ours.__traceml__
    timer.enter()
    model()
    timer.exit()
    assert out[-1].phase_ns[FORWARD] == 66
    undo()
    assert torch.nn.Module.__dict__["__call__"] is call


@pytest.mark.parametrize("slotted", [True, False], ids=["slots", "attributes"])
def test_enter_and_leave_open_time_and_close_a_root(slotted: bool) -> None:
    """The C edges read and write RootState's slots directly; any other state object through
    its attributes. Both must be what Python code reads."""
    clock, out = FakeClock(), deque(maxlen=10)  # type: ignore[var-annotated]
    timer = Rig.make(out, clock=clock)
    state: Any = (
        RootState() if slotted else SimpleNamespace(busy=False, owner=threading.get_ident())
    )
    enter, leave = forward.make_edges(timer, state, fail)
    enter()
    assert state.busy  # outside a step: open, not timed
    leave()
    assert not state.busy
    leave()  # nothing open: nothing to do
    timer.enter()
    enter()
    clock.advance(9)
    leave()
    timer.begin(BACKWARD)
    enter()  # a recompute inside backward stays backward
    clock.advance(4)
    leave()
    timer.end(BACKWARD)
    timer.exit()
    assert (out[-1].phase_ns[FORWARD], out[-1].phase_ns[BACKWARD], state.busy) == (9, 4, False)
    state.owner = None  # forgotten (a forked child): every call passes
    enter()
    assert not state.busy


def test_another_threads_edges_neither_open_nor_close_the_owners_root() -> None:
    state: Any = RootState()  # Any: its busy changes behind mypy's back
    enter, leave = forward.make_edges(Rig.make(deque(maxlen=10)), state, fail)
    on_another_thread(enter)
    assert not state.busy
    enter()
    on_another_thread(leave)  # a call that passed the busy test before the owner's root opened
    assert state.busy
    leave()
    assert not state.busy


def test_an_interrupt_as_enter_returns_leaves_no_root_open() -> None:
    """enter sits inside the `try`: an interrupt raised between enter's return and torch's
    call (where the interpreter checks for signals) still reaches leave."""
    torch, clock = fake_torch(), FakeClock()
    model = layers(torch, clock, [])
    timer = Rig.make(deque(maxlen=10), clock=clock)
    state, undo = forward.install(torch, timer, fail)
    scope = torch.nn.Module.__dict__["__call__"].__globals__
    enter = scope["_traceml_enter"]

    def enter_then_interrupt() -> None:
        enter()
        raise KeyboardInterrupt

    scope["_traceml_enter"] = enter_then_interrupt
    timer.enter()
    with pytest.raises(KeyboardInterrupt):
        model()
    scope["_traceml_enter"] = enter
    assert not state.busy
    assert model() == "out"  # and the next root is timed again
    timer.exit()
    undo()

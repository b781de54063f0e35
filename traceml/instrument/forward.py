"""Forward time of every root module that runs inside a step, without touching any module.

Auto mode replaces `torch.nn.Module.__call__`, the class attribute through which every module
call goes, with one wrapper for the whole process. Nothing of TraceML's is ever stored in a
user's module, optimizer or tensor: no hook dict entry, no attribute, no closure. So
`torch.save(model)` then `torch.load` with `weights_only=True` (or on a machine without TraceML),
`copy.deepcopy`, `state_dict`, `torch.jit`, `torch.export` and `torch.compile` see exactly what they
would without TraceML, and every model of the step is timed, whichever one `trace_step` names: a
GAN's generator and discriminator, an encoder and its decoder, a teacher and its student.

The outermost module call on the training thread is a "root": its time is `forward`. Calls nested
in a root pass straight through (one attribute test, ~0.1 µs). A forward inside backward
(activation checkpointing's recompute) stays `backward`, whose cost it is; a forward inside
`optimizer.step(closure)` (LBFGS) is `forward`, as the timer's innermost-phase rule says.

While dynamo traces a compiled module, `torch.compiler.is_dynamo_compiling()` is constant True,
so the traced graph holds only the original call (no graph break, no guard on TraceML's state).
In eager mode it is one Python call returning False; `is_compiling()`, which also says True
under non-strict export, costs a second call (`torch.jit.is_scripting`) on every root call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from traceml.instrument.timer import BACKWARD, FORWARD, Timer, native_for

OnError = Callable[[BaseException], None]


class RootState:
    """Mutable state shared by the wrapper, the session and fork handling."""

    __slots__ = ("busy", "owner")

    def __init__(self) -> None:
        self.busy = False
        """True while the training thread is inside a root module's call."""
        self.owner: int | None = threading.get_ident()
        """Thread id of the training loop; None turns the wrapper into a pure pass-through."""


def make_call(
    original: Callable[..., Any],
    timer: Timer,
    state: RootState,
    on_error: OnError,
    is_compiling: Callable[[], bool],
) -> Callable[..., Any]:
    """The replacement for `torch.nn.Module.__call__`; `original` is the one it replaces.

    With the C timer, a root call's work after the first test (owner thread, timing, `busy`) is
    one C call, `_native.Root` (0.5 µs a root call less than the Python body below, its
    reference). The first test stays Python either way, so nested calls pay no C call and
    dynamo, which traces through this function, sees `is_compiling()` and the original call.
    """
    c = native_for(timer)
    if c is not None:
        root = c.Root(timer, state, original, on_error, FORWARD, BACKWARD)

        # The module is args[0] (in both bodies): passing `args` on as it came builds no new
        # tuple, where `original(self, *args)` builds a list and a tuple on every module call.
        # Most module calls take no keyword: `f(*args)` then passes the tuple on, where
        # `f(*args, **kwargs)` builds and merges one more dict on every call.
        def __call__(*args: Any, **kwargs: Any) -> Any:
            if state.busy or is_compiling():
                if kwargs:
                    return original(*args, **kwargs)
                return original(*args)
            if kwargs:
                return root(*args, **kwargs)
            return root(*args)

    else:
        get_ident = threading.get_ident

        def __call__(*args: Any, **kwargs: Any) -> Any:
            if state.busy or is_compiling() or get_ident() != state.owner:
                return original(*args, **kwargs) if kwargs else original(*args)
            state.busy = (
                True  # set outside steps too, so a compiled module sees one value (no recompile)
            )
            try:
                if not timer.inside or timer.in_phase(BACKWARD):
                    return original(*args, **kwargs)
                try:
                    timer.begin(FORWARD)
                except Exception as e:  # noqa: BLE001 - never into the user's loop
                    on_error(e)
                try:
                    return original(*args, **kwargs)
                finally:
                    try:
                        timer.end(FORWARD)
                    except Exception as e:  # noqa: BLE001
                        on_error(e)
            finally:
                state.busy = False

    __call__.__wrapped__ = original  # type: ignore[attr-defined]
    __call__.__traceml__ = True  # type: ignore[attr-defined]
    return __call__


def install(torch: Any, timer: Timer, on_error: OnError) -> tuple[RootState, Callable[[], None]]:
    """Replace `torch.nn.Module.__call__`; returns the shared state and the undo.

    The undo puts the original back only if the wrapper is still the class attribute; if another
    tool wrapped it since, ours stays in its chain as a pure pass-through (owner None).
    """
    module_cls = torch.nn.Module
    original = module_cls.__call__
    state = RootState()
    compiling = getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)
    ours = make_call(original, timer, state, on_error, compiling)
    module_cls.__call__ = ours

    def undo() -> None:
        state.owner = None
        if module_cls.__dict__.get("__call__") is ours:
            module_cls.__call__ = original

    return state, undo

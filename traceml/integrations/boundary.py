"""The step boundary that framework callbacks mark: `trace_step(model)` opened at a step-start
hook and closed at the step-end hook, so the user's training loop stays untouched.

Runs on the training thread inside framework hooks; it must not raise into the loop, and a step
left open (an end hook that never came) is closed before the next one opens.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

TraceStep = Callable[[Any], AbstractContextManager[None]]
"""`traceml.trace_step`, or a stand-in with its signature."""


class StepBoundary:
    """Turns a pair of framework hooks (step start, step end) into one traced step.

    Args:
        trace_step: Opens a step for a model; default `traceml.trace_step`, looked up on first
            use so that constructing a callback costs nothing and starts nothing.
    """

    __slots__ = ("_open", "_trace_step", "steps")

    def __init__(self, trace_step: TraceStep | None = None) -> None:
        self._trace_step = trace_step
        self._open: AbstractContextManager[None] | None = None
        self.steps = 0
        """Steps closed so far."""

    @property
    def is_open(self) -> bool:
        """True between a step's start hook and its end hook."""
        return self._open is not None

    def begin(self, model: Any = None) -> None:
        """A step starts: close any step still open, then open one for `model`."""
        self.end()
        ctx = self._tracer()(model)
        ctx.__enter__()
        self._open = ctx

    def end(self, error: BaseException | None = None) -> None:
        """The step ends (with `error` when training raised); nothing happens when none is open."""
        ctx, self._open = self._open, None
        if ctx is None:
            return
        if error is None:
            ctx.__exit__(None, None, None)
        else:
            ctx.__exit__(type(error), error, error.__traceback__)
        self.steps += 1

    def _tracer(self) -> TraceStep:
        if self._trace_step is None:
            from traceml.api import trace_step

            self._trace_step = trace_step
        return self._trace_step

"""Both step timers, for tests that must hold of each: the pure-Python reference and the C one.

`make(out, clock=..., read_rss=..., mark=...)` builds either with the same arguments. The C one
must be built here (`make install` compiles it); test_native.py fails if it is not.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import pytest

from traceml.instrument.timer import RawStep, StepTimer, Timer, native


class MakeTimer(Protocol):
    def __call__(
        self,
        out: deque[RawStep],
        clock: Callable[[], int] | None = None,
        read_rss: Callable[[], int] | None = None,
        mark: Callable[[], Any] | None = None,
    ) -> Timer: ...


def make_python(
    out: deque[RawStep],
    clock: Callable[[], int] | None = None,
    read_rss: Callable[[], int] | None = None,
    mark: Callable[[], Any] | None = None,
) -> Timer:
    if clock is None:
        return StepTimer(out, read_rss=read_rss, mark=mark)
    return StepTimer(out, clock=clock, read_rss=read_rss, mark=mark)


def make_c(
    out: deque[RawStep],
    clock: Callable[[], int] | None = None,
    read_rss: Callable[[], int] | None = None,
    mark: Callable[[], Any] | None = None,
) -> Timer:
    c = native()
    assert c is not None, "the C timer is not built: run `make install`"
    timer: Timer = c.StepTimer(out, clock=clock, read_rss=read_rss, mark=mark)
    return timer


TIMERS = pytest.mark.parametrize("make_timer", [make_python, make_c], ids=["python", "c"])
"""Runs a test once with each timer, as its `make_timer` argument."""


def run_steps(timer: Timer, clock: Any, n: int, ns: int = 1) -> None:
    """`n` empty steps of `ns` each on `clock` (a FakeClock)."""
    for _ in range(n):
        timer.enter()
        clock.advance(ns)
        timer.exit()

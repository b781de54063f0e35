"""A hand-driven nanosecond clock for the timers under test (they take `now_ns` as a callable)."""

from __future__ import annotations


class FakeClock:
    def __init__(self, start: int = 1_000) -> None:
        self.t = start

    def __call__(self) -> int:
        return self.t

    def advance(self, ns: int) -> None:
        self.t += ns

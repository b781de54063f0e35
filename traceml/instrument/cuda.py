"""Pooled CUDA events for phase boundaries, resolved later with `query()`, never `synchronize()`.

`record()` runs on the training thread (one pooled event, one `record()` on the current stream);
`try_resolve()` runs on the tx thread and returns None while the step's last event is not done,
so a step whose GPU work is still queued is published late, never waited for.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from traceml.instrument.resolve import segment_ms

MAX_POOL = 4096
"""Free events kept for reuse; beyond this they are dropped to the garbage collector."""


class EventPool:
    """Reuses timing events so that the hot path does not create CUDA objects."""

    def __init__(self, factory: Callable[[], Any], max_free: int = MAX_POOL) -> None:
        self._factory = factory
        self._free: deque[Any] = deque()
        self._max_free = max_free
        self.created = 0

    def acquire(self) -> Any:
        try:
            return self._free.pop()
        except IndexError:
            self.created += 1
            return self._factory()

    def release(self, events: Sequence[Any]) -> None:
        for ev in events:
            if len(self._free) < self._max_free:
                self._free.append(ev)


class CudaMarker:
    """Records an event at each segment boundary and resolves a step's segments on device time."""

    def __init__(self, pool: EventPool) -> None:
        self._pool = pool

    def record(self) -> Any:
        """Training thread: take a pooled event and record it on the current stream."""
        ev = self._pool.acquire()
        ev.record()
        return ev

    def try_resolve(self, marks: Sequence[tuple[int, Any]]) -> list[float] | None:
        """Tx thread: device ms per label, or None if the step's GPU work has not finished."""
        if not marks or not marks[-1][1].query():
            return None
        phases = segment_ms(marks, lambda a, b: float(a.elapsed_time(b)))
        # The last event opens the next step: it is released with that step, not this one.
        self._pool.release([ev for _, ev in marks[:-1]])
        return phases


def torch_event_factory() -> Callable[[], Any]:
    """A factory of timing-enabled CUDA events; imported lazily so CPU runs never touch CUDA."""
    import torch

    return lambda: torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]

"""How far a rank has got, as its heartbeats and run files report it; O(1) memory.

Runs in the tx thread; only plain arithmetic, never I/O.
"""

from __future__ import annotations

import math
import operator
import statistics
from collections import deque
from collections.abc import Sequence

from traceml.records import StepRecord

RECENT_STEPS = 64
_STEP_MS = operator.attrgetter("step_ms")


def finite(value: float | None) -> float | None:
    """`value` unless it is None, NaN or infinite (JSON and msgpack readers expect numbers)."""
    return value if value is not None and math.isfinite(value) else None


class Progress:
    """Last step, recent step times, and what the tx thread was told at its last service()."""

    def __init__(self) -> None:
        self.last_step: int | None = None
        self.last_step_ms: float | None = None
        self.last_step_t: float | None = None
        """Epoch seconds at which the last step record was published."""
        self.primary: str | None = None
        self.training_dropped = 0
        """Records the training thread's buffer dropped before they reached the publisher."""
        self._recent: deque[float] = deque(maxlen=RECENT_STEPS)

    def record(self, rec: StepRecord, t: float) -> None:
        """Note a published step record."""
        if self.last_step is None or rec.step >= self.last_step:
            self.last_step = rec.step
            self.last_step_ms = finite(rec.step_ms)
            self.last_step_t = t
        if finite(rec.step_ms) is not None:
            self._recent.append(rec.step_ms)

    def record_many(self, records: Sequence[StepRecord], t: float) -> None:
        """`record` of each record (one rank's, in step order: the tx thread's batch)."""
        if not records:
            return
        ms = list(map(_STEP_MS, records))
        if all(map(math.isfinite, ms)):
            last = records[-1]
            if self.last_step is None or last.step >= self.last_step:
                self.last_step, self.last_step_ms, self.last_step_t = last.step, last.step_ms, t
            self._recent.extend(ms[-RECENT_STEPS:])
            return
        for rec in records:
            self.record(rec, t)

    def note(self, last_step: int, dropped: int, primary: str | None) -> None:
        """Take what service() was told by the training side."""
        if last_step >= 0 and (self.last_step is None or last_step > self.last_step):
            self.last_step = last_step
        self.training_dropped = max(0, dropped)
        self.primary = primary

    def median_ms(self) -> float | None:
        return statistics.median(self._recent) if self._recent else None

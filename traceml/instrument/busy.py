"""The tx worker's busy spans (its beats), and which training steps they overlapped.

A beat folds a tick's steps in one go: a few ms on a fast loop. On the training thread (at a
step's end) it delays the next step by all of it; on the tx thread it holds the GIL, and a
training step that needs the interpreter meanwhile waits. Either way the step comes out a few
times slower than its neighbours. That time is TraceML's cost, not the loop's, so it must not be
diagnosed as the loop's spike (at 0.2 ms a step, 4 ticks a second made 7 % of a million-step
run's step time look like STEP_SPIKES). Each beat notes its span; when it converts a step it
measures how long the step overlapped those spans, and the record carries it
(`StepRecord.held_ms`). The overlap bounds what TraceML can have delayed the step: on the tx
thread, the training thread may have been in C code (GIL released) for part of it.

Pure and clock-free: spans are perf_counter_ns pairs given by the caller, the same clock as the
step timer's.
"""

from __future__ import annotations

import bisect
import operator
from collections import deque
from collections.abc import Sequence

from traceml.instrument.timer import RawStep

SPANS_KEPT = 256
"""Busy spans remembered: a step is converted within a tick or two of its end (CUDA steps can
wait longer for their events), and the tx thread makes a few spans a tick, 4 ticks a second."""

_END_NS = operator.itemgetter(2)
"""RawStep.end_ns, as a bisect key."""


class BusySpans:
    """Spans of the beats' work, and their overlap with the steps they convert."""

    __slots__ = ("_spans",)

    def __init__(self, kept: int = SPANS_KEPT) -> None:
        self._spans: deque[tuple[int, int]] = deque(maxlen=kept)

    def __len__(self) -> int:
        return len(self._spans)

    def add(self, start_ns: int, end_ns: int) -> None:
        """A beat ran from `start_ns` to `end_ns` (spans come in time order)."""
        if end_ns > start_ns:
            self._spans.append((start_ns, end_ns))

    def overlaps(self, raws: Sequence[RawStep]) -> dict[int, int]:
        """{index in `raws`: ns that step overlapped the spans}, for the steps that did.

        `raws` are in time order (each step starts where the one before ended, or later). Costs
        a few bisections per span near the steps, nothing per step: only the one or two steps a
        span overlaps are looked at.
        """
        if not self._spans or not raws:
            return {}
        first, last = raws[0].start_ns, raws[-1].end_ns
        out: dict[int, int] = {}
        n = len(raws)
        for start, end in self._spans:
            if end <= first or start >= last:
                continue
            i = bisect.bisect_right(raws, start, key=_END_NS)  # the first step ending after it
            while i < n and raws[i].start_ns < end:
                raw = raws[i]
                overlap = min(end, raw.end_ns) - max(start, raw.start_ns)
                if overlap > 0:
                    out[i] = out.get(i, 0) + overlap
                i += 1
        return out

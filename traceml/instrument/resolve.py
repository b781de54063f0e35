"""Turn the training thread's RawStep tuples into StepRecords, on the tx thread.

Host steps convert at once. CUDA steps carry (label, event) boundaries; their phases come from
device time between consecutive events, once the last event is done. Pure functions only: the
event type is whatever `elapsed(a, b) -> ms` understands, so tests use plain numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any

from traceml.instrument.timer import N_PHASES, RawStep
from traceml.records import StepRecord

NS_PER_MS = 1_000_000.0


def segment_ms(
    marks: Sequence[tuple[int, Any]], elapsed: Callable[[Any, Any], float]
) -> list[float]:
    """Milliseconds per label from consecutive boundaries: segment i is labelled by mark i."""
    acc = [0.0] * N_PHASES
    for (label, start), (_, end) in pairwise(marks):
        acc[label] += max(0.0, elapsed(start, end))
    return acc


def phases_or_none(values: Sequence[float], seen: int) -> tuple[float | None, ...]:
    """Phase values, with None for phases the run has never shown (not measured, never 0)."""
    return tuple(v if seen >> i & 1 else None for i, v in enumerate(values))


def host_phases_ms(raw: RawStep) -> list[float]:
    return [ns / NS_PER_MS for ns in raw.phase_ns]


def to_record(
    raw: RawStep,
    rank: int,
    wall_offset_ns: int,
    page_mb: float,
    phases_ms: Sequence[float] | None = None,
) -> StepRecord:
    """The StepRecord of one step; `phases_ms` replaces host phases when CUDA resolved them."""
    cuda = phases_ms is not None
    values = list(phases_ms) if phases_ms is not None else host_phases_ms(raw)
    step_ms = sum(values) if cuda else (raw.end_ns - raw.start_ns) / NS_PER_MS
    device_mem = raw.device_mem or (None, None, None)
    return StepRecord(
        rank=rank,
        step=raw.step,
        wall_start=(raw.start_ns + wall_offset_ns) / 1e9,
        step_ms=step_ms,
        phases=phases_or_none(values, raw.seen),
        clock="cuda" if cuda else "host",
        host_rss_mb=raw.rss_pages * page_mb if raw.rss_pages >= 0 else None,
        device_allocated_mb=device_mem[0],
        device_reserved_mb=device_mem[1],
        device_peak_mb=device_mem[2],
    )

"""Turn the training thread's RawStep tuples into StepRecords, on the tx thread.

Host steps convert at once. CUDA steps carry (label, event) boundaries; their phases come from
device time between consecutive events, once the last event is done. Pure functions only: the
event type is whatever `elapsed(a, b) -> ms` understands, so tests use plain numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache, partial
from itertools import pairwise
from types import ModuleType
from typing import Any

from traceml.instrument.timer import BACKWARD, N_PHASES, RawStep
from traceml.records import StepRecord, step_record_of

NS_PER_MS = 1_000_000.0
HostRecords = Callable[[Sequence[RawStep], int, int, float], list[StepRecord]]
"""`host_records`' signature: (raws, rank, wall_offset_ns, page_mb) -> records."""


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
    out: list[float | None] = list(values)
    for i in unseen(seen):
        out[i] = None
    return tuple(out)


@lru_cache(maxsize=256)
def unseen(seen: int) -> tuple[int, ...]:
    """Indexes of the phases whose bit is not set in `seen` (a run has one or two masks)."""
    return tuple(i for i in range(N_PHASES) if not seen >> i & 1)


def to_record(
    raw: RawStep,
    rank: int,
    wall_offset_ns: int,
    page_mb: float,
    phases_ms: Sequence[float] | None = None,
) -> StepRecord:
    """The StepRecord of one step; `phases_ms` replaces host phases when CUDA resolved them.

    Runs once per step on the tx thread, so it is written flat: this is most of that thread's
    cost per record, and the tx thread shares the GIL with training.
    """
    step, start_ns, end_ns, phase_ns, seen, rss, _marks, dev, comm_ns = raw
    if phases_ms is None:
        values = [ns / NS_PER_MS for ns in phase_ns]
        step_ms = (end_ns - start_ns) / NS_PER_MS
    else:
        values = list(phases_ms)
        step_ms = sum(values)
    alloc, reserved, peak = dev if dev is not None else (None, None, None)
    # A host-clock wait next to device-clock phases would mix clocks: CUDA steps leave it None.
    comm_ms = None
    if comm_ns >= 0 and phases_ms is None:
        comm_ms = min(comm_ns / NS_PER_MS, values[BACKWARD])
    return StepRecord(
        rank,
        step,
        (start_ns + wall_offset_ns) / 1e9,
        step_ms,
        phases_or_none(values, seen),
        "host" if phases_ms is None else "cuda",
        rss * page_mb if rss >= 0 else None,
        alloc,
        reserved,
        peak,
        comm_ms,
    )


def host_records(
    raws: Sequence[RawStep], rank: int, wall_offset_ns: int, page_mb: float
) -> list[StepRecord]:
    """`to_record` of each host-clock RawStep (no CUDA marks): one loop for a tick's batch,
    without a Python call per step."""
    out: list[StepRecord] = []
    append = out.append
    for step, start_ns, end_ns, phase_ns, seen, rss, _marks, dev, comm_ns in raws:
        values: list[Any] = [ns / NS_PER_MS for ns in phase_ns]
        for i in unseen(seen):
            values[i] = None
        alloc, reserved, peak = dev if dev is not None else (None, None, None)
        comm_ms = None
        if comm_ns >= 0:
            comm_ms = min(comm_ns / NS_PER_MS, phase_ns[BACKWARD] / NS_PER_MS)
        record = (
            rank,
            step,
            (start_ns + wall_offset_ns) / 1e9,
            (end_ns - start_ns) / NS_PER_MS,
            tuple(values),
            "host",
            rss * page_mb if rss >= 0 else None,
            alloc,
            reserved,
            peak,
            comm_ms,
            None,  # held_ms: the caller adds it to the few steps that have one
        )
        append(step_record_of(record))
    return out


def host_records_for(native: ModuleType | None) -> HostRecords:
    """`host_records` in C when the C module is in use, else the Python one above; both give
    equal records. The C one costs 0.7 µs a step inside a training loop, against 1.8 (0.4-0.6
    against 2.1-2.5 alone, benchmarks/fold.py), and its records are untracked by the GC."""
    if native is None:
        return host_records
    fast: HostRecords = partial(native.host_records, StepRecord)
    return fast

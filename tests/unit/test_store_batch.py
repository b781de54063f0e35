"""The store's column-wise batch fold gives exactly the state one-record-at-a-time folding gives.

A rank folds its steps in batches of a tick's worth (hundreds), a viewer in frames; every view
built from the store (summary, live window, timeline, comm, spikes) must not depend on how the
steps were batched: same floats, same spikes, same slowest steps.
"""

from __future__ import annotations

import random

import pytest

from traceml.analysis.stats import BlockSeries
from traceml.analysis.store import RunStore
from traceml.records import StepRecord


def _stream(seed: int, steps: int, rank: int = 0) -> list[StepRecord]:
    rng = random.Random(seed)
    out = []
    phased_from = rng.randrange(0, 40)  # a phase that only shows up after a while (None before)
    device = rng.random() < 0.5
    for i in range(steps):
        base = rng.uniform(0.3, 0.5) if i < steps // 2 else rng.uniform(0.6, 0.9)  # speed changes
        ms = base * (rng.uniform(4, 30) if rng.random() < 0.03 else 1.0)  # spikes
        if rng.random() < 0.01:
            ms = 0.0  # a zero-length step lands in the histogram's zero count
        parts = [rng.random() for _ in range(7)]
        scale = ms / sum(parts)
        phases: list[float | None] = [p * scale for p in parts]
        if i < phased_from:
            phases[5] = None
        alloc = rng.uniform(100, 200) if device else None
        out.append(
            StepRecord(
                rank=rank,
                step=i,
                wall_start=1e9 + i * 0.001,
                step_ms=ms,
                phases=tuple(phases),
                clock="cuda" if device else "host",
                host_rss_mb=rng.uniform(300, 310) if i % 7 == 0 else None,
                device_allocated_mb=alloc,
                device_reserved_mb=alloc * 1.5 if alloc is not None else None,
                device_peak_mb=alloc * 1.2 if alloc is not None and i % 3 else None,
                comm_wait_ms=ms * 0.1 if rank == 1 and i % 2 else None,
            )
        )
    return out


def _fold(records: list[StepRecord], sizes: list[int], history: int) -> RunStore:
    store = RunStore(history_steps=history)
    i = 0
    while i < len(records):
        n = sizes[i % len(sizes)]
        store.add_steps(records[i : i + n])
        i += n
    return store


def _state(store: RunStore) -> tuple[object, ...]:
    with store.frozen():
        ranks = store.ranks()
        return (
            store.summary_view(),
            store.live_view(),
            store.live_view(window=512),
            store.comm_totals("summary"),
            [store.timeline_wire(r) for r in ranks],
            [store.recent(r, 10_000) for r in ranks],
        )


def _comparable(state: tuple[object, ...]) -> tuple[object, ...]:
    summary, live, wide, comm, timeline, recent = state
    comm_values = {
        r: (c.steps, c.step_ms, c.wait_ms)
        for r, c in comm.items()  # type: ignore[attr-defined]
    }
    return summary, live, wide, comm_values, timeline, recent


@pytest.mark.parametrize(
    ("seed", "steps", "history", "sizes"),
    [
        (1, 300, 4096, [250]),  # one tick's worth, summary exact from the ring
        (2, 3_000, 256, [7, 64, 1, 300]),  # ring evicts; segments, series halving
        (3, 9_000, 1024, [512, 3, 2048]),  # timeline halves; warm-up cut moves past segments
        (4, 40, 4096, [5, 5, 30]),  # baseline not yet set in the first batch
    ],
)
def test_batches_fold_exactly_as_single_records(
    seed: int, steps: int, history: int, sizes: list[int]
) -> None:
    records = _stream(seed, steps) + _stream(seed + 100, steps, rank=1)
    records.sort(key=lambda r: (r.step, r.rank))  # interleaved ranks, as a viewer gets them
    per_rank = sorted(records, key=lambda r: (r.rank, r.step))
    one_by_one = _fold(records, [1], history)
    batched = _fold(per_rank, sizes, history)
    assert _comparable(_state(batched)) == _comparable(_state(one_by_one))
    summary = batched.summary_view()
    assert any(w.spikes is not None for w in summary.ranks), "the stream must have spikes"


def test_late_and_repeated_steps_in_a_batch_fall_back_to_one_at_a_time() -> None:
    records = _stream(5, 600)
    shuffled = records[:300] + records[350:400] + records[300:350] + records[400:] + records[:20]
    one_by_one = _fold(shuffled, [1], 4096)
    batched = _fold(shuffled, [64], 4096)
    assert _comparable(_state(batched)) == _comparable(_state(one_by_one))
    assert batched.total_steps(0) == 600


def test_series_halving_inside_a_batch_matches_one_step_at_a_time() -> None:
    rng = random.Random(7)
    steps = list(range(5_000))
    columns = (
        [rng.uniform(0.1, 0.9) for _ in steps],
        [rng.uniform(300, 310) if s % 5 == 0 else None for s in steps],
        [None for _ in steps],
    )
    one = BlockSeries(3, capacity=16)
    for k, step in enumerate(steps):
        one.add(step, [c[k] for c in columns])
    many = BlockSeries(3, capacity=16)
    for lo in range(0, len(steps), 777):
        many.add_many(steps[lo : lo + 777], [c[lo : lo + 777] for c in columns])
    assert many.stride == one.stride
    assert [many.points(c) for c in range(3)] == [one.points(c) for c in range(3)]

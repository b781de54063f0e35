"""What the tx thread's Python costs per step, measured alone (tight loops over recorded steps).

Run: .venv/bin/python benchmarks/fold.py [--steps N]

The rank's tx thread turns each step's RawStep into a StepRecord, folds it into the RunStore
(stats, spikes, timeline) and packs it for the live publisher. Here each part runs on
synthetic 0.4 ms steps (a spike every 500, RSS read every 25th step, as the step timer does)
taken in ticks of 625 (what a 0.4 ms loop queues per 0.25 s tick) and, for the store, also one
at a time and in 16- and 1,024-step batches. Then what the job collector and a viewer pay per
record: decoding the published frames and folding them. Inside a real training loop every
figure is 2-5 times higher (code and data evicted by torch's kernels between ticks):
benchmarks/overhead.py measures that, in every process of the run.
"""

from __future__ import annotations

import argparse
import time

from traceml.analysis.store import RunStore
from traceml.instrument.resolve import host_records, host_records_for
from traceml.instrument.timer import RawStep, native
from traceml.transport.wire.codec import Packer, decode_steps, pack_array

TICK = 625
FRAME = 256
"""Records per published frame (publisher.MAX_FRAME_RECORDS, the collector feed's CHUNK)."""
HISTORY = 16_384


def raw_steps(n: int) -> list[RawStep]:
    out = []
    for i in range(n):
        extra = 5_000_000 if i % 500 == 0 else (i % 7) * 1000
        phases = (1000, 20000, 150000, 180000, 30000, 0, 19000 + extra)
        rss = 3000 if i % 25 == 0 else -1
        start = i * 400_000
        out.append(RawStep(i, start, start + 400_000 + extra, phases, 0b1011101, rss, None, None))
    return out


def per_step_us(seconds: float, n: int) -> str:
    return f"{seconds / n * 1e6:5.2f} µs"


def row(label: str, value: str) -> None:
    print(f"{label:<46} {value}")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--steps", type=int, default=200_000)
    n = ap.parse_args().steps
    raws = raw_steps(n)

    c = native()
    for name, convert in (("Python", host_records), ("C", host_records_for(c) if c else None)):
        if convert is None:
            row(f"RawStep -> StepRecord ({name})", "not built")
            continue
        t0 = time.perf_counter()
        records = [r for lo in range(0, n, TICK) for r in convert(raws[lo : lo + TICK], 0, 0, 1)]
        row(
            f"RawStep -> StepRecord ({name}), a tick at a time",
            per_step_us(time.perf_counter() - t0, n),
        )

    for batch in (1, 16, TICK, 1024):
        store = RunStore(HISTORY)
        spent = []
        for lo in range(0, n, batch):
            t = time.perf_counter()
            store.add_steps(records[lo : lo + batch])
            spent.append(time.perf_counter() - t)
        cut = len(spent) // 2
        late = per_step_us(sum(spent[cut:]), n - cut * batch)
        whole = per_step_us(sum(spent), n)
        row(f"RunStore fold, {batch}-step batches", f"{whole}  (second half of the run: {late})")

    for name, packer in (("Python", Packer(native=False)), ("C", Packer())):
        t0 = time.perf_counter()
        frames = [
            pack_array(packer.pack_steps(records[lo : lo + FRAME])) for lo in range(0, n, FRAME)
        ]
        row(f"pack ({name}), {FRAME}-record frames", per_step_us(time.perf_counter() - t0, n))

    # The job collector (and a viewer) decode each rank's frames and fold them into one store.
    t0 = time.perf_counter()
    decoded = [decode_steps(frame) for frame in frames]
    row("decode (frames to StepRecords)", per_step_us(time.perf_counter() - t0, n))
    store = RunStore(HISTORY)
    t0 = time.perf_counter()
    for batch in decoded:
        store.add_steps(batch)
    row(f"fold the decoded frames ({FRAME} records each)", per_step_us(time.perf_counter() - t0, n))


if __name__ == "__main__":
    main()

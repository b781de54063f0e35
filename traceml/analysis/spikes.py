"""Rare slow steps (spikes): judged once, when a step is folded, and kept in bounded aggregates.

A step is a spike when it takes more than `Thresholds.spike_factor` times the rank's typical
step: the median of its last `BASELINE_STEPS` steps (recomputed every `BASELINE_EVERY` steps, so
it follows a run whose speed changes). Its overlap with TraceML's own work (its beats)
(`StepRecord.held_ms`) is left out of the judgement: that delay is TraceML's, not the loop's.
The judgement is made once, at fold time, so a live window, a short run's exact summary and a
week-long run's segment aggregates all agree on which steps were spikes. What is kept is bounded
whatever the run's length: per segment a count, the spikes' phase sums and the `SLOWEST_KEPT`
slowest steps of all; per rank the last `LOG_KEPT` spikes (step, ms, phase) for naming them and
finding a period. Pure: no I/O, no clock, no torch.
"""

from __future__ import annotations

import heapq
import operator
from collections import Counter, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from traceml.analysis.native import fold_module
from traceml.analysis.stats import PhaseTotals
from traceml.records import PHASES

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from traceml.records import Phase, StepRecord

BASELINE_STEPS = 64
"""Steps the rolling typical step is the median of."""
BASELINE_EVERY = 16
"""Steps between two recomputations of that median (sorting 64 floats each time)."""
BASELINE_MIN = 8
"""Steps seen before any step is judged (earlier ones are never spikes: warm-up)."""
SLOWEST_KEPT = 8
"""Slowest steps kept per segment (all steps, spikes or not)."""
LOG_KEPT = 512
"""Most recent spikes kept per rank, for naming them and for the period."""
PERIOD_LOOKAHEAD = 4
"""Each spike's distance to the next this many spikes are period candidates, so an unrelated
slow step between two checkpoints does not hide their period."""
PERIOD_MIN_HITS = 3
"""Spikes on one lattice (step = r mod P) needed before a period is claimed."""
PERIOD_MIN_FRACTION = 0.5
"""Share of the spikes that must sit on that lattice."""
PERIOD_SPREAD = 10.0
"""A spike on the lattice more than this many times the median of the spikes on it (or less than
its 1/PERIOD_SPREAD) is not one of the period's: three slow steps 7 apart, one a 2.5 s hang and
two of 16 ms, are a hang and two slow steps, not "every 7 steps a step takes 16 ms"."""


@dataclass(frozen=True, slots=True)
class SlowStep:
    """One slow step: where, how long, and which phase it spent its extra time in."""

    step: int
    ms: float
    phase: Phase | None
    """The phase furthest above its typical ms (the raw largest phase before a baseline
    exists); None when the step measured no phase."""

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "ms": round(self.ms, 3), "phase": self.phase}


_STEP_MS = operator.attrgetter("step_ms")


def _c_median() -> Callable[[Iterable[StepRecord]], float | None] | None:
    """_fold.c's median_step_ms when built and allowed (native.fold_module), else None."""
    c = fold_module()
    if c is None:
        return None
    median: Callable[[Iterable[StepRecord]], float | None] = c.median_step_ms
    return median


_C_MEDIAN = _c_median()


def _c_scan() -> (
    Callable[..., tuple[list[tuple[int, float]], int, float | None, float] | None] | None
):
    """_fold.c's spike_scan when built and allowed, else None (also for a build older than it)."""
    return getattr(fold_module(), "spike_scan", None)


_C_SCAN = _c_scan()


class Baseline:
    """The rank's typical step, rolling: median ms and mean phase ms of its recent steps."""

    __slots__ = ("_recent", "_since", "ms")

    def __init__(self) -> None:
        self._recent: deque[StepRecord] = deque(maxlen=BASELINE_STEPS)
        self._since = 0
        self.ms: float | None = None
        """Median of the recent steps; None before BASELINE_MIN steps were seen."""

    def observe(self, rec: StepRecord) -> None:
        self._recent.append(rec)
        self._since += 1
        self._refresh()

    def steady(self) -> int:
        """How many steps can be observed before the median is recomputed (after the last of
        them): the steps of a batch up to there are all judged against the same median."""
        left = BASELINE_EVERY - self._since
        if self.ms is None:
            left = min(left, BASELINE_MIN - len(self._recent))
        return max(1, left)

    def observe_many(self, records: Sequence[StepRecord]) -> None:
        """`observe` of each of at most `steady()` records: one recomputation, after the last."""
        self._recent.extend(records)
        self._since += len(records)
        self._refresh()

    def _refresh(self) -> None:
        n = len(self._recent)
        if self._since >= BASELINE_EVERY or (self.ms is None and n >= BASELINE_MIN):
            self._since = 0
            self.ms = _C_MEDIAN(self._recent) if _C_MEDIAN is not None else None
            if self.ms is None:  # no C build, or step times it declines (not finite floats)
                self.ms = median_step_ms(self._recent)

    def is_spike(self, ms: float, factor: float) -> bool:
        return self.ms is not None and ms > factor * self.ms

    def slow(
        self,
        rec: StepRecord,
        factor: float,
        before: Sequence[StepRecord] = (),
        ms: float | None = None,
    ) -> SlowStep:
        """`rec` as a SlowStep, its phase judged against the recent typical steps' phases.
        `before`: steps of the same batch folded before `rec` but not observed yet; `ms`: the
        median `rec` was judged against, when the Baseline has moved on since (scan)."""
        recent: Iterable[StepRecord] = self._recent
        if before:
            recent = [*self._recent, *before][-BASELINE_STEPS:]
        ms = self.ms if ms is None else ms
        typical = [r for r in recent if ms is None or r.step_ms <= factor * ms]
        return SlowStep(rec.step, rec.step_ms, excess_phase(rec.phases, typical))

    def scan(
        self, records: list[StepRecord], factor: float
    ) -> tuple[list[tuple[int, SlowStep]], float] | None:
        """Judge and observe a batch in one C pass (_fold.spike_scan): its spikes as (index,
        SlowStep), as judging chunk by chunk against `steady()` medians finds them
        (store._Rank._judge_chunks, the reference), and its largest step time; the Baseline
        moved past it. None, the Baseline untouched, without the C build or for step times it
        declines."""
        if _C_SCAN is None:
            return None
        out = _C_SCAN(
            self._recent, records, self._since, self.ms, factor,
            BASELINE_STEPS, BASELINE_EVERY, BASELINE_MIN,
        )  # fmt: skip
        if out is None:
            return None
        hits, since, ms, top = out
        found = [
            (i, self.slow(records[i], factor, records[max(0, i - BASELINE_STEPS) : i], at))
            for i, at in hits
        ]
        self._recent.extend(records[-BASELINE_STEPS:])
        self._since, self.ms = since, ms
        return found, top


def median_step_ms(records: Sequence[StepRecord]) -> float:
    """The median step time of `records` (the middle one, or the mean of the two middle ones):
    the reference of _fold.c's median_step_ms."""
    n = len(records)
    values: list[float] = sorted(map(_STEP_MS, records))
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def excess_phase(phases: Sequence[float | None], typical: Sequence[StepRecord]) -> Phase | None:
    """The phase furthest above its mean over `typical` (absolute ms); None if none measured."""
    best: tuple[float, int] | None = None
    for i, value in enumerate(phases):
        if value is None:
            continue
        seen = [t.phases[i] for t in typical if t.phases[i] is not None]
        base = sum(seen) / len(seen) if seen else 0.0  # type: ignore[arg-type]
        if best is None or value - base > best[0]:
            best = (value - base, i)
    return None if best is None else PHASES[best[1]]


def largest_phase(phases: Sequence[float | None]) -> Phase | None:
    """The phase with the most ms; None if none was measured (a step that is no spike)."""
    best, at = -1.0, -1
    for i, value in enumerate(phases):
        if value is not None and value > best:
            best, at = value, i
    return PHASES[at] if at >= 0 else None


class SpikeTotals:
    """Spikes of one span of steps (a warm-up segment, a live window): O(1) memory."""

    __slots__ = ("count", "phases", "slowest", "total_ms")

    def __init__(self) -> None:
        self.count = 0
        self.total_ms = 0.0
        self.phases = PhaseTotals()
        """Phase sums of the spike steps only (so typical = all minus these)."""
        self.slowest: list[tuple[float, int, SlowStep]] = []
        """Min-heap of (ms, step, SlowStep) of the SLOWEST_KEPT slowest steps of the span."""

    def add_spike(self, rec: StepRecord) -> None:
        self.count += 1
        self.total_ms += rec.step_ms
        self.phases.add(rec.phases, rec.step_ms)

    def offer(self, rec: StepRecord, slow: SlowStep | None) -> SlowStep | None:
        """Keep `rec` among the slowest steps if it is one; returns the SlowStep built."""
        heap = self.slowest
        if len(heap) >= SLOWEST_KEPT and rec.step_ms <= heap[0][0]:
            return slow
        slow = slow or SlowStep(rec.step, rec.step_ms, largest_phase(rec.phases))
        item = (rec.step_ms, rec.step, slow)
        if len(heap) < SLOWEST_KEPT:
            heapq.heappush(heap, item)
        else:
            heapq.heapreplace(heap, item)
        return slow

    def top(self) -> tuple[SlowStep, ...]:
        """The kept slowest steps, slowest first."""
        return tuple(s for _, _, s in sorted(self.slowest, key=lambda t: (-t[0], t[1])))

    @classmethod
    def merged(cls, parts: Iterable[SpikeTotals]) -> SpikeTotals:
        out = cls()
        for part in parts:
            out.count += part.count
            out.total_ms += part.total_ms
            out.phases.merge(part.phases)
            for item in part.slowest:
                if len(out.slowest) < SLOWEST_KEPT:
                    heapq.heappush(out.slowest, item)
                elif item[0] > out.slowest[0][0]:
                    heapq.heapreplace(out.slowest, item)
        return out


def period(steps: Sequence[int]) -> tuple[int, int] | None:
    """(period P, spikes on it) when most spikes sit on one lattice r + k*P; else None.

    Candidates are each spike's distance to its next PERIOD_LOOKAHEAD spikes; the most common
    (the smallest on ties) wins if it repeats for PERIOD_MIN_FRACTION of the spikes and at least
    PERIOD_MIN_HITS spikes, and PERIOD_MIN_FRACTION of all, share one residue mod P.
    """
    ordered = sorted(set(steps))
    gaps: Counter[int] = Counter()
    for i, s in enumerate(ordered):
        for t in ordered[i + 1 : i + 1 + PERIOD_LOOKAHEAD]:
            gaps[t - s] += 1
    if not gaps:
        return None
    best, seen = min(gaps.items(), key=lambda kv: (-kv[1], kv[0]))
    if best < 2 or seen < max(2, PERIOD_MIN_FRACTION * (len(ordered) - 1)):
        return None  # no distance repeats often enough: a coincidence of residues is no period
    hits = Counter(s % best for s in ordered).most_common(1)[0][1]
    if hits < PERIOD_MIN_HITS or hits < PERIOD_MIN_FRACTION * len(ordered):
        return None
    return best, hits


@dataclass(frozen=True, slots=True)
class SpikeWindow:
    """The spikes of one rank's window, and what they cost. Built by RunStore."""

    count: int
    """Spike steps in the window (0: none, the numbers below are then 0 / None / ())."""
    total_ms: float
    """Their summed step time."""
    share: float
    """Their share 0..1 of the window's summed step time (all steps)."""
    phase_ms: tuple[float | None, ...]
    """Mean ms per phase over the spike steps; None = not measured."""
    phase: Phase | None
    """The phase the spikes spent their extra time in (furthest above the typical step)."""
    period_steps: int | None
    """Steps between spikes when most of them repeat on one period; None otherwise."""
    periodic: int
    """Spikes on that period (0 without one)."""
    periodic_ms: float | None
    """Median ms of the spikes on the period (of all listed spikes without one)."""
    listed: tuple[SlowStep, ...]
    """The most recent spikes of the window (at most LOG_KEPT), in step order."""

    @property
    def mean_ms(self) -> float | None:
        return self.total_ms / self.count if self.count else None


def apart(ms: float, typical: float) -> bool:
    """Whether a step of `ms` is another kind of event than spikes of `typical` ms."""
    return ms > PERIOD_SPREAD * typical or ms * PERIOD_SPREAD < typical


def periodic(listed: Sequence[SlowStep]) -> tuple[int, list[SlowStep]] | None:
    """(P, the spikes on its lattice) when `period` finds P among `listed` and enough of the
    spikes on the lattice are alike in size (PERIOD_SPREAD of their median): the lattice's
    others stay listed as spikes, off the period; else None."""
    found = period([s.step for s in listed])
    if found is None:
        return None
    p = found[0]
    residue = _residue(listed, p)
    on = [s for s in listed if s.step % p == residue]
    typical = _median([s.ms for s in on])
    alike = [s for s in on if not apart(s.ms, typical)]
    if len(alike) < max(PERIOD_MIN_HITS, PERIOD_MIN_FRACTION * len(listed)):
        return None
    return p, alike


def _median(values: Sequence[float]) -> float:
    """The middle value (the upper one of an even count), as periodic_ms has always been."""
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def spike_window(
    totals: SpikeTotals,
    window_ms: float,
    listed: Sequence[SlowStep],
    typical_phase_ms: Sequence[float | None],
) -> SpikeWindow:
    """Summarise `totals` (and the spikes `listed`) over a window of `window_ms` step time."""
    found = periodic(listed)
    chosen = [s.ms for s in (found[1] if found else listed)]
    means = totals.phases.means()
    return SpikeWindow(
        count=totals.count,
        total_ms=totals.total_ms,
        share=totals.total_ms / window_ms if window_ms > 0 else 0.0,
        phase_ms=means,
        phase=_extra_phase(means, typical_phase_ms) if totals.count else None,
        period_steps=found[0] if found else None,
        periodic=len(found[1]) if found else 0,
        periodic_ms=_median(chosen) if chosen else None,
        listed=tuple(listed),
    )


def _residue(listed: Sequence[SlowStep], p: int) -> int:
    return Counter(s.step % p for s in listed).most_common(1)[0][0]


def _extra_phase(
    spike_ms: Sequence[float | None], typical_ms: Sequence[float | None]
) -> Phase | None:
    extra = [
        (s - (t or 0.0), i)
        for i, (s, t) in enumerate(zip(spike_ms, typical_ms, strict=True))
        if s is not None
    ]
    return PHASES[max(extra)[1]] if extra else None

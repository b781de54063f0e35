"""Compare two final_summary.json objects: where the step time moved, and one verdict.

Pure functions over summary dicts that were already loaded and checked (load_summary or
build_summary): no I/O, no printing, never torch. A null number stays "not measured": it never
counts as a change, and no change is ever computed from a fake 0.

Verdict rules (moderate = `Thresholds.compare_moderate`, 3 %; material =
`Thresholds.compare_material`, 8 %). Three signals are read first:

* step: the relative change of the median step time, baseline to candidate. It counts as worse
  or better when its size is >= moderate, and as flat below that.
* memory: the relative change of the peak memory compared (device peak allocated when both runs
  measured it, else host RSS peak, so that CPU-only runs compare). It counts only when its size
  is >= material.
* phases moved: some phase's time per step changed by >= material x the baseline step time.

Then the first rule that matches decides:

1. MIXED: step and memory both count and point in opposite directions (faster but bigger, or
   slower but smaller): a trade-off a person has to judge.
2. REGRESSION: step is worse. IMPROVEMENT: step is better.
3. REGRESSION: step is flat and memory is worse. IMPROVEMENT: step is flat and memory is better.
4. MIXED: step and memory are flat, but some phase moved: time shifted between phases (for
   example less waiting on data, more compute) and netted out.
5. EQUIVALENT: |step change| < moderate, |memory change| < material and no phase moved by
   material x step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from traceml.analysis.rules import mb, ms
from traceml.config import DEFAULT_THRESHOLDS, Thresholds
from traceml.errors import TraceMLError
from traceml.records import PHASES, Phase

Verdict = Literal["REGRESSION", "IMPROVEMENT", "EQUIVALENT", "MIXED"]
MemoryBasis = Literal["device", "host"]
MEMORY_LABEL: dict[MemoryBasis, str] = {"device": "device peak allocated", "host": "host RSS peak"}
REASON_PHASES = 2
"""Most phases named in a REGRESSION/IMPROVEMENT reason."""
REASON_RANKS = 3
"""Most ranks named in the notes as having moved apart from the run."""


class CompareError(TraceMLError):
    """Two summaries that cannot be compared, such as a run with no measured step time."""


@dataclass(frozen=True, slots=True)
class Change:
    """One number in both runs; None on a side means not measured there."""

    baseline: float | None
    candidate: float | None

    @property
    def delta(self) -> float | None:
        """candidate - baseline; None unless both are measured."""
        if self.baseline is None or self.candidate is None:
            return None
        return self.candidate - self.baseline

    @property
    def ratio(self) -> float | None:
        """Relative change (0.18 = +18 %); None unless both are measured and baseline is not 0."""
        if self.delta is None or not self.baseline:
            return None
        return round(self.delta / self.baseline, 9)


@dataclass(frozen=True, slots=True)
class PhaseChange:
    """One phase of the step in both runs."""

    phase: Phase
    ms: Change
    """Mean time per step: share x mean (typical) step time, so the phase ms add up to the mean
    step and their deltas to its change; None where the phase was not measured."""
    share_pct: Change
    """Share of step time in percent; the delta is in percentage points."""
    step_fraction: float | None
    """ms delta / baseline step time: how much of a step moved. None if not measured in both."""


@dataclass(frozen=True, slots=True)
class RankChange:
    """One rank, matched by rank number; a rank only one run has is None on the other side."""

    rank: int
    median_ms: Change
    dataloader_pct: Change
    lag_pct: Change
    """Lag behind the median rank, % of a step; None for a one-rank run."""


@dataclass(frozen=True, slots=True)
class MemoryChange:
    """Peak memory in both runs, and which figure the verdict compares."""

    basis: MemoryBasis | None
    """ "device" when both runs measured device memory, else "host" (RSS) when both measured
    it, None when no memory figure exists in both: memory then plays no part in the verdict."""
    peak_mb: Change
    """The compared figure (device peak allocated or host RSS peak)."""
    device_allocated_mb: Change
    device_reserved_mb: Change
    host_rss_mb: Change
    diagnosis: tuple[str, str]
    """step_memory.diagnosis of (baseline, candidate)."""


@dataclass(frozen=True, slots=True)
class RunInfo:
    """Who a side of the comparison is: enough to label it and to note surprises."""

    label: str
    """What the user called it: the file path in the CLI."""
    run_id: str
    script: str
    device: str
    world_size: int
    steps: int
    exit: str
    primary: str
    severity: str
    step_diagnosis: str
    memory_diagnosis: str


@dataclass(frozen=True, slots=True)
class Comparison:
    """Everything `traceml compare` says about a candidate run against a baseline."""

    baseline: RunInfo
    candidate: RunInfo
    verdict: Verdict
    reason: str
    """One line that explains the verdict ("step +18 %: dataloader +12.0 ms")."""
    step_median_ms: Change
    step_p95_ms: Change
    step_mean_ms: Change
    """Mean step time of the typical steps: the base the phase ms add up to."""
    throughput: Change
    """Steps per second, 1000 / median step ms."""
    phases: tuple[PhaseChange, ...]
    memory: MemoryChange
    ranks: tuple[RankChange, ...]
    notes: tuple[str, ...]
    """Things to know before trusting the numbers (different world sizes, few steps, ...)."""
    thresholds: Thresholds


@dataclass(frozen=True, slots=True)
class _Signals:
    """What the reason line is written from."""

    step: Change
    phases: tuple[PhaseChange, ...]
    memory: MemoryChange
    th: Thresholds


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _change(a: Mapping[str, Any], b: Mapping[str, Any], key: str) -> Change:
    return Change(_num(a.get(key)), _num(b.get(key)))


def _run_info(summary: Mapping[str, Any], label: str) -> RunInfo:
    run, primary = summary["run"], summary["primary"]
    return RunInfo(
        label=label,
        run_id=str(run["id"]),
        script=str(run["script"]),
        device=str(run["device"]),
        world_size=int(run["world_size"]),
        steps=int(summary["step_time"]["steps"]),
        exit=str(run["exit"]),
        primary=str(primary["kind"]),
        severity=str(primary["severity"]),
        step_diagnosis=str(summary["step_time"]["diagnosis"]),
        memory_diagnosis=str(summary["step_memory"]["diagnosis"]),
    )


def _step_ms(step: Mapping[str, Any]) -> float | None:
    """The step time phases are attributed from: the mean (typical) step, as `show` and the live
    view do, so phase ms add up to it; the median where a summary has no mean."""
    mean = _num(step.get("mean_ms"))
    return mean if mean is not None else _num(step.get("median_ms"))


def _phase_ms(step: Mapping[str, Any], phase: Phase) -> float | None:
    share, total = _num(step.get(f"{phase}_pct")), _step_ms(step)
    return None if share is None or total is None else share / 100 * total


def _phase_change(a: Mapping[str, Any], b: Mapping[str, Any], phase: Phase) -> PhaseChange:
    moved = Change(_phase_ms(a, phase), _phase_ms(b, phase))
    base = _step_ms(a)
    fraction = None if moved.delta is None or not base else moved.delta / base
    return PhaseChange(phase, moved, _change(a, b, f"{phase}_pct"), fraction)


def _memory_basis(a: Mapping[str, Any], b: Mapping[str, Any]) -> MemoryBasis | None:
    def both(key: str) -> bool:
        return _num(a.get(key)) is not None and _num(b.get(key)) is not None

    if both("device_peak_allocated_mb"):
        return "device"
    return "host" if both("host_rss_peak_mb") else None


def _memory(a: Mapping[str, Any], b: Mapping[str, Any]) -> MemoryChange:
    basis = _memory_basis(a, b)
    device = _change(a, b, "device_peak_allocated_mb")
    host = _change(a, b, "host_rss_peak_mb")
    peak = device if basis == "device" else host if basis == "host" else Change(None, None)
    return MemoryChange(
        basis=basis,
        peak_mb=peak,
        device_allocated_mb=device,
        device_reserved_mb=_change(a, b, "device_peak_reserved_mb"),
        host_rss_mb=host,
        diagnosis=(str(a["diagnosis"]), str(b["diagnosis"])),
    )


def _ranks(a: list[Mapping[str, Any]], b: list[Mapping[str, Any]]) -> tuple[RankChange, ...]:
    by_a = {int(r["rank"]): r for r in a}
    by_b = {int(r["rank"]): r for r in b}
    keys = ("median_ms", "dataloader_pct", "lag_pct")
    return tuple(
        RankChange(rank, *(_change(by_a.get(rank, {}), by_b.get(rank, {}), k) for k in keys))
        for rank in sorted(by_a.keys() | by_b.keys())
    )


def _throughput(step: Change) -> Change:
    def rate(value: float | None) -> float | None:
        return 1000.0 / value if value else None

    return Change(rate(step.baseline), rate(step.candidate))


def direction(ratio: float | None, threshold: float) -> int:
    """+1 (grew), -1 (shrank) when |ratio| >= threshold, else 0 (flat or not measured)."""
    if ratio is None or abs(ratio) < threshold:
        return 0
    return 1 if ratio > 0 else -1


def moved_phases(phases: tuple[PhaseChange, ...], threshold: float) -> list[PhaseChange]:
    """Phases whose time per step moved by >= threshold x baseline step, largest move first."""
    moved = [p for p in phases if abs(p.step_fraction or 0.0) >= threshold]
    return sorted(moved, key=lambda p: -abs(p.step_fraction or 0.0))


def decide(step: int, memory: int, phases_moved: bool) -> Verdict:
    """The verdict from the three signals (see the module docstring for the rules)."""
    if step and memory == -step:
        return "MIXED"
    lead = step or memory
    if lead:
        return "REGRESSION" if lead > 0 else "IMPROVEMENT"
    return "MIXED" if phases_moved else "EQUIVALENT"


def signed_pct(ratio: float | None) -> str:
    """0.18 -> "+18 %", -0.045 -> "-4.5 %"; "n/a" for None."""
    if ratio is None:
        return "n/a"
    value = ratio * 100
    text = f"{value:+.1f}" if abs(value) < 10 else f"{value:+.0f}"
    return f"{text} %"


def signed_ms(delta: float | None) -> str:
    """12.04 -> "+12.0 ms"; "n/a" for None."""
    if delta is None:
        return "n/a"
    if abs(delta) < 0.005:
        return "0 ms"
    return ("-" if delta < 0 else "+") + ms(abs(delta))


def _phase_list(phases: list[PhaseChange]) -> str:
    return ", ".join(f"{p.phase} {signed_ms(p.ms.delta)}" for p in phases)


def _leading_phases(c: _Signals, sign: int) -> list[PhaseChange]:
    same = [p for p in c.phases if p.ms.delta and (p.ms.delta > 0) == (sign > 0)]
    same.sort(key=lambda p: -abs(p.ms.delta or 0.0))
    big = [p for p in same if abs(p.step_fraction or 0.0) >= c.th.compare_moderate]
    return (big or same)[:REASON_PHASES]


def _memory_text(memory: MemoryChange) -> str:
    label = MEMORY_LABEL[memory.basis] if memory.basis else "memory"
    return f"memory {signed_pct(memory.peak_mb.ratio)} ({label} {mb(memory.peak_mb.candidate)})"


def _step_reason(s: _Signals, step_dir: int, mem_dir: int) -> str:
    text = f"step {signed_pct(s.step.ratio)}"
    leading = _phase_list(_leading_phases(s, step_dir))
    if mem_dir == -step_dir:
        detail = f" ({leading})" if leading else ""
        return f"{text}{detail} but {_memory_text(s.memory)}"
    text = f"{text}: {leading}" if leading else text
    return f"{text}; {_memory_text(s.memory)}" if mem_dir else text


def _reason(s: _Signals, verdict: Verdict) -> str:
    """The one line that explains `verdict`, with the numbers behind it."""
    th = s.th
    step_dir = direction(s.step.ratio, th.compare_moderate)
    mem_dir = direction(s.memory.peak_mb.ratio, th.compare_material)
    flat = f"step {signed_pct(s.step.ratio)} (within {th.compare_moderate * 100:g} %)"
    if step_dir:
        return _step_reason(s, step_dir, mem_dir)
    moved = _phase_list(moved_phases(s.phases, th.compare_material)[:3])
    if mem_dir:
        shifted = f"; time moved between phases: {moved}" if moved else ""
        return f"{_memory_text(s.memory)}, {flat}{shifted}"
    if verdict == "MIXED":
        return f"{flat} but time moved between phases: {moved}"
    return f"{flat}; no phase or memory moved by {th.compare_material * 100:g} % or more"


def _notes(a: RunInfo, b: RunInfo, memory: MemoryChange, th: Thresholds) -> tuple[str, ...]:
    notes = []
    if a.world_size != b.world_size:
        notes.append(
            f"world size differs: {a.world_size} -> {b.world_size} ranks;"
            " ranks are matched by number and step times are per rank"
        )
    if a.device != b.device:
        notes.append(f"devices differ: {a.device} -> {b.device}")
    if a.script != b.script:
        notes.append(f"scripts differ: {a.script} -> {b.script}")
    notes += _memory_notes(memory)
    for side, info in (("baseline", a), ("candidate", b)):
        if info.steps < th.min_steps_for_critical:
            notes.append(f"the {side} has only {info.steps} steps: its times are noisy")
        if info.exit != "ok":
            notes.append(f"the {side} ended with exit {info.exit!r}")
    return tuple(notes)


def _rank_notes(ranks: tuple[RankChange, ...], step: Change, th: Thresholds) -> list[str]:
    """Ranks whose own median moved apart from the run's by >= material (a new straggler)."""
    overall = step.ratio or 0.0
    gaps = {
        r.rank: abs(r.median_ms.ratio - overall) for r in ranks if r.median_ms.ratio is not None
    }
    apart = [r for r in ranks if gaps.get(r.rank, 0.0) >= th.compare_material]
    apart.sort(key=lambda r: -gaps[r.rank])
    return [
        f"rank {r.rank} moved apart: its median step {signed_pct(r.median_ms.ratio)}"
        f" vs {signed_pct(step.ratio)} for the run"
        for r in apart[:REASON_RANKS]
    ]


def _memory_notes(memory: MemoryChange) -> list[str]:
    device = memory.device_allocated_mb
    if memory.basis is None:
        return ["memory was not measured in both runs: it is not compared"]
    if memory.basis == "host" and (device.baseline is None) != (device.candidate is None):
        side = "baseline" if device.baseline is not None else "candidate"
        return [f"device memory was measured only in the {side}: memory is compared by host RSS"]
    return []


def _require_steps(summary: Mapping[str, Any], label: str) -> None:
    if _num(summary["step_time"].get("median_ms")) is None:
        raise CompareError(
            f"{label} has no measured step time ({summary['primary']['kind']}): nothing to"
            " compare; wrap the training step in traceml.trace_step(model)"
        )


def compare(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    *,
    labels: tuple[str, str] = ("baseline", "candidate"),
) -> Comparison:
    """Compare candidate run `b` against baseline run `a`.

    Args:
        a: The baseline, a "traceml.summary/1" dict (from load_summary or build_summary).
        b: The candidate, same schema.
        thresholds: `compare_moderate` and `compare_material` decide the verdict.
        labels: How to name the two runs in notes and errors (the CLI passes file paths).

    Returns:
        A frozen Comparison with the verdict and the one line that explains it.

    Raises:
        CompareError: a run has no measured step time (it took no step after warm-up).
    """
    for summary, label in zip((a, b), labels, strict=True):
        _require_steps(summary, label)
    sa, sb = a["step_time"], b["step_time"]
    step = _change(sa, sb, "median_ms")
    phases = tuple(_phase_change(sa, sb, p) for p in PHASES)
    memory = _memory(a["step_memory"], b["step_memory"])
    signals = _Signals(step, phases, memory, thresholds)
    verdict = decide(
        direction(step.ratio, thresholds.compare_moderate),
        direction(memory.peak_mb.ratio, thresholds.compare_material),
        bool(moved_phases(phases, thresholds.compare_material)),
    )
    info_a, info_b = _run_info(a, labels[0]), _run_info(b, labels[1])
    ranks = _ranks(a["ranks"], b["ranks"])
    return Comparison(
        baseline=info_a,
        candidate=info_b,
        verdict=verdict,
        reason=_reason(signals, verdict),
        step_median_ms=step,
        step_p95_ms=_change(sa, sb, "p95_ms"),
        step_mean_ms=Change(_step_ms(sa), _step_ms(sb)),
        throughput=_throughput(step),
        phases=phases,
        memory=memory,
        ranks=ranks,
        notes=(
            *_notes(info_a, info_b, memory, thresholds),
            *_rank_notes(ranks, step, thresholds),
        ),
        thresholds=thresholds,
    )


def regressed(c: Comparison, max_pct: float) -> bool:
    """True when the median step time grew by more than `max_pct` percent (the CI gate)."""
    ratio = c.step_median_ms.ratio
    return ratio is not None and ratio * 100 > max_pct

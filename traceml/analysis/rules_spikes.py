"""STEP_SPIKES: rare slow steps that cost a noticeable share of the run.

The step-time verdict is made on the typical steps (RunStore leaves spikes out of the phase
shares while they are rare); this rule says what the spikes cost instead: how many, how long,
in which phase, their share of the window's step time and, when they repeat, their period.
Pure function of a RunView: no I/O, no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceml.analysis.rules import cap, enough_steps, grade, ms, pct, rounded
from traceml.analysis.spikes import apart

if TYPE_CHECKING:
    from traceml.analysis.spikes import SpikeWindow
    from traceml.analysis.view import RankWindow, RunView
    from traceml.config import Thresholds
    from traceml.records import Finding, Phase

LISTED_STEPS = 10
"""Spike step indices a finding's evidence lists at most."""

PHASE_GUESS: dict[str, str] = {
    "between": "checkpoint or eval?",
    "dataloader": "a slow read, a worker restart or the end of an epoch?",
    "forward": "a recompile or a new input shape?",
    "backward": "a recompile, a new input shape or a slow all-reduce?",
    "optimizer": "an optimizer state allocation or a scheduler step?",
    "h2d": "an unpinned or very large copy?",
    "other": "a host sync, logging or garbage collection?",
}
"""What usually makes a step slow in each phase (a question, never a claim)."""

PHASE_ACTION: dict[str, str] = {
    "between": "Make the periodic work outside the step cheaper or rarer: save checkpoints"
    " asynchronously (torch.distributed.checkpoint.async_save) or less often, evaluate on fewer"
    " batches or less often.",
    "dataloader": "Check the dataset around those steps (a slow file, an epoch boundary that"
    " restarts workers: persistent_workers=True) and raise prefetch_factor.",
    "forward": "Keep shapes stable (pad to a few bucket sizes) so torch.compile and cuDNN do"
    " not re-tune; TORCH_LOGS=recompiles shows recompilations.",
    "backward": "Keep shapes stable so kernels are not re-tuned; in DDP check whether one rank"
    " was late (the others wait in backward).",
    "optimizer": "Create optimizer state up front and step the scheduler outside the hot path.",
    "h2d": "Pin host memory and copy with non_blocking=True; split very large copies.",
    "other": "Look for host syncs (.item(), .cpu()) and logging that run only on some steps;"
    " gc.freeze() after start-up avoids long garbage-collection pauses.",
}


def _worst(view: RunView) -> tuple[RankWindow, SpikeWindow] | None:
    rated = [(r, r.spikes) for r in view.active if r.spikes is not None]
    return max(rated, key=lambda rs: rs[1].share, default=None)


def _where(phase: Phase | None) -> str:
    if phase is None:
        return ""
    return f" in {phase} ({PHASE_GUESS[phase]})"


def _span(view: RunView) -> str:
    return "the last steps' time" if view.kind == "live" else "the run's step time"


def _outlier(rank: RankWindow, sp: SpikeWindow) -> str:
    """The slowest step, named beside a period it does not belong to: a 25 s hang among 200 ms
    checkpoints must not hide behind their median."""
    slowest = rank.slowest[0] if rank.slowest else None
    if slowest is None or sp.periodic_ms is None or not apart(slowest.ms, sp.periodic_ms):
        return ""
    return f", and step {slowest.step} took {ms(slowest.ms)}"


def _summary(view: RunView, rank: RankWindow, sp: SpikeWindow) -> str:
    typical = f"typical {ms(rank.median_ms)}"
    on = "" if len(view.active) < 2 else f" on rank {rank.rank}"
    cost = f"{pct(sp.share)} of {_span(view)}"
    if sp.period_steps is not None:
        return (
            f"every {sp.period_steps} steps a step takes {ms(sp.periodic_ms)} ({typical})"
            f"{_where(sp.phase)}{_outlier(rank, sp)}{on}: {sp.count} slow steps, {cost}"
        )
    if sp.count == 1:
        one = sp.listed[-1] if sp.listed else rank.slowest[0]
        return f"step {one.step} took {ms(one.ms)} ({typical}){_where(one.phase)}{on}: {cost}"
    slowest = rank.slowest[0] if rank.slowest else None
    worst = f"; slowest step {slowest.step}, {ms(slowest.ms)}" if slowest else ""
    return (
        f"{sp.count} slow steps of {ms(sp.mean_ms)} on average ({typical}){_where(sp.phase)}"
        f"{worst}{on}: {cost}"
    )


def step_spikes(view: RunView, th: Thresholds) -> Finding | None:
    """STEP_SPIKES: rare spikes (> spike_factor x the typical step) take at least spike_warning
    of the window's step time (spike_critical: critical)."""
    from traceml.records import Finding

    worst = _worst(view) if enough_steps(view, th) else None
    if worst is None:
        return None
    rank, sp = worst
    severity = grade(sp.share, th.spike_warning, th.spike_critical)
    if severity is None or sp.count > th.spike_rare * rank.steps:
        return None
    phase = sp.phase if sp.count > 1 or not sp.listed else sp.listed[-1].phase
    action = PHASE_ACTION.get(phase or "", "Look at what the loop does on those steps.")
    return Finding(
        kind="STEP_SPIKES",
        section="step_time",
        severity=cap(severity, view.steps, th),
        summary=_summary(view, rank, sp),
        action=f"{action} The verdict above is on the typical steps; these cost the rest.",
        evidence={
            "rank": rank.rank,
            "count": sp.count,
            "share": rounded(sp.share, 4),
            "mean_ms": rounded(sp.mean_ms),
            "typical_ms": rounded(rank.median_ms),
            "phase": phase,
            "period_steps": sp.period_steps,
            "steps": [s.step for s in sp.listed[-LISTED_STEPS:]],
            "slowest": [s.to_json() for s in rank.slowest[:5]],
            "factor": th.spike_factor,
        },
    )

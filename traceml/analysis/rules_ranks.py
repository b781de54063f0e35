"""Rank rules: which rank holds the others back, and in which phase (README, "Diagnoses").

Each rank is compared with the median rank phase by phase. In DDP a slow rank makes every other
rank wait inside backward (the all-reduce), so the gap is measured on the phases before the
collective: dataloader, between, forward, other. When ranks are not synchronised (their step
times differ by more than that), the whole step is compared instead. Pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from traceml.analysis.rules import (
    EVIDENCE_RANKS,
    cap,
    enough_steps,
    grade,
    ms,
    pct,
    rank_list,
    rounded,
)
from traceml.analysis.stats import median
from traceml.records import PHASES, Finding

if TYPE_CHECKING:
    from collections.abc import Mapping

    from traceml.analysis.view import RankWindow, RunView
    from traceml.config import Thresholds
    from traceml.records import Phase

STRAGGLER_KINDS = ("STRAGGLER", "INPUT_STRAGGLER", "COMPUTE_STRAGGLER")
PRE_COLLECTIVE: tuple[Phase, ...] = ("dataloader", "between", "forward", "other")
"""Phases that run before DDP's all-reduce; backward absorbs the wait for a slow rank."""

INPUT_ACTION = (
    "This rank loads data slower: check its node's CPU load and disk or network I/O, DataLoader"
    " num_workers per rank, and uneven shard sizes."
)
COMPUTE_ACTION = (
    "This rank computes slower: check its GPU (clocks, temperature, throttling in nvidia-smi)"
    " and uneven batch shapes or sequence lengths per rank."
)
STRAGGLER_ACTION = (
    "This rank does extra work outside the shared step: look for rank-specific logging,"
    " checkpointing or evaluation (e.g. `if rank == 0:` blocks) and for a busy host."
)


@dataclass(frozen=True, slots=True)
class Lag:
    """How far one rank is behind the median rank."""

    rank: int
    gap_ms: float
    """Extra ms per step versus the median rank (negative: ahead)."""
    lag: float
    """gap_ms as a fraction of the median rank's mean step time."""
    phase: Phase | None
    """The phase explaining >= straggler_phase_explains of the gap; None when no single one."""
    phase_gap_ms: float | None
    whole_step: bool
    """True when ranks are not synchronised and the whole step was compared."""

    @property
    def kind(self) -> str:
        if self.phase == "dataloader":
            return "INPUT_STRAGGLER"
        if self.phase in ("forward", "backward"):
            return "COMPUTE_STRAGGLER"
        return "STRAGGLER"


def _common(ranks: tuple[RankWindow, ...], names: tuple[Phase, ...]) -> tuple[Phase, ...]:
    """Phases measured on every rank: comparing a measured phase with a missing one is unfair."""
    return tuple(p for p in names if all(r.ms(p) is not None for r in ranks))


def _deviations(
    rank: RankWindow, ref: dict[Phase, float], names: tuple[Phase, ...]
) -> dict[Phase, float]:
    return {p: (rank.ms(p) or 0.0) - ref[p] for p in names}


def _lag(rank: RankWindow, ref: dict[Phase, float], step_ms: float, th: Thresholds) -> Lag:
    pre = _deviations(rank, ref, tuple(p for p in PRE_COLLECTIVE if p in ref))
    full = _deviations(rank, ref, tuple(ref))
    whole = sum(full.values()) > sum(pre.values())
    devs = full if whole else pre
    gap = sum(devs.values())
    phase, phase_gap = max(devs.items(), key=lambda kv: kv[1], default=(None, None))
    explains = gap > 0 and phase_gap is not None and phase_gap >= th.straggler_phase_explains * gap
    return Lag(
        rank=rank.rank,
        gap_ms=gap,
        lag=gap / step_ms,
        phase=phase if explains else None,
        phase_gap_ms=phase_gap if explains else None,
        whole_step=whole,
    )


def rank_lags(view: RunView, th: Thresholds) -> list[Lag]:
    """One Lag per active rank; [] for a single rank or too few steps."""
    ranks = view.active
    step_ms = view.median_mean_ms()
    if view.world_size < 2 or len(ranks) < 2 or not step_ms or not enough_steps(view, th):
        return []
    names = _common(ranks, PHASES)
    ref = {p: median(r.ms(p) for r in ranks) or 0.0 for p in names}
    return [_lag(r, ref, step_ms, th) for r in ranks]


def _straggler(view: RunView, th: Thresholds, kind: str, action: str) -> Finding | None:
    slow = [lag for lag in rank_lags(view, th) if lag.lag >= th.straggler_warning]
    slow = sorted((lag for lag in slow if lag.kind == kind), key=lambda lag: -lag.lag)
    if not slow:
        return None
    worst = slow[0]
    severity = grade(worst.lag, th.straggler_warning, th.straggler_critical) or "warning"
    return Finding(
        kind=kind,
        section="ranks",
        severity=cap(severity, view.steps, th),
        summary=_summary(slow, view.median_mean_ms()),
        action=action,
        evidence={
            "ranks": [lag.rank for lag in slow][:EVIDENCE_RANKS],
            "rank": worst.rank,
            "phase": worst.phase,
            "gap_ms": rounded(worst.gap_ms),
            "lag_pct": rounded(worst.lag * 100, 1),
            "whole_step": worst.whole_step,
        },
    )


def _summary(slow: list[Lag], step_ms: float | None) -> str:
    worst = slow[0]
    names = rank_list([lag.rank for lag in slow])
    scope = "over the whole step" if worst.whole_step else "before the all-reduce"
    lead = f"{names} {'is' if len(slow) == 1 else 'are up to'} {pct(worst.lag)} of a step behind"
    where = f"the median rank {scope} (+{ms(worst.gap_ms)} of a {ms(step_ms)} step"
    if worst.phase is None or worst.phase_gap_ms is None:
        return f"{lead} {where}; no single phase explains it)"
    share = worst.phase_gap_ms / worst.gap_ms
    return f"{lead} {where}; {worst.phase} +{ms(worst.phase_gap_ms)} explains {pct(share)})"


def straggler(view: RunView, th: Thresholds) -> Finding | None:
    """STRAGGLER: a rank lags by >= straggler_warning of a step, outside data and compute."""
    return _straggler(view, th, "STRAGGLER", STRAGGLER_ACTION)


def input_straggler(view: RunView, th: Thresholds) -> Finding | None:
    """INPUT_STRAGGLER: a rank lags and its dataloader explains the gap."""
    return _straggler(view, th, "INPUT_STRAGGLER", INPUT_ACTION)


def compute_straggler(view: RunView, th: Thresholds) -> Finding | None:
    """COMPUTE_STRAGGLER: a rank lags and its forward (or backward, unsynchronised) explains it."""
    return _straggler(view, th, "COMPUTE_STRAGGLER", COMPUTE_ACTION)


def with_comm_wait(finding: Finding, waits_ms: Mapping[int, float]) -> Finding:
    """A straggler finding plus what the other ranks pay for it: their measured all-reduce wait.

    Args:
        finding: Any finding; only the straggler kinds change.
        waits_ms: Mean DDP all-reduce wait per step by rank, for the ranks that measured it.

    Returns:
        The finding with `evidence["comm_wait_ms"]` (waiting rank -> ms, the longest waits first)
        and "rank 0 waits 12 ms/step for rank 1" in its summary; unchanged when nothing applies.
    """
    if finding.kind not in STRAGGLER_KINDS or not waits_ms:
        return finding
    slow = set(finding.evidence.get("ranks") or ())
    waiting = sorted(((w, r) for r, w in waits_ms.items() if r not in slow), reverse=True)
    if not waiting:
        return finding
    most, rank = waiting[0]
    note = f"rank {rank} waits {ms(most)}/step for rank {finding.evidence.get('rank')}"
    evidence = {
        **finding.evidence,
        "comm_wait_ms": {str(r): rounded(w) for w, r in waiting[:EVIDENCE_RANKS]},
    }
    return replace(finding, summary=f"{finding.summary}; {note}", evidence=evidence)

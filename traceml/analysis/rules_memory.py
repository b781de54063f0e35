"""Memory rules: growth, pressure, fragmentation and imbalance (README, "Diagnoses",
memory rows).

Device memory is judged when the run has it, else host RSS, so CPU runs are diagnosed too. A
value that was not measured (None) makes its rule skip, never count as 0. Pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from traceml.analysis.rules import (
    EVIDENCE_RANKS,
    cap,
    enough_steps,
    grade,
    mb,
    pct,
    rank_list,
    rounded,
)
from traceml.analysis.stats import series_slope
from traceml.records import Finding

if TYPE_CHECKING:
    from traceml.analysis.view import RankWindow, RunView
    from traceml.config import Thresholds

MIN_SERIES_POINTS = 3
"""Fewest points a memory series needs before a slope means anything."""

GROWING_ACTION = (
    "Look for tensors kept alive across steps: accumulate loss.item() not loss, .detach() what"
    " you store (outputs, metrics, hidden states), clear lists that grow every step;"
    " torch.cuda.memory._record_memory_history() plus a snapshot shows who allocates."
)
GROWING_HOST_ACTION = (
    "Look for Python objects that grow every step (lists of losses or tensors, caches), and"
    " DataLoader workers that copy the dataset; tracemalloc shows who allocates."
)
PRESSURE_ACTION = (
    "Close to out-of-memory: lower the batch size or sequence length, use bf16 autocast or"
    " activation checkpointing, set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; shard"
    " optimizer state (FSDP/ZeRO) on several GPUs."
)
FRAGMENTED_ACTION = (
    "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, keep tensor shapes stable (pad"
    " to a few bucket sizes) and avoid torch.cuda.empty_cache() inside the loop."
)
IMBALANCED_ACTION = (
    "The fullest rank limits the batch size: check uneven batch or sequence lengths per rank,"
    " and extra work kept on one rank's GPU (evaluation, metrics, rank-0 logging)."
)


@dataclass(frozen=True, slots=True)
class Growth:
    """The fitted growth of one rank's memory series over the window."""

    rank: int
    source: str
    """"device allocated" or "host RSS"."""
    slope_mb_per_step: float
    rise_mb: float
    """Slope times the window's span in steps."""
    base_mb: float
    """The series' first value, the base of the growth fraction."""
    span_steps: int


def memory_growth(rank: RankWindow) -> Growth | None:
    """Theil-Sen growth of device allocated (else host RSS); None with too few points."""
    series = rank.memory_series
    if len(series) < MIN_SERIES_POINTS:
        return None
    slope = series_slope(series)
    if slope is None:
        return None
    span = series[-1][0] - series[0][0]
    source = "device allocated" if rank.device_allocated else "host RSS"
    return Growth(rank.rank, source, slope, slope * span, series[0][1], span)


def _is_growing(rank: RankWindow, th: Thresholds) -> Growth | None:
    """The growth when it is steady and big enough; the observed range must reach it too."""
    values = [y for _, y in rank.memory_series]
    if len(values) < MIN_SERIES_POINTS:
        return None
    low = min(values)
    if max(values) - low < min(th.growth_absolute_mb, th.growth_fraction * low):
        return None
    growth = memory_growth(rank)
    if growth is None or growth.slope_mb_per_step <= 0:
        return None
    big = growth.rise_mb >= th.growth_absolute_mb
    return growth if big or growth.rise_mb >= th.growth_fraction * growth.base_mb else None


def _pressure(rank: RankWindow) -> float | None:
    reserved, capacity = rank.device_peak_reserved_mb, rank.device_capacity_mb
    if reserved is None or not capacity:
        return None
    return reserved / capacity


FULL_WITHIN_WINDOWS = 10.0
"""Device growth "ends the run" when, at its slope, capacity is reached within this many times
the window's span of steps (or pressure is already at pressure_warning)."""


def steps_to_full(rank: RankWindow, growth: Growth) -> float | None:
    """Steps until device allocated reaches capacity at the fitted slope; None without both."""
    capacity, series = rank.device_capacity_mb, rank.device_allocated
    if not capacity or not series or growth.source != "device allocated":
        return None
    return max(0.0, capacity - series[-1][1]) / growth.slope_mb_per_step


def _ends_run(rank: RankWindow, growth: Growth, th: Thresholds) -> bool:
    """Host RSS growing steadily has no ceiling we know of but the machine's; device memory
    ends the run when pressure is near or capacity is a few windows away."""
    if growth.source == "host RSS":
        return True
    if (_pressure(rank) or 0.0) >= th.pressure_warning:
        return True
    full = steps_to_full(rank, growth)
    return full is not None and full <= FULL_WITHIN_WINDOWS * max(1, growth.span_steps)


def growing(view: RunView, th: Thresholds) -> Finding | None:
    """GROWING: memory rises steadily (positive robust slope) by >= 5 % or >= 1 GiB.

    Its evidence says `ends_run` when the growth will end the run (host RSS growing without
    bound, or device memory heading for capacity): diagnose then ranks it above throughput."""
    if not enough_steps(view, th):
        return None
    found = [g for g in (_is_growing(r, th) for r in view.active) if g is not None]
    if not found:
        return None
    worst = max(found, key=lambda g: g.rise_mb)
    by_rank = {r.rank: r for r in view.active}
    near_oom = (_pressure(by_rank[worst.rank]) or 0.0) >= th.pressure_warning
    host = worst.source == "host RSS"
    full = steps_to_full(by_rank[worst.rank], worst)
    return Finding(
        kind="GROWING",
        section="step_memory",
        severity=cap("critical" if near_oom else "warning", view.steps, th),
        summary=f"{worst.source} grows {mb(worst.rise_mb)} over {worst.span_steps} steps"
        f" (+{pct(worst.rise_mb / worst.base_mb) if worst.base_mb > 0 else 'n/a'},"
        f" {worst.slope_mb_per_step * 1000:.1f} MB per 1k steps) on"
        f" {rank_list(sorted(g.rank for g in found))}",
        action=GROWING_HOST_ACTION if host else GROWING_ACTION,
        evidence={
            "rank": worst.rank,
            "ranks": sorted(g.rank for g in found)[:EVIDENCE_RANKS],
            "source": worst.source,
            "mb_per_1k_steps": rounded(worst.slope_mb_per_step * 1000),
            "rise_mb": rounded(worst.rise_mb),
            "base_mb": rounded(worst.base_mb),
            "ends_run": _ends_run(by_rank[worst.rank], worst, th),
            "steps_to_full": None if full is None else round(full),
        },
    )


def pressure(view: RunView, th: Thresholds) -> Finding | None:
    """PRESSURE: device peak reserved reaches pressure_warning / pressure_critical of capacity."""
    rated = [(p, r) for r in view.active if (p := _pressure(r)) is not None]
    if not rated or not enough_steps(view, th):
        return None
    ratio, rank = max(rated, key=lambda pr: pr[0])
    severity = grade(ratio, th.pressure_warning, th.pressure_critical)
    if severity is None:
        return None
    return Finding(
        kind="PRESSURE",
        section="step_memory",
        severity=cap(severity, view.steps, th),
        summary=f"peak reserved {mb(rank.device_peak_reserved_mb)} of"
        f" {mb(rank.device_capacity_mb)} ({pct(ratio)}) on rank {rank.rank}",
        action=PRESSURE_ACTION,
        evidence={"rank": rank.rank, "ratio": rounded(ratio, 4)},
    )


def _fragmentation(rank: RankWindow, th: Thresholds) -> float | None:
    reserved, allocated = rank.device_peak_reserved_mb, rank.device_peak_allocated_mb
    ratio = _pressure(rank)
    if reserved is None or not allocated or ratio is None:
        return None
    ok = reserved >= th.fragmented_ratio * allocated and ratio >= th.fragmented_capacity
    return reserved / allocated if ok else None


def fragmented(view: RunView, th: Thresholds) -> Finding | None:
    """FRAGMENTED: reserved >= 2 x allocated peak while reserved >= 30 % of capacity."""
    rated = [(f, r) for r in view.active if (f := _fragmentation(r, th)) is not None]
    if not rated or not enough_steps(view, th):
        return None
    factor, rank = max(rated, key=lambda fr: fr[0])
    return Finding(
        kind="FRAGMENTED",
        section="step_memory",
        severity="warning",
        summary=f"reserved {mb(rank.device_peak_reserved_mb)} is {factor:.1f}x the allocated peak"
        f" {mb(rank.device_peak_allocated_mb)} ({pct(_pressure(rank) or 0.0)} of"
        f" {mb(rank.device_capacity_mb)}) on {rank_list(sorted(r.rank for _, r in rated))}:"
        " the caching allocator holds memory it cannot reuse",
        action=FRAGMENTED_ACTION,
        evidence={"rank": rank.rank, "reserved_over_allocated": rounded(factor)},
    )


def imbalanced(view: RunView, th: Thresholds) -> Finding | None:
    """IMBALANCED: cross-rank peak allocated skew >= 20 % while pressure >= 30 %."""
    ranks = [r for r in view.active if r.device_peak_allocated_mb is not None]
    if len(ranks) < 2 or not enough_steps(view, th):
        return None
    low = min(ranks, key=lambda r: r.device_peak_allocated_mb or 0.0)
    high = max(ranks, key=lambda r: r.device_peak_allocated_mb or 0.0)
    hi_mb, lo_mb = high.device_peak_allocated_mb or 0.0, low.device_peak_allocated_mb or 0.0
    skew = (hi_mb - lo_mb) / hi_mb if hi_mb > 0 else 0.0
    ratio = max((p for r in ranks if (p := _pressure(r)) is not None), default=None)
    if ratio is None or skew < th.imbalance_skew or ratio < th.imbalance_pressure:
        return None
    return Finding(
        kind="IMBALANCED",
        section="step_memory",
        severity="warning",
        summary=f"peak allocated ranges from {mb(lo_mb)} (rank {low.rank}) to {mb(hi_mb)}"
        f" (rank {high.rank}), {pct(skew)} apart, with the fullest GPU at {pct(ratio)}",
        action=IMBALANCED_ACTION,
        evidence={"skew": rounded(skew, 4), "pressure": rounded(ratio, 4), "rank": high.rank},
    )


def balanced_memory(view: RunView, th: Thresholds) -> Finding:
    """BALANCED (info): what diagnose reports when no memory rule fired."""
    device = [r.device_peak_reserved_mb for r in view.active if r.device_peak_reserved_mb]
    host = [r.host_rss_peak_mb for r in view.active if r.host_rss_peak_mb is not None]
    if not device and not host:
        return Finding(
            kind="NOT_MEASURED",
            section="step_memory",
            severity="info",
            summary="memory not measured: no step ended with a memory reading",
            action="Nothing to judge; memory is read at the end of each traced step.",
        )
    peak = max(device) if device else max(host)
    what = f"{'device peak reserved' if device else 'host RSS peak'} {mb(peak)}"
    return Finding(
        kind="BALANCED",
        section="step_memory",
        severity="info",
        summary=f"{what}; no growth, pressure or fragmentation",
        action="Nothing to fix in memory.",
        evidence={"device_peak_reserved_mb": rounded(max(device, default=None))},
    )

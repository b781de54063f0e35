"""The one signature every diagnosis rule shares, and the small helpers rule families reuse.

Rules are pure functions of a RunView and the Thresholds: no I/O, no state, no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

from traceml.analysis.view import RunView
from traceml.config import Thresholds

if TYPE_CHECKING:
    from traceml.records import Finding, Severity

Rule: TypeAlias = Callable[[RunView, Thresholds], "Finding | None"]
"""A diagnosis rule: returns a Finding when it fires, None otherwise."""

EVIDENCE_RANKS = 32
"""Most rank numbers a finding's evidence lists, so the summary stays small for big jobs."""


def cap(severity: Severity, steps: int, thresholds: Thresholds) -> Severity:
    """Critical needs `min_steps_for_critical` steps; fewer steps cap it at warning."""
    if severity == "critical" and steps < thresholds.min_steps_for_critical:
        return "warning"
    return severity


def grade(value: float, warning: float, critical: float) -> Severity | None:
    """warning/critical when `value` reaches the threshold, None below `warning`."""
    if value >= critical:
        return "critical"
    if value >= warning:
        return "warning"
    return None


def enough_steps(view: RunView, thresholds: Thresholds) -> bool:
    """True when the window holds at least `min_steps` steps on some rank."""
    return view.steps >= thresholds.min_steps


def pct(fraction: float) -> str:
    """0.4712 -> "47 %"; under 10 % keeps one decimal ("4.5 %")."""
    value = fraction * 100
    return f"{value:.1f} %" if abs(value) < 10 else f"{value:.0f} %"


def ms(value: float | None) -> str:
    """Milliseconds with about three significant digits; "n/a" for None."""
    if value is None:
        return "n/a"
    if abs(value) >= 100:
        return f"{value:.0f} ms"
    return f"{value:.1f} ms" if abs(value) >= 1 else f"{value:.2f} ms"


def mb(value: float | None) -> str:
    """Megabytes, shown as GB from 1024 MB on; "n/a" for None."""
    if value is None:
        return "n/a"
    return f"{value / 1024:.1f} GB" if abs(value) >= 1024 else f"{value:.0f} MB"


def rank_list(ranks: list[int], limit: int = 8) -> str:
    """ "rank 3" / "ranks 3, 7" / "ranks 1, 2, ... (+5 more)"."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    shown = ", ".join(str(r) for r in ranks[:limit])
    more = f" (+{len(ranks) - limit} more)" if len(ranks) > limit else ""
    return f"ranks {shown}{more}"


def rounded(value: float | None, digits: int = 3) -> float | None:
    """Round for JSON evidence; None stays None."""
    return None if value is None else round(value, digits)

"""A summary as flat scalars and strings, the shape experiment trackers store.

`traceml/step_time/median_ms` = 112.4 for numbers, `traceml/primary` = "INPUT_BOUND" for words.
Pure: no I/O, no tracker imports. A null (not measured) value is left out, never logged as 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PREFIX = "traceml"
SECTIONS = ("run", "step_time", "step_memory", "system")
"""Summary sections whose fields are flattened; ranks and findings are summed up instead."""
SKIPPED = frozenset({"argv", "started"})
"""Run fields that are no use as a metric or tag."""


@dataclass(frozen=True, slots=True)
class FlatSummary:
    """What a tracker gets: numeric metrics and string tags, keyed `traceml/<section>/<field>`."""

    metrics: dict[str, float] = field(default_factory=dict)
    """Every finite number of the summary (booleans excluded); nulls are absent."""
    tags: dict[str, str] = field(default_factory=dict)
    """Diagnoses, ids and names; `traceml/primary` is the run's main diagnosis."""


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _section(flat: FlatSummary, name: str, values: Mapping[str, Any]) -> None:
    for key, value in values.items():
        if key in SKIPPED:
            continue
        number = _number(value)
        if number is not None:
            flat.metrics[f"{PREFIX}/{name}/{key}"] = number
        elif isinstance(value, str):
            flat.tags[f"{PREFIX}/{name}/{key}"] = value


def _derived(flat: FlatSummary, summary: Mapping[str, Any]) -> None:
    median = _number(summary["step_time"].get("median_ms"))
    if median:
        flat.metrics[f"{PREFIX}/step_time/steps_per_s"] = 1000.0 / median
    lags = [lag for r in summary["ranks"] if (lag := _number(r.get("lag_pct"))) is not None]
    if lags:
        flat.metrics[f"{PREFIX}/ranks/max_lag_pct"] = max(lags)
    flat.metrics[f"{PREFIX}/findings"] = float(len(summary["findings"]))


def flatten_summary(summary: Mapping[str, Any]) -> FlatSummary:
    """Flatten a "traceml.summary/1" dict for a tracker.

    Args:
        summary: A checked summary (load_summary or build_summary).

    Returns:
        Metrics such as `traceml/step_time/median_ms` and `traceml/step_time/steps_per_s`, and
        tags such as `traceml/primary`, `traceml/primary_severity` and `traceml/run/id`. No key
        is a path prefix of another (file-based stores keep keys as paths).
    """
    flat = FlatSummary()
    primary = summary["primary"]
    flat.tags[f"{PREFIX}/primary"] = str(primary["kind"])
    flat.tags[f"{PREFIX}/primary_severity"] = str(primary["severity"])
    for name in SECTIONS:
        _section(flat, name, summary[name])
    _derived(flat, summary)
    return flat

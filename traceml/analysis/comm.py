"""Per-rank totals of the DDP all-reduce wait (`StepRecord.comm_wait_ms`), in O(1) memory.

Only steps that measured it count, and its share is taken of those steps' own time, so a run
that measured nothing reports None (not measured), never 0. Pure values; never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from traceml.records import StepRecord


class CommTotals:
    """Sums over the steps of one rank that carry a comm wait."""

    __slots__ = ("step_ms", "steps", "wait_ms")

    def __init__(self) -> None:
        self.steps = 0
        self.step_ms = 0.0
        """Summed step time of the measured steps."""
        self.wait_ms = 0.0

    def add(self, rec: StepRecord) -> None:
        if rec.comm_wait_ms is None:
            return
        self.steps += 1
        self.step_ms += rec.step_ms
        self.wait_ms += rec.comm_wait_ms

    @property
    def share(self) -> float | None:
        """Fraction 0..1 of step time spent waiting; None when no step measured it."""
        return self.wait_ms / self.step_ms if self.steps and self.step_ms > 0 else None

    @property
    def mean_ms(self) -> float | None:
        """Mean wait per measured step; None when no step measured it."""
        return self.wait_ms / self.steps if self.steps else None

    @classmethod
    def of(cls, records: Iterable[StepRecord]) -> CommTotals:
        out = cls()
        for rec in records:
            out.add(rec)
        return out

    @classmethod
    def merged(cls, parts: Iterable[CommTotals]) -> CommTotals:
        out = cls()
        for part in parts:
            out.steps += part.steps
            out.step_ms += part.step_ms
            out.wait_ms += part.wait_ms
        return out

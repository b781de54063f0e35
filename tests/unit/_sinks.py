"""A tx-thread sink that does nothing: tests override the one method they watch."""

from __future__ import annotations

from typing import Any

from traceml.records import RankEnd, StepRecord, SystemSample


class NullSink:
    """Implements instrument.worker.Sink with no-ops."""

    def open(self) -> None:
        pass

    def send_steps(self, records: list[StepRecord]) -> None:
        pass

    def send_system(self, sample: SystemSample) -> None:
        pass

    def service(self, now: float, **_: Any) -> None:
        pass

    def close(self, end: RankEnd, summary_path: Any) -> None:
        pass

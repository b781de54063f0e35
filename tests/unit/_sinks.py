"""A tx-thread sink that does nothing (tests override the one method they watch), and a tx
thread started over one."""

from __future__ import annotations

from collections import deque
from typing import Any

from traceml.analysis.store import RunStore
from traceml.instrument.timer import StepTimer
from traceml.instrument.worker import TxWorker, WorkerParts
from traceml.records import RankEnd, RankInfo, StepRecord, SystemSample


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


def started_worker(
    sink: Any, run_id: str, queue: int = 10_000, **parts: Any
) -> tuple[TxWorker, StepTimer]:
    """A tx thread over `sink` alone, started, and the step timer that feeds its queue of
    `queue` steps; `parts` are more WorkerParts fields (finish=...)."""
    raw: deque[Any] = deque(maxlen=queue)
    timer = StepTimer(raw)
    worker_parts = WorkerParts(
        info=RankInfo(run_id=run_id, rank=0), raw=raw, store=RunStore(), page_mb=0.004,
        wall_offset_ns=0, sinks=[sink], **parts,
    )  # fmt: skip
    tx = TxWorker(worker_parts)
    tx.start()
    return tx, timer

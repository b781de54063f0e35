"""The tx thread's last act: whatever happens to the summary, every sink is closed (run files
marked ended, sockets gone), so a failed summary never leaves a live-looking run behind."""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from tests.unit._sinks import NullSink
from traceml.analysis.store import RunStore
from traceml.instrument.worker import TxWorker, WorkerParts
from traceml.records import RankEnd, RankInfo


class ClosingSink(NullSink):
    """Remembers how it was closed."""

    def __init__(self) -> None:
        self.closed_with: tuple[RankEnd, Any] | None = None

    def close(self, end: RankEnd, summary_path: Any) -> None:
        self.closed_with = (end, summary_path)


def broken_summary(end: RankEnd) -> Path:
    raise RuntimeError("summary builder bug")


def written_summary(end: RankEnd) -> Path:
    return Path("/runs/final_summary.json")


@pytest.mark.parametrize(
    ("finish", "summary"),
    [(written_summary, Path("/runs/final_summary.json")), (broken_summary, None)],
)
def test_sinks_close_whatever_the_summary_does(finish: Any, summary: Path | None) -> None:
    info = RankInfo(run_id="w-1", rank=0)
    store = RunStore(history_steps=16)
    store.add_info(info)
    sink = ClosingSink()
    parts = WorkerParts(
        info=info, raw=deque(), store=store, page_mb=0.004, wall_offset_ns=0, sinks=[sink]
    )
    parts.finish = finish
    worker = TxWorker(parts)
    worker.start()
    assert worker.stop(RankEnd(0, "ok", 0, time.time()), timeout=5.0)
    worker.join(5.0)
    assert sink.closed_with is not None
    assert sink.closed_with[1] == summary
    assert worker.summary_path == summary

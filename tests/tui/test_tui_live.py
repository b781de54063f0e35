"""The viewer fed by real Publishers (one thread per rank, as a rank's tx thread would be).

Late attach sees the history, live steps follow, a rank that ends is shown, `q` detaches without
touching the ranks, and attaching again shows the history once more.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from pathlib import Path

import pytest

from tests.tui.fixtures import RUN_ID, CannedRun, info, record, sample, summary_of, until
from traceml.analysis.summary import write_summary
from traceml.config import Settings
from traceml.errors import RunNotFoundError
from traceml.records import RankEnd, StepRecord
from traceml.transport.publish.publisher import Publisher
from traceml_tui.app import TraceMLApp
from traceml_tui.snapshot import Snapshot
from traceml_tui.source import SubscriberSource, open_run
from traceml_tui.widgets.header import RunHeader

SIZE = (120, 40)


class RankThread(threading.Thread):
    """One rank's publisher, driven from its own thread as the tx thread drives it."""

    def __init__(self, run: CannedRun, rank: int, runtime_dir: Path) -> None:
        super().__init__(name=f"traceml-test-rank-{rank}", daemon=True)
        self.run_spec, self.rank, self.runtime_dir = run, rank, runtime_dir
        self.inbox: queue.Queue[list[StepRecord]] = queue.Queue()
        self.opened = threading.Event()
        self.stop_at: int | None = None
        self.last_step = -1
        self._rng = random.Random(rank)

    def send(self, first: int, last: int) -> None:
        self.inbox.put([record(self.run_spec, self.rank, s, self._rng) for s in range(first, last)])

    def finish(self) -> None:
        self.stop_at = self.last_step + 1

    def run(self) -> None:
        settings = Settings(runtime_dir=self.runtime_dir)
        pub = Publisher(info(self.run_spec, self.rank), settings, self.runtime_dir)
        pub.open()
        self.opened.set()
        while self.stop_at is None or not self.inbox.empty():
            self._step(pub)
        pub.close(RankEnd(self.rank, "ok", self.last_step + 1, time.time()), None)

    def _step(self, pub: Publisher) -> None:
        try:
            batch = self.inbox.get(timeout=0.01)
        except queue.Empty:
            batch = []
        if batch:
            pub.send_steps(batch)
            pub.send_system(sample(self.run_spec, self.rank, time.time()))
            self.last_step = batch[-1].step
        pub.service(time.time(), last_step=self.last_step, dropped=0, primary=None)


def start_ranks(run: CannedRun, runtime_dir: Path) -> list[RankThread]:
    ranks = [RankThread(run, r, runtime_dir) for r in range(run.ranks)]
    for rank in ranks:
        rank.start()
        assert rank.opened.wait(5), "the publisher did not open"
    return ranks


def steps_shown(app: TraceMLApp) -> int:
    shown = app.main.shown
    return min((r.total_steps for r in shown.view.ranks), default=0) if shown else 0


async def test_attach_to_real_publishers_detach_and_attach_again(runtime_dir: Path) -> None:
    run = CannedRun(ranks=2, slow_rank=None)
    ranks = start_ranks(run, runtime_dir)
    try:
        for rank in ranks:
            rank.send(0, 50)
        app = TraceMLApp(None, runtime_dir=runtime_dir)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: steps_shown(app) == 50, timeout=10)
            for rank in ranks:
                rank.send(50, 70)
            await until(pilot, lambda: steps_shown(app) == 70, timeout=10)
            header = str(app.main.query_one(RunHeader).render().plain)
            assert "2 ranks" in header and "live" in header
            ranks[1].finish()
            ranks[1].join(5)
            await until(
                pilot, lambda: app.main.ranks.table.get_cell("1", "state").plain == "finished"
            )
            await pilot.press("q")
        assert app.return_value == 0
        assert ranks[0].is_alive(), "detaching leaves the job running"

        again = TraceMLApp(None, runtime_dir=runtime_dir)
        async with again.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: steps_shown(again) == 70, timeout=10)
            await pilot.press("q")
    finally:
        for rank in ranks:
            rank.finish()
        for rank in ranks:
            rank.join(5)


def test_a_finished_run_opens_from_its_summary_file(runtime_dir: Path, tmp_path: Path) -> None:
    run = CannedRun(ranks=1, slow_rank=None)
    summary = write_summary(summary_of(run), tmp_path / "final_summary.json")
    pub = Publisher(info(run, 0), Settings(runtime_dir=runtime_dir), runtime_dir)
    pub.open()
    pub.close(RankEnd(0, "ok", run.steps, time.time()), summary)
    opened = open_run(RUN_ID[:10], runtime_dir=runtime_dir)
    assert isinstance(opened, Snapshot) and opened.source == "summary"
    assert opened.view.run_id == RUN_ID


def test_traceml_run_waits_for_its_run_to_appear(runtime_dir: Path) -> None:
    run = CannedRun(ranks=1, slow_rank=None)
    ranks: list[RankThread] = []
    timer = threading.Timer(0.5, lambda: ranks.extend(start_ranks(run, runtime_dir)))
    timer.start()
    try:
        with pytest.raises(RunNotFoundError):
            open_run(RUN_ID, runtime_dir=runtime_dir)
        source = open_run(RUN_ID, runtime_dir=runtime_dir, wait=True)
        assert isinstance(source, SubscriberSource)
        with pytest.raises(RunNotFoundError):
            open_run("other", runtime_dir=runtime_dir, wait=True, cancelled=lambda: True)
    finally:
        timer.join()
        for rank in ranks:
            rank.finish()
            rank.join(5)

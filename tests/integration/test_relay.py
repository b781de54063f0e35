"""The job collector re-serves other nodes' ranks to this node's viewers, over real sockets.

A CollectorFeed says hello from "node 1" (another GROUP_RANK), the Collector on "node 0" decodes
its frames, and Relays publish them in node 0's run dir; a real Subscriber attaches there.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration._publisher_proc import make_step
from tests.integration._transport_helpers import Seen
from traceml.collect.collector import Collector
from traceml.collect.relay import MIN_HISTORY, Relays
from traceml.config import Settings
from traceml.records import RankEnd, RankInfo
from traceml.transport.publish.feed import CollectorFeed
from traceml.transport.subscribe.runs import list_runs, resolve_run
from traceml.transport.subscribe.subscriber import Subscriber
from traceml.transport.wire.events import EndEvent

RUN = "relay-test"


@dataclass
class Job:
    collector: Collector
    relays: Relays
    feed: CollectorFeed

    def pump(self, seconds: float = 0.3) -> None:
        """Rank 0's tx thread: take what arrived, route it, service the relays."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.relays.route(self.collector.poll(), time.time())
            self.relays.service(time.time())
            time.sleep(0.01)

    def until(self, sub: Subscriber, seen: Seen, done: Callable[[], bool], what: str) -> None:
        """Run rank 0's side and the viewer's side in turn until `done()`."""
        deadline = time.monotonic() + 15
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            self.pump(0.05)
            seen.add(sub.poll(50))


@pytest.fixture
def world_size() -> int:
    return 2


@pytest.fixture
def job(runtime_dir: Path, monkeypatch: pytest.MonkeyPatch, world_size: int) -> Iterator[Job]:
    monkeypatch.setenv("GROUP_RANK", "0")
    collector = Collector(RUN, f"ipc://{runtime_dir}/collector.sock", curve=False)
    address = collector.open()
    relays = Relays(Settings(runtime_dir=runtime_dir), runtime_dir, collector.remote, world_size)
    monkeypatch.setenv("GROUP_RANK", "1")  # the feed's hello comes from the other node
    info = RankInfo(RUN, rank=1, world_size=2, host=socket.gethostname(), pid=999_999)
    feed = CollectorFeed(address, info)
    feed.open()
    feed.hello()
    yield Job(collector, relays, feed)
    feed.close(linger_ms=0)
    relays.close()
    collector.close()


def test_late_viewer_gets_the_relayed_history_then_live_records(
    job: Job, runtime_dir: Path
) -> None:
    job.feed.send_steps([make_step(i, rank=1) for i in range(300)])
    job.feed.heartbeat({"last_step": 299, "dropped": 0, "primary": None})
    job.pump()
    assert job.relays.ranks == [1]
    run = resolve_run(RUN, runtime_dir)
    assert [r.rank for r in run.ranks] == [1] and run.ranks[0].relayed_by is not None

    seen = Seen()
    with Subscriber(run) as sub:
        job.until(sub, seen, lambda: seen.count(1) >= 300, "the relayed history")
        job.feed.send_steps([make_step(i, rank=1) for i in range(300, 320)])
        job.until(sub, seen, lambda: seen.count(1) >= 320, "live records")
        assert seen.steps[1] == list(range(320)), "the snapshot and the live stream stitch"
        assert sub.rank_states(time.time())[1] == "live"

        job.feed.send_end(RankEnd(1, "ok", 320, time.time()))
        said_end = lambda: any(isinstance(e, EndEvent) for e in seen.events)  # noqa: E731
        job.until(sub, seen, said_end, "the rank's end")
    assert job.relays.ranks == [], "an ended rank's relay is closed"
    ended = list_runs(runtime_dir, include_finished=True)[0].ranks[0]
    assert ended.end is not None and ended.end.steps == 320


@pytest.mark.parametrize("world_size", [1_000_000])
def test_relay_history_is_shared_out_by_world_size(job: Job, runtime_dir: Path) -> None:
    """A huge job keeps a short history per relayed rank, so rank 0's memory stays bounded."""
    job.feed.send_steps([make_step(i, rank=1) for i in range(300)])
    job.feed.heartbeat({"last_step": 299, "dropped": 0, "primary": None})
    job.pump()
    seen = Seen()
    with Subscriber(resolve_run(RUN, runtime_dir)) as sub:
        job.until(sub, seen, lambda: seen.count(1) >= MIN_HISTORY, "the relayed history")
        job.pump(0.2)
        seen.add(sub.poll(50))
        assert seen.steps[1] == list(range(300 - MIN_HISTORY, 300))


def test_a_rank_that_falls_silent_is_not_kept_alive_by_its_relay(
    job: Job, runtime_dir: Path
) -> None:
    job.feed.send_steps([make_step(i, rank=1) for i in range(10)])
    job.feed.heartbeat({"last_step": 9, "dropped": 0, "primary": None})
    job.pump()
    seen = Seen()
    with Subscriber(resolve_run(RUN, runtime_dir)) as sub:
        job.until(sub, seen, lambda: seen.count(1) >= 10, "the relayed history")
        # The relay keeps serving (rank 0 is alive) but the rank sends no more heartbeats.
        job.until(sub, seen, lambda: "dead" in seen.states(1), "the silent rank called dead")


def test_a_rank_of_this_node_gets_no_relay(
    runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GROUP_RANK", "0")
    collector = Collector(RUN, f"ipc://{runtime_dir}/collector.sock", curve=False)
    relays = Relays(Settings(runtime_dir=runtime_dir), runtime_dir, collector.remote, 2)
    feed = CollectorFeed(collector.open(), RankInfo(RUN, rank=1, world_size=2))
    try:
        feed.open()
        feed.hello()
        feed.send_steps([make_step(i, rank=1) for i in range(5)])
        deadline = time.monotonic() + 5
        while 1 not in collector.ranks:
            assert time.monotonic() < deadline
            relays.route(collector.poll(), time.time())
        assert relays.ranks == [] and not collector.remote(1)
        assert list_runs(runtime_dir, include_finished=True) == []
    finally:
        feed.close(linger_ms=0)
        relays.close()
        collector.close()

"""Attach over real sockets: snapshot then live, detach and re-attach, several runs, the end."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import zmq

from tests.integration._publisher_proc import TxLoop, make_info, make_step
from tests.integration._transport_helpers import Seen, attach, poll_until, wait_for
from traceml.config import Settings
from traceml.records import RankEnd, SystemSample
from traceml.transport.publish import publisher as publisher_module
from traceml.transport.publish.publisher import Publisher
from traceml.transport.runfiles.runfile import write_json_atomic
from traceml.transport.subscribe.runs import RunEntry, list_runs
from traceml.transport.subscribe.subscriber import Subscriber
from traceml.transport.wire.codec import WELCOME, Header, decode_steps, parse_topic
from traceml.transport.wire.events import EndEvent, GapEvent, HeartbeatEvent, InfoEvent


def _loop(runtime: Path, run_id: str, rank: int = 0, history: int = 4096) -> TxLoop:
    settings = Settings(history_steps=history)
    return TxLoop(Publisher(make_info(run_id, rank), settings, runtime), rank)


def test_late_attach_sees_every_step_then_live_ones(tmp_path: Path) -> None:
    with _loop(tmp_path, "late-1") as loop:
        loop.steps(1000)
        loop.wait_published(1000)
        seen = Seen()
        with attach(tmp_path, "late") as sub:
            poll_until(sub, seen, lambda: seen.count() >= 1000)
            loop.steps(50)
            poll_until(sub, seen, lambda: seen.count() >= 1050)
            assert sub.stats["malformed"] == 0
    assert seen.seqs[0] == list(range(1050))
    assert seen.steps[0] == list(range(1050))
    assert any(isinstance(e, InfoEvent) and e.info.run_id == "late-1" for e in seen.events)
    assert any(isinstance(e, HeartbeatEvent) for e in seen.events)
    assert seen.states() == ["live"]


def test_detach_and_attach_again_shows_the_history_again(tmp_path: Path) -> None:
    with _loop(tmp_path, "again-1") as loop:
        loop.steps(300)
        first, second = Seen(), Seen()
        with attach(tmp_path, None) as sub:
            poll_until(sub, first, lambda: first.count() >= 300)
        loop.steps(200)
        loop.wait_published(500)
        with attach(tmp_path, None) as sub:
            poll_until(sub, second, lambda: second.count() >= 500)
            loop.steps(10)
            poll_until(sub, second, lambda: second.count() >= 510)
    assert first.seqs[0] == list(range(300))
    assert second.seqs[0] == list(range(510))


def test_two_runs_at_once_stay_apart(tmp_path: Path) -> None:
    with _loop(tmp_path, "alpha-1") as a, _loop(tmp_path, "beta-1", rank=1) as b:
        a.steps(100)
        b.steps(70)
        a.wait_published(100)
        b.wait_published(70)
        assert {r.run_id for r in list_runs(tmp_path)} == {"alpha-1", "beta-1"}
        seen_a, seen_b = Seen(), Seen()
        with attach(tmp_path, "alpha") as sa, attach(tmp_path, "beta") as sb:
            poll_until(sa, seen_a, lambda: seen_a.count(0) >= 100)
            poll_until(sb, seen_b, lambda: seen_b.count(1) >= 70)
    assert set(seen_a.seqs) == {0} and seen_a.seqs[0] == list(range(100))
    assert set(seen_b.seqs) == {1} and seen_b.seqs[1] == list(range(70))


def test_a_finished_run_is_readable_from_its_files(tmp_path: Path) -> None:
    summary = tmp_path / "out" / "final_summary.json"
    summary.parent.mkdir()
    summary.write_text(json.dumps({"schema": "traceml.summary/1"}))
    loop = _loop(tmp_path, "done-1").start()
    loop.summary = summary
    loop.steps(20)
    seen = Seen()
    with attach(tmp_path, "done-1") as sub:
        poll_until(sub, seen, lambda: seen.count() >= 20)
        loop.stop()
        poll_until(sub, seen, lambda: "finished" in seen.states())
    [run] = list_runs(tmp_path, include_finished=True)
    assert run.state == "finished"
    assert run.summary_path == summary
    assert (run.dir / "final_summary.json").resolve() == summary
    assert not list(run.dir.glob("*.sock"))
    assert list_runs(tmp_path) == []
    later = Seen()
    with Subscriber(run) as sub:
        later.add(sub.poll(0))
        assert sub.rank_states(time.time()) == {0: "finished"}
    ends = [e for e in later.events if isinstance(e, EndEvent)]
    assert ends and ends[0].end.steps == 20 and ends[0].summary_path == str(summary)


def test_a_rank_that_starts_after_attach_is_picked_up(tmp_path: Path) -> None:
    with _loop(tmp_path, "grow-1", rank=0) as r0:
        r0.steps(5)
        r0.wait_published(5)
        seen = Seen()
        with attach(tmp_path, "grow-1") as sub:
            poll_until(sub, seen, lambda: seen.count(0) >= 5)
            with _loop(tmp_path, "grow-1", rank=1) as r1:
                r1.steps(7)
                poll_until(sub, seen, lambda: seen.count(1) >= 7)
                wait_for(lambda: set(sub.rank_states(time.time())) == {0, 1})
    assert seen.seqs[1] == list(range(7))


def test_a_late_attach_to_a_long_run_starts_at_the_oldest_kept_step(tmp_path: Path) -> None:
    with _loop(tmp_path, "long-1", history=300) as loop:
        loop.steps(1000)
        loop.wait_published(1000)
        seen = Seen()
        with attach(tmp_path, "long-1") as sub:
            poll_until(sub, seen, lambda: seen.count() >= 300)
            assert sub.stats["lost"] == 0
    assert seen.seqs[0] == list(range(700, 1000))
    assert not any(isinstance(e, GapEvent) for e in seen.events)


def test_a_viewer_too_far_behind_is_told_what_it_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One frame per record, as a rank publishing a step at a time: 30,000 frames overflow the
    # viewer's queue (batched, they would fit).
    monkeypatch.setattr(publisher_module, "PUBLISH_EVERY_S", 0.0)
    pub = Publisher(make_info("behind-1"), Settings(history_steps=100), tmp_path)
    pub.open()
    seen = Seen()
    try:
        with attach(tmp_path, "behind-1") as sub:
            pub.send_steps([make_step(0)])
            while seen.count() < 1:
                pub.service(time.monotonic(), last_step=0, dropped=0, primary=None)
                seen.add(sub.poll(10))
            for i in range(1, 30_000):
                pub.send_steps([make_step(i)])
            while seen.count() < 101 or seen.seqs[0][-1] < 29_999:
                pub.service(time.monotonic(), last_step=29_999, dropped=0, primary=None)
                seen.add(sub.poll(10))
            gaps = [e for e in seen.events if isinstance(e, GapEvent)]
            assert gaps and sub.stats["resyncs"] >= 1
            assert sub.stats["lost"] == sum(g.to_seq - g.from_seq + 1 for g in gaps)
    finally:
        pub.close(RankEnd(0, "ok", 30_000, time.time()), None)
    assert pub.dropped > 0
    assert seen.seqs[0] == sorted(set(seen.seqs[0])), "in order, no duplicates"
    assert len(seen.seqs[0]) + sum(g.to_seq - g.from_seq + 1 for g in gaps) == 30_000


@contextmanager
def raw_frames(pub: Publisher) -> Iterator[Callable[[], list[list[bytes]]]]:
    """A bare SUB on `pub`, past its welcome; yields a function that returns what came since."""
    ctx = zmq.Context()
    raw = ctx.socket(zmq.SUB)
    raw.setsockopt(zmq.SUBSCRIBE, b"")
    raw.connect(pub.endpoints["pub"])

    def welcomed() -> bool:
        pub.service(0, last_step=-1, dropped=0, primary=None, heartbeat=False)
        return raw.poll(10) != 0

    def received() -> list[list[bytes]]:
        """What came, read until 0.5 s bring nothing; the first frame gets 5 s (a loaded host
        may be slow to deliver it, and every caller expects one)."""
        frames, wait_ms = [], 5000
        while raw.poll(wait_ms):
            frames.append(raw.recv_multipart())
            wait_ms = 500
        return frames

    try:
        wait_for(welcomed, 5, "the welcome")
        assert raw.recv_multipart() == [WELCOME]
        yield received
    finally:
        raw.close(0)
        ctx.term()


def test_records_leave_in_batches_and_always_before_the_next_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step at a time in, one frame out: the viewer's cost is per frame. A heartbeat (or any
    other frame) first sends what is pending, so its seq never runs ahead of the records."""
    monkeypatch.setattr(publisher_module, "PUBLISH_EVERY_S", 3600.0)
    pub = Publisher(make_info("batch-1"), Settings(), tmp_path)
    pub.open()
    try:
        with raw_frames(pub) as received:
            pub.send_steps([make_step(0)])  # the first record leaves at once
            for i in range(1, 100):
                pub.send_steps([make_step(i)])
            pub.service(1.0, last_step=99, dropped=0, primary=None, heartbeat=True)
            frames = received()
        kinds = [parse_topic(f[0])[0] for f in frames]
        assert kinds == ["rec", "rec", "hb"], kinds
        assert [len(decode_steps(f[2])) for f in frames[:2]] == [1, 99]
        assert Header.unpack(frames[2][1]).seq == 99
    finally:
        pub.close(RankEnd(0, "ok", 100, time.time()), None)


@pytest.mark.parametrize("frame", ["hb", "evt"])
def test_records_kept_while_nobody_listened_go_out_before_the_next_frame(
    tmp_path: Path, frame: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A viewer whose snapshot was taken before its subscription was read never got the records
    kept after that snapshot: once someone listens, or at the end, they are published before
    any frame whose seq counts them (a heartbeat here, the end event)."""
    pub = Publisher(make_info("waiting-1"), Settings(), tmp_path)
    pub.open()
    closed = False
    # close() tears the sockets down with linger 0 (a rank's exit never waits on a viewer; one
    # that misses the end frame learns of the end from the rank file), so on a loaded host the
    # frames it sent may still be queued there and dropped: one CI run got none. What is tested
    # is their order, so the teardown waits until they have been read.
    teardown = pub._teardown
    try:
        pub.send_steps([make_step(i) for i in range(50)])
        assert (pub.watched, pub.stats_dict()["records"]) == (False, 0)
        with raw_frames(pub) as received:
            if frame == "hb":
                pub.service(1.0, last_step=49, dropped=0, primary=None, heartbeat=True)
            else:
                monkeypatch.setattr(pub, "_teardown", lambda: None)
                pub.close(RankEnd(0, "ok", 50, time.time()), None)
                closed = True
            frames = received()
        kinds = [parse_topic(f[0])[0] for f in frames]
        assert kinds == ["rec", frame], kinds
        assert Header.unpack(frames[0][1]).seq == 0
        assert [r.step for r in decode_steps(frames[0][2])] == list(range(50))
        assert Header.unpack(frames[1][1]).seq == 49
    finally:
        if closed:
            teardown()
        else:
            pub.close(RankEnd(0, "ok", 50, time.time()), None)


@pytest.mark.parametrize(("world_size", "published"), [(1, 3), (1024, 1)])
def test_a_big_job_publishes_a_share_of_its_system_samples(
    tmp_path: Path, world_size: int, published: int
) -> None:
    """At most ~256 samples a second for the whole job reach a viewer: a rank of 1,024 publishes
    one in four (every sample is still kept for snapshots)."""
    pub = Publisher(make_info("sys-1", world_size=world_size), Settings(), tmp_path)
    pub.open()
    try:
        with raw_frames(pub) as received:
            for t in range(3):
                pub.send_system(SystemSample(0, 1.7e9 + t, process_cpu_pct=float(t)))
            frames = received()
        assert [parse_topic(f[0])[0] for f in frames] == ["sys"] * published
    finally:
        pub.close(RankEnd(0, "ok", 0, time.time()), None)


def test_the_tx_thread_ticks_faster_while_a_snapshot_is_being_sent_and_folds_while_watched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from traceml.instrument import worker
    from traceml.transport.publish import snapshot

    pub = Publisher(make_info("busy-1"), Settings(history_steps=10_000), tmp_path)
    pub.open()
    tx = worker.TxWorker(
        worker.WorkerParts(make_info("busy-1"), deque(), None, 0.0, 0, sinks=[pub])
    )
    try:
        pub.send_steps([make_step(i) for i in range(10_000)])
        idle = (pub.busy, tx._watched(), tx._tick_s())
        assert idle == (False, False, worker.QUIET_TICK_S)  # nobody listens: the slow tick
        monkeypatch.setattr(snapshot, "SERVICE_BUDGET_S", 0.0)  # take the request, send nothing
        seen = Seen()
        with attach(tmp_path, "busy-1") as sub:
            deadline = time.monotonic() + 10
            while not pub.busy:
                assert time.monotonic() < deadline, "the snapshot request never came"
                pub.service(time.monotonic(), last_step=9_999, dropped=0, primary=None)
                sub.poll(10)
            assert tx._tick_s() == worker.SERVE_TICK_S
            monkeypatch.undo()
            while seen.count() < 10_000:
                pub.service(time.monotonic(), last_step=9_999, dropped=0, primary=None)
                seen.add(sub.poll(10))
                assert time.monotonic() < deadline, f"snapshot incomplete: {seen.count()}"
            assert (pub.busy, tx._watched(), tx._tick_s()) == (False, True, worker.TICK_S)
        while tx._watched():  # the viewer left: its unsubscription is read by a service
            assert time.monotonic() < deadline + 10, "the viewer's unsubscription never came"
            pub.service(time.monotonic(), last_step=9_999, dropped=0, primary=None)
            time.sleep(0.01)
        assert tx._tick_s() == worker.QUIET_TICK_S
    finally:
        pub.close(RankEnd(0, "ok", 10_000, time.time()), None)


def test_records_wait_unpacked_while_nobody_listens_and_a_viewer_gets_them_all(
    tmp_path: Path,
) -> None:
    """While no viewer listens, the publisher keeps records unpacked and publishes nothing; the
    viewer that attaches gets them all from its snapshot, then live ones packed at once. One
    that does not pack (step 1500) is left out and counted, and the seqs close up behind it."""
    pub = Publisher(make_info("lazy-1"), Settings(), tmp_path)
    pub.open()
    history = pub._history
    records = [make_step(i) for i in range(3001)]
    records[1500] = records[1500]._replace(step_ms=object())  # type: ignore[arg-type]
    try:
        pub.send_steps(records)
        assert (pub.watched, history.unpacked, pub.stats_dict()["records"]) == (False, 3001, 0)
        seen = Seen()
        with attach(tmp_path, "lazy-1") as sub:
            deadline = time.monotonic() + 10
            while seen.count() < 3000:
                assert time.monotonic() < deadline, f"snapshot incomplete: {seen.count()}"
                pub.service(time.monotonic(), last_step=2999, dropped=0, primary=None)
                seen.add(sub.poll(10))
            assert pub.watched and history.unpacked == 0
            pub.send_steps([make_step(i) for i in range(3001, 3101)])
            assert history.unpacked == 0
            while seen.count() < 3100:
                assert time.monotonic() < deadline, f"live records missing: {seen.count()}"
                pub.service(time.monotonic(), last_step=3100, dropped=0, primary=None)
                seen.add(sub.poll(10))
        assert seen.seqs[0] == list(range(3100))
        assert seen.steps[0] == [i for i in range(3101) if i != 1500]
        assert pub.stats_dict()["unpackable"] == 1
    finally:
        pub.close(RankEnd(0, "ok", 3101, time.time()), None)


def test_run_json_is_rewritten_only_when_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rank file is rewritten at every FILE_UPDATE_S; run.json only at the start and at the
    end, when its end and summary path arrive."""
    written: list[str] = []

    def counted(path: Path, obj: dict[str, object]) -> None:
        written.append(path.name)
        write_json_atomic(path, obj)

    monkeypatch.setattr(publisher_module, "write_json_atomic", counted)
    pub = Publisher(make_info("runjson-1"), Settings(), tmp_path)
    pub.open()
    run_dir = pub.run_dir
    assert run_dir is not None
    for i in range(1, 4):
        now = i * (publisher_module.FILE_UPDATE_S + 1)
        pub.service(now, last_step=i, dropped=0, primary=None, heartbeat=False)
    assert written == ["rank-0.json", "run.json"] + ["rank-0.json"] * 3
    assert json.loads(run_dir.rank_json(0).read_text())["last_step"] == 3
    summary = tmp_path / "final_summary.json"
    summary.write_text("{}")
    pub.close(RankEnd(0, "ok", 4, time.time()), summary)
    assert written[-2:] == ["rank-0.json", "run.json"]
    ended = json.loads(run_dir.run_json.read_text())
    assert ended["end"][2] == "ok" and ended["summary_path"] == str(summary)


def _poll_on_a_thread(sub: Subscriber) -> threading.Event:
    """Start `sub.poll(60 s)` on a thread of its own; the event is set when it returns."""
    returned = threading.Event()

    def poll() -> None:
        sub.poll(60_000)
        returned.set()

    threading.Thread(target=poll, daemon=True).start()
    return returned


def test_another_thread_cuts_a_long_poll_short(tmp_path: Path) -> None:
    """A viewer that leaves wakes its feed's poll (Subscriber.wake) instead of waiting it out.
    A run whose ranks have not written their files yet sends nothing: unwoken, each poll here
    would wait its whole minute."""
    run = RunEntry(
        run_id="wake-1", dir=tmp_path, script="train.py", host="", ranks=(), state="live",
        started=0.0, updated=0.0, world_size=1, last_step=None, last_step_ms=None,
        primary=None, summary_path=None,
    )  # fmt: skip
    with Subscriber(run) as sub:
        returned = _poll_on_a_thread(sub)
        assert not returned.wait(0.3), "nothing comes: the poll waits"
        sub.wake()
        assert returned.wait(10), "woken, the poll returns"
        sub.wake()  # before a poll: the next one returns at once
        assert _poll_on_a_thread(sub).wait(10)
    sub.wake()  # after close(): nothing to wake, nothing raised

"""Faults against real publishers: kill -9, SIGSTOP, a viewer that never reads, junk on both
sockets, the same run id twice. The publisher must survive and never block; viewers must say
what happened."""

from __future__ import annotations

import os
import random
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import zmq

from tests.integration._publisher_proc import TxLoop, make_info, make_step
from tests.integration._transport_helpers import (
    Seen,
    attach,
    poll_until,
    publisher_process,
    wait_for,
)
from traceml.config import Settings
from traceml.errors import TransportError
from traceml.records import RankEnd, StepRecord
from traceml.transport.publish import publisher as publisher_module
from traceml.transport.publish import snapshot as snapshot_module
from traceml.transport.publish.channels import MAX_HELD_SUBSCRIPTIONS
from traceml.transport.publish.publisher import Publisher
from traceml.transport.publish.snapshot import MAX_JOBS
from traceml.transport.runfiles.runfile import read_json, write_json_atomic
from traceml.transport.subscribe import ranklink
from traceml.transport.subscribe.runs import list_runs, resolve_run
from traceml.transport.subscribe.subscriber import Subscriber
from traceml.transport.wire.codec import WELCOME, pack, topic
from traceml.transport.wire.control import Request
from traceml.transport.wire.events import EndEvent, HeartbeatEvent


def _state(runtime: Path, run_id: str) -> str:
    return resolve_run(run_id, runtime).state


def test_a_rank_that_wrote_its_end_and_exited_is_finished_never_dead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank's close writes its end into its file, then the process exits; its end message
    may never be read (the sockets close with linger 0). The viewer must read the file when it
    finds the process gone, not call a run that finished dead until its next periodic read (an
    exporter that stops at the first dead rank exported it so)."""
    monkeypatch.setattr(ranklink, "FILE_CHECK_S", 1000.0)  # no periodic re-read in this test
    with publisher_process(tmp_path, "gone-1", "--backlog", "50") as proc:
        seen = Seen()
        with attach(tmp_path, "gone-1") as sub:
            poll_until(sub, seen, lambda: seen.count() >= 50)
            proc.kill()  # no end message; the file gets the end below, as close() writes it
            proc.wait(10)
            path = tmp_path / "gone-1" / "rank-0.json"
            obj = read_json(path)
            obj["end"] = RankEnd(0, "ok", 50, time.time()).to_wire()
            write_json_atomic(path, obj)
            poll_until(sub, seen, lambda: any(isinstance(e, EndEvent) for e in seen.events), 5)
    assert "dead" not in seen.states() and seen.states()[-1] == "finished"


def test_kill_9_shows_the_run_dead_in_ls_and_in_the_viewer(tmp_path: Path) -> None:
    with publisher_process(tmp_path, "kill-1", "--backlog", "100") as proc:
        seen = Seen()
        with attach(tmp_path, "kill-1") as sub:
            poll_until(sub, seen, lambda: seen.count() >= 100)
            assert _state(tmp_path, "kill-1") == "live"
            proc.kill()
            proc.wait(5)
            poll_until(sub, seen, lambda: "dead" in seen.states(), timeout=5)
            assert sub.rank_states(time.time()) == {0: "dead"}
        assert _state(tmp_path, "kill-1") == "dead"
        assert list_runs(tmp_path) == []
        assert [r.run_id for r in list_runs(tmp_path, include_finished=True)] == ["kill-1"]


def test_sigstop_shows_the_run_stalled_then_live_again(tmp_path: Path) -> None:
    with publisher_process(tmp_path, "stop-1", "--backlog", "10", "--rate", "100") as proc:
        seen = Seen()
        with attach(tmp_path, "stop-1") as sub:
            poll_until(sub, seen, lambda: seen.count() >= 10)
            os.kill(proc.pid, signal.SIGSTOP)
            wait_for(lambda: _state(tmp_path, "stop-1") == "stalled", 5, "ls to say stalled")
            poll_until(sub, seen, lambda: seen.states()[-1:] == ["stalled"], timeout=5)
            os.kill(proc.pid, signal.SIGCONT)
            poll_until(sub, seen, lambda: seen.states()[-1:] == ["live"], timeout=5)
        assert seen.seqs[0] == list(range(len(seen.seqs[0])))
        assert _state(tmp_path, "stop-1") == "live"


def test_a_viewer_that_never_reads_costs_nothing_and_starves_nobody(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One frame per record, as a rank publishing a step at a time: 20,000 frames fill the
    # stalled viewer's queues (batched, they would fit).
    monkeypatch.setattr(publisher_module, "PUBLISH_EVERY_S", 0.0)
    pub = Publisher(make_info("stall-1"), Settings(history_steps=50_000), tmp_path)
    pub.open()
    ctx = zmq.Context()
    stalled = ctx.socket(zmq.SUB)
    stalled.setsockopt(zmq.RCVHWM, 10)
    stalled.setsockopt(zmq.SUBSCRIBE, b"")
    stalled.connect(pub.endpoints["pub"])
    seen = Seen()
    try:
        with attach(tmp_path, "stall-1") as reader:
            pump = _pump(pub, reader, seen)
            wait_for(lambda: pump() and stalled.poll(10) != 0, 5, "a welcome")
            assert stalled.recv() == WELCOME  # and never another read
            pub.send_steps([make_step(0)])
            wait_for(lambda: pump() and seen.count() == 1, 5, "step 0")
            worst = 0.0
            for i in range(1, 20_000):
                t0 = time.perf_counter()
                pub.send_steps([make_step(i)])
                worst = max(worst, time.perf_counter() - t0)
                if i % 200 == 0:
                    pump()
            poll_until(reader, seen, lambda: pump() and seen.count() >= 20_000)
            assert reader.stats["lost"] == 0
        assert pub.stats.subscriptions == 2
        # What the kernel's socket buffers absorbed for the stalled viewer varies with the
        # host's load; every record it will never get must be counted, no more, no fewer.
        got = _records_waiting(stalled, 20_000 - pub.dropped)
        assert got < 20_000 and pub.dropped == 20_000 - got, (got, pub.dropped)
        # A blocked send would never return; the bound only has to survive a loaded machine.
        assert worst < 2.0, f"a send took {worst * 1000:.1f} ms"
        assert seen.seqs[0] == list(range(20_000)), "the reading viewer misses nothing"
        beats = [e for e in seen.events if isinstance(e, HeartbeatEvent)]
        assert beats and all(e.dropped == 0 for e in beats), "nothing was lost for good"
    finally:
        stalled.close(0)
        ctx.term()
        pub.close(_end(20_000), None)


def _records_waiting(sock: zmq.Socket[bytes], want: int) -> int:
    """The step-record frames (one record each here) a SUB socket holds and has yet to take in
    from the kernel's buffers, read until `want` came or 5 s pass with nothing (a loaded host's
    I/O thread can be that slow), then until 0.2 s pass with nothing more."""
    rec = topic("rec", 0)
    got = 0
    while sock.poll(200 if got >= want else 5000):
        got += sock.recv_multipart()[0] == rec
    return got


def _pump(pub: Publisher, reader: Subscriber, seen: Seen) -> Callable[[], bool]:
    """One tx-thread service() and one viewer poll(); always True, to chain in conditions."""

    def pump() -> bool:
        pub.service(time.monotonic(), last_step=-1, dropped=0, primary=None)
        seen.add(reader.poll(0))
        return True

    return pump


def _end(steps: int) -> RankEnd:
    return RankEnd(0, "ok", steps, time.time())


def _junk_at(endpoint: str) -> None:
    """Raw bytes at the transport level, not even a ZMTP greeting."""
    kind, _, address = endpoint.partition("://")
    if kind == "ipc":
        s = socket.socket(socket.AF_UNIX)
        s.connect(address)
    else:
        host, _, port = address.rpartition(":")
        s = socket.create_connection((host, int(port)))
    with s:
        s.sendall(random.Random(1).randbytes(4096))


def test_junk_on_both_sockets_is_dropped_and_counted(tmp_path: Path) -> None:
    with TxLoop(Publisher(make_info("junk-1"), Settings(), tmp_path)) as loop:
        loop.steps(100)
        pub = loop.publisher
        eps = pub.endpoints
        _junk_at(eps["pub"])
        _junk_at(eps["ctl"])
        ctx = zmq.Context()
        dealer, xsub = ctx.socket(zmq.DEALER), ctx.socket(zmq.XSUB)
        for s in (dealer, xsub):
            s.setsockopt(zmq.LINGER, 0)
        dealer.connect(eps["ctl"])
        xsub.connect(eps["pub"])
        rng = random.Random(2)
        for frames in (
            [rng.randbytes(64)],
            [b"\xc1"],
            [pack({"verb": "exec", "req": 1})],
            [pack([1, 2, 3])],
            [pack({"verb": "snapshot", "req": -1})],
            [pack({"verb": "ping", "req": 1}), b"extra"],
            [b"x" * 8192],
        ):
            dealer.send_multipart(frames)
        dealer.send(b"y" * (1 << 20))
        xsub.send_multipart([b"\x07garbage", b"more"])
        # The tx thread reads both sockets in turns: the oversized request may be counted
        # after the rest of the junk.
        counted = lambda: pub.stats.rejected >= 8 and pub.stats.oversized >= 1  # noqa: E731
        wait_for(counted, 5, "junk (and the oversized request) to be counted")
        seen = Seen()
        with attach(tmp_path, "junk-1") as sub:
            poll_until(sub, seen, lambda: seen.count() >= 100)
        ping = ctx.socket(zmq.DEALER)
        ping.setsockopt(zmq.LINGER, 0)
        ping.connect(eps["ctl"])
        ping.send(Request("ping", 7).pack())
        assert ping.poll(5000), "ROUTER still answers"
        assert len(ping.recv_multipart()) == 2
        for s in (dealer, xsub, ping):
            s.close(0)
        ctx.term()
        assert pub.stats.errors == 0
    assert seen.seqs[0] == list(range(100))


def test_the_same_run_id_twice_never_binds_over_the_live_one(tmp_path: Path) -> None:
    with publisher_process(tmp_path, "twice-1", "--backlog", "30", "--rate", "0"):
        second = Publisher(make_info("twice-1"), Settings(), tmp_path)
        with pytest.raises(TransportError, match=r"twice-1 rank 0 is already live in pid \d+"):
            second.open()
        second.close(_end(0), None)
        seen = Seen()
        with attach(tmp_path, "twice-1") as sub:
            poll_until(sub, seen, lambda: seen.count() >= 30)
        assert seen.seqs[0] == list(range(30))


def test_a_dead_runs_rank_can_be_taken_over(tmp_path: Path) -> None:
    with publisher_process(tmp_path, "reuse-1", "--rate", "0") as proc:
        proc.kill()
        proc.wait(5)
    with TxLoop(Publisher(make_info("reuse-1"), Settings(), tmp_path)) as loop:
        loop.steps(5)
        seen = Seen()
        with attach(tmp_path, "reuse-1") as sub:
            poll_until(sub, seen, lambda: seen.count() >= 5)


def test_a_record_that_cannot_be_packed_is_counted_not_raised(tmp_path: Path) -> None:
    with TxLoop(Publisher(make_info("odd-1"), Settings(), tmp_path)) as loop:
        loop.steps(3)
        loop.wait_published(3)
        odd = StepRecord(0, 3, 0.0, 1.0, (object(),) * 7)  # type: ignore[arg-type]
        loop.push([odd, make_step(4)])
        seen = Seen()
        with attach(tmp_path, "odd-1") as sub:
            poll_until(sub, seen, lambda: seen.count() >= 4)
            poll_until(
                sub,
                seen,
                lambda: any(isinstance(e, HeartbeatEvent) and e.dropped == 1 for e in seen.events),
            )
        assert loop.publisher.stats.unpackable == 1 and loop.publisher.stats.errors == 0
    assert seen.steps[0] == [0, 1, 2, 4]


@pytest.mark.parametrize("listen", ["ipc", "tcp"])
def test_a_subscription_flood_resets_the_xpub_and_viewers_resync(
    tmp_path: Path, listen: str
) -> None:
    """libzmq keeps every subscription a peer sends, even refused: past a cap the publisher
    rebuilds its XPUB on the same endpoint, and an attached viewer re-syncs and misses nothing."""
    settings = Settings(listen="tcp" if listen == "tcp" else "ipc", insecure=True)
    with TxLoop(Publisher(make_info("flood-1"), settings, tmp_path)) as loop:
        pub = loop.publisher
        endpoint = pub.endpoints["pub"]
        loop.steps(50)
        seen = Seen()
        with attach(tmp_path, "flood-1") as sub:
            poll_until(sub, seen, lambda: seen.count() >= 50)
            ctx = zmq.Context()
            flood = ctx.socket(zmq.XSUB)
            flood.setsockopt(zmq.LINGER, 0)
            flood.setsockopt(zmq.SNDHWM, 100_000)
            flood.connect(endpoint)
            rng = random.Random(5)
            for _ in range(2 * MAX_HELD_SUBSCRIPTIONS):
                flood.send(b"\x01\xff" + rng.randbytes(rng.randint(0, 16)), zmq.NOBLOCK)
            poll_until(sub, seen, lambda: pub.stats.resets >= 1)
            assert listen == "tcp" or pub.endpoints["pub"] == endpoint
            flood.close(0)
            ctx.term()
            loop.steps(50)
            poll_until(sub, seen, lambda: seen.count() >= 100, timeout=20)
            resyncs = sub.stats["resyncs"]
        assert pub.stats.errors == 0
    assert seen.seqs[0] == list(range(100))
    assert resyncs >= 1


def test_a_snapshot_request_over_the_limit_is_told_busy_and_served_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MAX_JOBS viewers that ask for a big snapshot and never read hold every slot: the next
    viewer is answered BUSY (not silence, not a malformed reply), asks again, and once a slot
    frees up gets everything."""
    # Stuck jobs are abandoned after JOB_TIMEOUT_S; a slow host must not free a slot that way
    # before the viewer asks.
    monkeypatch.setattr(snapshot_module, "JOB_TIMEOUT_S", 600.0)
    backlog = 60_000
    settings = Settings(history_steps=backlog)
    with TxLoop(Publisher(make_info("busy-1"), settings, tmp_path)) as loop:
        pub = loop.publisher
        loop.steps(backlog)
        loop.wait_published(backlog, timeout=30)
        ctx = zmq.Context()
        stuck = []
        for i in range(MAX_JOBS):
            dealer = ctx.socket(zmq.DEALER)
            dealer.setsockopt(zmq.LINGER, 0)
            dealer.setsockopt(zmq.RCVHWM, 1)
            dealer.connect(pub.endpoints["ctl"])
            dealer.send(Request("snapshot", i + 1).pack())
            stuck.append(dealer)
        for dealer in stuck:  # every slot is taken (each job sent its first part) before we ask
            assert dealer.poll(10_000), "a stuck request was never served"
        seen = Seen()
        with attach(tmp_path, "busy-1") as sub:
            poll_until(sub, seen, lambda: pub.stats.busy >= 2)
            assert seen.count() == 0
            for dealer in stuck:
                dealer.close(0)
            poll_until(sub, seen, lambda: seen.count() >= backlog, timeout=30)
            malformed = sub.stats["malformed"]
        ctx.term()
        assert pub.stats.errors == 0
    assert seen.seqs[0] == list(range(backlog))
    assert malformed == 0


def test_a_rank_that_ended_before_attach_and_comes_back_is_followed(tmp_path: Path) -> None:
    """torchelastic restarted a rank while no viewer was attached, or between two of its
    incarnations: its file names a new process, and the viewer follows it."""
    with publisher_process(tmp_path, "again-1", "--backlog", "5", "--rate", "0") as first:
        first.terminate()
        assert first.wait(10) == 0
    seen = Seen()
    with attach(tmp_path, "again-1") as sub:
        seen.add(sub.poll(50))
        assert sub.rank_states(time.time()) == {0: "finished"}
        with publisher_process(tmp_path, "again-1", "--backlog", "7", "--rate", "0"):
            poll_until(sub, seen, lambda: seen.count() >= 7, timeout=20)
            assert sub.rank_states(time.time()) == {0: "live"}

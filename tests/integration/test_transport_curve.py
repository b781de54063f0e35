"""tcp endpoints: CURVE by default (a client without the key from the 0600 rank file gets
nothing), plain only when asked for, and the fallback when an ipc path would be too long."""

from __future__ import annotations

import stat
from pathlib import Path

import zmq

from tests.integration._publisher_proc import TxLoop, make_info
from tests.integration._transport_helpers import Seen, attach, poll_until
from traceml.config import Settings
from traceml.transport.publish.publisher import Publisher
from traceml.transport.subscribe.runs import resolve_run
from traceml.transport.wire.codec import WELCOME
from traceml.transport.wire.control import Request
from traceml.transport.wire.security import make_client, new_keypair


def _plain(ctx: zmq.Context[zmq.Socket[bytes]], kind: int, endpoint: str) -> zmq.Socket[bytes]:
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    if kind == zmq.SUB:
        sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(endpoint)
    return sock


def test_curve_tcp_serves_only_clients_with_the_key(tmp_path: Path) -> None:
    with TxLoop(_publisher(tmp_path, "curve-1", Settings(listen="tcp"))) as loop:
        loop.steps(50)
        [rank] = resolve_run("curve-1", tmp_path).ranks
        assert rank.endpoints["pub"].startswith("tcp://127.0.0.1:")
        assert rank.curve_key
        assert rank.path is not None and stat.S_IMODE(rank.path.stat().st_mode) == 0o600
        assert new_keypair().secret not in rank.path.read_text()
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        no_key_sub = _plain(ctx, zmq.SUB, rank.endpoints["pub"])
        no_key_ctl = _plain(ctx, zmq.DEALER, rank.endpoints["ctl"])
        wrong = ctx.socket(zmq.SUB)
        wrong.setsockopt(zmq.LINGER, 0)
        make_client(wrong, new_keypair().public)
        wrong.setsockopt(zmq.SUBSCRIBE, b"")
        wrong.connect(rank.endpoints["pub"])
        no_key_ctl.send(Request("ping", 1).pack())
        seen = Seen()
        with attach(tmp_path, "curve-1") as sub:
            poll_until(sub, seen, lambda: seen.count() >= 50)
            loop.steps(10)
            poll_until(sub, seen, lambda: seen.count() >= 60)
        assert seen.seqs[0] == list(range(60))
        for sock in (no_key_sub, no_key_ctl, wrong):
            assert not sock.poll(200), "a client without the key must get nothing"
            sock.close(0)
        ctx.term()


def test_insecure_tcp_is_plain_when_asked_for(tmp_path: Path) -> None:
    with TxLoop(_publisher(tmp_path, "plain-1", Settings(listen="tcp", insecure=True))) as loop:
        [rank] = resolve_run("plain-1", tmp_path).ranks
        assert rank.curve_key is None
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        sub = _plain(ctx, zmq.SUB, rank.endpoints["pub"])
        loop.steps(1)
        assert sub.poll(5000) and sub.recv() == WELCOME
        sub.close(0)
        ctx.term()


def test_an_ipc_path_over_107_bytes_falls_back_to_curve_tcp(tmp_path: Path) -> None:
    runtime = tmp_path / ("r" * 100)
    with TxLoop(_publisher(runtime, "long-1", Settings())) as loop:
        loop.steps(5)
        [rank] = resolve_run("long-1", runtime).ranks
        assert rank.endpoints["ctl"].startswith("tcp://127.0.0.1:") and rank.curve_key
        seen = Seen()
        with attach(runtime, "long-1") as sub:
            poll_until(sub, seen, lambda: seen.count() >= 5)


def _publisher(runtime: Path, run_id: str, settings: Settings) -> Publisher:
    return Publisher(make_info(run_id), settings, runtime)

"""The two sockets a rank binds, owned by its tx thread: XPUB "pub" and ROUTER "ctl".

Every send is non-blocking: a full queue drops the frame (the caller counts it), so a missing,
stalled or killed viewer never slows training. Inbound traffic is read one message at a time in
bounded batches. These sockets must never be used from another thread or after fork.
"""

from __future__ import annotations

import re
from typing import Literal

import zmq

from traceml.errors import TransportError
from traceml.transport.codec import WELCOME
from traceml.transport.endpoints import EndpointPlan, bind
from traceml.transport.security import KeyPair, make_server

PUB_SNDHWM = 1024
"""Frames queued per viewer before that viewer misses frames (it sees a seq gap and re-syncs)."""
CTL_SNDHWM = 16
"""Snapshot chunks queued per viewer; beyond this the job waits for the next service() call."""
INBOUND_HWM = 64
MAX_INBOUND_BYTES = 64 * 1024
"""libzmq disconnects a peer that sends a larger frame; smaller junk is read and counted."""

MAX_SUBSCRIPTION_BYTES = 64

SendResult = Literal["sent", "full", "gone"]


def _socket(ctx: zmq.Context[zmq.Socket[bytes]], kind: int) -> zmq.Socket[bytes]:
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, INBOUND_HWM)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_INBOUND_BYTES)
    return sock


class Channels:
    """A bound XPUB + ROUTER pair and their real endpoints."""

    def __init__(self, pub: zmq.Socket[bytes], ctl: zmq.Socket[bytes]) -> None:
        self.pub = pub
        self.ctl = ctl
        self.endpoints: dict[str, str] = {}
        self.lagging = False
        """A viewer's queue was full: libzmq now skips that viewer without telling us, so every
        frame counts as dropped until the viewer re-syncs or leaves (see `caught_up`)."""

    @classmethod
    def open(
        cls, ctx: zmq.Context[zmq.Socket[bytes]], plan: EndpointPlan, keys: KeyPair | None
    ) -> Channels:
        """Create, configure and bind both sockets (TransportError, with nothing left open)."""
        try:
            channels = cls(_socket(ctx, zmq.XPUB), _socket(ctx, zmq.ROUTER))
        except zmq.ZMQError as e:
            raise TransportError(f"cannot create sockets: {e.strerror}") from e
        try:
            channels._configure(keys)
            channels.endpoints = {
                "pub": bind(channels.pub, plan.pub),
                "ctl": bind(channels.ctl, plan.ctl),
            }
        except (TransportError, zmq.ZMQError) as e:
            channels.close()
            if isinstance(e, TransportError):
                raise
            raise TransportError(f"cannot configure sockets: {e.strerror}") from e
        return channels

    def _configure(self, keys: KeyPair | None) -> None:
        self.pub.setsockopt(zmq.SNDHWM, PUB_SNDHWM)
        self.pub.setsockopt(zmq.XPUB_NODROP, 1)
        self.pub.setsockopt(zmq.XPUB_VERBOSER, 1)
        # Manual: a subscription takes effect only when `apply_subscription` accepts it, so a
        # peer cannot grow libzmq's subscription trie in the job with random topics.
        self.pub.setsockopt(zmq.XPUB_MANUAL, 1)
        if keys is None:
            # A real subscription is at most 1 + 12 bytes; libzmq buffers each inbound one before
            # we see it, so bigger frames (junk, floods) are refused at the door. Not under CURVE:
            # the limit also applies to its handshake (HELLO is 200 bytes), and a peer without
            # the key cannot send a subscription at all.
            self.pub.setsockopt(zmq.MAXMSGSIZE, MAX_SUBSCRIPTION_BYTES)
        self.pub.setsockopt(zmq.XPUB_WELCOME_MSG, WELCOME)
        self.ctl.setsockopt(zmq.SNDHWM, CTL_SNDHWM)
        self.ctl.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if keys is not None:
            make_server(self.pub, keys)
            make_server(self.ctl, keys)

    def publish(self, frames: list[bytes]) -> bool:
        """Send to every viewer whose queue has room; False if some viewer missed the frame.

        XPUB_NODROP makes a full viewer queue visible (EAGAIN); the retry without it still
        reaches the other viewers, so one stalled viewer never starves the rest.
        """
        try:
            self.pub.send_multipart(frames, zmq.NOBLOCK)
            return not self.lagging
        except zmq.Again:
            pass
        self.lagging = True
        self.pub.setsockopt(zmq.XPUB_NODROP, 0)
        try:
            self.pub.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            pass
        finally:
            self.pub.setsockopt(zmq.XPUB_NODROP, 1)
        return False

    def apply_subscription(self, msg: bytes) -> bool:
        """Apply the (un)subscription `msg` just read from the XPUB if it names a real topic
        (everything, or a kind, or a kind and a rank); False, and nothing applied, otherwise."""
        topic = msg[1:]
        if not is_topic_prefix(topic):
            return False
        option = zmq.SUBSCRIBE if msg[:1] == b"\x01" else zmq.UNSUBSCRIBE
        self.pub.setsockopt(option, topic)
        return True

    def caught_up(self) -> None:
        """A viewer re-synced or left: stop counting frames as dropped."""
        self.lagging = False

    def read_pub(self) -> list[bytes] | None:
        """One inbound message on the XPUB (subscriptions, or junk), None when there is none."""
        return _recv(self.pub)

    def read_ctl(self) -> list[bytes] | None:
        """One inbound ROUTER message, `[identity, *frames]`, None when there is none."""
        return _recv(self.ctl)

    def reply(self, frames: list[bytes]) -> SendResult:
        """Send `[identity, *frames]` on the ROUTER without blocking."""
        try:
            self.ctl.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            return "full"
        except zmq.ZMQError as e:
            if e.errno == zmq.EHOSTUNREACH:
                return "gone"
            raise
        return "sent"

    def close(self) -> None:
        """Close both sockets at once (linger 0); idempotent."""
        for sock in (self.pub, self.ctl):
            if not sock.closed:
                sock.close(linger=0)


_TOPIC_PREFIX = re.compile(rb"(?:(?:rec|sys|hb|evt)(?:\.[0-9]{0,7})?)?")


def is_topic_prefix(topic: bytes) -> bool:
    """True for b"", b"rec", b"rec.", b"rec.12" and the like: what a viewer may subscribe to."""
    return _TOPIC_PREFIX.fullmatch(topic) is not None


def _recv(sock: zmq.Socket[bytes]) -> list[bytes] | None:
    try:
        return sock.recv_multipart(zmq.NOBLOCK)
    except zmq.Again:
        return None

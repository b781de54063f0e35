"""The two sockets a rank binds, used by its beats alone: XPUB "pub" and ROUTER "ctl".

Every send is non-blocking: a full queue drops the frame (the caller counts it), so a missing,
stalled or killed viewer never slows training. Inbound traffic is read one message at a time in
bounded batches. These sockets must never be used from another thread or after fork.
"""

from __future__ import annotations

import re
from typing import Literal

import zmq

from traceml.errors import TransportError
from traceml.transport.publish.endpoints import EndpointPlan, bind
from traceml.transport.wire.codec import WELCOME
from traceml.transport.wire.security import KeyPair, make_server

PUB_SNDHWM = 1024
"""Frames queued per viewer before that viewer misses frames (it sees a seq gap and re-syncs)."""
CTL_SNDHWM = 16
"""Snapshot chunks queued per viewer; beyond this the job waits for the next service() call."""
INBOUND_HWM = 64
MAX_INBOUND_BYTES = 64 * 1024
"""libzmq disconnects a peer that sends a larger frame; smaller junk is read and counted."""

MAX_SUBSCRIPTION_BYTES = 64
MAX_HELD_SUBSCRIPTIONS = 128
"""Subscriptions the XPUB may hold before it is rebuilt. libzmq keeps every subscription a peer
sends, refused ones too (XPUB_MANUAL included), until that peer leaves: about 2 KB each for random
topics. A viewer holds one, so only a flood reaches this; its peers are then cut off."""

REBIND_TRIES = 100
"""keep_bounded() calls that retry the old endpoint before binding a fresh one."""

SendResult = Literal["sent", "full", "gone"]


def _socket(ctx: zmq.Context[zmq.Socket[bytes]], kind: int) -> zmq.Socket[bytes]:
    sock = ctx.socket(kind)
    _configure_common(sock)
    return sock


def _configure_common(sock: zmq.Socket[bytes]) -> None:
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, INBOUND_HWM)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_INBOUND_BYTES)


def _configure_pub(pub: zmq.Socket[bytes], keys: KeyPair | None) -> None:
    pub.setsockopt(zmq.SNDHWM, PUB_SNDHWM)
    pub.setsockopt(zmq.XPUB_NODROP, 1)
    pub.setsockopt(zmq.XPUB_VERBOSER, 1)
    # Manual: a subscription takes effect only when `apply_subscription` accepts it, so a peer
    # cannot add topics to the trie libzmq matches every published frame against.
    pub.setsockopt(zmq.XPUB_MANUAL, 1)
    if keys is None:
        # A real subscription is at most 1 + 12 bytes; libzmq buffers each inbound one before
        # we see it, so bigger frames (junk, floods) are refused at the door. Not under CURVE:
        # the limit also applies to its handshake (HELLO is 200 bytes), and a peer without
        # the key cannot send a subscription at all.
        pub.setsockopt(zmq.MAXMSGSIZE, MAX_SUBSCRIPTION_BYTES)
    pub.setsockopt(zmq.XPUB_WELCOME_MSG, WELCOME)
    if keys is not None:
        make_server(pub, keys)


class Channels:
    """A bound XPUB + ROUTER pair and their real endpoints."""

    def __init__(self, pub: zmq.Socket[bytes], ctl: zmq.Socket[bytes]) -> None:
        self.pub = pub
        self.ctl = ctl
        self.endpoints: dict[str, str] = {}
        self.held = 0
        """Subscriptions libzmq holds for the XPUB's peers as far as we can tell: refused ones
        (kept until their peer leaves, which we cannot see) and accepted ones not cancelled."""
        self.rebuilds = 0
        """Times the XPUB was rebuilt because `held` passed MAX_HELD_SUBSCRIPTIONS."""
        self._accepted: dict[bytes, int] = {}
        self._ctx: zmq.Context[zmq.Socket[bytes]] | None = None
        self._keys: KeyPair | None = None
        self._pub_plan = ""
        self._pub_bound = True
        self._bind_tries = 0
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
        channels._ctx, channels._keys, channels._pub_plan = ctx, keys, plan.pub
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
        _configure_pub(self.pub, keys)
        self.ctl.setsockopt(zmq.SNDHWM, CTL_SNDHWM)
        self.ctl.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if keys is not None:
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

    def apply_subscription(self, msg: list[bytes]) -> bool:
        """Apply the (un)subscription `msg` just read from the XPUB if it is one frame naming a
        real topic (everything, a kind, a kind and a rank); False, nothing applied, otherwise."""
        topic, subscribe = msg[0][1:], msg[0][:1] == b"\x01"
        if len(msg) != 1 or msg[0][:1] not in (b"\x00", b"\x01") or not is_topic_prefix(topic):
            # libzmq took every frame that starts with 1 as a subscription and keeps it.
            self.held += sum(frame[:1] == b"\x01" for frame in msg)
            return False
        if subscribe:
            self._accepted[topic] = self._accepted.get(topic, 0) + 1
            self.held += 1
        elif topic in self._accepted:
            self.held -= 1
            if self._accepted[topic] == 1:
                del self._accepted[topic]
            else:
                self._accepted[topic] -= 1
        self.pub.setsockopt(zmq.SUBSCRIBE if subscribe else zmq.UNSUBSCRIBE, topic)
        return True

    def keep_bounded(self) -> bool:
        """Rebuild the XPUB on the same endpoint when its peers' subscriptions pass
        MAX_HELD_SUBSCRIPTIONS (True then). Every peer is cut off; viewers reconnect by
        themselves, get the welcome again and re-sync. Never blocks; a bind that fails (a tcp
        port the old socket still holds for a moment) is tried again on the next call."""
        if not self._pub_bound:
            self._bind_pub()
        if self.held <= MAX_HELD_SUBSCRIPTIONS or self._ctx is None:
            return False
        self.pub.close(linger=0)
        self.pub = self._ctx.socket(zmq.XPUB)
        _configure_common(self.pub)
        _configure_pub(self.pub, self._keys)
        self.held, self._accepted, self.lagging = 0, {}, False
        self.rebuilds += 1
        self._pub_bound = False
        self._bind_pub()
        return True

    def _bind_pub(self) -> None:
        """Bind the rebuilt XPUB where the old one was; after REBIND_TRIES failures, where the
        plan says (a fresh tcp port, which the rank file then announces)."""
        self._bind_tries += 1
        give_up = self._bind_tries > REBIND_TRIES
        try:
            self.endpoints["pub"] = bind(
                self.pub, self._pub_plan if give_up else self.endpoints["pub"]
            )
        except TransportError:
            return
        self._pub_bound, self._bind_tries = True, 0

    @property
    def watched(self) -> bool:
        """Whether some peer holds a subscription to a real topic: a viewer is listening."""
        return bool(self._accepted)

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

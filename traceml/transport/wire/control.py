"""Requests to a rank's ROUTER ("ctl") socket: bounded msgpack maps with a whitelisted verb.

`parse_request` is the only way a request enters the publisher: anything oversized, not msgpack,
not a map, or with an unknown verb raises SchemaError and is dropped and counted by the caller.
Nothing here ever unpickles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from traceml.errors import SchemaError
from traceml.transport.wire.codec import pack, unpack

MAX_REQUEST_BYTES = 4096
"""Largest request the ROUTER accepts; anything larger is dropped and counted."""

Verb = Literal["snapshot", "ping"]
VERBS: tuple[Verb, ...] = ("snapshot", "ping")


class OversizedRequest(SchemaError):
    """A request frame larger than MAX_REQUEST_BYTES."""


@dataclass(frozen=True, slots=True)
class Request:
    """One request from a viewer's DEALER."""

    verb: Verb
    req: int
    """Id chosen by the viewer, echoed in every reply part."""
    since: int = 0
    """snapshot: first step seq wanted."""
    events_since: int = 0
    """snapshot: first event id wanted."""

    def pack(self) -> bytes:
        return pack(
            {"verb": self.verb, "req": self.req, "since": self.since, "events": self.events_since}
        )


def parse_request(frame: bytes) -> Request:
    """Validate one request frame.

    Raises:
        OversizedRequest: larger than MAX_REQUEST_BYTES.
        SchemaError: not a msgpack map with a known verb and integer fields.
    """
    if len(frame) > MAX_REQUEST_BYTES:
        raise OversizedRequest(f"request of {len(frame)} bytes, over {MAX_REQUEST_BYTES}")
    obj = unpack(frame, "request")
    if not isinstance(obj, dict):
        raise SchemaError("request: not a map")
    verb = obj.get("verb")
    if verb not in VERBS:
        raise SchemaError(f"request: unknown verb {str(verb)[:32]!r}")
    return Request(
        verb=verb,
        req=_count(obj, "req"),
        since=_count(obj, "since"),
        events_since=_count(obj, "events"),
    )


def _count(obj: dict[str, Any], key: str) -> int:
    value = obj.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**62:
        raise SchemaError(f"request: {key} must be a non-negative integer")
    return value

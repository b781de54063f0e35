"""ROUTER requests: bounded msgpack maps with a whitelisted verb, nothing else."""

from __future__ import annotations

import pytest

from traceml.errors import SchemaError
from traceml.transport.wire.codec import pack
from traceml.transport.wire.control import (
    MAX_REQUEST_BYTES,
    OversizedRequest,
    Request,
    parse_request,
)


@pytest.mark.parametrize(
    "request_",
    [Request("snapshot", 1, since=10, events_since=2), Request("ping", 5)],
)
def test_requests_round_trip(request_: Request) -> None:
    assert parse_request(request_.pack()) == request_


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\xc1",
        pack([1, 2]),
        pack({"verb": "exec", "req": 1}),
        pack({"verb": None}),
        pack({"verb": "snapshot", "req": -1}),
        pack({"verb": "snapshot", "req": True}),
        pack({"verb": "snapshot", "req": 1, "since": "0"}),
        pack({"verb": "snapshot", "req": 2**63}),
        pack({1: "snapshot"}),
    ],
)
def test_malformed_requests_are_refused(frame: bytes) -> None:
    with pytest.raises(SchemaError):
        parse_request(frame)


def test_oversized_requests_are_refused_before_decoding() -> None:
    frame = pack({"verb": "ping", "req": 1, "pad": "x" * MAX_REQUEST_BYTES})
    with pytest.raises(OversizedRequest):
        parse_request(frame)

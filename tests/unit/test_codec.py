"""Frames: headers round-trip, other wire versions get a clear error, the step fast path agrees
with StepRecord.from_wire."""

from __future__ import annotations

import dataclasses
import math

import msgpack
import pytest

from traceml.errors import SchemaError
from traceml.records import StepRecord, SystemSample
from traceml.transport.wire.codec import (
    Header,
    WireVersionError,
    array_header,
    decode_steps,
    pack,
    pack_array,
    parse_topic,
    step_from_wire,
    topic,
    unpack,
)

STEP = StepRecord(3, 7, 1.7e9, 12.5, (1.0, None, 2.0, 3.0, 4.0, None, 2.5), "cuda", 10.0, 1.0)


def test_header_round_trips() -> None:
    plain = Header("run-1", 3, 2, 41, 1.5)
    reply = Header("run-1", 3, 2, 41, 1.5, req=9, part=2, done=True)
    assert Header.unpack(plain.pack()) == plain
    assert Header.unpack(reply.pack()) == reply


def test_another_wire_version_is_a_clear_schema_error() -> None:
    frame = pack({"v": 2, "run": "r", "rank": 0, "inc": 0, "seq": 0, "t": 0.0})
    with pytest.raises(WireVersionError, match="same TraceML version"):
        Header.unpack(frame)
    assert issubclass(WireVersionError, SchemaError)


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\xc1",
        pack([1, 2]),
        pack({"v": 1, "run": "r", "rank": 0, "inc": 0, "seq": 0}),
        pack({"v": 1, "run": 5, "rank": 0, "inc": 0, "seq": 0, "t": 0.0}),
        pack({"v": 1, "run": "r", "rank": True, "inc": 0, "seq": 0, "t": 0.0}),
    ],
)
def test_malformed_headers_raise_schema_error(frame: bytes) -> None:
    with pytest.raises(SchemaError):
        Header.unpack(frame)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"rec.0", ("rec", 0)),
        (b"hb.12", ("hb", 12)),
        (b"evt.3", ("evt", 3)),
        (b"sys.1", ("sys", 1)),
    ],
)
def test_topics_parse(data: bytes, expected: tuple[str, int]) -> None:
    assert parse_topic(data) == expected
    assert topic(*expected) == data


@pytest.mark.parametrize("data", [b"rec", b"rec.", b"rec.x", b"foo.1", b"rec.-1", b""])
def test_unknown_topics_raise(data: bytes) -> None:
    with pytest.raises(SchemaError):
        parse_topic(data)


@pytest.mark.parametrize("n", [0, 1, 15, 16, 65535, 65536])
def test_pack_array_is_a_msgpack_array(n: int) -> None:
    items = [pack(i % 100) for i in range(n)]
    assert pack_array(items) == msgpack.packb([i % 100 for i in range(n)])
    assert len(array_header(n)) in (1, 3, 5)


def test_steps_decode_through_the_fast_path_like_from_wire() -> None:
    body = pack_array([pack(STEP.to_wire()), pack(STEP.to_wire())])
    assert decode_steps(body) == (STEP, STEP)
    wire = unpack(pack(STEP.to_wire()), "t", use_list=False)
    assert step_from_wire(wire, finite=True) == StepRecord.from_wire(list(wire))


def test_a_measured_comm_wait_travels_as_a_twelfth_field() -> None:
    waited = STEP._replace(comm_wait_ms=1.5)
    assert len(waited.to_wire()) == len(STEP.to_wire()) + 1
    assert decode_steps(pack_array([pack(waited.to_wire()), pack(STEP.to_wire())])) == (
        waited,
        STEP,
    )
    wire = unpack(pack(waited.to_wire()), "t", use_list=False)
    assert step_from_wire(wire, finite=True).comm_wait_ms == 1.5


def test_a_step_held_by_tracemls_thread_carries_the_overlap_as_a_thirteenth_field() -> None:
    held = STEP._replace(held_ms=4.25)
    both = STEP._replace(comm_wait_ms=1.5, held_ms=4.25)
    assert len(held.to_wire()) == len(STEP.to_wire()) + 2  # comm wait stays in its place
    assert held.to_wire()[11] is None
    body = pack_array([pack(held.to_wire()), pack(both.to_wire()), pack(STEP.to_wire())])
    assert decode_steps(body) == (held, both, STEP)
    for rec in (held, both):
        wire = unpack(pack(rec.to_wire()), "t", use_list=False)
        assert step_from_wire(wire, finite=True) == rec
        assert StepRecord.from_wire(list(wire)) == rec
    assert StepRecord.from_wire(STEP.to_wire()).held_ms is None  # an older sender's record


@pytest.mark.parametrize("bad", [math.nan, -math.nan, math.inf, -math.inf])
def test_non_finite_numbers_take_the_slow_path(bad: float) -> None:
    odd = StepRecord(0, 1, 1.0, 2.0, (1.0, None, 1.0, 1.0, 1.0, None, 1.0), "host", bad)
    body = pack_array([pack(STEP.to_wire()), pack(odd.to_wire())])
    rec = decode_steps(body)[1]
    if math.isnan(bad):
        assert rec.host_rss_mb is None
    else:
        assert rec.host_rss_mb == bad
    as_float32 = msgpack.packb([odd.to_wire()], use_single_float=True)
    [rec] = decode_steps(as_float32)
    assert rec.host_rss_mb is None if math.isnan(bad) else rec.host_rss_mb == bad


@pytest.mark.parametrize("body", [pack({"a": 1}), pack([[9, 0]]), b"\xc1", pack([["x"] * 11])])
def test_malformed_step_bodies_raise_schema_error(body: bytes) -> None:
    with pytest.raises(SchemaError):
        decode_steps(body)


@pytest.mark.parametrize(
    ("topic", "ok"),
    [
        (b"", True),
        (b"rec", True),
        (b"rec.", True),
        (b"rec.12", True),
        (b"hb.0", True),
        (b"evt.3", True),
        (b"sys", True),
        (b"x", False),
        (b"rec.12a", False),
        (b"rec.123456789", False),
        (b"recx", False),
        (b"\x00" * 100, False),
    ],
)
def test_only_real_topics_may_be_subscribed(topic: bytes, ok: bool) -> None:
    from traceml.transport.publish.channels import is_topic_prefix

    assert is_topic_prefix(topic) is ok


def test_a_system_sample_carries_traceml_own_cpu_and_reads_the_shorter_form() -> None:
    sample = SystemSample(2, 1.7e9, 95.0, 40.0, traceml_cpu_pct=1.5)
    wire = unpack(pack(sample.to_wire()), "t")
    assert SystemSample.from_wire(wire) == sample
    older = wire[:12]  # a sender from before the field: the rest of the sample still reads
    assert SystemSample.from_wire(older) == dataclasses.replace(sample, traceml_cpu_pct=None)

"""The C packer of step records (_pack.c) against its Python reference: the same bytes.

`Packer.pack_steps` packs in C when built; the reference is `pack(rec.to_wire())` with msgpack
itself. Random records cover every integer format (fixint to int64, negative ones), floats
including NaN, infinities and -0.0, None, short and long strings, phases as tuples and lists, and
each trailing-field case of `to_wire`. What the C path does not model must give the same result
as Python: the same bytes, or the same error.
"""

from __future__ import annotations

import math
import random
import sys
import types
from typing import Any

import msgpack
import pytest

from traceml.records import PHASES, WIRE_VERSION, StepRecord
from traceml.transport.wire import codec
from traceml.transport.wire.codec import Packer, pack, pack_array

c_pack = codec._pack_module()

INTS = [
    0, 1, 31, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1,
    -1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63),
]  # fmt: skip
FLOATS = [0.0, -0.0, 1.5, -2.25, 1e300, 5e-324, math.inf, -math.inf, math.nan, 0.4123456789]
STRINGS = ["host", "cuda", "", "x" * 31, "y" * 32, "z" * 255, "w" * 256, "é" * 40000, "🙂"]


def number(rng: random.Random) -> int | float:
    return rng.choice(INTS) if rng.random() < 0.3 else rng.choice([*FLOATS, rng.uniform(-1e6, 1e6)])


def optional(rng: random.Random) -> Any:
    return None if rng.random() < 0.4 else number(rng)


def random_record(rng: random.Random) -> StepRecord:
    phases: Any = tuple(optional(rng) for _ in PHASES)
    if rng.random() < 0.2:
        phases = list(phases)
    if rng.random() < 0.05:  # the array16 and array32 headers too
        phases = tuple(number(rng) for _ in range(rng.choice([0, 15, 16, 70000])))
    return StepRecord(
        rank=rng.choice(INTS),
        step=rng.choice(INTS),
        wall_start=number(rng),
        step_ms=number(rng),
        phases=phases,
        clock=rng.choice(STRINGS),  # type: ignore[arg-type]
        host_rss_mb=optional(rng),
        device_allocated_mb=optional(rng),
        device_reserved_mb=optional(rng),
        device_peak_mb=optional(rng),
        comm_wait_ms=optional(rng),
        held_ms=optional(rng),
    )


def reference(records: list[StepRecord]) -> list[bytes]:
    return [pack(rec.to_wire()) for rec in records]


def test_the_c_packer_is_built_and_chosen() -> None:
    assert c_pack is not None, "the C packer is not built: run `make install`"
    assert Packer()._c is c_pack


@pytest.mark.parametrize("seed", range(20))
def test_c_bytes_equal_msgpacks_on_random_records(seed: int) -> None:
    rng = random.Random(seed)
    records = [random_record(rng) for _ in range(200)]
    assert c_pack is not None
    packed = c_pack.pack_steps(records, StepRecord, WIRE_VERSION)
    assert packed is not None, "every value here is one the C path models"
    assert packed == reference(records)
    assert Packer().pack_steps(records) == packed
    assert Packer(native=False).pack_steps(records) == packed


def test_each_trailing_field_case_matches_to_wire() -> None:
    base = StepRecord(0, 7, 1.0, 2.0, (0.5,) * len(PHASES), "host", 10.0)
    cases = [
        base,
        base._replace(comm_wait_ms=0.25),
        base._replace(held_ms=0.125),  # comm None stays in the list before held
        base._replace(comm_wait_ms=0.25, held_ms=0.125),
    ]
    packed = Packer().pack_steps(cases)
    assert [len(msgpack.unpackb(p)) for p in packed] == [11, 12, 13, 13]
    assert packed == reference(cases)
    assert msgpack.unpackb(packed[2])[11] is None


@pytest.mark.parametrize(
    "odd",
    [
        True,  # a bool is packed as a bool, not an int
        2**64 - 1,  # uint64: msgpack's, the C path declines
        2**64,  # beyond any msgpack int
        -(2**63) - 1,
        float("nan"),
        "\ud800",  # a lone surrogate: not UTF-8 encodable
        b"raw",
        {"a": 1},
        object(),
        type("F", (float,), {})(1.5),  # subclasses are left to msgpack
        type("I", (int,), {})(3),
        (((((1.0,),),),),),  # deeper than any record
    ],
)
def test_what_c_does_not_model_gives_pythons_result(odd: Any) -> None:
    records = [
        StepRecord(0, 1, 1.0, 2.0, (None,) * len(PHASES), "host"),
        StepRecord(0, 2, 1.0, 2.0, (None,) * len(PHASES), "host", host_rss_mb=odd),
    ]
    try:
        expected: list[bytes] | type[Exception] = reference(records)
    except (TypeError, ValueError, OverflowError) as e:
        expected = type(e)
    for packer in (Packer(), Packer(native=False)):
        if isinstance(expected, list):
            assert packer.pack_steps(records) == expected
        else:
            with pytest.raises(expected):
                packer.pack_steps(records)


def test_records_of_another_type_or_shape_are_left_to_python() -> None:
    assert c_pack is not None
    rec = StepRecord(0, 1, 1.0, 2.0, (None,) * len(PHASES), "host")
    assert c_pack.pack_steps([tuple(rec)], StepRecord, WIRE_VERSION) is None
    assert c_pack.pack_steps(iter([rec]), StepRecord, WIRE_VERSION) is None
    assert c_pack.pack_steps([], StepRecord, WIRE_VERSION) == []
    assert c_pack.pack_steps((rec,), StepRecord, WIRE_VERSION) == reference([rec])
    with pytest.raises(TypeError):
        c_pack.pack_steps([rec], StepRecord)


def test_without_the_c_build_python_packs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "traceml.transport.wire._pack", None)
    assert codec._pack_module() is None
    monkeypatch.setenv("TRACEML_C_TIMER", "0")
    monkeypatch.delitem(sys.modules, "traceml.transport.wire._pack")
    assert codec._pack_module() is None


@pytest.mark.parametrize(
    ("layout", "fields"),
    [
        ((("comm_wait_ms", 9), ("held_ms", 11)), 12),
        ((("comm_wait_ms", 10), ("held_ms", 12)), 12),
        ((), 12),
        ((("comm_wait_ms", 10), ("held_ms", 11)), 13),
    ],
)
def test_a_build_for_another_record_layout_is_not_used(
    monkeypatch: pytest.MonkeyPatch, layout: tuple[tuple[str, int], ...], fields: int
) -> None:
    """A .so built for another StepRecord would leave out the wrong fields."""
    assert c_pack is not None and c_pack.RECORD_LAYOUT == (("comm_wait_ms", 10), ("held_ms", 11))
    stale = types.ModuleType("traceml.transport.wire._pack")
    stale.RECORD_LAYOUT, stale.RECORD_FIELDS = layout, fields  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "traceml.transport.wire._pack", stale)
    assert codec._pack_module() is None


# -- decoding -----------------------------------------------------------------------------------


def python_decode(body: bytes, monkeypatch: pytest.MonkeyPatch) -> Any:
    """decode_steps with the C path switched off: the records, or the exception type."""
    with monkeypatch.context() as m:
        m.setattr(codec, "_C", None)
        try:
            return codec.decode_steps(body)
        except Exception as e:
            return type(e)


def c_decode(body: bytes) -> Any:
    try:
        return codec.decode_steps(body)
    except Exception as e:
        return type(e)


def frame_of(records: Any, **packer: Any) -> bytes:
    body: bytes = msgpack.packb(records, use_bin_type=True, **packer)
    return body


def finite_record(rng: random.Random) -> StepRecord:
    """A record as a rank sends it: finite floats or None, ints for rank and step."""

    def opt() -> float | None:
        return (
            None if rng.random() < 0.4 else rng.choice([0.0, -0.0, 5e-324, rng.uniform(-1e9, 1e9)])
        )

    return StepRecord(
        rank=rng.choice(INTS),
        step=rng.choice(INTS),
        wall_start=rng.uniform(0, 2e9),
        step_ms=rng.choice([0.0, -1.5, rng.lognormvariate(0, 2)]),
        phases=tuple(opt() for _ in PHASES),
        clock=rng.choice(["host", "cuda"]),
        host_rss_mb=opt(),
        device_allocated_mb=opt(),
        device_reserved_mb=opt(),
        device_peak_mb=opt(),
        comm_wait_ms=opt(),
        held_ms=opt(),
    )


@pytest.mark.parametrize("seed", range(10))
def test_c_decodes_what_python_decodes(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    records = [finite_record(rng) for _ in range(rng.choice([0, 1, 15, 16, 300]))]
    body = pack_array(Packer(native=False).pack_steps(records))
    assert c_pack is not None
    direct = c_pack.unpack_steps(body, StepRecord, WIRE_VERSION, len(PHASES))
    assert direct is not None, "a rank's records are what the C path models"
    # repr tells 0 from 0.0 and -0.0 from 0.0, which == does not
    assert repr(direct) == repr(python_decode(body, monkeypatch)) == repr(tuple(records))
    assert all(type(r) is StepRecord for r in direct)


def wire(**change: Any) -> list[Any]:
    rec = StepRecord(3, 9, 1.5e9, 0.4, (0.1, None, 0.2, 0.05, None, None, 0.05), "host", 312.5)
    out = [WIRE_VERSION, *rec[:10]]
    for i, value in change.items():
        out[int(i[1:])] = value
    return out


@pytest.mark.parametrize(
    "body",
    [
        frame_of([wire(f3=7)]),  # an int where a float belongs: kept as the int
        frame_of([wire(f7=300)]),
        frame_of([wire(f5=[0.1, 2, None, None, None, None, None])]),
        frame_of([wire(f4=math.nan)]),  # not finite: the Python path's rules
        frame_of([wire(f7=math.inf)]),
        frame_of([wire(f5=[math.nan] * len(PHASES))]),
        frame_of([wire()], use_single_float=True),  # float32
        frame_of([wire(f1=True)]),
        frame_of([wire(f2=2**64 - 1)]),
        frame_of([wire(f0=WIRE_VERSION + 1)]),
        frame_of([wire(f6="tpu")]),
        frame_of([wire(f6="x" * 40)]),
        frame_of([wire(f6=None)]),
        frame_of([wire(f5=[0.1] * (len(PHASES) - 1))]),
        frame_of([wire(f5="phases")]),
        frame_of([[*wire(), None, None, None]]),  # 14 fields
        frame_of([wire()[:10]]),  # 9 fields
        frame_of([wire(), "not a record"]),
        frame_of({"not": "an array"}),
        frame_of([wire()]) + b"\xc0",  # trailing bytes
        frame_of([wire()])[:-3],  # truncated
        b"\xdd\xff\xff\xff\xff" + frame_of([wire()])[1:],  # a count the body cannot hold
        b"",
        b"\xc1",
    ],
)
def test_what_c_does_not_decode_gives_pythons_result(
    body: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert c_pack is not None
    assert c_pack.unpack_steps(body, StepRecord, WIRE_VERSION, len(PHASES)) is None
    assert repr(c_decode(body)) == repr(python_decode(body, monkeypatch))


def test_each_trailing_field_count_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = StepRecord(0, 7, 1.0, 2.0, (0.5,) * len(PHASES), "cuda", 10.0)
    cases = [rec, rec._replace(comm_wait_ms=0.25), rec._replace(held_ms=0.125)]
    body = pack_array(Packer().pack_steps(cases))
    assert c_pack is not None
    assert c_pack.unpack_steps(body, StepRecord, WIRE_VERSION, len(PHASES)) == tuple(cases)
    assert python_decode(body, monkeypatch) == tuple(cases)

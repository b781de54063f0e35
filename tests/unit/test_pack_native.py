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
from traceml.transport.wire.codec import Packer, pack

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

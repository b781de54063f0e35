"""Frames on the wire: `[topic, header, body]` in msgpack, with a version checked on every decode.

Shared by the publisher (tx thread) and the subscriber. Decoding raises SchemaError and nothing
else (WireVersionError for a frame of another TraceML version); nothing here ever unpickles.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

import msgpack

from traceml.errors import SchemaError
from traceml.extensions import load
from traceml.records import PHASES, WIRE_VERSION, StepRecord, step_record_of

FRAME_VERSION = 1
"""Version of frame headers; a viewer refuses frames of any other version with a clear error."""

Kind = Literal["rec", "sys", "hb", "evt"]
KINDS: tuple[Kind, ...] = ("rec", "sys", "hb", "evt")
WELCOME = b"traceml.welcome"
"""XPUB welcome message: a subscriber that gets it knows its subscription has reached the rank."""


class WireVersionError(SchemaError):
    """A frame from a TraceML that speaks another wire version."""


def pack(obj: Any) -> bytes:
    """msgpack bytes of plain data (TypeError/ValueError on anything else)."""
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def _pack_module() -> ModuleType | None:
    """traceml.transport.wire._pack (the C packer and decoder) when built and allowed
    (extensions.load: TRACEML_C_TIMER, the record layout) and built for as many fields as
    StepRecord has, the trailing ones it leaves out included (else a stale build: None)."""
    c = load("traceml.transport.wire._pack")
    return c if c is not None and len(StepRecord._fields) == c.RECORD_FIELDS else None


_C = _pack_module()


class Packer:
    """`pack` for one thread that packs many small items (a rank's step records): reusing one
    msgpack packer costs half of `pack`'s new packer per call. Not thread-safe."""

    __slots__ = ("_c", "_packer")

    def __init__(self, native: bool = True) -> None:
        self._packer = msgpack.Packer(use_bin_type=True)
        self._c = _C if native else None
        """The C packer of step records (_pack.c), None for the Python reference alone."""

    def pack_steps(self, records: Sequence[StepRecord]) -> list[bytes]:
        """`pack(rec.to_wire())` of each record, the same bytes whichever path packs them: in C
        when built (0.55 µs a record less here), in Python for anything the C path declines
        (which raises as `pack` does on what is not plain data)."""
        if self._c is not None:
            packed: list[bytes] | None = self._c.pack_steps(records, StepRecord, WIRE_VERSION)
            if packed is not None:
                return packed
        pack_one = self.pack
        return [pack_one(rec.to_wire()) for rec in records]

    def pack(self, obj: Any) -> bytes:
        """As `pack` (TypeError/ValueError on anything but plain data)."""
        try:
            data: bytes = self._packer.pack(obj)
        except BaseException:
            self._packer.reset()
            raise
        return data


def unpack(data: bytes, what: str, *, use_list: bool = True) -> Any:
    """Decode msgpack, raising SchemaError (never another type) when it is not msgpack."""
    try:
        return msgpack.unpackb(data, raw=False, use_list=use_list, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise SchemaError(f"{what}: not valid msgpack ({e})") from e


def array_header(n: int) -> bytes:
    """msgpack header of an array of `n` items, to wrap items packed one by one."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def pack_array(items: Sequence[bytes]) -> bytes:
    """A msgpack array of already packed items, without unpacking them again."""
    return array_header(len(items)) + b"".join(items)


def topic(kind: Kind, rank: int) -> bytes:
    return f"{kind}.{rank}".encode()


def parse_topic(data: bytes) -> tuple[Kind, int]:
    """(kind, rank) of a topic frame such as b"rec.3"; SchemaError otherwise."""
    head, _, tail = data.partition(b".")
    for kind in KINDS:
        if head == kind.encode() and tail.isdigit():
            return kind, int(tail)
    raise SchemaError(f"unknown topic {data[:32]!r}")


@dataclass(frozen=True, slots=True)
class Header:
    """Second frame of every message: who sent it and where it sits in the rank's stream."""

    run: str
    rank: int
    inc: int
    """Incarnation: changes when torchelastic restarts the worker."""
    seq: int
    """Seq of the first record in a `rec` frame; the last assigned seq in any other (-1: none)."""
    t: float
    """Epoch seconds at which the frame was sent."""
    req: int | None = None
    """Snapshot replies only: the request this answers."""
    part: int | None = None
    """Snapshot replies only: 0 for the metadata, then 1, 2, ... for record chunks."""
    done: bool = False
    """Snapshot replies only: True on the last part."""

    def pack(self) -> bytes:
        obj: dict[str, Any] = {
            "v": FRAME_VERSION,
            "run": self.run,
            "rank": self.rank,
            "inc": self.inc,
            "seq": self.seq,
            "t": self.t,
        }
        if self.req is not None:
            obj.update(req=self.req, part=self.part, done=self.done)
        return pack(obj)

    @classmethod
    def unpack(cls, data: bytes) -> Header:
        obj = unpack(data, "frame header")
        if not isinstance(obj, dict):
            raise SchemaError("frame header: not a map")
        if obj.get("v") != FRAME_VERSION:
            raise WireVersionError(
                f"frame of wire version {obj.get('v')!r}; this TraceML reads version"
                f" {FRAME_VERSION}: use the same TraceML version for the run and the viewer"
            )
        try:
            return cls(
                run=_typed(obj["run"], str),
                rank=_typed(obj["rank"], int),
                inc=_typed(obj["inc"], int),
                seq=_typed(obj["seq"], int),
                t=float(_typed(obj["t"], (int, float))),
                req=obj.get("req"),
                part=obj.get("part"),
                done=bool(obj.get("done", False)),
            )
        except KeyError as e:
            raise SchemaError(f"frame header: missing {e}") from e


def _typed(value: Any, kind: type | tuple[type, ...]) -> Any:
    if isinstance(value, bool) or not isinstance(value, kind):
        raise SchemaError(f"frame header: unexpected {type(value).__name__}")
    return value


_NUMBER = frozenset((float, int, type(None)))
_CLOCKS = frozenset(("host", "cuda"))
_MISSING = ((None, None), (None,))
"""The optional trailing fields (comm wait, held) a wire record of 11 or 12 fields leaves out."""
_NON_FINITE_64 = re.compile(rb"\xcb[\x7f\xff][\xf0-\xff]")
_NON_FINITE_32 = re.compile(rb"\xca[\x7f\xff][\x80-\xff]")
"""msgpack float64/float32 whose exponent bits are all ones: NaN or infinity (or, rarely, the
same bytes inside another value: that only sends the chunk down the slow path). Two patterns
with a literal first byte search three times faster than one alternation."""


def _all_finite(body: bytes) -> bool:
    if _NON_FINITE_64.search(body) is not None:
        return False
    return b"\xca" not in body or _NON_FINITE_32.search(body) is None


def step_from_wire(w: Any, finite: bool = False) -> StepRecord:
    """StepRecord.from_wire with a fast path for well-formed records (2x faster on attach).

    The fast path takes only exact shapes, and only when the caller knows the body holds no NaN
    or infinity (`finite`); anything else goes through `StepRecord.from_wire`, which validates
    fully, turns NaN into None, and raises SchemaError.
    """
    if (
        finite
        and type(w) is tuple
        and 11 <= len(w) <= 13
        and w[0] == WIRE_VERSION
        and type(w[1]) is int
        and type(w[2]) is int
        and type(w[3]) is float
        and type(w[4]) is float
        and w[6] in _CLOCKS
        and type(w[5]) is tuple
        and len(w[5]) == len(PHASES)
        and _NUMBER.issuperset(map(type, w[5]))
        and _NUMBER.issuperset(map(type, w[7:]))
    ):
        fields = w[1:] if len(w) == 13 else w[1:] + _MISSING[len(w) - 11]
        return step_record_of(fields)
    return StepRecord.from_wire(w)


def decode_steps(body: bytes) -> tuple[StepRecord, ...]:
    """Step records of a `rec` body or a snapshot chunk (SchemaError if malformed).

    The cyclic GC is paused while a chunk decodes: thousands of fresh acyclic objects would
    otherwise trigger collections that cost as much as the decoding itself.
    """
    if _C is not None:  # the same records, in C (_pack.c); None: Python decides
        records: tuple[StepRecord, ...] | None = _C.unpack_steps(
            body, StepRecord, WIRE_VERSION, len(PHASES)
        )
        if records is not None:
            return records
    finite = _all_finite(body)
    enabled = gc.isenabled()
    gc.disable()
    try:
        wires = unpack(body, "step records", use_list=False)
        if not isinstance(wires, tuple):
            raise SchemaError("step records: not an array")
        return tuple([step_from_wire(w, finite) for w in wires])
    finally:
        if enabled:
            gc.enable()

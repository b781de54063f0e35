"""Every record that crosses a thread or process boundary, as frozen plain values.

Records hold only Python scalars: torch values are converted at the instrumentation edge. Each has
`to_wire()` (msgpack-native list) and `from_wire()`; `from_wire` raises SchemaError on anything it
does not understand, never a bare TypeError. This module must not import torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, NamedTuple

from traceml.errors import SchemaError

WIRE_VERSION = 1
"""Version of the record bodies on the wire; bumped on any incompatible change."""

Phase = Literal["dataloader", "between", "forward", "backward", "optimizer", "h2d", "other"]
PHASES: tuple[Phase, ...] = (
    "dataloader",
    "between",
    "forward",
    "backward",
    "optimizer",
    "h2d",
    "other",
)
"""Phases in wire order. A step's phases always sum to its step time."""

Clock = Literal["host", "cuda"]
Severity = Literal["info", "warning", "critical"]
Section = Literal["step_time", "step_memory", "ranks"]
ExitKind = Literal["ok", "error", "signal", "running", "killed"]
"""killed: the process died of SIGKILL (out of memory?); only a launcher or collector says it."""

SEVERITY_ORDER: dict[str, int] = {"info": 0, "warning": 1, "critical": 2}


def _opt_float(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SchemaError(f"expected a number or null, got {type(value).__name__}")
    out = float(value)
    if math.isnan(out):
        return None
    return out


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SchemaError(f"expected an integer, got {type(value).__name__}")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise SchemaError(f"expected a string, got {type(value).__name__}")
    return value


def _fields(wire: Any, name: str, n: int) -> Sequence[Any]:
    if not isinstance(wire, (list, tuple)) or len(wire) < n:
        raise SchemaError(f"{name}: expected a list of at least {n} fields")
    if wire[0] != WIRE_VERSION:
        raise SchemaError(
            f"{name} of wire version {wire[0]!r}; this TraceML reads version {WIRE_VERSION}:"
            " use the same TraceML version on both sides"
        )
    return wire


class StepRecord(NamedTuple):
    """One training step of one rank: wall time split into phases, plus memory at its end.

    A NamedTuple, not a frozen dataclass like the other records: a rank builds one per step on
    its tx thread and a viewer decodes thousands a second, and a tuple is built at C speed
    (0.2 µs against 1.5 µs for the dataclass's generated __init__, 4-5x that inside a training
    loop). Change a field with `rec._replace(...)`.
    """

    rank: int
    """Global rank of the process that ran the step."""
    step: int
    """Index of the step within this rank's run, from 0."""
    wall_start: float
    """Epoch seconds at which the step began (the end of the previous step)."""
    step_ms: float
    """Duration of the step in ms: end of the previous trace_step to the end of this one."""
    phases: tuple[float | None, ...]
    """Milliseconds per phase in PHASES order; None means the loop has no such phase (not 0)."""
    clock: Clock = "host"
    """"cuda" when device phases come from resolved CUDA events, "host" for host clocks."""
    host_rss_mb: float | None = None
    """Resident set size of the process at the step's end; None if it could not be read."""
    device_allocated_mb: float | None = None
    """CUDA memory allocated at the step's end; None without CUDA."""
    device_reserved_mb: float | None = None
    """CUDA memory reserved by the caching allocator at the step's end; None without CUDA."""
    device_peak_mb: float | None = None
    """Peak CUDA memory allocated during the step; None without CUDA."""
    comm_wait_ms: float | None = None
    """Part of `backward` spent waiting for DDP's gradient all-reduce after the last gradient
    bucket was ready (not a phase of its own); None when not measured (no DDP, a user comm hook,
    CUDA). On the wire it is a 12th field, left out when None: older readers ignore it."""
    held_ms: float | None = None
    """Part of the step that overlapped TraceML's own periodic work (a beat of the tx worker,
    on the training thread before the step's own work or on the tx thread while it ran, see
    instrument.busy): an upper bound on what TraceML delayed it.
    None when it overlapped none. On the wire a 13th field, left out when None."""

    def phase(self, name: Phase) -> float | None:
        """Milliseconds spent in `name`, None when the loop has no such phase."""
        return self.phases[PHASES.index(name)]

    def to_wire(self) -> list[Any]:
        """[WIRE_VERSION, *fields], the optional trailing ones left out while None (phases stay
        a tuple: msgpack writes it as the same array as a list)."""
        if self.held_ms is not None:
            return [WIRE_VERSION, *self]
        return [WIRE_VERSION, *self[: 11 if self.comm_wait_ms is not None else 10]]

    @classmethod
    def from_wire(cls, wire: Any) -> StepRecord:
        w = _fields(wire, "step record", 11)
        phases = w[5]
        if not isinstance(phases, (list, tuple)) or len(phases) != len(PHASES):
            raise SchemaError(f"step record: expected {len(PHASES)} phases")
        clock = w[6]
        if clock not in ("host", "cuda"):
            raise SchemaError(f"step record: unknown clock {clock!r}")
        step_ms = _opt_float(w[4])
        if step_ms is None:
            raise SchemaError("step record: step_ms is missing")
        return cls(
            rank=_int(w[1]),
            step=_int(w[2]),
            wall_start=_opt_float(w[3]) or 0.0,
            step_ms=step_ms,
            phases=tuple(_opt_float(p) for p in phases),
            clock=clock,
            host_rss_mb=_opt_float(w[7]),
            device_allocated_mb=_opt_float(w[8]),
            device_reserved_mb=_opt_float(w[9]),
            device_peak_mb=_opt_float(w[10]),
            comm_wait_ms=_opt_float(w[11]) if len(w) > 11 else None,
            held_ms=_opt_float(w[12]) if len(w) > 12 else None,
        )


step_record_of: Callable[[Iterable[Any]], StepRecord] = partial(tuple.__new__, StepRecord)
"""A StepRecord from all its fields in order, without the NamedTuple's Python-level __new__:
the rank's tx thread and a viewer's decoder build thousands a second (unchecked: the caller
gives every field, in order)."""


@dataclass(frozen=True, slots=True)
class SystemSample:
    """System signals of one rank's process and host, sampled about once a second."""

    rank: int
    t: float
    """Epoch seconds of the sample."""
    process_cpu_pct: float | None = None
    """CPU of the training process, 100 = one full core."""
    host_cpu_pct: float | None = None
    """CPU of the whole host, 100 = every core busy."""
    host_mem_used_mb: float | None = None
    host_mem_total_mb: float | None = None
    gpu_util_pct: float | None = None
    """NVML utilisation of this rank's GPU; None without NVML or GPU."""
    gpu_mem_used_mb: float | None = None
    gpu_mem_total_mb: float | None = None
    gpu_power_w: float | None = None
    gpu_temp_c: float | None = None
    traceml_cpu_pct: float | None = None
    """CPU of TraceML's own periodic work in this process since the previous sample (100 = one
    full core): what folding, publishing and sampling cost, on the training thread or the tx
    thread, whichever ran it; the hooks' timestamps are not in it."""

    def to_wire(self) -> list[Any]:
        return [
            WIRE_VERSION,
            self.rank,
            self.t,
            self.process_cpu_pct,
            self.host_cpu_pct,
            self.host_mem_used_mb,
            self.host_mem_total_mb,
            self.gpu_util_pct,
            self.gpu_mem_used_mb,
            self.gpu_mem_total_mb,
            self.gpu_power_w,
            self.gpu_temp_c,
            self.traceml_cpu_pct,
        ]

    @classmethod
    def from_wire(cls, wire: Any) -> SystemSample:
        w = _fields(wire, "system sample", 12)  # 13 since traceml_cpu_pct; 12 still read
        return cls(_int(w[1]), _opt_float(w[2]) or 0.0, *(_opt_float(x) for x in w[3:13]))


@dataclass(frozen=True, slots=True)
class RankInfo:
    """Who a rank is: sent once when it starts and kept in its run file."""

    run_id: str
    rank: int
    local_rank: int = 0
    world_size: int = 1
    host: str = ""
    pid: int = 0
    started: float = 0.0
    """Epoch seconds at which TraceML started in this rank."""
    script: str = ""
    argv: tuple[str, ...] = ()
    device: str = "cpu"
    """"cpu" or "cuda:<index>"."""
    device_capacity_mb: float | None = None
    """Total memory of the rank's GPU; None on CPU."""
    torch_version: str = ""
    traceml_version: str = ""
    incarnation: int = 0
    """Changes when torchelastic restarts the worker; 0 otherwise."""
    optimizers: tuple[str, ...] = ()
    """Class names of the optimizers stepped so far (auto mode), first seen first; () = none
    seen. The rank sends its info again when this grows. A 16th wire field, optional on read."""

    def to_wire(self) -> list[Any]:
        return [
            WIRE_VERSION,
            self.run_id,
            self.rank,
            self.local_rank,
            self.world_size,
            self.host,
            self.pid,
            self.started,
            self.script,
            list(self.argv),
            self.device,
            self.device_capacity_mb,
            self.torch_version,
            self.traceml_version,
            self.incarnation,
            list(self.optimizers),
        ]

    @classmethod
    def from_wire(cls, wire: Any) -> RankInfo:
        w = _fields(wire, "rank info", 15)
        argv, optimizers = w[9], w[15] if len(w) > 15 else ()
        if not isinstance(argv, (list, tuple)) or not isinstance(optimizers, (list, tuple)):
            raise SchemaError("rank info: argv and optimizers must be lists")
        return cls(
            run_id=_str(w[1]),
            rank=_int(w[2]),
            local_rank=_int(w[3]),
            world_size=_int(w[4]),
            host=_str(w[5]),
            pid=_int(w[6]),
            started=_opt_float(w[7]) or 0.0,
            script=_str(w[8]),
            argv=tuple(_str(a) for a in argv),
            device=_str(w[10]),
            device_capacity_mb=_opt_float(w[11]),
            torch_version=_str(w[12]),
            traceml_version=_str(w[13]),
            incarnation=_int(w[14]),
            optimizers=tuple(_str(o) for o in optimizers),
        )


@dataclass(frozen=True, slots=True)
class RankEnd:
    """The last word of a rank: how it ended and how many steps it ran."""

    rank: int
    exit: ExitKind
    steps: int
    t: float
    """Epoch seconds at which the rank shut TraceML down."""
    error: tuple[str, str] | None = None
    """(type name, message) of the exception that ended the script; None otherwise. A 6th
    wire field, left out when None: older readers ignore it."""

    def to_wire(self) -> list[Any]:
        wire: list[Any] = [WIRE_VERSION, self.rank, self.exit, self.steps, self.t]
        if self.error is not None:
            wire.append(list(self.error))
        return wire

    @classmethod
    def from_wire(cls, wire: Any) -> RankEnd:
        w = _fields(wire, "rank end", 5)
        if w[2] not in ("ok", "error", "signal", "running", "killed"):
            raise SchemaError(f"rank end: unknown exit {w[2]!r}")
        error = w[5] if len(w) > 5 else None
        if error is not None and (not isinstance(error, (list, tuple)) or len(error) != 2):
            raise SchemaError("rank end: error must be [type, message]")
        pair = None if error is None else (_str(error[0]), _str(error[1]))
        return cls(_int(w[1]), w[2], _int(w[3]), _opt_float(w[4]) or 0.0, pair)


@dataclass(frozen=True, slots=True)
class Finding:
    """One diagnosis: what was found, how bad, the numbers, and where to look next."""

    kind: str
    """E.g. INPUT_BOUND, GROWING, STRAGGLER, BALANCED, WARMUP, NO_STEPS."""
    section: Section
    severity: Severity
    summary: str
    """One line with the numbers that support the finding."""
    action: str
    """What to look at or change next."""
    evidence: Mapping[str, Any] = field(default_factory=dict)
    """The measured values behind the finding (JSON-native), for tools and tests."""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "section": self.section,
            "severity": self.severity,
            "summary": self.summary,
            "action": self.action,
            "evidence": dict(self.evidence),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Finding:
        try:
            return cls(
                kind=_str(obj["kind"]),
                section=obj["section"],
                severity=obj["severity"],
                summary=_str(obj["summary"]),
                action=_str(obj["action"]),
                evidence=dict(obj.get("evidence") or {}),
            )
        except (KeyError, TypeError) as e:
            raise SchemaError(f"finding: missing or bad field {e}") from e

"""The step timer: cuts the training thread's time into labelled segments, one step at a time.

This module runs on the training thread and is the whole hot path: each call takes a timestamp,
moves a few integers and, at the end of a step, appends one tuple to a bounded deque. It never
blocks, allocates little, and never raises into the user's loop.

`StepTimer` here is the reference. `_native.c` is the same timer in C, with C versions of the
hooks' wrappers: inside a real loop a Python-level call costs about 1 µs (the interpreter's caches
are cold after torch's own work), and a step makes eight of them. `new_timer` takes the C one
when it is built, else this one; tests run both on the same sequences.

Time is a sequence of segments. A segment is labelled by the innermost open phase; with no phase
open it is `between` outside `trace_step` and `other` inside it. So the phases of a step always
sum to its wall time, from the end of the previous step to the end of this one.
"""

from __future__ import annotations

import importlib
import time
from collections import deque
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple, Protocol

from traceml.records import PHASES, Phase

DATALOADER, BETWEEN, FORWARD, BACKWARD, OPTIMIZER, H2D, OTHER = range(len(PHASES))
N_PHASES = len(PHASES)
RSS_INTERVAL_NS = 10_000_000
"""Host RSS is read at a step's end when at least this long has passed since the last read: it
costs about 2 µs, too much for every 1 ms step, and steps closer than this share the last read."""

Mark = Callable[[], Any]
"""Called at every segment boundary; returns a marker resolved later (a recorded CUDA event)."""


class RawStep(NamedTuple):
    """What the training thread queues for one step; a beat of the tx worker converts it.

    The C timer hands over `_native.RawStep` instead: these fields as C numbers (no int object
    made a step), read by the same names and indexes, and equal to this tuple of its values."""

    step: int
    start_ns: int
    end_ns: int
    phase_ns: tuple[int, ...]
    seen: int
    """Bit i set when phase i has been observed in this run (else the phase is `None`)."""
    rss_pages: int
    """Resident pages read at the step's end, or -1 when not read for this step."""
    marks: tuple[Any, ...] | None
    """(label, event) boundaries of the step on CUDA, else None."""
    device_mem: tuple[float | None, float | None, float | None] | None
    """CUDA (allocated, reserved, peak) MB at the step's end, None without CUDA."""
    comm_ns: int = -1
    """Exposed DDP all-reduce wait of the step (see instrument.comm), -1 when not measured."""


_new_raw = tuple.__new__
"""Builds a RawStep without NamedTuple's Python-level __new__ (hot path)."""


def phase_index(name: Phase) -> int:
    """Index of a phase name in PHASES."""
    return PHASES.index(name)


class StepTimer:
    """Accumulates segment time per phase and emits a RawStep at each step's end."""

    __slots__ = (
        "_acc",
        "_beat",
        "_beat_due",
        "_clock",
        "_comm",
        "_label",
        "_last_rss_ns",
        "_mark",
        "_marks",
        "_out",
        "_read_device",
        "_read_rss",
        "_stack",
        "_step_t0",
        "_t",
        "inside",
        "seen",
        "step",
    )

    def __init__(
        self,
        out: deque[RawStep],
        clock: Callable[[], int] = time.perf_counter_ns,
        read_rss: Callable[[], int] | None = None,
        mark: Mark | None = None,
    ) -> None:
        self._out = out
        self._clock = clock
        self._read_rss = read_rss
        self._mark = mark
        self._read_device: Callable[[], Any] | None = None
        self._comm: Callable[[], int] | None = None
        self._beat: Callable[[int], int] | None = None
        self._beat_due = 0
        self._acc = [0] * N_PHASES
        self._stack: list[int] = []
        self._label = BETWEEN
        self._t = -1
        """Start of the current segment; -1 until the first event after init."""
        self._step_t0 = -1
        """Start of the current step: the previous step's end, or the first event of the run."""
        self._last_rss_ns = -RSS_INTERVAL_NS
        self._marks: list[Any] | None = [] if mark is not None else None
        self.inside = False
        self.seen = (1 << BETWEEN) | (1 << OTHER)
        self.step = 0

    def _switch(self, label: int, t: int) -> None:
        if self._t >= 0:
            self._acc[self._label] += t - self._t
        else:
            self._step_t0 = t
        self._label = label
        self._t = t
        if self._marks is not None and self._mark is not None:
            self._marks.append((label, self._mark()))

    def use_cuda(self, mark: Mark, read_device: Callable[[], Any]) -> None:
        """From the next boundary on, record a CUDA event at each one and device memory per step."""
        self._mark = mark
        self._read_device = read_device
        if self._marks is None:
            self._marks = []

    def rest(self) -> None:
        """The loop paused between steps (a notebook between two cells): the next step starts at
        its first event, so the pause counts in no step. Training thread only; no-op in a step."""
        if self.inside or self._stack:
            return
        self._t = -1
        self._acc = [0] * N_PHASES
        if self._marks is not None:
            self._marks = []

    def use_comm(self, take: Callable[[], int] | None) -> None:
        """From the next step end on, ask `take()` for the step's comm wait ns (None: stop)."""
        self._comm = take

    def use_beat(self, beat: Callable[[int], int] | None) -> None:
        """From the next step end on, call `beat(t)` at the end of a step whose clock reads `t`
        at or after the due time: the first step's end, then whenever the time `beat` returned
        has come (the tx worker's periodic work, run on this thread; None: stop)."""
        self._beat = beat
        self._beat_due = 0

    # begin/end/enter inline `_switch` on purpose: they run several times per step, and a
    # Python call costs as much as the rest of their work.
    def begin(self, idx: int) -> None:
        """A measured phase starts (it may nest inside another; the inner one wins)."""
        t = self._clock()
        label = self._label
        self._stack.append(label)
        self.seen |= 1 << idx
        if self._t < 0 or self._marks is not None:
            self._switch(idx, t)
            return
        self._acc[label] += t - self._t
        self._label = idx
        self._t = t

    def end(self, idx: int) -> None:
        """The innermost measured phase ends; time goes back to what was open before it."""
        t = self._clock()
        if not self._stack:
            return
        label = self._stack.pop()
        if self._marks is not None:
            self._switch(label, t)
            return
        self._acc[self._label] += t - self._t
        self._label = label
        self._t = t

    @property
    def open_phase(self) -> int:
        """Index of the phase time is counted in now (`between` outside a step). The tx thread
        reads it for the heartbeat, so a stalled rank says where it is stuck; a plain int read."""
        return self._label

    def in_phase(self, idx: int) -> bool:
        """True while `idx` is the innermost open phase (lets nested wrappers skip re-timing)."""
        return self._label == idx and bool(self._stack)

    def enter(self) -> None:
        """`trace_step` was entered: unlabelled time is now `other`."""
        self.inside = True
        if self._stack:
            return
        t = self._clock()
        if self._t < 0 or self._marks is not None:
            self._switch(OTHER, t)
            return
        self._acc[self._label] += t - self._t
        self._label = OTHER
        self._t = t

    def exit(self) -> None:
        """`trace_step` was left: close every open phase, emit the step, start the next one."""
        t = self._clock()
        self._stack.clear()
        self.inside = False
        step_start = self._step_t0
        if self._t < 0 or self._marks is not None:
            self._switch(BETWEEN, t)
            step_start = self._step_t0
        else:
            self._acc[self._label] += t - self._t
            self._label = BETWEEN
            self._t = t
        rss = -1
        if self._read_rss is not None and t - self._last_rss_ns >= RSS_INTERVAL_NS:
            self._last_rss_ns = t
            rss = self._read_rss()
        marks = None
        if self._marks is not None:
            marks = tuple(self._marks)
            self._marks = [self._marks[-1]]
        dev = None if self._read_device is None else self._read_device()
        comm = -1 if self._comm is None else self._comm()
        raw = (self.step, step_start, t, tuple(self._acc), self.seen, rss, marks, dev, comm)
        self._out.append(_new_raw(RawStep, raw))
        self._acc = [0] * N_PHASES
        self.step += 1
        self._step_t0 = t
        if self._beat is not None and t >= self._beat_due:
            self._beat_due = t + 1_000_000_000  # until it returns (the C timer's call_beat)
            self._beat_due = self._beat(t)


class Timer(Protocol):
    """What the hooks, `trace_step` and the session use of a step timer: StepTimer or its C twin
    (traceml/instrument/_native.c), which behave the same."""

    inside: bool
    seen: int
    step: int

    @property
    def open_phase(self) -> int: ...
    def begin(self, idx: int) -> None: ...
    def end(self, idx: int) -> None: ...
    def enter(self) -> None: ...
    def exit(self) -> None: ...
    def rest(self) -> None: ...
    def in_phase(self, idx: int) -> bool: ...
    def use_cuda(self, mark: Mark, read_device: Callable[[], Any]) -> None: ...
    def use_comm(self, take: Callable[[], int] | None) -> None: ...
    def use_beat(self, beat: Callable[[int], int] | None) -> None: ...


def native() -> ModuleType | None:
    """The built C timer module (traceml/instrument/_native.c), or None when it is not built (no
    compiler at install) or was built from other constants than this module's (a stale build)."""
    try:
        c = importlib.import_module("traceml.instrument._native")
    except ImportError:
        return None
    built = (c.N_PHASES, c.BETWEEN, c.OTHER, c.RSS_INTERVAL_NS)
    if built != (N_PHASES, BETWEEN, OTHER, RSS_INTERVAL_NS):
        return None
    return c


def native_for(timer: Timer) -> ModuleType | None:
    """The C module when `timer` is its StepTimer: the hooks then use its C wrappers too."""
    c = native()
    return c if c is not None and isinstance(timer, c.StepTimer) else None


def new_timer(
    out: deque[RawStep], read_rss: Callable[[], int] | None = None, native_ok: bool = True
) -> Timer:
    """The session's timer: the C one when built and `native_ok`, else the pure-Python one."""
    c = native() if native_ok else None
    if c is None:
        return StepTimer(out, read_rss=read_rss)
    timer: Timer = c.StepTimer(out, read_rss=read_rss)
    return timer

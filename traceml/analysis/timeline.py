"""The whole run over time, in a fixed number of windows whatever the run's length.

A `Timeline` folds one rank's steps into at most `TIMELINE_WINDOWS` windows of `stride`
consecutive steps (aligned on step // stride). When a step would open one window too many,
neighbouring windows merge pairwise and the stride doubles, so memory is O(windows) at any run
length and a run of a million steps still shows its first minutes. `TimelineWindow` is the frozen
value that views, the attach snapshot and final_summary.json carry.

p50/p95 of a window come from a small log-bucketed sketch per window (DDSketch-style, buckets
`SKETCH_ACCURACY` wide, at most `SKETCH_BUCKETS` of them; on overflow the lowest buckets collapse,
which only blurs quantiles below the collapsed values), so they stay within ~2 % after any number
of merges instead of being a guess from the halves. Pure arithmetic: no I/O, no clock, no torch.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import math
import operator
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from traceml.analysis.batch import facts_of
from traceml.analysis.native import fold_module
from traceml.errors import SchemaError
from traceml.records import PHASES

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from traceml.records import StepRecord

TIMELINE_WINDOWS = 256
"""Windows a rank's timeline keeps at most; on overflow pairs merge and the stride doubles."""
SUMMARY_WINDOWS = 64
"""Windows final_summary.json keeps (the timeline coarsened by a power of two): about 5 KB."""
SKETCH_ACCURACY = 0.02
"""Relative accuracy of a window's p50/p95 (bucket half-width)."""
PENDING_STEPS = 256
"""Steps a timeline holds before folding them (bounded memory; read windows fold them too)."""
SKETCH_BUCKETS = 64
"""Most sketch buckets a window keeps; beyond it the lowest ones collapse into one."""

_GAMMA = (1 + SKETCH_ACCURACY) / (1 - SKETCH_ACCURACY)
_INV_LOG_GAMMA = 1 / math.log(_GAMMA)
_NP = len(PHASES)

# Slots of an open window (a flat list of floats: cheaper to fold than an object):
_ID, _FIRST, _LAST, _N, _SUM, _MAX, _RSS, _RSS_N, _DEV, _DEV_N = range(10)
_PH = 10
"""Phase sums at _PH + i, their counts at _PH + _NP + i."""
_SIZE = _PH + 2 * _NP


def _c_slots(name: str) -> Callable[..., Any] | None:
    """_fold.c's function `name`, one that reads or writes an open window's slots, when built
    (a build from before it lacks it), allowed (native.fold_module) and made for this module's
    window layout; else None."""
    c = fold_module()
    if c is None or c.SLOTS != _SIZE:  # another window layout: a stale build
        return None
    part: Callable[..., Any] | None = getattr(c, name, None)
    return part


_C_FOLD: Callable[..., bool] | None = _c_slots("timeline_fold")
_STEP = operator.attrgetter("step")
_Frozen = tuple[float, float, tuple[tuple[int, int], ...]]
"""A sketch's p50, p95 and its (bucket, count) pairs in bucket order."""
_C_FREEZE: Callable[[dict[int, int], int, float], _Frozen | None] | None
_C_FREEZE = getattr(fold_module(), "sketch_freeze", None)
"""_fold.c's twin of a window's sketch part of freeze (SortedSketch, the reference), or None."""


@dataclass(frozen=True, slots=True)
class TimelineWindow:
    """Consecutive steps of one rank, summarised. None means not measured, never 0."""

    first_step: int
    """Lowest step index folded into the window."""
    last_step: int
    """Highest step index folded into the window (steps in between may be missing: late or
    dropped records)."""
    steps: int
    """Steps folded into the window."""
    mean_ms: float
    p50_ms: float
    """Median step time, from the window's sketch (within ~2 %)."""
    p95_ms: float
    """95th percentile step time, from the window's sketch (within ~2 %)."""
    max_ms: float
    """Slowest step of the window, exact."""
    phase_ms: tuple[float | None, ...] = (None,) * _NP
    """Mean ms per phase in PHASES order over the steps that measured it; None = not measured."""
    host_rss_mb: float | None = None
    """Mean host RSS at the window's step ends; None when never read."""
    device_allocated_mb: float | None = None
    """Mean CUDA allocated MB at the window's step ends; None without CUDA."""
    sketch: tuple[tuple[int, int], ...] = ()
    """(bucket, count) of the step-time sketch, so a receiver can keep merging windows exactly;
    bucket 0 holds zeros. Left out of final_summary.json."""

    def to_wire(self) -> list[Any]:
        return [
            self.first_step,
            self.last_step,
            self.steps,
            self.mean_ms,
            self.p50_ms,
            self.p95_ms,
            self.max_ms,
            list(self.phase_ms),
            self.host_rss_mb,
            self.device_allocated_mb,
            [list(b) for b in self.sketch],
        ]

    @classmethod
    def from_wire(cls, wire: Any) -> TimelineWindow:
        if not isinstance(wire, (list, tuple)) or len(wire) < 11:
            raise SchemaError("timeline window: expected a list of 11 fields")
        phases, sketch = wire[7], wire[10]
        if not isinstance(phases, (list, tuple)) or len(phases) != _NP:
            raise SchemaError(f"timeline window: expected {_NP} phases")
        if not isinstance(sketch, (list, tuple)):
            raise SchemaError("timeline window: sketch must be a list")
        try:
            return cls(
                first_step=_int(wire[0]),
                last_step=_int(wire[1]),
                steps=_int(wire[2]),
                mean_ms=float(wire[3]),
                p50_ms=float(wire[4]),
                p95_ms=float(wire[5]),
                max_ms=float(wire[6]),
                phase_ms=tuple(_opt(p) for p in phases),
                host_rss_mb=_opt(wire[8]),
                device_allocated_mb=_opt(wire[9]),
                sketch=tuple((_int(k), _int(n)) for k, n in sketch),
            )
        except (TypeError, ValueError) as e:
            raise SchemaError(f"timeline window: bad field ({e})") from e

    def to_json(self) -> dict[str, Any]:
        """The final_summary.json form: rounded, without the sketch."""
        return {
            "first_step": self.first_step,
            "last_step": self.last_step,
            "steps": self.steps,
            "mean_ms": round(self.mean_ms, 3),
            "p50_ms": round(self.p50_ms, 3),
            "p95_ms": round(self.p95_ms, 3),
            "max_ms": round(self.max_ms, 3),
            "phase_ms": {p: _round(v) for p, v in zip(PHASES, self.phase_ms, strict=True)},
            "host_rss_mb": _round(self.host_rss_mb, 1),
            "device_allocated_mb": _round(self.device_allocated_mb, 1),
        }


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SchemaError(f"timeline window: expected an integer, got {type(value).__name__}")
    return value


def _opt(value: Any) -> float | None:
    return None if value is None else float(value)


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _total(values: Iterable[float], start: float) -> float:
    return functools.reduce(operator.add, values, start)


def _add_column(v: list[float], at: int, count_at: int, column: Sequence[float | None]) -> None:
    """Add a column's measured values at v[at] and their number at v[count_at]."""
    try:
        v[at] = _total(cast("Sequence[float]", column), v[at])
        v[count_at] += len(column)
    except TypeError:  # a None: not measured in some steps
        measured = [x for x in column if x is not None]
        v[at] = _total(measured, v[at])
        v[count_at] += len(measured)


def _bucket(ms: float) -> int:
    """Sketch bucket of a step time: 0 for <= 0, else ceil(log_gamma(ms)) shifted to be != 0."""
    if ms <= 0:
        return 0
    key = math.ceil(math.log(ms) * _INV_LOG_GAMMA)
    return key if key > 0 else key - 1


def _bucket_counts(ms: Sequence[float]) -> dict[int, int]:
    """How many values fall in each `_bucket`, without a Python call per value."""
    if min(ms) <= 0:
        return Counter(map(_bucket, ms))
    logs = map(operator.mul, map(math.log, ms), itertools.repeat(_INV_LOG_GAMMA))
    raw = Counter(map(math.ceil, logs))
    return {(k if k > 0 else k - 1): n for k, n in raw.items()}


def _bucket_value(key: int) -> float:
    if key == 0:
        return 0.0
    k = key if key > 0 else key + 1
    return 2 * _GAMMA**k / (_GAMMA + 1)


def _collapse(sketch: dict[int, int]) -> None:
    """Fold the lowest buckets into one until at most SKETCH_BUCKETS remain."""
    keys = sorted(sketch)
    extra = len(keys) - SKETCH_BUCKETS
    if extra <= 0:
        return
    into = keys[extra]
    for key in keys[:extra]:
        sketch[into] += sketch.pop(key)


class SortedSketch:
    """A sketch's buckets sorted once, for several quantiles: the reference of
    _fold.sketch_freeze. A window's freeze asks for two, each at two ranks, and sorted the
    buckets for every rank; sorting once, and the int keys rather than (key, count) pairs,
    froze a whole timeline a third faster (235 windows: 4.8 -> 3.2 ms; 2.3 in C), which every
    viewer and the heartbeat finding re-freeze as steps arrive."""

    __slots__ = ("_cum", "items")

    def __init__(self, sketch: dict[int, int]) -> None:
        keys = sorted(sketch)  # ints: several times cheaper to sort than (key, count) pairs
        counts = list(map(sketch.__getitem__, keys))
        self.items = list(zip(keys, counts, strict=True))
        self._cum = list(itertools.accumulate(counts))

    def quantile(self, count: int, q: float) -> float:
        """Value at quantile q of the sketch holding `count` values, interpolated between the two
        neighbouring ranks as stats.quantile does (so p95 of a 2-step window is near its slower
        step, not its faster one)."""
        pos = q * (count - 1)
        lo = math.floor(pos)
        v_lo, v_hi = self._value_at_rank(lo), self._value_at_rank(min(lo + 1, count - 1))
        return v_lo + (v_hi - v_lo) * (pos - lo)

    def _value_at_rank(self, rank: int) -> float:
        """Bucket value of the rank-th smallest value (0-based); the top bucket's past the end."""
        at = bisect.bisect_right(self._cum, rank)
        return _bucket_value(self.items[min(at, len(self.items) - 1)][0])


_WINDOW_FIELDS = (
    "first_step",
    "last_step",
    "steps",
    "mean_ms",
    "p50_ms",
    "p95_ms",
    "max_ms",
    "phase_ms",
    "host_rss_mb",
    "device_allocated_mb",
    "sketch",
)
"""TimelineWindow's fields in the order _fold.c's window_freeze computes them."""


def _c_window() -> Callable[..., TimelineWindow | None] | None:
    """_fold.c's window_freeze (`_c_slots`) while TimelineWindow's fields are those it sets."""
    fields = tuple(f.name for f in dataclasses.fields(TimelineWindow))
    return _c_slots("window_freeze") if fields == _WINDOW_FIELDS else None


_C_WINDOW = _c_window()
_C_MERGE: Callable[[list[float], dict[int, int], list[float], dict[int, int]], bool] | None
_C_MERGE = _c_slots("window_merge")


class _Open:
    """One window being folded: the flat numbers plus its sketch."""

    __slots__ = ("nums", "sketch")

    def __init__(self, wid: int) -> None:
        self.nums = [0.0] * _SIZE
        self.nums[_ID] = wid
        self.nums[_FIRST] = math.inf
        self.nums[_LAST] = -math.inf
        self.sketch: dict[int, int] = {}

    def merge(self, other: _Open) -> None:
        """Fold `other` in: in C when it is built (_fold.window_merge, the same values and
        bucket order), else `merge_py`. A halving merges 128 pairs per rank at once."""
        if _C_MERGE is None or not _C_MERGE(self.nums, self.sketch, other.nums, other.sketch):
            self.merge_py(other)
        elif len(self.sketch) > SKETCH_BUCKETS:
            _collapse(self.sketch)

    def merge_py(self, other: _Open) -> None:
        """The reference of `merge` (and of _fold.c's window_merge)."""
        a, b = self.nums, other.nums
        kept = (a[_ID], min(a[_FIRST], b[_FIRST]), max(a[_LAST], b[_LAST]), max(a[_MAX], b[_MAX]))
        a[:] = map(operator.add, a, b)
        a[_ID], a[_FIRST], a[_LAST], a[_MAX] = kept
        sketch = self.sketch
        for key, n in other.sketch.items():
            sketch[key] = sketch.get(key, 0) + n
        if len(sketch) > SKETCH_BUCKETS:
            _collapse(sketch)

    def freeze(self) -> TimelineWindow:
        """This window's TimelineWindow: in C when it is built (_fold.window_freeze, the same
        values), else `freeze_py`."""
        if _C_WINDOW is not None:
            got = _C_WINDOW(self.nums, self.sketch, _GAMMA, TimelineWindow, _WINDOW_FIELDS)
            if got is not None:
                return got
        return self.freeze_py()

    def freeze_py(self) -> TimelineWindow:
        """The reference of `freeze` (and of _fold.c's window_freeze)."""
        v, n = self.nums, int(self.nums[_N])
        frozen = _C_FREEZE(self.sketch, n, _GAMMA) if _C_FREEZE is not None else None
        if frozen is None:
            ref = SortedSketch(self.sketch)
            frozen = (ref.quantile(n, 0.5), ref.quantile(n, 0.95), tuple(ref.items))
        p50, p95, sketch = frozen
        phases = tuple(
            v[_PH + i] / v[_PH + _NP + i] if v[_PH + _NP + i] else None for i in range(_NP)
        )
        return TimelineWindow(
            first_step=int(v[_FIRST]),
            last_step=int(v[_LAST]),
            steps=n,
            mean_ms=v[_SUM] / n,
            p50_ms=min(p50, v[_MAX]),
            p95_ms=min(p95, v[_MAX]),
            max_ms=v[_MAX],
            phase_ms=phases,
            host_rss_mb=v[_RSS] / v[_RSS_N] if v[_RSS_N] else None,
            device_allocated_mb=v[_DEV] / v[_DEV_N] if v[_DEV_N] else None,
            sketch=sketch,
        )

    @classmethod
    def thaw(cls, window: TimelineWindow, wid: int) -> _Open:
        """An open window holding what `window` summarised (from a snapshot)."""
        out = cls(wid)
        v, n = out.nums, window.steps
        v[_FIRST], v[_LAST], v[_N] = window.first_step, window.last_step, n
        v[_SUM], v[_MAX] = window.mean_ms * n, window.max_ms
        if window.host_rss_mb is not None:
            v[_RSS], v[_RSS_N] = window.host_rss_mb * n, n
        if window.device_allocated_mb is not None:
            v[_DEV], v[_DEV_N] = window.device_allocated_mb * n, n
        for i, ms in enumerate(window.phase_ms):
            if ms is not None:
                v[_PH + i], v[_PH + _NP + i] = ms * n, n
        out.sketch = dict(window.sketch) or {_bucket(window.p50_ms): n}
        return out


class _Columns:
    """The columns a timeline folds, taken once from a batch of records."""

    __slots__ = ("dev", "ms", "phases", "rss", "steps")

    def __init__(self, records: Sequence[StepRecord]) -> None:
        self.steps = [r.step for r in records]
        self.ms = [r.step_ms for r in records]
        self.phases = list(zip(*(r.phases for r in records), strict=True))
        self.rss = [r.host_rss_mb for r in records]
        self.dev = [r.device_allocated_mb for r in records]


def _fold_columns(window: _Open, c: _Columns, i: int, j: int) -> None:
    """Steps i..j of `c` (all in one window) into `window`, column by column: the reference
    that _fold.c's timeline_fold follows to the bit."""
    steps, ms = c.steps[i:j], c.ms[i:j]
    v = window.nums
    v[_N] += len(ms)
    v[_SUM] = _total(ms, v[_SUM])
    v[_MAX] = max(v[_MAX], *ms)
    v[_FIRST] = min(v[_FIRST], *steps)
    v[_LAST] = max(v[_LAST], *steps)
    for k, column in enumerate(c.phases):
        _add_column(v, _PH + k, _PH + _NP + k, column[i:j])
    _add_column(v, _RSS, _RSS_N, c.rss[i:j])
    _add_column(v, _DEV, _DEV_N, c.dev[i:j])
    sketch = window.sketch
    for key, n in _bucket_counts(ms).items():
        sketch[key] = sketch.get(key, 0) + n


class Timeline:
    """One rank's steps in at most `capacity` windows; O(capacity) memory for any run.

    Args:
        capacity: Most windows kept; at least 2.
    """

    __slots__ = ("_open", "_pending", "_stale", "_tuple", "capacity", "stride")

    def __init__(self, capacity: int = TIMELINE_WINDOWS) -> None:
        self.capacity = max(2, capacity)
        self.stride = 1
        """Steps per window (a power of two); doubles on each pairwise merge."""
        self._open: list[_Open] = []
        """Windows in step order."""
        self._pending: list[StepRecord] = []
        """Steps added but not folded yet (at most PENDING_STEPS)."""
        self._tuple: tuple[TimelineWindow, ...] = ()
        """The last `windows()` answer: only the windows changed since are frozen again."""
        self._stale: set[int] | None = set()
        """Positions of the windows changed since `windows()`; None when positions moved (a
        window was inserted, or windows merged): then every window is frozen again."""

    def add(self, rec: StepRecord) -> None:
        """Fold one step (steps may come in any order; each step should come once).

        Steps wait in a short list and are folded column by column, a window's worth at a time
        (`_flush`, at PENDING_STEPS or whenever the windows are read): several times cheaper
        per step than one at a time, which matters to a viewer folding 6,400 steps a second.
        """
        self._pending.append(rec)
        if len(self._pending) >= PENDING_STEPS:
            self._flush()

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if not pending:
            return
        if not facts_of(pending, 0).ascending:  # late or repeated steps: rare
            for _, group in itertools.groupby(pending, key=lambda r: r.step // self.stride):
                records = list(group)
                self._fold(records, 0, len(records), None)
                if len(self._open) > self.capacity:
                    self._halve()
            return
        columns = None if _C_FOLD is not None else _Columns(pending)
        i, n = 0, len(pending)
        while i < n:  # each window folds a slice of the records (the columns are taken once)
            end = (pending[i].step // self.stride + 1) * self.stride  # a halving doubles stride
            j = bisect.bisect_left(pending, end, i, n, key=_STEP)
            self._fold(pending, i, j, columns)
            if len(self._open) > self.capacity:
                self._halve()
            i = j

    def _fold(self, records: list[StepRecord], i: int, j: int, columns: _Columns | None) -> None:
        """Steps i..j of `records` (all in one window) into their window: in C when it is built
        and takes them (the same floats), else column by column."""
        pos = self._find(records[i].step // self.stride)
        if self._stale is not None:
            self._stale.add(pos)
        window = self._open[pos]
        if _C_FOLD is None or not _C_FOLD(
            window.nums, window.sketch, records, i, j, _INV_LOG_GAMMA
        ):
            _fold_columns(window, columns or _Columns(records), i, j)
        if len(window.sketch) > SKETCH_BUCKETS:
            _collapse(window.sketch)

    def extend(self, records: Iterable[StepRecord]) -> None:
        """`add` of each record."""
        self._pending.extend(records)
        if len(self._pending) >= PENDING_STEPS:
            self._flush()

    def windows(self, limit: int | None = None) -> tuple[TimelineWindow, ...]:
        """The windows in step order; with `limit`, coarsened pairwise until at most `limit`."""
        if self._pending:
            self._flush()
        if limit is not None and len(self._open) > limit:
            return self._coarsened(limit)
        stale = self._stale
        if stale is None:
            self._tuple = tuple(o.freeze() for o in self._open)
        elif stale:  # usually the open, last window (and new ones after it): refreeze the tail
            lo = min(stale)
            tail = tuple(self._open[i].freeze() for i in range(lo, len(self._open)))
            self._tuple = self._tuple[:lo] + tail
        self._stale = set()
        return self._tuple

    def seed(self, windows: Sequence[TimelineWindow]) -> None:
        """Start from windows received in a snapshot (steps folded later are added to them).

        The received windows keep their step ranges; the stride becomes the smallest power of
        two that covers the widest, so later steps land in aligned windows after them.
        """
        if not windows:
            return
        self._flush()
        span = max((w.last_step - w.first_step + 1) for w in windows)
        stride = 1 << max(0, math.ceil(math.log2(max(1, span))))
        merged: dict[int, _Open] = {}
        for w in windows:
            wid = w.first_step // stride
            thawed = _Open.thaw(w, wid)
            if wid in merged:
                merged[wid].merge(thawed)
            else:
                merged[wid] = thawed
        self.stride = max(self.stride, stride)
        for part in self._open:
            part.nums[_ID] = int(part.nums[_FIRST]) // self.stride
        opens = sorted([*self._open, *merged.values()], key=lambda o: o.nums[_ID])
        self._open = _coalesce(opens)
        self._stale = None
        while len(self._open) > self.capacity:
            self._halve()

    @property
    def steps(self) -> int:
        self._flush()
        return sum(int(o.nums[_N]) for o in self._open)

    def _find(self, wid: int) -> int:
        opens = self._open
        pos = len(opens)
        while pos > 0 and opens[pos - 1].nums[_ID] > wid:
            pos -= 1
        if pos > 0 and opens[pos - 1].nums[_ID] == wid:
            return pos - 1
        opens.insert(pos, _Open(wid))
        if pos < len(opens) - 1:
            self._stale = None  # a late step opened a window before others: positions moved
        return pos

    def _halve(self) -> None:
        for part in self._open:
            part.nums[_ID] = int(part.nums[_ID]) // 2
        self._open = _coalesce(self._open)
        self._stale = None
        self.stride *= 2

    def _coarsened(self, limit: int) -> tuple[TimelineWindow, ...]:
        factor = 1
        while math.ceil(len(self._open) / factor) > limit:
            factor *= 2
        out: list[_Open] = []
        for part in self._open:
            wid = int(part.nums[_ID]) // factor
            if out and out[-1].nums[_ID] == wid:
                out[-1].merge(part)
            else:
                copy = _Open(wid)
                copy.merge(part)
                copy.nums[_ID] = wid
                out.append(copy)
        return tuple(o.freeze() for o in out)


def _coalesce(opens: list[_Open]) -> list[_Open]:
    """Windows sorted by id, merging neighbours that now share an id."""
    out: list[_Open] = []
    for part in opens:
        if out and out[-1].nums[_ID] == part.nums[_ID]:
            out[-1].merge(part)
        else:
            out.append(part)
    return out


def coarsen(windows: Sequence[TimelineWindow], limit: int) -> tuple[TimelineWindow, ...]:
    """`windows` merged pairwise (as the timeline itself would) until at most `limit` remain."""
    if len(windows) <= limit:
        return tuple(windows)
    line = Timeline(capacity=limit)
    line.seed(windows)
    return line.windows()

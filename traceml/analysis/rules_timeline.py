"""REGIME_CHANGE: the run's character changed part-way (compute-bound, then input-bound).

Read from the whole-run timeline of the median rank, whatever window the view diagnoses: each
timeline window gets the label the step rules would give its phase shares, and the rule looks
for the one step that splits the run (after warm-up) into two long stretches, each mostly of one
label, with different labels. Pure function of a RunView: no I/O, no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceml.analysis.rules import pct, rounded
from traceml.analysis.stats import median
from traceml.records import PHASES, Finding

if TYPE_CHECKING:
    from collections.abc import Sequence

    from traceml.analysis.timeline import TimelineWindow
    from traceml.analysis.view import RankWindow, RunView
    from traceml.config import Thresholds
    from traceml.records import Phase

MIN_STRETCH_STEPS = 50
"""Steps each side of a change needs at least (and MIN_STRETCH_FRACTION of the run)."""
MIN_STRETCH_FRACTION = 0.15
PURITY = 0.8
"""Share of each stretch's steps that must carry its label."""

_GROUPS: tuple[tuple[str, tuple[Phase, ...], str], ...] = (
    ("INPUT_BOUND", ("dataloader",), "input"),
    ("HOST_BOUND", ("between", "other"), "host"),
    ("H2D_BOUND", ("h2d",), "h2d"),
    ("OPTIMIZER_BOUND", ("optimizer",), "optimizer"),
)
WORDS = {
    "INPUT_BOUND": "input-bound",
    "HOST_BOUND": "host-bound",
    "H2D_BOUND": "copy-bound",
    "OPTIMIZER_BOUND": "optimizer-bound",
    "COMPUTE_BOUND": "compute-bound",
    "BALANCED": "balanced",
}
ACTION = (
    "Look at what changed at that step (an epoch or dataset-shard boundary, evaluation, a"
    " schedule that changes batch size or sequence length, a cache that filled up); the verdict"
    " above covers the summary window as a whole."
)


_INDEX = {p: i for i, p in enumerate(PHASES)}


def _group(window: TimelineWindow, phases: Sequence[Phase]) -> float:
    """Share 0..1 of the window's mean step spent in the measured phases among `phases`."""
    if window.mean_ms <= 0:
        return 0.0
    return sum(window.phase_ms[_INDEX[p]] or 0.0 for p in phases) / window.mean_ms


_DL, _BETWEEN, _FWD, _BWD, _OPT, _H2D, _OTHER = (_INDEX[p] for p in PHASES)


def label(window: TimelineWindow, th: Thresholds) -> str:
    """The step verdict the window's phase shares alone would get (its strongest bottleneck,
    each group's share over its warning threshold). Called for every window: kept flat."""
    m, ph = window.mean_ms, window.phase_ms
    if m <= 0:
        return "BALANCED"
    scored = (
        ((ph[_DL] or 0.0) / th.input_warning, "INPUT_BOUND"),
        (((ph[_BETWEEN] or 0.0) + (ph[_OTHER] or 0.0)) / th.host_warning, "HOST_BOUND"),
        ((ph[_H2D] or 0.0) / th.h2d_warning, "H2D_BOUND"),
        ((ph[_OPT] or 0.0) / th.optimizer_warning, "OPTIMIZER_BOUND"),
    )
    score, kind = max(scored)
    if score >= m:
        return kind
    compute = ((ph[_FWD] or 0.0) + (ph[_BWD] or 0.0)) / m
    return "COMPUTE_BOUND" if compute >= th.compute_share else "BALANCED"


def _median_rank(view: RunView) -> RankWindow | None:
    ranks = [r for r in view.active if r.timeline and r.mean_ms is not None]
    mid = median(r.mean_ms for r in ranks)
    return min(ranks, key=lambda r: abs((r.mean_ms or 0.0) - (mid or 0.0)), default=None)


def _best_split(labels: Sequence[tuple[str, int]], total: int) -> tuple[int, str, str] | None:
    """(index, label before, label after) of the split with the purest two long stretches."""
    least = max(MIN_STRETCH_STEPS, MIN_STRETCH_FRACTION * total)
    kinds = sorted({k for k, _ in labels})
    before = dict.fromkeys(kinds, 0)
    after = dict.fromkeys(kinds, 0)
    for k, n in labels:
        after[k] += n
    best: tuple[float, int, str, str] | None = None
    left = 0
    for i, (k, n) in enumerate(labels[:-1]):
        before[k] += n
        after[k] -= n
        left += n
        right = total - left
        if left < least or right < least:
            continue
        a, b = max(before, key=before.__getitem__), max(after, key=after.__getitem__)
        purity = min(before[a] / left, after[b] / right)
        if a != b and purity >= PURITY and (best is None or purity > best[0]):
            best = (purity, i + 1, a, b)
    return None if best is None else best[1:]


def _describe(kind: str, windows: Sequence[TimelineWindow]) -> str:
    steps = sum(w.steps for w in windows)
    total = sum(w.mean_ms * w.steps for w in windows)
    for k, phases, _ in _GROUPS:
        if k == kind:
            got = sum(_group(w, phases) * w.mean_ms * w.steps for w in windows)
            return f"{WORDS[kind]} ({' + '.join(phases)} {pct(got / total)})" if total else kind
    mean = total / steps if steps else 0.0
    return f"{WORDS.get(kind, kind)} ({mean:.1f} ms mean step)"


class _Cache:
    """The last answer per rank, reused while the rank's closed windows are the same objects
    (a timeline re-freezes only the window a step changed: the open, last one, which the rule
    leaves out), so a viewer re-diagnosing several times a second recomputes only when a new
    window opened, every `stride` steps."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[tuple[object, ...], Thresholds, Finding | None]] = {}
        self._labels: dict[int, tuple[TimelineWindow, Thresholds, str]] = {}
        """label() of windows seen, by id (the window is kept, so the id stays its own)."""

    def label(self, window: TimelineWindow, th: Thresholds) -> str:
        hit = self._labels.get(id(window))
        if hit is not None and hit[0] is window and hit[1] is th:
            return hit[2]
        if len(self._labels) > CACHED_LABELS:
            self._labels.clear()
        got = label(window, th)
        self._labels[id(window)] = (window, th, got)
        return got

    def get(self, rank: RankWindow, th: Thresholds) -> tuple[bool, Finding | None]:
        hit = self._last.get(rank.rank)
        key = _key(rank)
        if hit is not None and hit[1] is th and _same(hit[0], key):
            return True, hit[2]
        return False, None

    def put(self, rank: RankWindow, th: Thresholds, found: Finding | None) -> None:
        if len(self._last) > CACHED_RANKS:
            self._last.clear()
        self._last[rank.rank] = (_key(rank), th, found)


CACHED_RANKS = 1024
CACHED_LABELS = 65_536


def _key(rank: RankWindow) -> tuple[object, ...]:
    line = rank.timeline
    return (len(line), rank.total_steps // 1024, *(line[i] for i in (0, -2) if len(line) > 1))


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    same = len(a) == len(b) and a[:2] == b[:2]
    return same and all(x is y for x, y in zip(a[2:], b[2:], strict=True))


_CACHE = _Cache()


def regime_change(view: RunView, th: Thresholds) -> Finding | None:
    """REGIME_CHANGE (warning when the later regime is a bottleneck, else info)."""
    rank = _median_rank(view)
    if rank is None:
        return None
    hit, found = _CACHE.get(rank, th)
    if not hit:
        found = _regime_change(rank, th)
        _CACHE.put(rank, th, found)
    return found


def _regime_change(rank: RankWindow, th: Thresholds) -> Finding | None:
    warm = max(th.warmup_steps, int(th.warmup_fraction * rank.total_steps))
    windows = [w for w in rank.timeline[:-1] if w.first_step >= warm]  # the last is still open
    total = sum(w.steps for w in windows)
    if total < 2 * MIN_STRETCH_STEPS:
        return None
    split = _best_split([(_CACHE.label(w, th), w.steps) for w in windows], total)
    if split is None:
        return None
    index, first, then = split
    at = windows[index].first_step
    about = "about " if windows[index].last_step > at else ""
    early, late = _describe(first, windows[:index]), _describe(then, windows[index:])
    return Finding(
        kind="REGIME_CHANGE",
        section="step_time",
        severity="info" if then in ("COMPUTE_BOUND", "BALANCED") else "warning",
        summary=f"the run changed at {about}step {at:,}: {early} before it, {late} from it on",
        action=ACTION,
        evidence={
            "step": at,
            "before": first,
            "after": then,
            "rank": rank.rank,
            "before_mean_ms": rounded(_mean(windows[:index])),
            "after_mean_ms": rounded(_mean(windows[index:])),
        },
    )


def _mean(windows: Sequence[TimelineWindow]) -> float | None:
    steps = sum(w.steps for w in windows)
    return sum(w.mean_ms * w.steps for w in windows) / steps if steps else None

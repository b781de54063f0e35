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


def _shares(window: TimelineWindow) -> dict[Phase, float]:
    if window.mean_ms <= 0:
        return {}
    pairs = zip(PHASES, window.phase_ms, strict=True)
    return {p: v / window.mean_ms for p, v in pairs if v is not None}


def _group(shares: dict[Phase, float], phases: Sequence[Phase]) -> float:
    return sum(shares.get(p, 0.0) for p in phases)


def label(window: TimelineWindow, th: Thresholds) -> str:
    """The step verdict the window's phase shares alone would get (its strongest bottleneck)."""
    shares = _shares(window)
    warnings = {
        "INPUT_BOUND": th.input_warning,
        "HOST_BOUND": th.host_warning,
        "H2D_BOUND": th.h2d_warning,
        "OPTIMIZER_BOUND": th.optimizer_warning,
    }
    scored = [(_group(shares, phases) / warnings[kind], kind) for kind, phases, _ in _GROUPS]
    score, kind = max(scored)
    if score >= 1:
        return kind
    compute = _group(shares, ("forward", "backward"))
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
            got = sum(_group(_shares(w), phases) * w.mean_ms * w.steps for w in windows)
            return f"{WORDS[kind]} ({' + '.join(phases)} {pct(got / total)})" if total else kind
    mean = total / steps if steps else 0.0
    return f"{WORDS.get(kind, kind)} ({mean:.1f} ms mean step)"


def regime_change(view: RunView, th: Thresholds) -> Finding | None:
    """REGIME_CHANGE (warning when the later regime is a bottleneck, else info)."""
    rank = _median_rank(view)
    if rank is None:
        return None
    warm = max(th.warmup_steps, int(th.warmup_fraction * rank.total_steps))
    windows = [w for w in rank.timeline if w.first_step >= warm]
    total = sum(w.steps for w in windows)
    if total < 2 * MIN_STRETCH_STEPS:
        return None
    split = _best_split([(label(w, th), w.steps) for w in windows], total)
    if split is None:
        return None
    index, first, then = split
    at = windows[index].first_step
    early, late = _describe(first, windows[:index]), _describe(then, windows[index:])
    return Finding(
        kind="REGIME_CHANGE",
        section="step_time",
        severity="info" if then in ("COMPUTE_BOUND", "BALANCED") else "warning",
        summary=f"the run changed at step {at:,}: {early} before it, {late} from it on",
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

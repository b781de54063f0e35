"""RunView: the immutable picture of a run that rules, renderers and the TUI read.

Frozen plain values built by `RunStore`; nothing here mutates, does I/O or imports torch. A None
number always means "not measured", never 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from traceml.analysis.spikes import SlowStep, SpikeWindow
from traceml.analysis.stats import median
from traceml.analysis.timeline import TimelineWindow
from traceml.records import PHASES, Clock, ExitKind, Phase

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

RankState = Literal["live", "stalled", "dead", "finished"]
"""Liveness of a rank as the transport layer sees it (transport.subscribe.liveness)."""
ViewKind = Literal["live", "summary"]
Series = tuple[tuple[int, float], ...]
"""(step index, MB) points in step order."""


@dataclass(frozen=True, slots=True)
class RankWindow:
    """One rank's steps inside the view's window (last N steps live, post-warm-up for a summary)."""

    rank: int
    host: str = ""
    """Hostname from the rank's RankInfo; "" until the info arrived."""
    steps: int = 0
    """Steps inside the window; 0 means none yet (all numbers below are then None)."""
    total_steps: int = 0
    """Steps the rank has run so far, warm-up included."""
    median_ms: float | None = None
    p95_ms: float | None = None
    mean_ms: float | None = None
    """Mean step time of the typical steps (spikes left out, see `typical_steps`); phase
    shares are fractions of it."""
    phase_ms: tuple[float | None, ...] = (None,) * len(PHASES)
    """Mean ms per phase in PHASES order over the typical steps; None = the loop has no such
    phase (not measured)."""
    phase_share: tuple[float | None, ...] = (None,) * len(PHASES)
    """Fraction 0..1 of the typical steps' time per phase; None = not measured."""
    typical_steps: int = 0
    """Steps behind mean_ms and the phases: `steps` minus the spikes while they are rare
    (Thresholds.spike_rare), else `steps`."""
    max_ms: float | None = None
    """Slowest step of the window (all steps); None without steps."""
    slowest: tuple[SlowStep, ...] = ()
    """The window's slowest steps (at most 8), slowest first, each with its phase."""
    spikes: SpikeWindow | None = None
    """Rare slow steps of the window and what they cost; None when there were none."""
    step_series: Series = ()
    """Step ms over the window, decimated to at most ~256 block means (for the trend)."""
    host_rss: Series = ()
    """Host RSS in MB over the window; () when never read."""
    device_allocated: Series = ()
    """CUDA allocated MB over the window; () without CUDA."""
    device_peak_allocated_mb: float | None = None
    device_peak_reserved_mb: float | None = None
    device_capacity_mb: float | None = None
    """Total memory of the rank's GPU; None on CPU or before RankInfo arrived."""
    host_rss_peak_mb: float | None = None
    state: RankState = "live"
    clock: Clock = "host"
    dropped: int = 0
    """Records the rank had to drop because the viewer or transport fell behind; 0 = none."""
    phase: str | None = None
    """The phase the rank's training thread was in at its last heartbeat (`between` outside a
    step): where a stalled rank is stuck. None when no heartbeat said it."""
    exit: ExitKind | None = None
    """How the rank ended; None while it runs."""
    comm_wait_share: float | None = None
    """Live windows: fraction 0..1 of step time this rank's backward sat waiting for DDP's
    all-reduce (a part of `backward`); None when not measured."""
    comm_wait_ms: float | None = None
    """Live windows: mean of that wait per step; None when not measured."""
    timeline: tuple[TimelineWindow, ...] = ()
    """The rank's whole run (warm-up included) in at most 512 windows of consecutive steps,
    oldest first, in live and summary views alike; () before the first step."""

    def ms(self, name: Phase) -> float | None:
        """Mean ms of one phase; None when not measured."""
        return self.phase_ms[PHASES.index(name)]

    def share(self, name: Phase) -> float | None:
        """Share 0..1 of step time of one phase; None when not measured."""
        return self.phase_share[PHASES.index(name)]

    def group_share(self, names: Sequence[Phase]) -> float | None:
        """Summed share of the measured phases among `names`; None when none is measured."""
        return _sum_measured(self.share(n) for n in names)

    def group_ms(self, names: Sequence[Phase]) -> float | None:
        """Summed mean ms of the measured phases among `names`; None when none is measured."""
        return _sum_measured(self.ms(n) for n in names)

    @property
    def memory_series(self) -> Series:
        """Device allocated when the rank has device memory, else host RSS."""
        return self.device_allocated or self.host_rss


def _sum_measured(values: Iterable[float | None]) -> float | None:
    measured = [v for v in values if v is not None]
    return sum(measured) if measured else None


@dataclass(frozen=True, slots=True)
class RunView:
    """Every rank of a run over one window: what rules diagnose and renderers draw."""

    run_id: str = ""
    script: str = ""
    world_size: int = 1
    """World size announced by the ranks; may exceed len(ranks) while ranks are joining."""
    hosts: int = 1
    device: str = "cpu"
    ranks: tuple[RankWindow, ...] = ()
    """Ranks in rank order; ranks without steps in the window are included with steps = 0."""
    kind: ViewKind = "live"
    optimizers: tuple[str, ...] = ()
    """Class names of the optimizers any rank stepped, first seen first; () when none was seen
    (manual mode, a hand-written update): the findings' advice depends on them."""

    @property
    def steps(self) -> int:
        """Most steps any rank has inside the window; 0 when none has any."""
        return max((r.steps for r in self.ranks), default=0)

    @property
    def total_steps(self) -> int:
        """Most steps any rank has run, warm-up included."""
        return max((r.total_steps for r in self.ranks), default=0)

    @property
    def active(self) -> tuple[RankWindow, ...]:
        """Ranks with at least one step in the window."""
        return tuple(r for r in self.ranks if r.steps > 0)

    def phase_share(self, name: Phase) -> tuple[float | None, ...]:
        """Share of `name` per active rank, in rank order."""
        return tuple(r.share(name) for r in self.active)

    def median_share(self, name: Phase) -> float | None:
        """Median over active ranks of the share of `name`; None when no rank measured it."""
        return median(self.phase_share(name))

    def median_group_share(self, names: Sequence[Phase]) -> float | None:
        """Median over active ranks of the summed share of the measured phases among `names`."""
        return median(r.group_share(names) for r in self.active)

    def median_group_ms(self, names: Sequence[Phase]) -> float | None:
        """Median over active ranks of the summed mean ms of the measured phases in `names`."""
        return median(r.group_ms(names) for r in self.active)

    def median_ms(self) -> float | None:
        """Median over active ranks of their median step ms."""
        return median(r.median_ms for r in self.active)

    def median_mean_ms(self) -> float | None:
        """Median over active ranks of their mean step ms (the base of phase shares)."""
        return median(r.mean_ms for r in self.active)

    @property
    def has_device_memory(self) -> bool:
        return any(r.device_peak_allocated_mb is not None for r in self.active)

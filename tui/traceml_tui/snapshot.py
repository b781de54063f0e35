"""The frozen, complete picture of a run that every panel draws from (live data takes
one path, and the UI sees only immutable snapshots).

The feed worker builds one from its RunStore with `from_store`; a finished run gets one from its
summary (`traceml_tui.summary_snapshot`). Widgets only read snapshots. Nothing here does I/O,
mutates a snapshot after it is built, or imports torch.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from traceml.analysis.diagnose import diagnose
from traceml.analysis.rules_ranks import rank_lags
from traceml.analysis.stats import median
from traceml.config import DEFAULT_THRESHOLDS, Thresholds
from traceml.records import PHASES

if TYPE_CHECKING:
    from traceml.analysis.diagnose import Diagnosis
    from traceml.analysis.store import RunStore
    from traceml.analysis.view import RankWindow, RunView
    from traceml.records import StepRecord, SystemSample

SnapshotSource = Literal["live", "summary", "files"]
"""live: from the run's sockets; summary: its final_summary.json; files: only its run files (a
run that died without a summary: what `traceml ls` knows, nothing more)."""
RECENT_STEPS = 100
"""Steps of the charted ranks a snapshot carries for the "last 100 steps" charts."""
STATE_ORDER = {"dead": 0, "stalled": 1, "live": 2, "finished": 3}
STALE_AFTER_S = 5.0
"""A live run that sent nothing at all (not even a heartbeat) for this long is called stale."""


def _empty() -> Mapping[Any, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PhaseSplit:
    """Where the median rank's step time goes, per phase in PHASES order."""

    share: tuple[float | None, ...] = (None,) * len(PHASES)
    """Median over ranks of each phase's share 0..1 of step time; None = not measured."""
    ms: tuple[float | None, ...] = (None,) * len(PHASES)
    """Median over ranks of each phase's mean ms; None = not measured."""
    median_ms: float | None = None
    """Median over ranks of the median step time; None before the first step."""
    p95_ms: float | None = None
    comm_wait_share: float | None = None
    """Median over the ranks that measured it of the DDP all-reduce wait's share (a part of
    backward); None when no rank measured it."""
    comm_wait_ms: float | None = None

    @classmethod
    def of_view(cls, view: RunView) -> PhaseSplit:
        active = view.active
        return cls(
            share=tuple(view.median_share(p) for p in PHASES),
            ms=tuple(median(r.ms(p) for r in active) for p in PHASES),
            median_ms=view.median_ms(),
            p95_ms=median(r.p95_ms for r in active),
            comm_wait_share=median(r.comm_wait_share for r in active),
            comm_wait_ms=median(r.comm_wait_ms for r in active),
        )


@dataclass(frozen=True, slots=True, eq=False)
class Snapshot:
    """Everything the panels show at one instant; compared by identity (it is never mutated)."""

    view: RunView
    """Live window (last N steps per rank) or, for a summary, the whole run after warm-up."""
    diagnosis: Diagnosis | None
    """Findings of `view`; None only when a summary carried none."""
    phases: PhaseSplit
    taken_at: float
    """Epoch seconds at which the snapshot was built."""
    lags: Mapping[int, float] = field(default_factory=_empty)
    """Rank -> how far it is behind the median rank, as a fraction of a step; absent = unknown."""
    system: Mapping[int, SystemSample] = field(default_factory=_empty)
    """Rank -> its latest system sample; absent = none received yet."""
    started: float | None = None
    """Epoch seconds at which the run started; None = unknown."""
    last_data_at: float | None = None
    """Epoch seconds of the last record or heartbeat received; None = nothing yet."""
    source: SnapshotSource = "live"
    duration_s: float | None = None
    """Run length from a summary; None for a live run (uptime is computed from `started`)."""
    run_exit: str | None = None
    """How the run ended according to its summary ("ok", "error", "signal"); None while live."""
    summary: Mapping[str, Any] | None = None
    """The final_summary.json object this snapshot came from; None for a live run."""
    child_exit: int | None = None
    """Exit status of the script started by `traceml run`; None while it runs or when attached."""
    restarts: int = 0
    """torchelastic restarts so far (the newest incarnation among the ranks); 0 = none."""
    recent: Mapping[int, tuple[StepRecord, ...]] = field(default_factory=_empty)
    """Rank -> its last RECENT_STEPS step records, for the worst and the focused rank only (the
    charts' "last 100 steps"); absent = not carried."""
    known_steps: int | None = None
    """Steps the run files say the run has made, before its history arrived; None = unknown."""
    known: Mapping[str, Any] | None = None
    """For source "files": what the run files say (last step ms, primary finding kind, when the
    last step ended); None otherwise."""

    @property
    def worst(self) -> int | None:
        """The rank the ranks table lists first (dead, stalled, then most behind); None when the
        run has no rank yet. The memory, system and chart panels show it by default."""
        ranks = self.view.ranks
        if not ranks:
            return None
        return min(ranks, key=lambda r: worst_first(r, self.lags.get(r.rank))).rank

    def rank(self, rank: int) -> RankWindow | None:
        """The window of `rank`, or None when the run has no such rank."""
        ranks = self.view.ranks
        i = bisect.bisect_left(ranks, rank, key=lambda r: r.rank)
        return ranks[i] if i < len(ranks) and ranks[i].rank == rank else None


def worst_first(rank: RankWindow, lag: float | None) -> tuple[int, float, float, int]:
    """Sort key: dead, then stalled, then the most lagging (slowest when lag is unknown)."""
    slow = -(rank.median_ms or 0.0)
    return (STATE_ORDER.get(rank.state, 2), -lag if lag is not None else math.inf, slow, rank.rank)


def from_store(
    store: RunStore,
    *,
    now: float,
    last_data_at: float | None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    focus: int | None = None,
    known_steps: int | None = None,
) -> Snapshot:
    """Build a live Snapshot from the feed's store (call it from the feed thread only).

    Args:
        store: The RunStore the feed folds records into.
        now: Epoch seconds, stamped as `taken_at`.
        last_data_at: When the feed last received anything from the run.
        thresholds: Live window and diagnosis thresholds.
        focus: The rank the user chose to look at; its recent steps are carried too.
        known_steps: Steps the run files announce (shown while the history is on its way).
    """
    view = store.live_view()
    numbers = [r.rank for r in view.ranks]
    system = {r: s for r in numbers if (s := store.last_system(r)) is not None}
    known = [i for r in numbers if (i := store.info(r)) is not None]
    infos = [i for i in known if i.started > 0]
    snap = Snapshot(
        view=view,
        diagnosis=diagnose(view, thresholds),
        phases=PhaseSplit.of_view(view),
        taken_at=now,
        lags=MappingProxyType({lag.rank: lag.lag for lag in rank_lags(view, thresholds)}),
        system=MappingProxyType(system),
        started=min((i.started for i in infos), default=None),
        last_data_at=last_data_at,
        restarts=max((i.incarnation for i in known), default=0),
        known_steps=known_steps,
    )
    charted = {r for r in (snap.worst, focus) if r is not None and r in store.ranks()}
    recent = {r: tuple(store.recent(r, RECENT_STEPS)) for r in charted}
    return dataclasses.replace(snap, recent=MappingProxyType(recent))


@dataclass(frozen=True, slots=True)
class RunState:
    """How the header and panels describe the run as a whole."""

    word: Literal["connecting", "waiting", "live", "stalled", "stale", "dead", "finished", "lost"]
    text: str
    """What the user reads, e.g. "live", "2 of 8 ranks dead", "finished (exit 1)"."""
    css: str
    """CSS class for the state: -waiting, -live, -stale, -dead or -finished."""


def _count(view: RunView, state: str) -> int:
    return sum(1 for r in view.ranks if r.state == state)


def exit_words(status: int) -> str:
    """A script's exit status as the header says it: 0 is "ok", like a summary's `run.exit`."""
    if status == 0:
        return "finished (ok)"
    if status > 128:
        try:
            name = signal.Signals(status - 128).name
        except ValueError:
            name = f"signal {status - 128}"
        hint = " (out of memory?)" if name == "SIGKILL" else ""
        return f"killed by {name}{hint} (exit {status})"
    return f"finished (exit {status})"


RUN_EXIT_WORDS = {
    "ok": "finished (ok)",
    "error": "finished (error)",
    "signal": "stopped by a signal",
    "killed": "killed (out of memory?)",
}
"""A summary's or rank end's `exit` kind, as the header says it."""


def _ended(snap: Snapshot) -> RunState | None:
    if snap.child_exit is not None:
        return RunState("finished", exit_words(snap.child_exit), "-finished")
    if snap.source == "summary":
        text = RUN_EXIT_WORDS.get(snap.run_exit or "", f"finished ({snap.run_exit or '?'})")
        return RunState("finished", text, "-finished")
    ranks = snap.view.ranks
    if ranks and all(r.state == "finished" for r in ranks):
        exits = sorted({r.exit for r in ranks if r.exit is not None}) or ["ok"]
        words = [RUN_EXIT_WORDS.get(e, e) for e in exits]
        return RunState("finished", ", ".join(words), "-finished")
    return None


def age(seconds: float) -> str:
    """12 s, 5 min, 3 h, 2 d."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{max(0, int(seconds))} s"


def _trouble(snap: Snapshot, now: float) -> RunState | None:
    view, n = snap.view, len(snap.view.ranks)
    dead, stalled = _count(view, "dead"), _count(view, "stalled")
    if dead:
        text = "dead" if dead == n else f"{dead} of {n} ranks dead"
        if dead == n and snap.last_data_at is not None:
            text += f" for {age(now - snap.last_data_at)}"
        return RunState("dead", text, "-dead")
    if stalled:
        text = "stalled" if stalled == n else f"{stalled} of {n} ranks stalled"
        return RunState("stalled", text, "-stale")
    if snap.last_data_at is not None and now - snap.last_data_at > STALE_AFTER_S:
        return RunState("stale", f"no data for {now - snap.last_data_at:.0f} s", "-stale")
    return None


def run_state(snap: Snapshot | None, now: float) -> RunState:
    """Say what the run is doing, in words: never blank."""
    if snap is None:
        return RunState("connecting", "connecting to the run…", "-waiting")
    ended = _ended(snap)
    if ended is not None:
        return ended
    trouble = _trouble(snap, now)
    if trouble is not None:
        return trouble
    if snap.view.total_steps == 0 and snap.known_steps:
        return RunState(
            "waiting", f"fetching the history ({snap.known_steps:,} steps)…", "-waiting"
        )
    if snap.view.total_steps == 0:
        return RunState("waiting", "waiting for the first step…", "-waiting")
    return RunState("live", "live", "-live")


def is_over(snap: Snapshot) -> bool:
    """True when nothing more will come: finished, or every rank dead."""
    word = run_state(snap, snap.taken_at).word
    every_rank_dead = _count(snap.view, "dead") == len(snap.view.ranks)
    return word == "finished" or (word == "dead" and every_rank_dead)


def stall_text(snap: Snapshot) -> str | None:
    """ "rank 1 stalled: no step ended for 25 s (its steps took 27 ms)"; None unless stalled.

    The time comes from the stalled rank's last step record (the worst rank's recent steps ride
    in every snapshot, and a stalled rank is the worst)."""
    stalled = [r for r in snap.view.ranks if r.state == "stalled"]
    if not stalled:
        return None
    worst = snap.worst
    rank = next((r for r in stalled if r.rank == worst), stalled[0])
    head = f"rank {rank.rank} stalled" if len(snap.view.ranks) > 1 else "stalled"
    recent = snap.recent.get(rank.rank, ())
    if not recent:
        return f"{head}: heartbeats come, but no step ended since this viewer attached"
    last = recent[-1]
    quiet = snap.taken_at - (last.wall_start + last.step_ms / 1000)
    usual = f" (its steps took {rank.median_ms:.1f} ms)" if rank.median_ms is not None else ""
    where = f", in {rank.phase}" if rank.phase else ""
    return f"{head}: no step ended for {age(quiet)} after step {last.step + 1:,}{where}{usual}"


def no_steps_text(snap: Snapshot | None) -> str | None:
    """Why the panels have no step to draw, in words; None when they have some."""
    if snap is None:
        return "Waiting for the run…"
    if snap.view.steps > 0:
        return None
    if snap.source == "files":
        return files_text(snap)
    if run_state(snap, snap.taken_at).word == "finished":
        return "No steps to show: the run ended before this viewer saw any (see its summary)."
    if snap.known_steps:
        return f"Fetching the run's history ({snap.known_steps:,} steps so far)…"
    return "Waiting for the first step…"


def files_text(snap: Snapshot) -> str:
    """What the run files tell of a run that died without a summary."""
    known = snap.known or {}
    steps = snap.view.total_steps
    parts = [
        f"The run died after {steps:,} steps" if steps else "The run died before its first step"
    ]
    if known.get("last_step_ms") is not None:
        parts.append(f"its last step took {known['last_step_ms']:.1f} ms")
    if known.get("primary"):
        parts.append(f"its diagnosis then was {known['primary']}")
    text = "; ".join(parts) + "."
    if snap.last_data_at is not None:
        text += f" Its last sign of life was {age(snap.taken_at - snap.last_data_at)} ago."
    return text + " It left no summary, and no process is left to ask for more."

"""A Snapshot of a run that died without a summary, from its run files alone (what `ls` knows).

Such a run has no process left to answer a snapshot request, so its rank files are all there is:
the last step and its time, the diagnosis at that moment, and when each rank was last heard of.
Pure translation of an already read RunEntry: no I/O, no sockets, no torch.
"""

from __future__ import annotations

import time
from types import MappingProxyType
from typing import TYPE_CHECKING

from traceml.analysis.view import RankWindow, RunView
from traceml_tui.snapshot import PhaseSplit, Snapshot

if TYPE_CHECKING:
    from traceml.transport.runfiles.runfile import RankFile
    from traceml.transport.subscribe.runs import RunEntry


def _rank(entry: RunEntry, rank: RankFile) -> RankWindow:
    return RankWindow(
        rank=rank.rank,
        host=rank.host,
        total_steps=0 if rank.last_step is None else rank.last_step + 1,
        median_ms=rank.median_step_ms,
        state=entry.rank_states.get(rank.rank, "dead"),
        dropped=rank.dropped,
        exit=rank.end.exit if rank.end is not None else None,
    )


def last_heard(entry: RunEntry) -> float | None:
    """Epoch seconds of the last step or file write of any rank; None when nothing was written."""
    times = [t for r in entry.ranks for t in (r.last_step_t, r.updated) if t]
    return max(times, default=None)


def from_entry(entry: RunEntry, now: float | None = None) -> Snapshot:
    """The Snapshot of a dead run without a summary: its files' facts, its panels in words."""
    view = RunView(
        run_id=entry.run_id,
        script=entry.script,
        world_size=entry.world_size or len(entry.ranks) or 1,
        hosts=len(entry.hosts) or 1,
        ranks=tuple(sorted((_rank(entry, r) for r in entry.ranks), key=lambda w: w.rank)),
    )
    return Snapshot(
        view=view,
        diagnosis=None,
        phases=PhaseSplit(),
        taken_at=time.time() if now is None else now,
        started=entry.started or None,
        last_data_at=last_heard(entry),
        source="files",
        known=MappingProxyType({"last_step_ms": entry.last_step_ms, "primary": entry.primary}),
    )

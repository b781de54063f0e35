"""`traceml.summary()`: the summary of this process's run while it trains, or the one it wrote.

Runs on whichever thread asks. The store is written by the tx worker's beats only (one at a
time, on the training thread between steps or on the tx thread); the summary is built under the
store's own (reentrant) lock, so every number comes from one instant of the run. A beat waits
while it is built (a few ms); a step never does, since it only appends to a bounded buffer that
the beats drain. First the tx thread is asked to fold the
steps queued so far (`TxWorker.flush`, at most FLUSH_WAIT_S), so a summary asked for right
after a step counts it, where it would miss up to a fold's interval of steps (0.25 s while a
viewer listens, 1 s otherwise).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traceml.instrument.session import Session

FLUSH_WAIT_S = 1.0
"""How long a summary waits for the tx thread to fold the queued steps (a few ms, one tick's
fold); past it, the summary covers what was folded."""


def session_summary(session: Session) -> dict[str, Any] | None:
    """The written final_summary.json once the session closed and wrote one; otherwise the
    summary built now from the session's store (`run.exit` "running" while it is open)."""
    if session.closed and session.summary_path is not None:
        try:
            loaded: dict[str, Any] = json.loads(session.summary_path.read_text(encoding="utf-8"))
            return loaded
        except (OSError, ValueError):
            pass  # moved or removed since: the store still knows the run
    worker, info = session.worker, session.info
    if worker is None or info is None:
        return None
    from traceml.analysis.summary import build_summary

    worker.flush(FLUSH_WAIT_S)
    store = worker.p.store
    with store.frozen():  # one instant of the run; see the module docstring
        return build_summary(
            store,
            run_id=info.run_id,
            script=info.script,
            argv=list(info.argv),
            started=info.started,
            duration_s=max(0.0, time.time() - info.started),
            exit=session.exit if session.closed else "running",
            device=info.device,
            torch_version=info.torch_version,
        )

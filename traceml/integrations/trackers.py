"""`live()`: this training process's run, logged live into W&B, MLflow or TensorBoard.

A single-rank run is read from the store its own tx thread folds (`export.live.OwnStore`); a
rank of a multi-rank job, or a run named by id, is followed over its sockets as `traceml export`
follows it (`export.live.follow_live`), since only the job's sockets carry the other ranks.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from traceml.export.live import LiveLogger, OwnStore, follow_live, start_logger, tracker_for

if TYPE_CHECKING:
    from traceml.export.tensorboard_tracker import ScalarWriter


def live(
    target: str | ScalarWriter,
    *,
    every_s: float = 10.0,
    run: str | None = None,
    runtime_dir: Path | None = None,
) -> LiveLogger:
    """Log this training process's run live into the user's tracker, from a daemon thread.

    Call it after traceml.init() (and wandb.init() / mlflow.start_run()); nothing runs on the
    training thread. Only one process needs it (rank 0 sees its node's ranks, and on a
    multi-node job every rank through the collector's relays).

    Args:
        target: "wandb" (the active wandb.run), "mlflow" (the active MLflow run), or a
            TensorBoard writer (torch's SummaryWriter or tensorboard.summary.Writer).
        every_s: Seconds between two points.
        run: The TraceML run to follow; default the one this process is a rank of.
        runtime_dir: Where runs live (tests).

    Returns:
        The started LiveLogger; close() (also run at exit) stops it and logs a last point.

    Raises:
        ValueError: `target` is not one of those.
        ConfigError: the tracker is not installed or has no active run.
    """
    own = own_store() if run is None else None
    if own is None:
        return follow_live(target, every_s=every_s, run=run, runtime_dir=runtime_dir)
    return start_logger(LiveLogger(own, tracker_for(target), every_s=every_s, owns_follower=True))


def own_store() -> OwnStore | None:
    """This process's run as its tx thread folds it, when TraceML runs here and the run has
    this one rank; None otherwise (not initialised yet, or a multi-rank job)."""
    from traceml import api
    from traceml.live_summary import FLUSH_WAIT_S

    session = api.current_session()
    if session is None or session.info is None or session.worker is None:
        return None
    if session.info.world_size != 1:
        return None
    worker = session.worker
    return OwnStore(worker.p.store, lambda: worker.flush(FLUSH_WAIT_S))

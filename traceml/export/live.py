"""Live logging into an experiment tracker: windowed step time, phase shares and memory, every N s.

A LiveLogger runs on its own daemon thread beside a Follower (never on a training thread): every
`every_s` seconds, when the run made progress, it takes the store's live view and hands a flat
dict to a Tracker (W&B, MLflow, TensorBoard; see the *_tracker modules). Keys follow
`log_summary`'s (`traceml/step_time/median_ms`, `traceml/step_time/dataloader_pct`), so live
curves and the final summary sit side by side; the x-axis is the run's step count. Values not
measured are left out, never logged as 0.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from traceml.analysis.rules_ranks import rank_lags
from traceml.analysis.stats import median
from traceml.config import DEFAULT_THRESHOLDS, Thresholds
from traceml.errors import TraceMLError
from traceml.export.metrics import latest_memory
from traceml.records import PHASES
from traceml.transport.subscribe.runs import list_runs

if TYPE_CHECKING:
    from traceml.analysis.store import RunStore
    from traceml.analysis.view import RunView
    from traceml.export.tensorboard_tracker import ScalarWriter

PREFIX = "traceml"
"""Key prefix, the same as log_summary's (traceml.integrations.flatten)."""
ATTACH_POLL_S = 0.5
"""How often a logger whose run has no files yet looks again."""


class Tracker(Protocol):
    """Where live points go; called from the LiveLogger's thread only."""

    name: str

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Record one point of every metric at training step `step`."""

    def close(self) -> None:
        """Flush and release; idempotent."""


def _memory(store: RunStore, view: RunView) -> dict[str, float | None]:
    mems = [latest_memory(store, r.rank) for r in view.ranks]
    peaks = [r.device_peak_allocated_mb for r in view.active if r.device_peak_allocated_mb]
    return {
        "step_memory/host_rss_mb": _most(m.host_rss_mb for m in mems),
        "step_memory/device_allocated_mb": _most(m.device_allocated_mb for m in mems),
        "step_memory/device_reserved_mb": _most(m.device_reserved_mb for m in mems),
        "step_memory/device_peak_allocated_mb": max(peaks, default=None),
    }


def _most(values: Iterable[float | None]) -> float | None:
    return max((v for v in values if v is not None), default=None)


def live_metrics(
    store: RunStore, thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> tuple[int, dict[str, float]]:
    """(steps run, metrics) of the store's live window, medians over ranks (the slowest rank's
    memory); ({}) before the first step.

    Args:
        store: The run's store.
        thresholds: Live window size and lag thresholds.
    """
    view = store.live_view()
    if not view.active:
        return view.total_steps, {}
    active = view.active
    values: dict[str, float | None] = {
        "step_time/median_ms": view.median_ms(),
        "step_time/p95_ms": median(r.p95_ms for r in active),
        "step_time/mean_ms": view.median_mean_ms(),
        "step_time/comm_wait_pct": _pct(median(r.comm_wait_share for r in active)),
        **{f"step_time/{p}_pct": _pct(view.median_share(p)) for p in PHASES},
        **_memory(store, view),
    }
    lags = [lag.lag for lag in rank_lags(view, thresholds)]
    values["ranks/max_lag_pct"] = _pct(max(lags)) if lags else None
    metrics = {f"{PREFIX}/{k}": v for k, v in values.items() if v is not None}
    return view.total_steps, metrics


def _pct(share: float | None) -> float | None:
    return None if share is None else 100.0 * share


class Feed(Protocol):
    """What a LiveLogger reads its run from: a Follower, or the process's own store (OwnStore)."""

    ref: str | None

    @property
    def alive(self) -> bool: ...
    def runs(self) -> Sequence[HasStore]: ...
    def start(self) -> object: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...


class HasStore(Protocol):
    @property
    def store(self) -> RunStore: ...


class OwnStore:
    """A single-rank run's store as the training process's own LiveLogger reads it: the store
    its tx thread folds, read in place under the store's lock.

    A Follower there subscribed the process to its own publisher. The rank then had a listener:
    it folded four times a second instead of once and packed every record, and the follower
    decoded and folded every record a second time, all under the training process's GIL.

    Args:
        store: The rank's RunStore.
        flush: Asks the tx thread to fold what is queued and waits for it (a bounded wait:
            the session's `TxWorker.flush`, as `traceml.summary()` calls it).
    """

    ref: str | None = None

    def __init__(self, store: RunStore, flush: Callable[[], object]) -> None:
        self.store = store
        self._flush = flush
        self._open = True

    @property
    def alive(self) -> bool:
        return self._open

    def runs(self) -> list[OwnStore]:
        return [self]

    def start(self) -> OwnStore:
        return self

    def stop(self) -> None:
        """Fold the steps queued since the tx thread's last fold, for the last point."""
        if self._open:
            self._flush()

    def close(self) -> None:
        """Stop reading; the store stays the tx thread's (the logger stopped first)."""
        self._open = False


class LiveLogger:
    """Logs the follower's (first) run into `tracker` every `every_s` seconds, on its own thread.

    Args:
        follower: A started or startable Follower of one run, or an OwnStore.
        tracker: Where the points go; closed by close().
        every_s: Seconds between two points; a point is logged only when the run moved on.
        warn: Where a tracker's failure is reported (once); logging stops on it.
        find_run: Finds the run id when the follower is not started yet (see `live`).
        owns_follower: close() closes the follower too.
    """

    def __init__(
        self,
        follower: Feed,
        tracker: Tracker,
        *,
        every_s: float = 10.0,
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
        warn: Callable[[str], object] = lambda line: print(line, file=sys.stderr),
        find_run: Callable[[], str | None] | None = None,
        owns_follower: bool = False,
    ) -> None:
        if every_s <= 0:
            raise ValueError(f"every_s must be > 0, got {every_s}")
        self.follower = follower
        self.tracker = tracker
        self.every_s = every_s
        self.thresholds = thresholds
        self.warn = warn
        self.find_run = find_run
        """Finds the run to follow when the follower is not started yet; None = follower.ref."""
        self.owns_follower = owns_follower
        """close() closes the follower too (live() made it)."""
        self.logged = 0
        """Points logged so far."""
        self.failed: str | None = None
        """The tracker's error once it failed (logging stopped); None while it works."""
        self._last_step = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> LiveLogger:
        self._thread = threading.Thread(target=self._loop, name="traceml-live", daemon=True)
        self._thread.start()
        return self

    def log_once(self) -> bool:
        """Log one point if the run made progress since the last; True when one was logged."""
        runs = self.follower.runs()
        if not runs or self.failed is not None:
            return False
        step, metrics = live_metrics(runs[0].store, self.thresholds)
        if not metrics or step <= self._last_step:
            return False
        with self._lock:
            try:
                self.tracker.log(metrics, step)
            except Exception as e:  # noqa: BLE001 - a tracker's own errors stop logging, never raise
                self.failed = f"{type(e).__name__}: {e}"
                self.warn(f"traceml export: {self.tracker.name} stopped taking points: {e}")
                return False
        self._last_step = step
        self.logged += 1
        return True

    def close(self) -> None:
        """Stop the thread, log the last point, close the tracker; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        if self.owns_follower:
            self.follower.stop()  # folds what arrived since its last pass into the last point
        self.log_once()
        self.tracker.close()
        if self.owns_follower:
            self.follower.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s if self._attached() else ATTACH_POLL_S):
            self.log_once()

    def _attached(self) -> bool:
        """Start the follower once its run can be found (in a training process the run files
        appear after init() returns); True when it follows."""
        if self.follower.alive:
            return True
        if self.find_run is not None:
            ref = self.find_run()
            if ref is None:
                return False
            self.follower.ref = ref
        try:
            self.follower.start()
        except TraceMLError:
            return False
        return True


def own_run(runtime_dir: Path | None = None) -> str | None:
    """The id of the live run one of whose ranks is this process; None until its files exist."""
    pid = os.getpid()
    try:
        runs = list_runs(runtime_dir)
    except TraceMLError:
        return None
    return next((r.run_id for r in runs if any(f.pid == pid for f in r.ranks)), None)


def tracker_for(target: str | ScalarWriter) -> Tracker:
    if not isinstance(target, str):
        from traceml.export.tensorboard_tracker import TensorBoardTracker

        return TensorBoardTracker(target, owned=False)
    if target == "wandb":
        from traceml.export.wandb_tracker import active_wandb

        return active_wandb()
    if target == "mlflow":
        from traceml.export.mlflow_tracker import active_mlflow

        return active_mlflow()
    raise ValueError(f"live({target!r}): use 'wandb', 'mlflow' or a TensorBoard SummaryWriter")


def follow_live(
    target: str | ScalarWriter,
    *,
    every_s: float = 10.0,
    run: str | None = None,
    runtime_dir: Path | None = None,
) -> LiveLogger:
    """`traceml.integrations.live` (the same arguments, the same errors) following the run over
    its sockets, as `traceml export` does: for a rank of a multi-rank job, which must see the
    other ranks, or for a run named by id."""
    from traceml.export.follower import Follower

    tracker = tracker_for(target)
    follower = Follower(run, runtime_dir=runtime_dir)
    find = None if run is not None else (lambda: own_run(runtime_dir))
    return start_logger(
        LiveLogger(follower, tracker, every_s=every_s, find_run=find, owns_follower=True)
    )


def start_logger(logger: LiveLogger) -> LiveLogger:
    """Start `logger`, with its last point logged at this process's exit."""
    owner = os.getpid()
    # The last point at exit, before the tracker's own atexit (registered earlier, run later)
    # finishes its run; never from a forked child, whose tracker is not ours to write.
    atexit.register(lambda: logger.close() if os.getpid() == owner else None)
    return logger.start()

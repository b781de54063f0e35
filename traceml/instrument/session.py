"""One TraceML session per process: wires the timer, hooks, tx thread and shutdown together.

`Session.start()` is what `traceml.init` does; `shutdown()` is idempotent and runs from atexit,
from a SIGTERM handler that chains to the previous one, or by hand. If anything inside TraceML
fails, the session logs one warning and steps aside: the training loop never sees an exception.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from traceml._version import __version__
from traceml.config import Settings
from traceml.instrument.hooks import Hooks
from traceml.instrument.memory import CudaMemory, HostRss
from traceml.instrument.resolve import host_records_for
from traceml.instrument.timer import RawStep, native_for, new_timer
from traceml.instrument.worker import TxWorker, WorkerParts
from traceml.probe import warn_directly, warn_once
from traceml.records import PHASES, ExitKind, RankEnd, RankInfo
from traceml.tracebacks import strip_exception

SHUTDOWN_TIMEOUT_S = 2.0


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def script_name() -> str:
    """The training script's file name, as the user would recognise it (in a Jupyter kernel,
    the notebook's, which Jupyter names in JPY_SESSION_NAME, not ipykernel_launcher.py)."""
    path = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c", "-m") else ""
    notebook = os.environ.get("JPY_SESSION_NAME", "")
    if notebook and os.path.basename(path).startswith("ipykernel_launcher"):
        path = notebook
    return os.path.basename(path) or "python"


class Session:
    """Everything TraceML holds in one process, from `init` to `shutdown`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.pid = os.getpid()
        self.raw: deque[RawStep] = deque(maxlen=settings.buffer_steps)
        self.rss = HostRss()
        self.timer = new_timer(self.raw, read_rss=self.rss.pages, native_ok=settings.c_timer)
        self.hooks = Hooks(self.timer, self.on_error, settings.skip)
        self.exit: ExitKind = "ok"
        self.closed = False
        self.failed = False
        self.info: RankInfo | None = None
        self.worker: TxWorker | None = None
        self.ship: Any = None
        """ship.Ship when the beats run in a process of their own (Settings.beats), else None."""
        self.summary_path: Path | None = None
        self.last_model_id = 0
        """id() of the model last given to trace_step, so a new model is hooked once."""
        self.step_ctx: Any = None
        self._torch: Any = None
        self._cuda_on = False
        self.cuda_checked = False
        """True once CUDA events are in use: trace_step stops looking for a model moved to a GPU."""
        self._prev_term: Any = None
        self._prev_excepthook: Any = None
        self.error: tuple[str, str] | None = None
        """(type name, message) of the exception that ended the script; kept in the summary."""

    # -- start -------------------------------------------------------------------------------
    def start(self) -> None:
        import torch

        self._torch = torch
        warn_directly(False)
        if self.settings.mode == "auto":
            self.hooks.install_auto(torch, h2d=False)
        self.info = self._rank_info(torch)
        self.cuda_checked = not self.info.device.startswith("cuda")  # no GPU: nothing to look for
        _preload_finish()
        if not (self.settings.beats == "process" and self._start_ship()):
            self.worker = TxWorker(self._worker_parts())
            self.worker.start()
            if self.settings.inline:
                self.timer.use_beat(self.worker.beat)
        atexit.register(self.shutdown)
        self._install_exit_handlers()
        os.register_at_fork(after_in_child=self._after_fork_child)

    def _start_ship(self) -> bool:
        """The beats in a process of their own (Settings.beats); False where this rank keeps
        the tx thread: a CUDA rank (its events resolve only here), a rank of a multi-rank job
        (the job link), the Python timer (the ring is written in C), no memfd (not Linux), or
        a beats process that did not start."""
        from traceml.instrument.ship import Ship

        info = self.info
        assert info is not None
        if info.device != "cpu" or info.world_size > 1 or native_for(self.timer) is None:
            return False
        if not hasattr(os, "memfd_create"):
            return False
        ship = Ship(self.timer, optimizers=lambda: tuple(self.hooks.optimizers))
        if not ship.start(info, self.settings.mode, self.settings.buffer_steps, self.rss.page_mb):
            return False
        self.ship = ship
        self.timer.use_beat(ship.beat)
        return True

    def _rank_info(self, torch: Any) -> RankInfo:
        from traceml.transport.runfiles.runid import derive_run_id

        script = script_name()
        cuda_ok = bool(torch.cuda.is_available())
        local_rank = _env_int("LOCAL_RANK", 0)
        return RankInfo(
            run_id=self.settings.run_id or derive_run_id(script),
            rank=_env_int("RANK", 0),
            local_rank=local_rank,
            world_size=_env_int("WORLD_SIZE", 1),
            host=socket.gethostname(),
            pid=self.pid,
            started=time.time(),
            script=script,
            argv=tuple(sys.argv[1:]),
            device=f"cuda:{local_rank}" if cuda_ok else "cpu",
            device_capacity_mb=CudaMemory(torch).capacity_mb() if cuda_ok else None,
            torch_version=str(torch.__version__),
            traceml_version=__version__,
            incarnation=_env_int("TORCHELASTIC_RESTART_COUNT", 0),
        )

    def _worker_parts(self) -> WorkerParts:
        from traceml.instrument.system import SystemSampler

        assert self.info is not None
        info = self.info
        gpu = info.local_rank if info.device.startswith("cuda") else None
        return rank_parts(
            self.settings,
            info,
            raw=self.raw,
            page_mb=self.rss.page_mb,
            wall_offset_ns=time.time_ns() - time.perf_counter_ns(),
            sampler=SystemSampler(info.rank, gpu),
            optimizers=lambda: tuple(self.hooks.optimizers),
            host_records=host_records_for(native_for(self.timer)),
            recycle=getattr(self.timer, "recycle", None),
            phase=lambda: PHASES[self.timer.open_phase],
        )

    def _install_exit_handlers(self) -> None:
        self._prev_excepthook = sys.excepthook
        sys.excepthook = self._excepthook
        if threading.current_thread() is threading.main_thread():
            try:
                self._prev_term = signal.signal(signal.SIGTERM, self._on_sigterm)
            except (ValueError, OSError):
                self._prev_term = None

    # -- hot path helpers --------------------------------------------------------------------
    def watch_model(self, model: Any) -> None:
        """A model's first trace_step: its thread is the training thread, DDP's all-reduce wait
        is timed, and CUDA events are used if it is on a GPU (forward needs nothing per model)."""
        torch = self._torch
        if not isinstance(model, torch.nn.Module):
            warn_once(
                "trace_step model",
                f"trace_step() expects the torch.nn.Module being trained, got "
                f"{type(model).__name__}; forward is still timed, but a model on a GPU or in"
                " DDP needs to be passed for CUDA events and the all-reduce wait",
            )
            return
        if self.settings.mode == "auto":
            self.hooks.watch_model(model)
        self.check_cuda(model)

    def check_cuda(self, model: Any) -> None:
        """Use CUDA events from now on if `model` is on a GPU (also after a late `.to("cuda")`)."""
        if not self._cuda_on and _on_cuda(model):
            self._enable_cuda(self._torch)

    def _enable_cuda(self, torch: Any) -> None:
        from traceml.instrument.cuda import CudaMarker, EventPool, torch_event_factory

        marker = CudaMarker(EventPool(torch_event_factory()))
        assert self.worker is not None
        self.worker.p.cuda = marker
        self.timer.use_cuda(marker.record, CudaMemory(torch).read)
        if self.settings.mode == "auto":
            self.hooks.install_h2d(torch)
        self._cuda_on = self.cuda_checked = True

    # -- failure and exit --------------------------------------------------------------------
    def on_error(self, err: BaseException) -> None:
        """TraceML itself broke: warn once, take every hook away, let training run on bare."""
        if self.failed:
            return
        self.failed = True
        warn_once("internal", f"disabled after an internal error ({type(err).__name__}: {err})")
        self.hooks.remove()

    def _excepthook(
        self, etype: type[BaseException], value: BaseException, tb: TracebackType | None
    ) -> None:
        self.exit = "signal" if issubclass(etype, KeyboardInterrupt) else "error"
        if self.exit == "error":
            self.note_error(value)
        if value is not None and value.__traceback__ is tb:
            strip_exception(value)  # the traceback reads as without TraceML's wrappers
            tb = value.__traceback__
        (self._prev_excepthook or sys.__excepthook__)(etype, value, tb)

    def note_error(self, value: BaseException) -> None:
        """The script ended with `value`: the summary says exit "error" and names it."""
        self.exit = "error"
        self.error = (type(value).__name__, _message(value))

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if self.closed:
            return  # a second TERM (the group's and the launcher's) while the summary is written
        self.shutdown("signal")
        prev = self._prev_term
        if callable(prev):
            prev(signum, frame)
            return
        if prev == signal.SIG_IGN:
            return
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def _after_fork_child(self) -> None:
        # A forked child (DataLoader worker) must never touch the parent's sockets or files.
        self.closed = True
        self.timer.use_beat(None)  # the parent's worker, sockets and lock are not the child's
        if self.ship is not None:
            self.ship.close_in_child()
            self.ship = None
        self.hooks.forget_thread()
        self.hooks = Hooks(self.timer, self.on_error)
        self.raw.clear()

    def shutdown(self, exit_kind: ExitKind | None = None) -> Path | None:
        """Stop timing, write the summary, close the transport. Idempotent; at most ~2 s."""
        if self.closed or os.getpid() != self.pid:
            return self.summary_path
        self.closed = True
        held = _hold_signals()  # first of all: a second Ctrl-C must not cut the summary short
        try:
            warn_directly(True)  # a logging lock may be held by the thread a SIGTERM interrupted
            if exit_kind is not None:
                self.exit = exit_kind
            self.hooks.remove()
            self.timer.use_beat(None)
            atexit.unregister(self.shutdown)
            self._stop_worker()
        finally:
            _release_signals(held)
            self._restore_handlers()
        self.rss.close()
        return self.summary_path

    def _stop_worker(self) -> None:
        if self.ship is not None:
            self._stop_ship()
            return
        worker = self.worker
        if worker is None or not worker.is_alive():
            return
        if not worker.stop(self._end(), SHUTDOWN_TIMEOUT_S):
            warn_once(
                "shutdown", "background thread did not finish in time; summary may be missing"
            )
        self.summary_path = worker.summary_path

    def _stop_ship(self) -> None:
        ship, self.ship = self.ship, None
        if not ship.stop(self._end(), SHUTDOWN_TIMEOUT_S):
            warn_once("shutdown", "beats process did not answer in time: summary late or missing")
        self.summary_path = ship.summary_path

    def _end(self) -> RankEnd:
        """How this rank ended, as far as this process knows (its beats count the steps)."""
        return RankEnd(self.info.rank if self.info else 0, self.exit, 0, time.time(), self.error)

    def _restore_handlers(self) -> None:
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._prev_excepthook or sys.__excepthook__
        if self._prev_term is not None and threading.current_thread() is threading.main_thread():
            try:
                if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                    signal.signal(signal.SIGTERM, self._prev_term)
            except (ValueError, OSError):
                pass


def rank_parts(settings: Settings, info: RankInfo, **given: Any) -> WorkerParts:
    """The parts a rank's beats are made of wherever they run (this process's tx thread, or the
    beats process): its store, sinks, progress line, heartbeat finding and summary; `given`
    names the rest (the queue, the clocks, the sampler, what the training thread tells)."""
    from traceml.analysis.store import RunStore

    store = RunStore(history_steps=settings.history_steps)
    store.add_info(info)
    sinks = _make_sinks(settings, info, store)

    def finish(end: RankEnd) -> Path | None:
        """Runs on the beats' thread after the final drain: the summary, if this rank writes
        it (imported by then: _preload_finish)."""
        from traceml.collect.finish import write_rank_summary

        return write_rank_summary(settings, info, store, end)

    return WorkerParts(
        info=info,
        store=store,
        sinks=sinks,
        progress=_progress_line(settings, info, store, sinks),
        finish=finish,
        primary=lambda: _primary_kind(store),
        **given,
    )


def _make_sinks(settings: Settings, info: RankInfo, store: Any) -> list[Any]:
    """Where the rank's records go besides its store: the live publisher, the job link."""
    sinks: list[Any] = []
    try:
        if settings.publish:
            from traceml.transport.publish.publisher import Publisher

            sinks.append(
                Publisher(
                    info,
                    settings,
                    settings.runtime_dir,
                    timeline=lambda: store.timeline_wire(info.rank),
                )
            )
        if info.world_size > 1:
            from traceml.instrument.job import JobLink
            from traceml.transport.runfiles.rundir import resolve_runtime_dir

            run_dir = resolve_runtime_dir(settings.runtime_dir) / info.run_id
            sinks.append(JobLink(info, settings, store, run_dir))
    except Exception as e:  # noqa: BLE001
        warn_once("publish", f"live view disabled: {e}")
    return sinks


def _progress_line(
    settings: Settings, info: RankInfo, store: Any, sinks: list[Any]
) -> Callable[[], str] | None:
    """The compact progress line's maker (`traceml run --no-live`), rank 0's only."""
    if not settings.progress or info.rank != 0:
        return None
    from traceml.analysis.render import render_progress

    def progress() -> str:
        # The job collector process, when it runs, prints the whole job's line instead.
        if any(getattr(s, "progress_elsewhere", False) for s in sinks):
            return ""
        return render_progress(store.live_view())

    return progress


ERROR_MESSAGE_CHARS = 500
"""Most characters of an exception's message the summary keeps (a few KB, whatever it says)."""


def _message(value: BaseException) -> str:
    """The exception's message, never raising (a broken __str__ is not our business)."""
    try:
        text = str(value)
    except Exception:  # noqa: BLE001 - user code
        text = "<message unavailable>"
    return text if len(text) <= ERROR_MESSAGE_CHARS else text[: ERROR_MESSAGE_CHARS - 3] + "..."


def _preload_finish() -> None:
    """Import now what the tx thread runs at the very end. The SIGTERM handler waits for the tx
    thread to write the summary; if the TERM lands while the main thread holds the import lock
    (one of torch's lazy imports, at exit or anywhere), a first import on the tx thread would
    wait for that lock until the shutdown gives up, and the summary would be lost."""
    import traceml.analysis.render
    import traceml.analysis.summary
    import traceml.collect.finish
    import traceml.transport.runfiles.rundir  # noqa: F401


def _hold_signals() -> dict[int, Any]:
    """Ignore SIGINT/SIGTERM while the summary is written: a second Ctrl-C, or the TERM that a
    launcher forwards on top of the one the process group already got, must not cut it short."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    held: dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            held[sig] = signal.signal(sig, signal.SIG_IGN)
        except (ValueError, OSError):
            pass
    return held


def _release_signals(held: dict[int, Any]) -> None:
    for sig, handler in held.items():
        try:
            signal.signal(sig, handler)
        except (ValueError, OSError, TypeError):
            pass


def _on_cuda(model: Any) -> bool:
    try:
        return bool(next(model.parameters()).is_cuda)
    except (StopIteration, AttributeError, TypeError):
        return False


def _primary_kind(store: Any) -> str | None:
    from traceml.analysis.diagnose import diagnose

    try:
        return str(diagnose(store.live_view()).primary.kind)
    except Exception:  # noqa: BLE001
        return None

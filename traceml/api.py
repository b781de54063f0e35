"""The public API behind `import traceml`: init, trace_step, phase, shutdown.

`trace_step` and `phase` are on the training thread's hot path: they return a preallocated
context manager and do no work beyond the timer's. With mode "off" or after a failure every call
is a no-op costing nanoseconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceml.config import PHASES_MANUAL, settings_from_env
from traceml.errors import ConfigError
from traceml.instrument.timer import native_for, phase_index
from traceml.probe import warn_once

if TYPE_CHECKING:
    from traceml.instrument.session import Session

_session: Session | None = None
_ended: Session | None = None
"""The session `shutdown()` closed, so that `summary()` still answers afterwards."""
_tried = False
"""True once init ran in this process (even with mode "off" or a failed start)."""
_by_run = False
"""True when `traceml run` started TraceML before the script: the script's own init is expected."""
_lock = threading.Lock()
_NULL: contextlib.nullcontext[None] = contextlib.nullcontext()
CUDA_RECHECK_MASK = 255
"""A CPU model is looked at again every 256 steps, in case it was moved to a GPU since."""

OWNER_ENV = "TRACEML_RUN_OWNER"
"""`<pid>:<rank>:<fingerprint of IDENTITY_ENV>` of the process that took that identity."""
IDENTITY_ENV = ("TRACEML_RUN_ID", "TRACEML_SUMMARY", "TRACEML_LAUNCHER", "TRACEML_PROGRESS")
"""What `traceml run` (or the user) hands one process of each rank: its run id and summary path."""


class StepContext:
    """`with traceml.trace_step(model):` marks one step; reused every step, never reallocated.

    The pure-Python twin of `_native.Step`, used when the C timer is not built."""

    __slots__ = ("_depth", "_on_error", "_timer")

    def __init__(self, session: Session) -> None:
        self._timer = session.timer
        self._on_error = session.on_error
        self._depth = 0

    def __enter__(self) -> None:
        self._depth += 1
        try:
            if self._depth == 1:
                self._timer.enter()
            else:
                _warn_nested()
        except Exception as e:  # noqa: BLE001 - never into the user's loop
            self._on_error(e)

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            try:
                self._timer.exit()
            except Exception as e:  # noqa: BLE001
                self._on_error(e)


def _warn_nested() -> None:
    warn_once(
        "nested step", "trace_step() was nested in another trace_step(); the inner one is ignored"
    )


def _step_context(session: Session) -> contextlib.AbstractContextManager[None]:
    """The C `Step` when the session's timer is the C one, else StepContext."""
    c = native_for(session.timer)
    if c is None:
        return StepContext(session)
    return _prebound(c.Step(session.timer, _warn_nested, session.on_error))


def _prebound(ctx: Any) -> contextlib.AbstractContextManager[None]:
    """`ctx` behind a class of its own that holds ctx's own bound `__enter__` and `__exit__`.

    A `with` statement looks both methods up on the type, and a method found there (a
    descriptor) is bound to the object anew each time: two method objects allocated and freed
    a step, about 70 ns of the 250 that a `with` on the C `Step` costs. A bound C method is not
    a descriptor, so found in the class it is returned as it is, already bound to `ctx`.
    """
    name = type(ctx).__name__
    methods = {"__enter__": ctx.__enter__, "__exit__": ctx.__exit__, "__slots__": ()}
    bound: contextlib.AbstractContextManager[None] = type(name, (), methods)()
    return bound


class PhaseContext:
    """`with traceml.phase("forward"):` times one phase by hand (manual mode, or extra detail)."""

    __slots__ = ("_idx", "_timer")

    def __init__(self, session: Session, idx: int) -> None:
        self._timer = session.timer
        self._idx = idx

    def __enter__(self) -> None:
        self._timer.begin(self._idx)

    def __exit__(self, *exc: object) -> None:
        self._timer.end(self._idx)


def init(
    mode: str = "auto", *, summary: str | os.PathLike[str] | None = None, run_id: str | None = None
) -> None:
    """Start TraceML in this process.

    Args:
        mode: "auto" (hook DataLoader, forward, backward, optimizer), "manual" (only
            `trace_step` and `phase`), or "off". TRACEML_MODE overrides it.
        summary: where final_summary.json goes (default traceml-runs/<run-id>/).
        run_id: force a run id (default: derived so that all ranks of a job share it).

    Raises:
        ConfigError: for a mode that does not exist.
    """
    global _session, _tried
    _claim_identity(os.environ, os.getpid())
    settings = settings_from_env(mode)
    if summary is not None:
        settings = _replace(settings, summary_path=Path(summary))
    if run_id is not None:
        settings = _replace(settings, run_id=run_id)
    with _lock:
        if _session is not None:
            if not _by_run:
                warn_once("init twice", "traceml.init() was already called; this call is ignored")
            return
        if _tried:
            if not _by_run:
                warn_once("init after shutdown", "traceml.init() after shutdown() is ignored")
            return
        _tried = True
        if settings.mode == "off":
            return
        _session = _start(settings)


def _claim_identity(env: MutableMapping[str, str], pid: int) -> None:
    """Keep the run identity in the environment only if no other process of this rank took it.

    A process that the script starts with its own environment (an evaluation job, a second
    `python -c "traceml.init()"`) inherits the script's run id and summary path; using them
    would make it bind over the script's rank and write over its summary, so it drops them and
    starts a run of its own. Other ranks (another RANK), and processes handed a new identity
    (a nested `traceml run`), keep theirs.
    """
    owner_pid, _, owned = env.get(OWNER_ENV, "").partition(":")
    if owned == _identity(env) and owner_pid != str(pid):
        for key in IDENTITY_ENV:
            env.pop(key, None)
    env[OWNER_ENV] = f"{pid}:{_identity(env)}"


def _identity(env: Mapping[str, str]) -> str:
    """`<rank>:<digest of the identity variables>`, comparable across processes."""
    values = "\0".join(env.get(key, "") for key in IDENTITY_ENV)
    digest = hashlib.sha1(values.encode(), usedforsecurity=False).hexdigest()[:12]
    return f"{env.get('RANK', '0')}:{digest}"


def _replace(settings: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(settings, **changes)


def _start(settings: Any) -> Session | None:
    from traceml.instrument.session import Session

    session = Session(settings)
    try:
        session.start()
    except Exception as e:  # noqa: BLE001 - TraceML steps aside, the script runs on bare
        warn_once("init", f"could not start ({type(e).__name__}: {e}); running without TraceML")
        session.hooks.remove()
        return None
    session.step_ctx = _step_context(session)
    from traceml.notebook import watch_cells

    watch_cells(session.timer.rest, lambda: not session.closed)
    return session


def trace_step(model: Any = None) -> contextlib.AbstractContextManager[None]:
    """Mark one training step: `with traceml.trace_step(model): ...`.

    Args:
        model: the root torch.nn.Module being trained; its forward is timed in auto mode.
    """
    s = _session
    if s is None:
        if _tried:
            return _NULL
        init("auto")
        s = _session
        if s is None:
            return _NULL
    if s.closed or s.failed:
        return _NULL
    if id(model) != s.last_model_id:
        s.last_model_id = id(model)
        if model is not None:
            s.watch_model(model)
    elif not s.cuda_checked and not s.timer.step & CUDA_RECHECK_MASK and model is not None:
        s.check_cuda(model)  # `model.to("cuda")` after its first step
    ctx: contextlib.AbstractContextManager[None] = s.step_ctx
    return ctx


def phase(name: str) -> contextlib.AbstractContextManager[None]:
    """Time a phase by hand: one of dataloader, forward, backward, optimizer, h2d.

    Raises:
        ConfigError: for a phase name TraceML does not know.
    """
    if name not in PHASES_MANUAL:
        raise ConfigError(f"unknown phase {name!r}: use one of {', '.join(PHASES_MANUAL)}")
    s = _session
    if s is None or s.closed or s.failed:
        return _NULL
    return PhaseContext(s, phase_index(name))  # type: ignore[arg-type]


def shutdown() -> Path | None:
    """Stop TraceML now: write the summary and close the live stream. Returns the summary path."""
    global _session
    global _ended
    with _lock:
        s, _session = _session, None
        _ended = s or _ended
    return s.shutdown() if s is not None else None


def summary() -> dict[str, Any] | None:
    """The run's summary so far: a dict shaped as final_summary.json, at any time.

    While the run trains, `run.exit` is "running" and the numbers cover every step so far (the
    background thread, which folds every 0.25 s while a viewer listens and every second
    otherwise, is asked to fold now; waits at most a second for it); after shutdown it is the
    summary that was written.
    In a multi-rank job each rank's live summary describes that rank alone. Safe from any thread:
    it never waits for the training loop and the loop never waits for it.

    Returns:
        The summary, or None before `init` (or with mode "off").
    """
    s = _session or _ended
    if s is None:
        return None
    from traceml.live_summary import session_summary

    return session_summary(s)


def show(summary_or_path: Mapping[str, Any] | str | os.PathLike[str] | None = None) -> None:
    """Display a summary as the card: HTML in a Jupyter notebook, text on stdout elsewhere.

    Args:
        summary_or_path: A summary dict or a final_summary.json path; default this run's
            `summary()`.
    """
    from traceml.notebook import show as show_card

    if summary_or_path is None or isinstance(summary_or_path, Mapping):
        show_card(summary_or_path if summary_or_path is not None else summary())
        return
    from traceml.analysis.summary import load_summary

    show_card(load_summary(Path(summary_or_path)))


def init_for_run(mode: str) -> None:
    """`traceml run`'s init, before the script runs; the script may call `init` again quietly."""
    global _by_run
    _by_run = True
    init(mode)


def current_session() -> Session | None:
    """The running session, for the launcher and tests."""
    return _session

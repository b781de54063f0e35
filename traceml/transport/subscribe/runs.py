"""This user's runs as `traceml ls` and `traceml attach` see them, read from their run files.

Listing never raises for a broken file (it lands in `warnings` and is skipped) and never blocks;
liveness is by pid plus process start time. Pruning removes only files of ours (known names) of
runs that are dead or finished and older than PRUNE_AFTER_S; nobody else's files are touched.
"""

from __future__ import annotations

import os
import re
import socket
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from traceml.errors import RunNotFoundError, SchemaError, TransportError
from traceml.transport.runfiles.rundir import resolve_runtime_dir, verify_private_dir
from traceml.transport.runfiles.runfile import RankFile, RunFile, read_rank_file, read_run_file
from traceml.transport.subscribe.liveness import ProcState, file_rank_state, process_state
from traceml.transport.wire.events import RankState

PRUNE_AFTER_S = 7 * 86400.0
LIVE_STATES: tuple[RankState, ...] = ("live", "stalled")
_RANK_FILE = re.compile(r"rank-(\d+)\.json")
_OURS = re.compile(
    r"run\.json|output\.log|final_summary(\.fallback)?\.json|collector\.sock"
    r"|rank-\d+\.(json|lock|pub\.sock|ctl\.sock)|\..+\.tmp"
)
"""Names of files TraceML creates in a run dir; pruning removes these and nothing else."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RunEntry:
    """One run as its files describe it on this host."""

    run_id: str
    dir: Path
    script: str
    host: str
    ranks: tuple[RankFile, ...]
    """This host's rank files, by rank: pid, endpoints, CURVE key, progress, end."""
    state: RankState
    """finished (every rank ended), dead (a rank's process is gone without ending),
    stalled (a rank is stopped or silent), else live."""
    started: float
    updated: float
    """Latest write to any of the run's files (epoch seconds)."""
    world_size: int
    last_step: int | None
    """Highest step any rank reached; None before the first step."""
    last_step_ms: float | None
    """Slowest rank's last step time; None before the first step."""
    primary: str | None
    """Current primary finding kind (rank 0's, else the first rank that has one)."""
    summary_path: Path | None
    """final_summary.json once the run has ended and written it; None before."""
    rank_states: Mapping[int, RankState] = field(default_factory=dict)
    argv: tuple[str, ...] = ()

    @property
    def live(self) -> bool:
        """True while some process of the run may still publish (live or stalled)."""
        return self.state in LIVE_STATES

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(sorted({r.host for r in self.ranks} | ({self.host} if self.host else set())))

    def age_s(self, now: float) -> float:
        return max(0.0, now - self.started)

    def to_json(self, now: float) -> dict[str, Any]:
        """The `traceml ls --json` object of this run."""
        return {
            "id": self.run_id,
            "script": self.script,
            "ranks": len(self.ranks),
            "world_size": self.world_size,
            "host": self.host,
            "hosts": list(self.hosts),
            "step": self.last_step,
            "last_step_ms": self.last_step_ms,
            "diagnosis": self.primary,
            "state": self.state,
            "age_s": round(self.age_s(now), 1),
            "started": self.started,
            "pids": [r.pid for r in self.ranks],
            "dir": str(self.dir),
            "summary": None if self.summary_path is None else str(self.summary_path),
        }


class RunList(list[RunEntry]):
    """Runs, newest first, with one line per file that had to be skipped."""

    def __init__(self, runs: Iterable[RunEntry] = (), warnings: Iterable[str] = ()) -> None:
        super().__init__(runs)
        self.warnings: list[str] = list(warnings)


def list_runs(
    runtime_dir: Path | None = None, *, include_finished: bool = False, now: float | None = None
) -> RunList:
    """This user's runs, newest first: live and stalled ones, plus finished and dead ones if asked.

    Raises:
        TransportError: the runtime dir itself is unsafe (a symlink, another user's, mode not 0700).
    """
    root = resolve_runtime_dir(runtime_dir)
    now = time.time() if now is None else now
    out = RunList()
    try:
        verify_private_dir(root)
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return out
    except OSError as e:
        raise TransportError(f"cannot list {root}: {e.strerror}") from e
    for name in names:
        run = read_run(root / name, now, out.warnings) if not name.startswith(".") else None
        if run is not None and (include_finished or run.live):
            out.append(run)
    out.sort(key=lambda r: r.started, reverse=True)
    return out


def resolve_run(ref: str | None, runtime_dir: Path | None = None) -> RunEntry:
    """The run named by `ref`: an id or a unique prefix; None means the newest live run.

    Raises:
        RunNotFoundError: nothing matches, or the prefix is ambiguous (the line lists candidates).
    """
    runs = list_runs(runtime_dir, include_finished=True)
    if ref is None:
        live = [r for r in runs if r.live]
        if not live:
            raise RunNotFoundError(
                "no live run: start one with `traceml run`, or name one from `traceml ls --all`"
            )
        return live[0]
    exact = [r for r in runs if r.run_id == ref]
    matches = exact or [r for r in runs if r.run_id.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise RunNotFoundError(f"no run matches {ref!r}: see `traceml ls --all`")
    ids = ", ".join(r.run_id for r in matches[:6]) + (", ..." if len(matches) > 6 else "")
    raise RunNotFoundError(f"{ref!r} matches {len(matches)} runs ({ids}): give more of the id")


def read_run(path: Path, now: float, warnings: list[str]) -> RunEntry | None:
    """The run in directory `path`, or None (with a warning if a file is broken)."""
    if path.is_file() and not path.is_symlink():
        return None
    try:
        verify_private_dir(path)
        names = os.listdir(path)
    except FileNotFoundError:
        return None
    except (TransportError, OSError) as e:
        warnings.append(f"skipping {path}: {_why(e)}")
        return None
    run_file = _read(path / "run.json", read_run_file, warnings)
    rank_names = sorted((int(m[1]), n) for n in names if (m := _RANK_FILE.fullmatch(n)))
    ranks = [rf for _, n in rank_names if (rf := _read(path / n, read_rank_file, warnings))]
    if run_file is None and not ranks:
        return None
    return _entry(path, run_file, ranks, now)


def _read(path: Path, reader: Callable[[Path], T], warnings: list[str]) -> T | None:
    try:
        return reader(path)
    except FileNotFoundError:
        return None
    except (TransportError, SchemaError, OSError) as e:
        warnings.append(f"skipping broken run file {path}: {_why(e)}")
        return None


def _why(e: Exception) -> str:
    if isinstance(e, TransportError | SchemaError):
        return e.msg
    return str(getattr(e, "strerror", None) or e)


def _proc(pid: int, start: float | None, host: str) -> ProcState:
    if host and host != socket.gethostname():
        return "unknown"
    return process_state(pid, start)


def _entry(path: Path, run: RunFile | None, ranks: list[RankFile], now: float) -> RunEntry:
    states = {
        r.rank: file_rank_state(r, now, _proc(r.serving_pid, r.pid_start, r.host)) for r in ranks
    }
    first = ranks[0] if ranks else None
    steps = [r.last_step for r in ranks if r.last_step is not None]
    times = [r.last_step_ms for r in ranks if r.last_step_ms is not None]
    primaries = [r.primary for r in ranks if r.primary]
    summaries = [r.summary_path for r in ranks if r.summary_path]
    summary = run.summary_path if run is not None and run.summary_path else None
    summary = summary or (summaries[0] if summaries else None)
    return RunEntry(
        run_id=run.run_id if run is not None else path.name,
        dir=path,
        script=run.script if run is not None else (first.info.script if first else ""),
        host=run.host if run is not None else (first.host if first else ""),
        ranks=tuple(ranks),
        state=_run_state(list(states.values()), run),
        started=_started(run, ranks),
        updated=max([r.updated for r in ranks] + ([run.updated] if run is not None else [])),
        world_size=run.world_size if run is not None else (first.info.world_size if first else 0),
        last_step=max(steps) if steps else None,
        last_step_ms=max(times) if times else None,
        primary=primaries[0] if primaries else None,
        summary_path=Path(summary) if summary else None,
        rank_states=states,
        argv=run.argv if run is not None else (first.info.argv if first else ()),
    )


def _started(run: RunFile | None, ranks: list[RankFile]) -> float:
    if run is not None:
        return run.started
    return min(r.info.started for r in ranks) if ranks else 0.0


def _run_state(states: list[RankState], run: RunFile | None) -> RankState:
    if not states:
        assert run is not None
        if run.end is not None:
            return "finished"
        return "dead" if _proc(run.pid, run.pid_start, run.host) == "gone" else "live"
    if all(s == "finished" for s in states):
        return "finished"
    for state in ("dead", "stalled"):
        if state in states:
            return state
    return "live"


def prune_runs(
    runs: Iterable[RunEntry], *, now: float | None = None, max_age_s: float = PRUNE_AFTER_S
) -> list[str]:
    """Remove our files of dead or finished runs not updated for `max_age_s`; return their ids."""
    now = time.time() if now is None else now
    removed = []
    for run in runs:
        if run.state in ("dead", "finished") and now - run.updated > max_age_s:
            _remove_run_dir(run.dir)
            removed.append(run.run_id)
    return removed


def _remove_run_dir(path: Path) -> None:
    try:
        names = os.listdir(path)
    except OSError:
        return
    for name in names:
        if _OURS.fullmatch(name):
            try:
                os.unlink(path / name)
            except OSError:
                continue
    try:
        os.rmdir(path)
    except OSError:
        return


def median_step_ms(run: RunEntry) -> float | None:
    """Median over ranks of their recent median step time; None before any step."""
    values = [r.median_step_ms for r in run.ranks if r.median_step_ms is not None]
    return statistics.median(values) if values else None

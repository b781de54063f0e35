"""Whether a rank is live, stalled, dead or finished, from its process, heartbeats and steps.

Dead: its process is gone (pid plus start time, so a reused pid does not look alive), or no
heartbeat for DEAD_AFTER_S when the process cannot be checked. Stalled: the process is stopped
or silent, or heartbeats come but no step for STALL_FACTOR x its median step time (at least
STALL_MIN_S). Pure apart from psutil lookups, which never block; each process is looked up at
most once per PROCESS_CHECK_S however many of a viewer's ranks it runs (`ProcessCache`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Iterable
from typing import Literal

import psutil

from traceml.transport.runfiles.runfile import RankFile
from traceml.transport.wire.events import RankState

HEARTBEAT_S = 1.0
DEAD_AFTER_S = 3.0
STALL_FACTOR = 10.0
STALL_MIN_S = 5.0
START_TOLERANCE_S = 0.5
"""Largest difference between recorded and actual process start times of the same process."""
FILE_STALE_S = 15.0
"""A rank file not rewritten for this long means the rank's beats are not running."""
FILE_LAG_S = 2.0
"""How far behind a rank file may be (its writer rewrites it every couple of seconds)."""
PROCESS_CHECK_S = 1.0

ProcState = Literal["running", "stopped", "gone", "unknown"]


def process_state(pid: int, start: float | None) -> ProcState:
    """ "gone" if `pid` does not exist, is a zombie, or started at another time than `start`."""
    try:
        proc = psutil.Process(pid)
        created = float(proc.create_time())
        status = proc.status()
    except psutil.NoSuchProcess:
        return "gone"
    except (psutil.Error, OSError):
        return "unknown"
    if start is not None and abs(created - start) > START_TOLERANCE_S:
        return "gone"
    if status in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
        return "gone"
    if status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
        return "stopped"
    return "running"


class ProcessCache:
    """`process_state` per (pid, start time), reused for PROCESS_CHECK_S by every rank of that
    process. Fresh only while both the caller's clock and the monotonic clock agree, so a fake
    clock that jumps ahead (tests) or a real one gets a new lookup."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self.lookups = 0
        """psutil lookups made (the rest were answered from the cache)."""
        self._seen: dict[tuple[int, float | None], tuple[float, float, ProcState]] = {}

    def state(self, pid: int, start: float | None, now: float) -> ProcState:
        key, mono = (pid, start), time.monotonic()
        hit = self._seen.get(key)
        if hit is not None:
            checked, checked_mono, state = hit
            if 0 <= now - checked < PROCESS_CHECK_S and mono - checked_mono < PROCESS_CHECK_S:
                return state
        if len(self._seen) >= self.size:
            self._seen.clear()
        self.lookups += 1
        state = process_state(pid, start)
        self._seen[key] = (now, mono, state)
        return state


PROCESSES = ProcessCache()
"""The one cache a viewer's ranks share (it is used from the feed thread only)."""


def stall_after_s(median_step_ms: float | None) -> float:
    """Seconds without a step after which a rank is stalled: k x median, at least STALL_MIN_S."""
    if median_step_ms is None or not math.isfinite(median_step_ms):
        return STALL_MIN_S
    return max(STALL_MIN_S, STALL_FACTOR * median_step_ms / 1000.0)


def file_rank_state(rank: RankFile, now: float, proc: ProcState) -> RankState:
    """State of a rank from its file alone (for `traceml ls`), given its process state."""
    if rank.end is not None:
        return "finished"
    if proc == "gone":
        return "dead"
    if proc == "stopped":
        return "stalled"
    if now - rank.updated > FILE_STALE_S:
        return "dead" if proc == "unknown" else "stalled"
    if rank.last_step_t is not None:
        quiet = now - rank.last_step_t
        if quiet > stall_after_s(rank.median_step_ms) + FILE_LAG_S:
            return "stalled"
    return "live"


class RankLiveness:
    """What a viewer has heard from one rank, and when; `state(now)` applies the rules."""

    def __init__(self, now: float, pid: int, pid_start: float | None, local: bool) -> None:
        self.attached = now
        self.last_heard: float | None = None
        self.last_progress = now
        self.max_step = -1
        self.ended = False
        self.proc: ProcState = "unknown"
        self._pid = pid
        self._pid_start = pid_start
        self._local = local
        self._checked = -math.inf
        self._step_ms: deque[float] = deque(maxlen=101)
        self._median: float | None = None
        """Median of `_step_ms`, computed on demand; None = to compute again."""

    def heard(self, now: float) -> None:
        self.last_heard = now

    def progress(self, step: int, now: float) -> None:
        """A step index seen in a heartbeat or record; time counts from the last increase."""
        if step > self.max_step:
            self.max_step = step
            self.last_progress = now

    def step_times(self, step_ms: Iterable[float]) -> None:
        self._step_ms.extend(ms for ms in step_ms if math.isfinite(ms))
        self._median = None

    def median_ms(self) -> float | None:
        if self._median is None and self._step_ms:
            self._median = statistics.median(self._step_ms)
        return self._median

    def silent(self, now: float) -> float:
        """Seconds since the rank was last heard from (or since attach)."""
        return now - (self.last_heard if self.last_heard is not None else self.attached)

    def check_process(self, now: float) -> None:
        """Refresh `proc` at most once per PROCESS_CHECK_S, only for ranks on this host."""
        if self._local and now - self._checked >= PROCESS_CHECK_S:
            self._checked = now
            self.proc = PROCESSES.state(self._pid, self._pid_start, now)

    def state(self, now: float) -> RankState:
        if self.ended:
            return "finished"
        if self.proc == "gone":
            return "dead"
        if self.proc == "stopped":
            return "stalled"
        if self.silent(now) > DEAD_AFTER_S:
            return "stalled" if self.proc == "running" else "dead"
        if self.max_step >= 0 and now - self.last_progress > stall_after_s(self.median_ms()):
            return "stalled"
        return "live"

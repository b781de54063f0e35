"""Liveness rules: pid plus start time, heartbeats, k x median step time, rank files."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from traceml.records import RankEnd, RankInfo
from traceml.transport.runfiles.runfile import RankFile
from traceml.transport.subscribe.liveness import (
    PROCESS_CHECK_S,
    ProcessCache,
    RankLiveness,
    file_rank_state,
    process_state,
    stall_after_s,
)

NOW = 1_000_000.0


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_process_state_by_pid_and_start_time() -> None:
    me = psutil.Process().create_time()
    assert process_state(os.getpid(), me) == "running"
    assert process_state(os.getpid(), None) == "running"
    assert process_state(os.getpid(), me - 100) == "gone", "a reused pid is not our process"
    assert process_state(dead_pid(), None) == "gone"


@pytest.mark.parametrize(
    ("median_ms", "after"), [(None, 5.0), (10.0, 5.0), (1000.0, 10.0), (float("nan"), 5.0)]
)
def test_stall_threshold(median_ms: float | None, after: float) -> None:
    assert stall_after_s(median_ms) == after


def rank_file(**kw: object) -> RankFile:
    fields: dict[str, object] = {
        "info": RankInfo(run_id="r", rank=0),
        "pid_start": None,
        "endpoints": {"pub": "ipc:///p", "ctl": "ipc:///c"},
        "updated": NOW - 1,
        "last_step": 10,
        "last_step_t": NOW - 1,
        "median_step_ms": 100.0,
    }
    return RankFile(**{**fields, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "proc", "state"),
    [
        ({}, "running", "live"),
        ({"end": RankEnd(0, "ok", 1, NOW)}, "gone", "finished"),
        ({}, "gone", "dead"),
        ({}, "stopped", "stalled"),
        ({"updated": NOW - 60}, "running", "stalled"),
        ({"updated": NOW - 60}, "unknown", "dead"),
        ({"last_step_t": NOW - 30}, "running", "stalled"),
        ({"last_step_t": NOW - 6}, "running", "live"),
        ({"last_step_t": None, "last_step": None}, "running", "live"),
    ],
)
def test_file_rank_state(kw: dict[str, object], proc: str, state: str) -> None:
    assert file_rank_state(rank_file(**kw), NOW, proc) == state  # type: ignore[arg-type]


def live(proc: str = "unknown") -> RankLiveness:
    rl = RankLiveness(NOW, 1, None, local=False)
    rl.proc = proc  # type: ignore[assignment]
    return rl


def test_heartbeats_keep_a_rank_live_and_silence_kills_it() -> None:
    rl = live()
    assert rl.state(NOW + 2) == "live"
    assert rl.state(NOW + 3.5) == "dead"
    rl.heard(NOW + 3)
    assert rl.state(NOW + 3.5) == "live"


def test_a_silent_rank_whose_process_lives_is_stalled_not_dead() -> None:
    assert live("running").state(NOW + 10) == "stalled"
    assert live("stopped").state(NOW) == "stalled"
    assert live("gone").state(NOW) == "dead"


def test_heartbeats_without_steps_for_k_medians_is_stalled() -> None:
    rl = live()
    rl.step_times([1000.0] * 5)
    rl.progress(7, NOW)
    for t in range(1, 12):
        rl.heard(NOW + t)
    assert rl.state(NOW + 9) == "live"
    assert rl.state(NOW + 11) == "stalled"
    rl.progress(8, NOW + 11)
    assert rl.state(NOW + 11) == "live"


def test_the_end_wins() -> None:
    rl = live("gone")
    rl.ended = True
    assert rl.state(NOW + 100) == "finished"


def test_one_lookup_per_process_however_many_ranks_it_runs() -> None:
    cache, me = ProcessCache(), psutil.Process().create_time()
    states = [cache.state(os.getpid(), me, NOW) for _ in range(1000)]
    assert states == ["running"] * 1000 and cache.lookups == 1
    assert cache.state(os.getpid(), me - 100, NOW) == "gone", "another start time: its own entry"
    assert cache.lookups == 2
    cache.state(os.getpid(), me, NOW + PROCESS_CHECK_S)
    assert cache.lookups == 3, "the caller's clock moved on: looked up again"
    cache.state(os.getpid(), me, NOW - 5)
    assert cache.lookups == 4, "a clock that went back is not trusted"


def test_a_gone_process_is_seen_once_its_entry_is_stale() -> None:
    cache, pid = ProcessCache(), dead_pid()
    assert cache.state(pid, None, NOW) == "gone"
    assert cache.state(pid, None, NOW + 0.5) == "gone" and cache.lookups == 1


def test_the_median_follows_new_step_times() -> None:
    rl = live()
    assert rl.median_ms() is None
    rl.step_times([10.0, 30.0, 20.0])
    assert rl.median_ms() == 20.0
    rl.step_times([40.0, 50.0])
    assert rl.median_ms() == 30.0, "new step times invalidate the remembered median"

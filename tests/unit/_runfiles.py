"""Hand-written run files for the run-listing tests (no sockets, no publisher)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil

from traceml.records import RankEnd, RankInfo
from traceml.transport.runfiles.rundir import RunDir
from traceml.transport.runfiles.runfile import RankFile, RunFile, write_json_atomic

NOW = 2_000_000_000.0
ME = os.getpid()
MY_START = psutil.Process().create_time()


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def write_run(
    root: Path,
    run_id: str,
    *,
    pid: int = ME,
    started: float = NOW - 60,
    updated: float = NOW - 1,
    ranks: int = 1,
    end: bool = False,
) -> RunDir:
    run_dir = RunDir(root, run_id).create()
    host = socket.gethostname()
    for rank in range(ranks):
        info = RankInfo(
            run_id=run_id,
            rank=rank,
            world_size=ranks,
            host=host,
            pid=pid,
            started=started,
            script="train.py",
        )
        rank_file = RankFile(
            info=info,
            pid_start=MY_START if pid == ME else None,
            endpoints={"pub": "ipc:///nowhere", "ctl": "ipc:///nowhere"},
            updated=updated,
            last_step=100 + rank,
            last_step_ms=20.0 + rank,
            last_step_t=updated,
            median_step_ms=20.0,
            primary="INPUT_BOUND",
            end=RankEnd(rank, "ok", 101, updated) if end else None,
            summary_path="/s/final_summary.json" if end else None,
        )
        write_json_atomic(run_dir.rank_json(rank), rank_file.to_json())
    run = RunFile(
        run_id,
        "train.py",
        (),
        host,
        pid,
        None,
        started,
        ranks,
        updated,
        "/s/final_summary.json" if end else None,
    )
    write_json_atomic(run_dir.run_json, run.to_json())
    return run_dir

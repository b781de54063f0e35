"""The job collector process (`python -m traceml.collect.collectord`), for real: spawned as
rank 0 spawns it, fed by real CollectorFeeds, writing the job's summary."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.integration._publisher_proc import make_step
from traceml.analysis.schema import validate_summary
from traceml.collect.collectord import Config
from traceml.instrument.job import CollectorProcess
from traceml.records import RankEnd, RankInfo
from traceml.transport.publish.feed import CollectorFeed
from traceml.transport.wire.address import CollectorAddress

RUN = "collectord-test"


def config(runtime_dir: Path, summary: Path, parent: int) -> Config:
    return Config(
        run_id=RUN,
        endpoint=f"ipc://{runtime_dir}/collector.sock",
        curve=False,
        world_size=2,
        relay=False,
        parent_pid=parent,
        summary_path=str(summary),
        runtime_dir=str(runtime_dir),
    )


def feed(address: CollectorAddress, rank: int) -> CollectorFeed:
    info = RankInfo(
        RUN,
        rank,
        world_size=2,
        host=socket.gethostname(),
        pid=os.getpid(),
        started=time.time() - 5,
        script="train.py",
    )
    out = CollectorFeed(address, info)
    out.open()
    out.hello()
    return out


def test_it_writes_the_jobs_summary_when_rank_0_ends(runtime_dir: Path, tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    process = CollectorProcess(config(runtime_dir, summary, os.getpid()))
    address = process.start()
    feeds = [feed(address, rank) for rank in (0, 1)]
    try:
        for rank, f in enumerate(feeds):
            f.send_steps([make_step(i, rank=rank, ms=10.0 + 5 * rank) for i in range(50)])
        feeds[1].send_end(RankEnd(1, "ok", 50, time.time()))
        feeds[0].send_end(RankEnd(0, "ok", 50, time.time()))
        answer = process.summary(timeout_s=10)
    finally:
        for f in feeds:
            f.close(linger_ms=0)
        process.reap()
        join_reaper()  # on a loaded host the collector may take longer than reap's 0.1 s to exit
    assert answer == {"summary": str(summary), "trouble": None}
    data = json.loads(summary.read_text())
    validate_summary(data)
    assert data["run"]["exit"] == "ok" and data["run"]["script"] == "train.py"
    assert [(r["rank"], r["steps"], r["state"]) for r in data["ranks"]] == [
        (0, 50, "finished"),
        (1, 50, "finished"),
    ]
    assert not (runtime_dir / "collector.sock").exists(), "the socket file is removed"


def join_reaper() -> None:
    for thread in threading.enumerate():
        if thread.name == "traceml-reap":
            thread.join(timeout=10)
            assert not thread.is_alive(), "the collector process did not exit"


PARENT = """
import dataclasses, json, os, sys, time
from traceml.instrument.job import CollectorProcess
from traceml.collect.collectord import Config
config = dataclasses.replace(Config(**json.loads(sys.argv[1])), parent_pid=os.getpid())
address = CollectorProcess(config).start()
print(address.encode(), flush=True)
time.sleep(600)
"""


def test_a_killed_rank_0_still_gets_the_jobs_summary(runtime_dir: Path, tmp_path: Path) -> None:
    """Rank 0 dies by SIGKILL (an OOM kill): the collector, in a session of its own, notices,
    and writes what it collected, with rank 0 dead and the run's exit "killed"."""
    summary = tmp_path / "summary.json"
    cfg = config(runtime_dir, summary, 0)
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, cfg.to_json()], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        address = CollectorAddress.decode(parent.stdout.readline())
        feeds = [feed(address, rank) for rank in (0, 1)]
        for rank, f in enumerate(feeds):
            f.send_steps([make_step(i, rank=rank) for i in range(30)])
        feeds[1].send_end(RankEnd(1, "ok", 30, time.time()))
        time.sleep(0.5)
        os.kill(parent.pid, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while not summary.exists():
            assert time.monotonic() < deadline, "no summary after rank 0 was killed"
            time.sleep(0.1)
    finally:
        parent.kill()
        parent.wait()
        for f in feeds:
            f.close(linger_ms=0)
    data = json.loads(summary.read_text())
    validate_summary(data)
    assert data["run"]["exit"] == "killed"
    rows = {r["rank"]: r for r in data["ranks"]}
    assert rows[0]["state"] == "dead" and rows[0]["steps"] == 30
    assert rows[1]["state"] == "finished"


def test_a_collector_still_running_at_close_is_reaped_later(tmp_path: Path) -> None:
    """Rank 0 may train on for hours after shutdown: the collector it leaves finishing its
    summary must not stay a zombie in its process table."""
    handle = CollectorProcess(config(tmp_path, tmp_path / "s.json", os.getpid()))
    handle.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    handle.reap()
    assert handle.proc.returncode is None, "reap must not wait for a process still writing"
    deadline = time.monotonic() + 10
    while handle.proc.returncode is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert handle.proc.returncode == 0

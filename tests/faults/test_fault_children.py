"""Processes the training script makes: forked children (DataLoader workers, a plain fork that
calls trace_step) never touch the parent's sockets, and a subprocess that calls traceml.init()
with the script's environment starts a run of its own instead of writing over the script's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.faults._harness import (
    SCRIPTS,
    VIEWER,
    check_finished,
    run_dir,
    spawn,
    summary_of,
    training,
)
from traceml.transport.runfiles.runfile import read_rank_file

pytestmark = [pytest.mark.faults, pytest.mark.slow]

FORK_STEPS = 50 + 2 * 32
"""fork.py: 50 steps, then two epochs of 256 samples in batches of 8."""


def test_forked_children_leave_the_parents_stream_and_summary_intact(
    tmp_path: Path, runtime_dir: Path
) -> None:
    report = tmp_path / "child.json"
    with training(tmp_path, "forks", str(report), script=SCRIPTS / "fork.py") as job:
        watcher = spawn([sys.executable, str(VIEWER), "forks"], cwd=tmp_path)
        result = job.finish()
        tail = watcher.out.wait(lambda line: line.startswith("end "), 30, "the viewer's end")
        watcher.finish()
    check_finished(result, summary_of(tmp_path), steps=FORK_STEPS)
    assert "child exit 0" in result.stdout
    child = json.loads(report.read_text())
    child_pid = child.pop("pid")
    assert child == {"ctx": "nullcontext", "closed": True, "queued": 0, "tx_alive": False}
    assert tail == f"end {FORK_STEPS} gaps 0", "the viewer saw every parent step, nothing else"
    rank = read_rank_file(run_dir(runtime_dir, "forks") / "rank-0.json")
    assert rank.pid != child_pid and rank.end is not None and rank.end.exit == "ok"


def test_a_second_init_in_a_subprocess_gets_its_own_run(tmp_path: Path, runtime_dir: Path) -> None:
    with training(tmp_path, "outer", script=SCRIPTS / "nested.py") as job:
        result = job.finish()
    data = check_finished(result, summary_of(tmp_path), steps=100)
    assert data["run"]["id"] == "outer"
    said = [line.split(" ", 1) for line in result.stdout.splitlines()]
    child = {words[0]: words[1] for words in said if words[0].startswith("child-")}
    child_run, child_summary = child["child-run"], Path(child["child-summary"])
    assert child_run != "outer", "the child must not take the parent's run id"
    assert child_summary != summary_of(tmp_path), "the child must not write the parent's summary"
    theirs = json.loads(child_summary.read_text())
    assert theirs["run"]["id"] == child_run and theirs["ranks"][0]["steps"] == 30
    parent_rank = read_rank_file(run_dir(runtime_dir, "outer") / "rank-0.json")
    assert parent_rank.info.script == "nested.py"
    assert parent_rank.summary_path == str(summary_of(tmp_path))
    assert (run_dir(runtime_dir, child_run) / "rank-0.json").is_file()
    assert "already live" not in result.stderr

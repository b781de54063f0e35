"""Listing, resolving and pruning runs from hand-written run files (no sockets)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.unit._runfiles import NOW, dead_pid, write_run
from traceml.errors import RunNotFoundError
from traceml.transport.subscribe.runs import list_runs, prune_runs, resolve_run


def test_states_and_fields(tmp_path: Path) -> None:
    write_run(tmp_path, "live-1", ranks=2, started=NOW - 10)
    write_run(tmp_path, "dead-1", pid=dead_pid(), started=NOW - 20)
    write_run(tmp_path, "done-1", pid=dead_pid(), end=True, started=NOW - 30)
    write_run(tmp_path, "stale-1", updated=NOW - 120, started=NOW - 40)
    runs = list_runs(tmp_path, include_finished=True, now=NOW)
    assert [(r.run_id, r.state) for r in runs] == [
        ("live-1", "live"),
        ("dead-1", "dead"),
        ("done-1", "finished"),
        ("stale-1", "stalled"),
    ]
    live = runs[0]
    assert (live.last_step, live.last_step_ms, live.primary) == (101, 21.0, "INPUT_BOUND")
    assert live.world_size == 2 and len(live.ranks) == 2 and live.hosts == (socket.gethostname(),)
    assert runs[2].summary_path == Path("/s/final_summary.json")
    assert [r.run_id for r in list_runs(tmp_path, now=NOW)] == ["live-1", "stale-1"]
    assert runs.warnings == []


@pytest.mark.parametrize(
    ("name", "content"),
    [("run.json", "{oops"), ("rank-0.json", '{"schema": "traceml.rank/1"}'), ("rank-0.json", "")],
)
def test_a_broken_file_is_reported_and_skipped(tmp_path: Path, name: str, content: str) -> None:
    write_run(tmp_path, "good-1")
    bad = write_run(tmp_path, "bad-1")
    (bad.path / name).unlink()
    (bad.path / name).write_text(content)
    runs = list_runs(tmp_path, include_finished=True, now=NOW)
    assert "good-1" in [r.run_id for r in runs]
    assert len(runs.warnings) == 1 and name in runs.warnings[0]


def test_a_run_dir_open_to_others_is_reported(tmp_path: Path) -> None:
    write_run(tmp_path, "open-1")
    os.chmod(tmp_path / "open-1", 0o755)
    runs = list_runs(tmp_path, include_finished=True, now=NOW)
    assert runs == [] and "chmod 700" in runs.warnings[0]


def test_a_missing_runtime_dir_lists_nothing(tmp_path: Path) -> None:
    assert list_runs(tmp_path / "absent") == []


def test_stray_files_are_ignored_and_symlinks_reported(tmp_path: Path) -> None:
    write_run(tmp_path, "real-1")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "link-1").symlink_to(tmp_path / "real-1")
    runs = list_runs(tmp_path, now=NOW)
    assert [r.run_id for r in runs] == ["real-1"]
    assert len(runs.warnings) == 1 and "symlink" in runs.warnings[0]


def test_resolve_by_id_prefix_and_newest_live(tmp_path: Path) -> None:
    write_run(tmp_path, "train-a1", started=NOW - 50)
    write_run(tmp_path, "train-a2", started=NOW - 40)
    write_run(tmp_path, "train-b1", pid=dead_pid(), end=True, started=NOW - 10)
    assert resolve_run("train-b", tmp_path).run_id == "train-b1"
    assert resolve_run("train-a1", tmp_path).run_id == "train-a1"
    assert resolve_run(None, tmp_path).run_id == "train-a2"
    with pytest.raises(RunNotFoundError, match=r"matches 3 runs \(.*train-a1.*\)"):
        resolve_run("train", tmp_path)
    with pytest.raises(RunNotFoundError, match="no run matches"):
        resolve_run("zzz", tmp_path)


def test_resolve_with_nothing_live(tmp_path: Path) -> None:
    with pytest.raises(RunNotFoundError, match="no live run"):
        resolve_run(None, tmp_path)


def test_prune_removes_only_old_dead_runs_and_only_our_files(tmp_path: Path) -> None:
    old = write_run(tmp_path, "old-1", pid=dead_pid(), updated=NOW - 8 * 86400)
    (old.path / "rank-0.pub.sock").write_text("")
    keep = write_run(tmp_path, "mixed-1", pid=dead_pid(), updated=NOW - 8 * 86400)
    (keep.path / "notes.txt").write_text("mine, not traceml's")
    write_run(tmp_path, "young-1", pid=dead_pid(), updated=NOW - 86400)
    write_run(tmp_path, "live-1", updated=NOW - 1)
    runs = list_runs(tmp_path, include_finished=True, now=NOW)
    assert sorted(prune_runs(runs, now=NOW)) == ["mixed-1", "old-1"]
    assert not old.path.exists()
    assert sorted(p.name for p in keep.path.iterdir()) == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["live-1", "mixed-1", "young-1"]


def test_prune_removes_a_fallback_summary_as_ours(tmp_path: Path) -> None:
    """A run whose summary fell back into its run dir leaves nothing behind once pruned."""
    old = write_run(tmp_path, "fell-back-1", pid=dead_pid(), updated=NOW - 8 * 86400)
    (old.path / "final_summary.fallback.json").write_text("{}")
    (old.path / "collector.sock").write_text("")  # a killed job collector's socket file
    (old.path / "final_summary.fallback.json.bak").write_text("not ours")
    runs = list_runs(tmp_path, include_finished=True, now=NOW)
    assert prune_runs(runs, now=NOW) == ["fell-back-1"]
    assert sorted(p.name for p in old.path.iterdir()) == ["final_summary.fallback.json.bak"]

"""`traceml ls`, `show RUN_ID` and `prune` over hand-written run files (no sockets, no torch)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.integration.test_cli_show import make_summary
from tests.unit._runfiles import dead_pid, write_run
from traceml.analysis.summary import write_summary
from traceml.cli.main import main
from traceml.transport.runfiles.runfile import RunFile, read_run_file, write_json_atomic


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "rt"
    root.mkdir(mode=0o700)
    monkeypatch.setenv("TRACEML_RUNTIME_DIR", str(root))
    return root


def finished_run(runtime: Path, tmp_path: Path, run_id: str = "cli-run", age: float = 0) -> Path:
    """A finished run whose run file names a real summary of that run; returns the summary."""
    then = time.time() - age
    run_dir = write_run(runtime, run_id, end=True, started=then - 60, updated=then)
    obj = make_summary()
    obj["run"]["id"] = run_id
    summary = write_summary(obj, tmp_path / "traceml-runs" / run_id / "final_summary.json")
    old = read_run_file(run_dir.run_json)
    fields = {**{f: getattr(old, f) for f in RunFile.__dataclass_fields__}}
    fields["summary_path"] = str(summary)
    write_json_atomic(run_dir.run_json, RunFile(**fields).to_json())
    return summary


def test_ls_counts_steps_not_the_last_index(
    runtime: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(runtime, "train-1", started=time.time() - 90, updated=time.time())  # step index 100
    assert main(["ls"]) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[4] == "101", "step index 100 is the 101st step"
    assert main(["ls", "--json"]) == 0
    [obj] = json.loads(capsys.readouterr().out)
    assert obj["steps"] == 101


def test_ls_says_since_when_a_dead_run_made_no_step(
    runtime: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(runtime, "gone-1", pid=dead_pid(), updated=time.time() - 300)
    assert main(["ls", "--all"]) == 0
    assert "dead (no step for 5m)" in capsys.readouterr().out


def test_show_takes_a_run_id(
    runtime: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    finished_run(runtime, tmp_path)
    assert main(["show", "cli-r"]) == 0
    assert "cli-run" in capsys.readouterr().out
    assert main(["show", "nope"]) == 2
    assert "neither a summary file nor a run" in capsys.readouterr().err


def test_show_of_a_live_run_says_where_to_look(
    runtime: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(runtime, "train-1", updated=time.time())
    assert main(["show", "train-1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "traceml attach train-1" in err


def test_prune_removes_only_old_runs_that_are_over_and_their_summaries(
    runtime: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = finished_run(runtime, tmp_path, "old-run", age=3 * 86400)
    (old.parent / "notes.txt").write_text("mine, not traceml's")
    new = finished_run(runtime, tmp_path, "new-run", age=0)
    write_run(runtime, "live-run", updated=time.time() - 10 * 86400)  # old but alive
    assert main(["prune", "--older-than", "2d", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would remove old-run" in out and "new-run" not in out and "live-run" not in out
    assert (runtime / "old-run").is_dir() and old.is_file(), "a dry run removes nothing"

    assert main(["prune", "--older-than", "2d"]) == 0
    assert not (runtime / "old-run").exists() and not old.exists()
    assert (old.parent / "notes.txt").is_file(), "a file that is not ours stays"
    assert (runtime / "new-run").is_dir() and new.is_file()
    assert (runtime / "live-run").is_dir()


def test_prune_bad_age_is_one_line_and_exit_2(
    runtime: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["prune", "--older-than", "soon"]) == 2
    assert "use a number and a unit" in capsys.readouterr().err

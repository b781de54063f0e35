"""`traceml ls`: table and JSON, --all, and a corrupt run file reported on stderr with exit 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.unit._runfiles import dead_pid, write_run
from traceml.cli.ls import format_age
from traceml.cli.main import main


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TRACEML_RUNTIME_DIR", str(tmp_path))
    return tmp_path


def test_table_shows_live_runs(runtime: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(runtime, "train-1", started=time.time() - 90, updated=time.time())
    write_run(runtime, "gone-1", pid=dead_pid())
    assert main(["ls"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == [
        "RUN",
        "ID",
        "SCRIPT",
        "RANKS",
        "HOST",
        "STEP",
        "STEP",
        "MS",
        "DIAGNOSIS",
        "STATE",
        "AGE",
    ]
    assert out[1].split()[:3] == ["train-1", "train.py", "1"]
    assert out[1].split()[-3:] == ["INPUT_BOUND", "live", "1m"]
    assert len(out) == 2


def test_json_all_lists_dead_runs(runtime: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(runtime, "gone-1", pid=dead_pid())
    assert main(["ls", "--all", "--json"]) == 0
    [obj] = json.loads(capsys.readouterr().out)
    assert obj["id"] == "gone-1" and obj["state"] == "dead" and obj["step"] == 100
    assert set(obj) >= {"script", "ranks", "host", "last_step_ms", "diagnosis", "age_s"}


def test_empty(runtime: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ls"]) == 0
    assert "no live runs" in capsys.readouterr().out
    assert main(["ls", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_a_corrupt_run_file_is_one_line_on_stderr_and_exit_0(runtime: Path) -> None:
    write_run(runtime, "good-1", pid=dead_pid())
    bad = write_run(runtime, "bad-1")
    (bad.path / "rank-0.json").unlink()
    (bad.path / "rank-0.json").write_bytes(b"\x00garbage{")
    (bad.path / "run.json").unlink()
    env = dict(os.environ, TRACEML_RUNTIME_DIR=str(runtime))
    done = subprocess.run(
        [sys.executable, "-m", "traceml", "ls", "--all"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0
    assert "good-1" in done.stdout and "bad-1" not in done.stdout
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("traceml: warning: skipping broken run file") and "rank-0.json" in line


def test_an_unsafe_runtime_dir_is_an_error_line(runtime: Path) -> None:
    os.chmod(runtime, 0o755)
    assert main(["ls"]) == 2


@pytest.mark.parametrize(("s", "text"), [(5, "5s"), (61, "1m"), (7200, "2h"), (3 * 86400, "3d")])
def test_format_age(s: float, text: str) -> None:
    assert format_age(s) == text

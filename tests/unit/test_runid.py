"""Run ids: the order of sources, readability, safety as a directory name, agreement of ranks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from traceml.transport.runfiles.runid import (
    _proc_start,
    derive_run_id,
    derived_run_id,
    is_valid_run_id,
    launcher_pid,
    process_start,
    sanitize,
    script_stem,
)

READABLE = re.compile(r"train-\d{8}-\d{6}-[0-9a-f]{4}")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"TRACEML_RUN_ID": "my-run", "SLURM_JOB_ID": "7"}, "my-run"),
        ({"TRACEML_RUN_ID": "a/b c"}, "a-b-c"),
        ({"SLURM_JOB_ID": "123", "SLURM_STEP_ID": "0"}, "train-slurm123.0"),
        ({"SLURM_JOB_ID": "123", "TORCHELASTIC_RUN_ID": "x"}, "train-slurm123"),
        (
            {"TORCHELASTIC_RUN_ID": "3f2a9c1e-aaaa-bbbb-cccc-1234567890ab"},
            "train-3f2a9c1e-aaaa-bbbb-cccc",
        ),
        ({"TORCHELASTIC_RUN_ID": "job42"}, "train-job42"),
    ],
)
def test_sources_in_order(env: dict[str, str], expected: str) -> None:
    assert derive_run_id("/x/train.py", env) == expected


@pytest.mark.parametrize("elastic", [None, "none", "NONE"])
def test_otherwise_derived_and_readable(elastic: str | None) -> None:
    env = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    if elastic is not None:
        env["TORCHELASTIC_RUN_ID"] = elastic
    run_id = derive_run_id("train.py", env)
    assert READABLE.fullmatch(run_id), run_id
    assert derive_run_id("train.py", env) == run_id


def test_ranks_of_one_launcher_agree_and_jobs_differ() -> None:
    env = {"MASTER_ADDR": "h", "MASTER_PORT": "1"}
    one = derived_run_id("train", env, 100, 1.7e9)
    assert derived_run_id("train", dict(env), 100, 1.7e9 + 0.001) == one
    assert derived_run_id("train", env, 101, 1.7e9) != one
    assert derived_run_id("train", {**env, "MASTER_ADDR": "g"}, 100, 1.7e9) != one
    restarted = {**env, "MASTER_PORT": "2"}  # torchelastic moved the store; same agent
    assert derived_run_id("train", restarted, 100, 1.7e9) == one


def test_without_a_start_time_the_stamp_is_now_not_1970() -> None:
    """psutil denied the launcher's start time: the id still says when the run began."""
    before = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() - 1))
    run_id = derived_run_id("train", {}, 100, None)
    after = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() + 1))
    assert READABLE.fullmatch(run_id), run_id
    assert before <= run_id[len("train-") : -len("-abcd")] <= after, run_id


def test_under_torchrun_the_launcher_is_the_parent() -> None:
    assert launcher_pid({"TORCHELASTIC_RESTART_COUNT": "0"}) == os.getppid()
    assert launcher_pid({}) == os.getpid()


@pytest.mark.parametrize(
    ("script", "stem"),
    [("train.py", "train"), ("/a/b/my model.py", "my-model"), ("", "python"), ("-c", "c")],
)
def test_script_stem(script: str, stem: str) -> None:
    assert script_stem(script) == stem


@pytest.mark.parametrize(
    ("run_id", "ok"),
    [("train-1", True), (".hidden", False), ("a/b", False), ("", False), ("x" * 97, False)],
)
def test_valid_run_ids(run_id: str, ok: bool) -> None:
    assert is_valid_run_id(run_id) is ok


def test_sanitize_never_yields_a_hidden_or_unsafe_name() -> None:
    assert sanitize("../../etc") == "etc"
    assert is_valid_run_id(sanitize("..a b/c..", 10))


def test_process_start_is_psutils_create_time_even_for_an_odd_command_name(
    tmp_path: Path,
) -> None:
    """Read from /proc, the start time must equal psutil's (liveness compares the two), also
    when the command name holds spaces and parentheses."""
    odd = tmp_path / "a) b (c"
    odd.symlink_to(sys.executable)
    child = subprocess.Popen([str(odd), "-c", "import time; time.sleep(30)"])
    try:
        for pid in (os.getpid(), child.pid):
            assert process_start(pid) == psutil.Process(pid).create_time()
    finally:
        child.kill()
        child.wait()
    assert process_start(2**22 + 12345) is None  # no such process


def test_a_procfs_without_boot_time_is_a_value_error_not_a_stop_iteration(tmp_path: Path) -> None:
    """process_start falls back to psutil on OSError/ValueError/IndexError: anything else
    (a StopIteration from a missing btime line) would escape into the user's `init`."""
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "stat").write_bytes(b"7 (py) S" + b" 0" * 30 + b"\n")
    (tmp_path / "stat").write_bytes(b"cpu  1 2 3\n")
    with pytest.raises(ValueError, match="btime"):
        _proc_start(7, str(tmp_path))

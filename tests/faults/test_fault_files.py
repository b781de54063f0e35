"""The file system turns against a live run: its run dir deleted or made read-only, the summary's
folder read-only or full. Training never notices, and the summary is never lost.

We run as root in CI, and root ignores permission bits, so "read-only" is made with what binds
root too: the immutable attribute (`chattr +i`: EPERM for every create, rename and unlink in the
dir), else a read-only bind mount (EROFS); a plain `chmod 0500` only where we are not root. The
full disk is a 16 KiB tmpfs filled to the brim before the job starts.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.faults._harness import (
    check_finished,
    rank_file,
    run_dir,
    summary_of,
    tracebacks,
    training,
    warnings,
)
from traceml.analysis.schema import validate_summary
from traceml.collect.finish import FALLBACK_NAME
from traceml.transport.runfiles.runfile import read_rank_file

pytestmark = [pytest.mark.faults, pytest.mark.slow]

STEPS = 200
PUBLISHER_FAILURES = 3
AFTER_FAULT_STEPS = 300
"""About 2 s of training after the fault: the publisher rewrites its rank file every 2 s."""
REFUSAL = {
    "chattr +i": "Operation not permitted",
    "read-only bind mount": "Read-only file system",
    "chmod 0500": "Permission denied",
}
"""What the kernel says to a write in a dir made read-only each way."""


def _refuses_writes(path: Path) -> bool:
    probe = path / ".write-probe"
    try:
        probe.write_text("x")
    except OSError as e:
        return e.errno in (errno.EPERM, errno.EACCES, errno.EROFS)
    probe.unlink()
    return False


def _sh(*argv: str) -> bool:
    return subprocess.run(argv, capture_output=True, check=False).returncode == 0


def _lock_dir(path: Path) -> tuple[str, list[str]] | None:
    """Make `path` refuse writes; (how, the command that undoes it), None if nothing worked."""
    target = str(path)
    if os.geteuid() != 0:
        path.chmod(0o500)
        return "chmod 0500", ["chmod", "0700", target]
    if _sh("chattr", "+i", target):
        return "chattr +i", ["chattr", "-i", target]
    if _sh("mount", "--bind", target, target):
        if _sh("mount", "-o", "remount,ro,bind", target):
            return "read-only bind mount", ["umount", "-l", target]
        _sh("umount", "-l", target)
    return None


@contextmanager
def read_only(path: Path) -> Iterator[str]:
    """Make the existing dir `path` refuse every write, even root's; yields how it was done."""
    locked = _lock_dir(path)
    if locked is None:
        pytest.skip("cannot make a dir read-only for root here (no chattr, no bind mount)")
    how, undo = locked
    try:
        assert _refuses_writes(path), f"{how} did not make {path} read-only"
        yield how
    finally:
        _sh(*undo)


@contextmanager
def full_disk(path: Path) -> Iterator[None]:
    """A 16 KiB tmpfs mounted at `path`, filled until the kernel says ENOSPC."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or not _sh("mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(path)):
        pytest.skip("mounting a tiny tmpfs needs root (and mount rights) here")
    try:
        with open(path / "filler", "wb", buffering=0) as f, contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 512)
        with pytest.raises(OSError, match="No space left on device"):
            (path / "probe").write_bytes(b"\0" * 512)
        (path / "probe").unlink(missing_ok=True)
        yield
    finally:
        _sh("umount", "-l", str(path))


def check_publisher_said(stderr: str, reason: str) -> None:
    """The live side's trouble is told in warning lines, one per thing that failed (rank file,
    run files at close, summary link), each with the reason; never a traceback."""
    said = warnings(stderr, "publisher: ")
    assert 1 <= len(said) <= PUBLISHER_FAILURES, stderr[-2000:]
    assert all(reason in line for line in said), said


def until(stop: Path) -> tuple[str, ...]:
    """train.py arguments: train until `stop` exists, so the fault lands in a live run."""
    return ("--until", str(stop), "--steps", "1000000")


def _fallback(runtime: Path, run_id: str) -> Path:
    return run_dir(runtime, run_id) / FALLBACK_NAME


def _check_fallback(stderr: str, runtime: Path, run_id: str, reason: str) -> Path:
    """Exactly one line says where the summary went instead, and why."""
    fallback = _fallback(runtime, run_id)
    lines = [line for line in stderr.splitlines() if str(fallback) in line]
    assert len(lines) == 1, stderr[-2000:]
    assert reason in lines[0] and "instead" in lines[0]
    rank = read_rank_file(run_dir(runtime, run_id) / "rank-0.json")
    assert rank.summary_path == str(fallback), "ls and viewers must find the fallback"
    assert os.readlink(run_dir(runtime, run_id) / "final_summary.json") == str(fallback)
    return fallback


def test_run_dir_deleted_under_a_live_run(tmp_path: Path, runtime_dir: Path) -> None:
    stop = tmp_path / "stop"
    with training(tmp_path, "gone", *until(stop)) as job:
        job.wait_line("started")
        rank_file(runtime_dir, "gone")
        shutil.rmtree(run_dir(runtime_dir, "gone"))
        job.wait_steps(AFTER_FAULT_STEPS)
        stop.touch()
        result = job.finish()
    check_finished(result, summary_of(tmp_path))
    check_publisher_said(result.stderr, "No such file or directory")


def test_run_dir_made_read_only_under_a_live_run(tmp_path: Path, runtime_dir: Path) -> None:
    stop = tmp_path / "stop"
    with training(tmp_path, "ro-run", *until(stop)) as job:
        job.wait_line("started")
        rank_file(runtime_dir, "ro-run")
        with read_only(run_dir(runtime_dir, "ro-run")) as how:
            job.wait_steps(AFTER_FAULT_STEPS)
            stop.touch()
            result = job.finish()
    check_finished(result, summary_of(tmp_path))
    check_publisher_said(result.stderr, REFUSAL[how])


def test_summary_folder_made_read_only_falls_back(tmp_path: Path, runtime_dir: Path) -> None:
    summary = summary_of(tmp_path)
    summary.parent.mkdir()
    stop = tmp_path / "stop"
    with training(tmp_path, "ro-out", *until(stop)) as job:
        job.wait_line("started")
        with read_only(summary.parent) as how:
            stop.touch()
            result = job.finish()
    fallback = _check_fallback(result.stderr, runtime_dir, "ro-out", REFUSAL[how])
    check_finished(result, fallback)
    assert not summary.exists()


def test_disk_full_for_the_summary_falls_back(tmp_path: Path, runtime_dir: Path) -> None:
    summary = summary_of(tmp_path)
    with full_disk(summary.parent):
        with training(tmp_path, "full", "--steps", str(STEPS)) as job:
            result = job.finish()
        assert not summary.exists()
        assert [p.name for p in summary.parent.iterdir()] == ["filler"], "no temp file left"
    fallback = _check_fallback(result.stderr, runtime_dir, "full", "the disk is full")
    check_finished(result, fallback, steps=STEPS)


def test_summary_printed_when_both_places_refuse(tmp_path: Path, runtime_dir: Path) -> None:
    """The summary's folder and the run dir both read-only: the summary comes out on stderr,
    as the last resort, on the one line that says what failed."""
    summary = summary_of(tmp_path)
    summary.parent.mkdir()
    stop = tmp_path / "stop"
    with training(tmp_path, "nowhere", *until(stop)) as job:
        job.wait_line("started")
        rank_file(runtime_dir, "nowhere")
        with read_only(summary.parent), read_only(run_dir(runtime_dir, "nowhere")):
            stop.touch()
            result = job.finish()
    [line] = [line for line in result.stderr.splitlines() if "the fallback failed too" in line]
    printed = json.loads(line.split("; the summary: ", 1)[1])
    validate_summary(printed)
    assert printed["ranks"][0]["steps"] == result.steps
    assert result.returncode == 0 and not tracebacks(result.stderr)
    assert not summary.exists() and not _fallback(runtime_dir, "nowhere").exists()

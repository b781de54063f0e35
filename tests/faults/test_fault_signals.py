"""SIGTERM while TraceML shuts down (the scheduler's TERM on top of the launcher's, or a second
Ctrl-C): the summary is still written whole, and a signal that lands in the shutdown is not
turned into a crash of the job."""

from __future__ import annotations

import json
import os
import shutil
import signal
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

pytestmark = [pytest.mark.faults, pytest.mark.slow]

STEPS = 150


def test_two_sigterms_during_an_explicit_shutdown(tmp_path: Path) -> None:
    """train.py sends itself two TERMs from a thread the moment traceml.shutdown() begins: they
    must be held off, and the script goes on to print its last line and exit 0."""
    args = ("--steps", str(STEPS), "--shutdown", "--term-in-shutdown")
    with training(tmp_path, "term-in", *args) as job:
        result = job.finish()
    check_finished(result, summary_of(tmp_path), steps=STEPS)
    assert "shutting down" in result.stdout


def test_two_sigterms_at_the_end_of_the_script(tmp_path: Path) -> None:
    """The TERMs race the script's exit: before atexit (summary says "signal"), inside it (held
    off), or after it (the process just dies). Whichever wins, the summary holds every step."""
    with training(tmp_path, "term-end", "--steps", str(STEPS)) as job:
        job.wait_line("steps ")
        os.killpg(job.pid, signal.SIGTERM)
        os.killpg(job.pid, signal.SIGTERM)
        result = job.finish()
    assert result.returncode in (0, -signal.SIGTERM), result.stderr[-2000:]
    assert not tracebacks(result.stderr), result.stderr[-2000:]
    assert result.steps == STEPS
    assert summary_of(tmp_path).exists(), f"exit {result.returncode}\n{result.stderr[-3000:]}"
    data = json.loads(summary_of(tmp_path).read_text())
    validate_summary(data)
    assert data["run"]["exit"] in ("ok", "signal")
    assert data["ranks"][0]["steps"] == STEPS


def test_sigterm_while_the_main_thread_holds_the_import_lock(tmp_path: Path) -> None:
    """The TERM handler waits for the tx thread to write the summary; if the tx thread had to
    import anything then, it would wait for the import lock the interrupted main thread holds,
    and the summary would be lost after the 2 s shutdown limit."""
    with training(tmp_path, "term-imp", "--steps", str(STEPS), "--term-in-import") as job:
        result = job.finish()
    assert result.returncode == -signal.SIGTERM, result.stderr[-2000:]  # died of it, as bare
    assert "did not finish in time" not in result.stderr, result.stderr[-2000:]
    assert not tracebacks(result.stderr), result.stderr[-2000:]
    data = json.loads(summary_of(tmp_path).read_text())
    validate_summary(data)
    assert data["run"]["exit"] == "signal"
    assert data["ranks"][0]["steps"] == STEPS == result.steps


def test_sigterm_while_the_main_thread_holds_a_logging_lock(
    tmp_path: Path, runtime_dir: Path
) -> None:
    """The TERM handler waits for the tx thread, which must warn as it closes (its run dir is
    gone): through `logging` it would wait for the handler lock the interrupted main thread
    holds, and shutdown would give up after its 2 s limit."""
    stop = tmp_path / "stop"
    args = ("--until", str(stop), "--steps", "1000000", "--term-holding-log-lock")
    with training(tmp_path, "term-log", *args) as job:
        job.wait_line("started")
        rank_file(runtime_dir, "term-log")
        shutil.rmtree(run_dir(runtime_dir, "term-log"))
        stop.touch()
        result = job.finish()
    assert result.returncode == -signal.SIGTERM, result.stderr[-2000:]  # died of it, as bare
    assert "did not finish in time" not in result.stderr, result.stderr[-2000:]
    assert any("close" in line for line in warnings(result.stderr, "publisher: ")), result.stderr
    assert not tracebacks(result.stderr), result.stderr[-2000:]
    data = json.loads(summary_of(tmp_path).read_text())
    validate_summary(data)
    assert data["run"]["exit"] == "signal"
    assert data["ranks"][0]["steps"] == result.steps

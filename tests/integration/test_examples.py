"""Every bundled example under `traceml run`, as a real subprocess, must get its diagnosis."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES, child_env, traceml_cmd
from traceml.analysis.schema import validate_summary
from traceml.analysis.summary import load_summary

pytestmark = pytest.mark.slow


def run_example(tmp_path: Path, name: str, *args: str) -> tuple[int, dict[str, Any], str]:
    summary = tmp_path / "summary.json"
    proc = subprocess.run(
        traceml_cmd("run", "--no-live", "--summary", str(summary), str(EXAMPLES / name), *args),
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
        cwd=tmp_path,
    )
    data = load_summary(summary)
    validate_summary(data)
    return proc.returncode, data, proc.stderr


@pytest.mark.parametrize(
    ("example", "kind"),
    [
        ("input_bound.py", "INPUT_BOUND"),
        ("compute_bound.py", "COMPUTE_BOUND"),
        ("optimizer_heavy.py", "OPTIMIZER_BOUND"),
        ("slow_logging.py", "HOST_BOUND"),
    ],
)
def test_step_time_diagnosis(tmp_path: Path, example: str, kind: str) -> None:
    code, summary, stderr = run_example(tmp_path, example)
    assert code == 0, stderr
    assert summary["step_time"]["diagnosis"] == kind, summary["findings"]
    assert summary["run"]["exit"] == "ok"
    assert summary["run"]["script"] == example
    assert summary["step_time"]["steps"] > 20
    assert kind in stderr  # the card was printed


def test_memory_leak_is_growing(tmp_path: Path) -> None:
    code, summary, _ = run_example(tmp_path, "memory_leak.py")
    assert code == 0
    assert summary["step_memory"]["diagnosis"] == "GROWING"
    assert summary["step_memory"]["growth_mb_per_1k_steps"] > 100


def test_crash_keeps_summary_and_exit_code(tmp_path: Path) -> None:
    code, summary, stderr = run_example(tmp_path, "crash.py")
    assert code == 1
    assert summary["run"]["exit"] == "error"
    assert "RuntimeError: loss became NaN" in stderr
    assert "Traceback" in stderr and "crash.py" in stderr
    assert "runpy" not in stderr  # the traceback starts in the user's script
    assert summary["step_time"]["steps"] >= 20


def test_phases_sum_to_step_time(tmp_path: Path) -> None:
    _, summary, _ = run_example(tmp_path, "input_bound.py", "--steps", "40")
    st = summary["step_time"]
    shares = [
        st[f"{p}_pct"] or 0.0
        for p in ("dataloader", "between", "forward", "backward", "optimizer", "h2d", "other")
    ]
    assert sum(shares) == pytest.approx(100.0, abs=0.5)
    assert st["h2d_pct"] is None  # CPU run: no host-to-device phase, not a fake zero

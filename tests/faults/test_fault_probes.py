"""psutil and NVML raising, and /proc unreadable, in every process of the job (a sitecustomize
shim on PYTHONPATH): the job trains on, TraceML warns at most once, keeps its live view, and
reports the missing signals as null (not measured), never as zero."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.faults._harness import (
    SCRIPTS,
    check_finished,
    run_dir,
    summary_of,
    training,
    warnings,
)
from traceml.transport.runfiles.runfile import read_rank_file

pytestmark = [pytest.mark.faults, pytest.mark.slow]

SHIM = SCRIPTS / "broken_probes"
STEPS = 150


def broken(kind: str, what: str = "psutil,nvml") -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(SHIM), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "TRACEML_FAULT_RAISE": kind, "TRACEML_FAULT_BREAK": what}


@pytest.mark.parametrize("kind", ["AccessDenied", "RuntimeError"])
def test_psutil_nvml_and_proc_failing(tmp_path: Path, runtime_dir: Path, kind: str) -> None:
    """Nothing to read the host from: its CPU and memory are null, not zero; the process's CPU
    (os.times) is still measured."""
    env = broken(kind, "psutil,nvml,procfs")
    with training(tmp_path, None, "--steps", str(STEPS), env=env) as job:
        result = job.finish()
    data = check_finished(result, summary_of(tmp_path), steps=STEPS)
    assert len(warnings(result.stderr)) <= 1, warnings(result.stderr)
    system = data["system"]
    assert system["host_cpu_pct_avg"] is None, "the shim was not in effect"
    assert system["host_mem_used_peak_mb"] is None
    assert system["cpu_pct_avg"] is not None
    rank = read_rank_file(run_dir(runtime_dir, data["run"]["id"]) / "rank-0.json")
    assert rank.endpoints and rank.end is not None, "the live view must survive broken probes"


def test_psutil_raising_leaves_linux_signals_measured(tmp_path: Path) -> None:
    """On Linux the system sample reads /proc itself: psutil failing costs no signal."""
    with training(tmp_path, None, "--steps", str(STEPS), env=broken("AccessDenied")) as job:
        result = job.finish()
    data = check_finished(result, summary_of(tmp_path), steps=STEPS)
    assert warnings(result.stderr) == []
    system = data["system"]
    assert system["host_cpu_pct_avg"] is not None and system["cpu_pct_avg"] is not None
    assert system["host_mem_used_peak_mb"] is not None


@pytest.mark.gpu
@pytest.mark.skipif(
    not Path("/dev/nvidiactl").exists(), reason="needs CUDA: NVML is only opened for a GPU rank"
)
def test_nvml_raising_on_a_gpu_rank(tmp_path: Path) -> None:
    env = broken("RuntimeError", "nvml")
    with training(tmp_path, None, "--steps", str(STEPS), "--device", "cuda", env=env) as job:
        result = job.finish()
    data = check_finished(result, summary_of(tmp_path), steps=STEPS)
    assert [w for w in warnings(result.stderr) if "NVML" in w] == warnings(result.stderr)
    assert len(warnings(result.stderr)) == 1
    assert data["system"]["gpu_util_pct_avg"] is None

"""DDP all-reduce wait under real torchrun (gloo, 2 ranks): the hook leaves gradients bitwise
unchanged, and a fast rank is seen waiting for a rank slowed in its data loading."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, child_env, traceml_cmd
from traceml.analysis.schema import validate_summary

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("nproc", "hooked"),
    # 3 ranks: 1/3 is inexact, so with gradient_as_bucket_view (DDP then divides in place) the
    # hook could not match DDP bit for bit and is not registered.
    [(2, [True, True]), (3, [True, False])],
)
def test_gradients_are_bitwise_identical_with_the_hook(
    tmp_path: Path, nproc: int, hooked: list[bool]
) -> None:
    cmd = [
        *(sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc)),
        *("--master-addr", "127.0.0.1", "--master-port", str(free_port())),
        *(str(HERE / "_ddp_grads.py"), str(tmp_path)),
    ]
    env = child_env(OMP_NUM_THREADS="1", TRACEML_SUMMARY=str(tmp_path / "summary.json"))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in range(nproc):
        report = json.loads((tmp_path / f"rank-{rank}.json").read_text())
        assert report["hooked"] == hooked, "TraceML's hook was not registered"
        assert report["mismatches"] == []


def test_fast_rank_waits_for_the_slow_one(tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    cmd = traceml_cmd(
        *("run", "--no-live", "--summary", str(summary), "--nproc-per-node", "2"),
        str(EXAMPLES / "ddp_straggler.py"),
        *("--slow-rank", "1", "--slow", "data", "--delay-ms", "10", "--steps", "40"),
    )
    env = child_env(MASTER_PORT=str(free_port()))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(summary.read_text())
    validate_summary(data)
    fast, slow = (r["comm_wait_pct"] for r in data["ranks"])
    assert fast is not None and slow is not None
    assert fast > slow + 15, (fast, slow)
    assert data["step_time"]["comm_wait_pct"] is not None
    straggler = next(f for f in data["findings"] if f["kind"] == "INPUT_STRAGGLER")
    assert straggler["evidence"]["comm_wait_ms"]["0"] > 5
    assert "rank 0 waits" in straggler["summary"]

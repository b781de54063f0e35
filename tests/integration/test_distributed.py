"""Real torchrun jobs (gloo on CPU): one run id, every rank in the summary, stragglers named.

Each test launches real ranks; steps are few and short to keep the suite's time in check.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES, child_env, traceml_cmd
from traceml.analysis.diagnose import diagnose
from traceml.analysis.schema import validate_summary
from traceml.analysis.store import RunStore
from traceml.transport.subscribe.fold import apply_events
from traceml.transport.subscribe.runs import list_runs
from traceml.transport.subscribe.subscriber import Subscriber
from traceml.transport.wire.events import GapEvent, InfoEvent

pytestmark = pytest.mark.slow
STRAGGLER = str(EXAMPLES / "ddp_straggler.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def finding(summary: dict[str, Any], kind: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [f for f in summary["findings"] if f["kind"] == kind]
    assert found, f"no {kind} in {[f['kind'] for f in summary['findings']]}"
    return found[0]


def run_job(
    tmp_path: Path, nproc: int, *args: str, collector: str = "process"
) -> tuple[int, dict[str, Any], str]:
    summary = tmp_path / "summary.json"
    cmd = traceml_cmd(
        "run",
        "--no-live",
        "--summary",
        str(summary),
        "--nproc-per-node",
        str(nproc),
        STRAGGLER,
        *args,
    )
    env = child_env(MASTER_PORT=str(free_port()), TRACEML_COLLECTOR=collector)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=tmp_path, env=env)
    data = json.loads(summary.read_text())
    validate_summary(data)
    return proc.returncode, data, proc.stderr


def watch_live(runtime_dir: Path, proc: subprocess.Popen[str], seconds: float) -> RunStore:
    """Attach like a viewer while the job runs and fold what arrives into a store."""
    deadline = time.monotonic() + seconds
    while not list_runs(runtime_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    store = RunStore()
    run = list_runs(runtime_dir)[0]
    with Subscriber(run) as sub:
        while time.monotonic() < deadline and proc.poll() is None:
            apply_events(store, sub.poll(100))
    return store


def test_input_straggler_named_live_and_in_summary(tmp_path: Path, runtime_dir: Path) -> None:
    summary = tmp_path / "summary.json"
    cmd = traceml_cmd(
        "run",
        "--no-live",
        "--summary",
        str(summary),
        "--nproc-per-node",
        "2",
        STRAGGLER,
        "--slow-rank",
        "1",
        "--slow",
        "data",
        "--delay-ms",
        "10",
        "--steps",
        "250",
    )
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=child_env(MASTER_PORT=str(free_port())),
    )
    store = watch_live(runtime_dir, proc, seconds=60)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert sorted(store.ranks()) == [0, 1], "one run with both ranks in the live stream"
    live = diagnose(store.live_view())
    assert live.primary.kind == "INPUT_STRAGGLER", [f.kind for f in live.findings]
    assert live.primary.evidence["ranks"] == [1]

    data = json.loads(summary.read_text())
    validate_summary(data)
    assert data["primary"]["kind"] == "INPUT_STRAGGLER"
    straggler = finding(data, "INPUT_STRAGGLER")
    assert straggler["evidence"]["ranks"] == [1]
    assert "rank 1" in straggler["summary"]
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    assert data["run"]["world_size"] == 2
    assert data["ranks"][1]["dataloader_pct"] > data["ranks"][0]["dataloader_pct"] + 20


@pytest.mark.parametrize("collector", ["process", "thread"])
def test_compute_straggler_among_three_ranks(tmp_path: Path, collector: str) -> None:
    """The job collector runs as a process of its own, or (when that cannot start, or
    TRACEML_COLLECTOR=thread) in rank 0's tx thread: the same summary either way."""
    code, data, stderr = run_job(
        tmp_path,
        3,
        *("--slow-rank", "2", "--slow", "forward", "--delay-ms", "8", "--steps", "60"),
        collector=collector,
    )
    assert code == 0, stderr
    assert "rank 0's own thread" not in stderr and "did not answer" not in stderr, stderr
    assert [r["rank"] for r in data["ranks"]] == [0, 1, 2]
    straggler = finding(data, "COMPUTE_STRAGGLER")
    assert straggler["evidence"]["ranks"] == [2]
    assert data["primary"]["kind"] == "COMPUTE_STRAGGLER"
    assert all(r["state"] == "finished" and r["exit"] == "ok" for r in data["ranks"])


def test_rank_killed_mid_run_is_listed_dead(tmp_path: Path) -> None:
    code, data, _ = run_job(
        tmp_path, 2, "--slow", "none", "--slow-rank", "1", "--die-at", "25", "--steps", "400"
    )
    assert code != 0
    rows = {r["rank"]: r for r in data["ranks"]}
    assert rows[1]["state"] == "dead"
    assert rows[1]["exit"] is None
    assert rows[0]["steps"] >= 20
    assert data["run"]["exit"] in ("error", "signal")


def test_two_nodes_feed_one_collector(tmp_path: Path) -> None:
    """Two torchrun agents as two nodes (static rendezvous on loopback), each with its own run
    dir as on separate hosts: node 1's rank reaches rank 0 only through the TCP collector."""
    port = str(free_port())
    procs = []
    for node in (0, 1):
        rt = tmp_path / f"node{node}"
        rt.mkdir(mode=0o700)
        env = child_env(TRACEML_RUNTIME_DIR=str(rt), TRACEML_SUMMARY=str(rt / "summary.json"))
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "2",
            "--nproc-per-node",
            "1",
            "--node-rank",
            str(node),
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            port,
            "-m",
            "traceml",
            "run",
            STRAGGLER,
            "--slow-rank",
            "1",
            "--slow",
            "data",
            "--delay-ms",
            "8",
            "--steps",
            "150",
        ]
        procs.append(
            subprocess.Popen(
                cmd,
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    live = watch_live(tmp_path / "node0", procs[0], seconds=60)
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sorted(live.ranks()) == [0, 1], "node 0's viewer sees node 1's rank through the relay"
    assert live.total_steps(1) > 0
    assert diagnose(live.live_view()).primary.kind == "INPUT_STRAGGLER"
    node0_runs = list_runs(tmp_path / "node0", include_finished=True)
    assert [len(r.ranks) for r in node0_runs] == [2], "ls on node 0 shows the whole job"
    relayed = {r.rank: r for r in node0_runs[0].ranks}[1]
    assert relayed.relayed_by is not None and relayed.end is not None
    data = json.loads((tmp_path / "node0" / "summary.json").read_text())
    validate_summary(data)
    assert not (tmp_path / "node1" / "summary.json").exists(), "only global rank 0 writes it"
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    assert data["ranks"][1]["steps"] == 150
    assert finding(data, "INPUT_STRAGGLER")["evidence"]["ranks"] == [1]
    node1_runs = list_runs(tmp_path / "node1", include_finished=True)
    assert [len(r.ranks) for r in node1_runs] == [1], "each node keeps its own run dir"
    assert os.environ.get("TRACEML_RUNTIME_DIR") != str(tmp_path / "node1")


def test_torchelastic_restart_is_a_new_incarnation_not_a_gap(
    tmp_path: Path, runtime_dir: Path
) -> None:
    """Rank 1 dies in the first incarnation; torchrun restarts both ranks once. A viewer
    attached throughout sees the new incarnation announced and loses nothing.

    c10d rendezvous with an unshared store: restarts with the static backend, or with the
    agent's store shared, reuse the first incarnation's gloo addresses and fail with or
    without TraceML (pytorch/pytorch#135712)."""
    summary = tmp_path / "summary.json"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{free_port()}",
        "-m",
        "traceml",
        "run",
        "--summary",
        str(summary),
        STRAGGLER,
        "--slow",
        "none",
        "--die-at",
        "40",
        "--die-once",
        "--steps",
        "300",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=child_env(TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not list_runs(runtime_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    events: list[Any] = []
    with Subscriber(list_runs(runtime_dir)[0]) as sub:
        while proc.poll() is None and time.monotonic() < deadline + 60:
            events += sub.poll(100)
        lost = sub.stats["lost"]
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, out
    incarnations = {(e.info.rank, e.info.incarnation) for e in events if isinstance(e, InfoEvent)}
    assert {(0, 1), (1, 1)} <= incarnations, incarnations
    assert lost == 0, "a restart is not a sequence gap"
    assert not [e for e in events if isinstance(e, GapEvent)]
    data = json.loads(summary.read_text())
    validate_summary(data)
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    assert all(r["steps"] == 300 for r in data["ranks"]), data["ranks"]
    assert data["run"]["restarts"] == 1, "the summary says which incarnation it describes"
    assert [r.run_id for r in list_runs(runtime_dir, include_finished=True)] == [data["run"]["id"]]

"""`traceml export prometheus` against a real job under `traceml run`: /metrics scraped over HTTP
and parsed with prometheus-client's parser; a port that cannot be bound and a killed exporter
cost the job nothing. The same job logs itself live into TensorBoard with `live()`."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import child_env, traceml_cmd
from tests.integration.test_export_trackers import scalars_steps
from traceml.errors import RunNotFoundError
from traceml.instrument.worker import TICK_S
from traceml.transport.subscribe.runs import resolve_run

pytestmark = pytest.mark.slow

RUN_ID = "export-prom-0001"
LOOP = """
import os, time, torch, traceml
from tensorboard.summary import Writer
from traceml.integrations import live
m = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
live(Writer("tb"), every_s=0.5)  # the script's own TensorBoard run, live, with a last point at exit
i = 0
while not os.path.exists("stop"):
    with traceml.trace_step(m):
        opt.zero_grad(); m(torch.randn(2, 4)).sum().backward(); opt.step()
    time.sleep(0.005)
    i += 1
    if i % 10 == 0:
        with open("count.tmp", "w") as f:
            f.write(str(i))
        os.replace("count.tmp", "count")
print("steps", i, flush=True)
"""


@pytest.fixture
def job(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A training script under `traceml run --no-live`, stopped by touching `stop`."""
    (tmp_path / "loop.py").write_text(LOOP)
    proc = subprocess.Popen(
        traceml_cmd("run", "--no-live", "--run-id", RUN_ID, "loop.py"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=child_env(),
    )
    try:
        yield proc
    finally:
        (tmp_path / "stop").touch()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_until(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not callable(check) or not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def job_steps(cwd: Path) -> int:
    """Steps the job has run (it writes the count every 10 steps; run files lag by seconds)."""
    try:
        return int((cwd / "count").read_text())
    except (OSError, ValueError):
        return 0


def run_files_written() -> bool:
    try:
        return resolve_run(RUN_ID).live
    except RunNotFoundError:
        return False


def start_exporter(*args: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        traceml_cmd("export", "prometheus", RUN_ID, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    m = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
    assert m, f"exporter said {line!r}"
    return proc, int(m[1])


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_a_real_job_scraped_then_conflict_and_kill_cost_it_nothing(
    tmp_path: Path, job: subprocess.Popen[str]
) -> None:
    wait_until(lambda: job_steps(tmp_path) > 0 and run_files_written(), 60, "the job's steps")
    exporter, port = start_exporter("--port", "0")
    try:
        wait_until(lambda: scrape(port).get("traceml_steps_total"), 20, "steps on /metrics")
        wait_until(lambda: scrape(port)["traceml_steps_total"][0][1] > 30, 20, "steps to move on")
        m = scrape(port)
        labels, steps = m["traceml_steps_total"][0]
        assert labels == {
            "run_id": RUN_ID,
            "script": "loop.py",
            "rank": "0",
            "host": labels["host"],
        }
        assert labels["host"]
        phases = {lab["phase"]: v for lab, v in m["traceml_phase_share_ratio"]}
        assert {"forward", "backward", "optimizer"} <= set(phases)
        assert 0.99 < sum(phases.values()) < 1.01
        assert m["traceml_step_median_seconds"][0][1] > 0.004  # the loop sleeps 5 ms a step
        assert m["traceml_host_rss_bytes"][0][1] > 10 * 2**20
        assert "traceml_device_allocated_bytes" not in m  # CPU: not measured, not 0
        state = {lab["state"]: v for lab, v in m["traceml_rank_state"]}
        assert state == {"live": 1.0, "stalled": 0.0, "dead": 0.0, "finished": 0.0}
        (diag,) = m["traceml_diagnosis_info"]
        assert diag[0]["run_id"] == RUN_ID and diag[0]["kind"] and diag[1] == 1.0
        count = m["traceml_step_duration_seconds_count"][0][1]
        assert 0 < count <= steps
        inf = [v for lab, v in m["traceml_step_duration_seconds_bucket"] if lab["le"] == "+Inf"]
        assert inf == [count]

        clash = subprocess.run(
            traceml_cmd("export", "prometheus", RUN_ID, "--port", str(port)),
            capture_output=True,
            text=True,
            timeout=60,
            env=child_env(),
        )
        assert clash.returncode == 2
        lines = clash.stderr.strip().splitlines()
        assert len(lines) == 1 and f":{port}" in lines[0], clash.stderr
    finally:
        os.kill(exporter.pid, signal.SIGKILL)
        exporter.wait(10)
    before = job_steps(tmp_path)
    wait_until(lambda: job_steps(tmp_path) > before + 20, 30, "the job to run on after the kill")
    assert job.poll() is None
    # The script's live logger logs a point every 0.5 s once it has found its run, and a last one
    # at exit if the run moved on. On a fast host everything above takes under a second: the job
    # runs on until a point is logged and a tick's records past it have gone out.
    tb = tmp_path / "tb"
    wait_until(lambda: tb.exists() and bool(scalars_steps(tb)), 30, "the script's first live point")
    past = scalars_steps(tb)[0] + TICK_S / 0.005 + 20
    wait_until(lambda: job_steps(tmp_path) > past, 30, "the job to run a tick past that point")
    (tmp_path / "stop").touch()
    out, err = job.communicate(timeout=60)
    assert job.returncode == 0, err
    ran = int(out.split("steps")[-1].split()[0])

    # live() in the script logged into its TensorBoard run on its own thread, the last point at
    # exit: as far as the rank had published (records go out once a tx tick, at most TICK_S old;
    # the loop steps every 5 ms)
    points = scalars_steps(tmp_path / "tb")
    assert len(points) >= 2 and points == sorted(set(points))
    assert ran - (TICK_S / 0.005 + 10) <= points[-1] <= ran

"""Exporter benchmark (issue #14): what `traceml export prometheus` costs on a busy run.

Run: .venv/bin/python benchmarks/exporter.py [--ranks 64] [--rate 100] [--seconds 20]

The simulated fleet of benchmarks/viewer.py (processes each driving up to 64 Publishers, one per
rank, publishing synthetic steps at `--rate` per rank plus one system sample per rank a second)
feeds a real `traceml export prometheus --all` subprocess. After every rank's steps reached
/metrics plus a warm-up, over a fixed window scraped every `--scrape` seconds as Prometheus
would:

- exporter CPU: its process's CPU seconds (psutil) over the window, as % of one core;
- scrape: how long one GET /metrics took (median, max), and its size;
- folded: steps the exporter's histogram counted over the window (sum of `_count`), and its CPU
  per folded step, which gives its cost at the published rate even when a loaded host starves
  it (then the first figure is what it got, not what it needs);
- kept up: steps counted against steps the fleet had published, at the window's end (the gap
  is what still sat in ZeroMQ's queues).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
from prometheus_client.parser import text_string_to_metric_families
from viewer import READY_TIMEOUT_S, Scenario, fleet_spec, join_or_kill, run_fleet, spawn

WARMUP_S = 3.0


def scrape(port: int) -> tuple[str, float]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    return text, time.perf_counter() - t0


def totals(text: str) -> tuple[int, float]:
    """(ranks on /metrics, steps counted by the histogram over all ranks)."""
    ranks, seen = 0, 0.0
    for family in text_string_to_metric_families(text):
        if family.name == "traceml_step_duration_seconds":
            counts = [s.value for s in family.samples if s.name.endswith("_count")]
            ranks, seen = len(counts), sum(counts)
    return ranks, seen


def published(logs: list[Path]) -> int:
    total = 0
    for log in logs:
        lines = log.read_text().splitlines() if log.exists() else []
        total += int(lines[-1].split()[1]) if lines else 0
    return total


def start_exporter(tmp: Path) -> tuple[subprocess.Popen[str], int]:
    env = dict(os.environ, TRACEML_RUNTIME_DIR=str(tmp))
    cmd = [sys.executable, "-m", "traceml", "export", "prometheus", "--all", "--port", "0"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    m = re.search(r":(\d+)/metrics", line)
    if m is None:
        raise SystemExit(f"the exporter did not start: {line!r}")
    return proc, int(m[1])


def wait_ranks(port: int, ranks: int) -> float:
    t0 = time.monotonic()
    while totals(scrape(port)[0])[0] < ranks:
        if time.monotonic() - t0 > READY_TIMEOUT_S:
            raise SystemExit("not every rank reached /metrics in time")
        time.sleep(0.5)
    return time.monotonic() - t0


def measure(args: argparse.Namespace, tmp: Path) -> None:
    sc = Scenario("exporter", args.ranks, args.rate)
    ctx = mp.get_context("spawn")
    specs = [fleet_spec(sc, tmp, "bench-export", a) for a in range(0, sc.ranks, 64)]
    opened = [ctx.Event() for _ in specs]
    go, stop = ctx.Event(), ctx.Event()
    fleets = [spawn(run_fleet, s, e, go, stop) for s, e in zip(specs, opened, strict=True)]
    exporter = None
    try:
        if not all(e.wait(READY_TIMEOUT_S) for e in opened):
            raise SystemExit("the fleet could not open its publishers in time")
        go.set()
        exporter, port = start_exporter(tmp)
        attach_s = wait_ranks(port, sc.ranks)
        time.sleep(WARMUP_S)
        proc = psutil.Process(exporter.pid)
        seen0 = totals(scrape(port)[0])[1]
        cpu0, t0 = sum(proc.cpu_times()[:2]), time.monotonic()
        took, size = [], 0
        while time.monotonic() - t0 < args.seconds:
            time.sleep(args.scrape)
            text, s = scrape(port)
            took.append(s)
            size = len(text)
        cpu_s, span = sum(proc.cpu_times()[:2]) - cpu0, time.monotonic() - t0
        seen, sent = totals(scrape(port)[0])[1], published([Path(s.log) for s in specs])
    finally:
        if exporter is not None:
            exporter.terminate()
            exporter.wait(30)
        stop.set()
        for f in fleets:
            join_or_kill(f, 60)
    print(f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{sc.ranks} ranks x {sc.rate:g} steps/s = {sc.total_rate:,.0f} steps/s published")
    print(f"every rank on /metrics after {attach_s:.1f} s")
    folded = seen - seen0
    print(f"exporter CPU over {span:.0f} s: {100 * cpu_s / span:.1f} % of one core")
    print(
        f"folded {folded / span:,.0f} steps/s, {1e6 * cpu_s / folded:.1f} µs of CPU a step"
        f" (scrapes included): {100 * cpu_s / folded * sc.total_rate:.1f} % of a core"
        f" at {sc.total_rate:,.0f} steps/s"
    )
    print(
        f"scrape every {args.scrape:g} s: median {1000 * statistics.median(took):.0f} ms,"
        f" max {1000 * max(took):.0f} ms, {size / 1024:.0f} KiB"
    )
    print(f"histogram counted {seen:,.0f} of {sent:,} published steps ({100 * seen / sent:.1f} %)")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--rate", type=float, default=100.0, help="steps/s per rank")
    parser.add_argument("--seconds", type=float, default=20.0, help="measuring window")
    parser.add_argument("--scrape", type=float, default=5.0, help="seconds between scrapes")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tmle-"))
    tmp.chmod(0o700)
    os.environ["TRACEML_RUNTIME_DIR"] = str(tmp)
    try:
        measure(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

"""What TraceML adds to a training step, and to a run, measured side by side in one process.

Run: make bench   (or .venv/bin/python benchmarks/overhead.py [--quick])

1. Per step: real torch steps sized to about 1 ms, 10 ms and 100 ms on this CPU, in alternating
   blocks, bare (no hooks, no trace_step) and traced (auto mode: DataLoader, forward, backward
   and optimizer hooks plus trace_step, the tx thread publishing). Each size runs twice: with no
   viewer, and with a live viewer (a separate process attached through the subscriber, folding
   every record into a RunStore as `traceml attach` does). Prints median and p95 per-step time,
   the added µs and the ratio.
2. Per run: `python script.py` against `traceml run --no-live script.py` on a 20-step script,
   alternated, for TraceML's startup plus shutdown.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import Loop, pct

RUNTIME = Path(tempfile.mkdtemp(prefix="traceml-bench-"))
RUNTIME.chmod(0o700)
os.environ["TRACEML_RUNTIME_DIR"] = str(RUNTIME)
os.environ["TRACEML_RUN_ID"] = f"bench-overhead-{os.getpid()}"

VIEWER = """
import sys, time
from traceml.analysis.store import RunStore
from traceml.transport.subscribe.fold import apply_events
from traceml.transport.subscribe.runs import resolve_run
from traceml.transport.subscribe.subscriber import Subscriber
store = RunStore()
with Subscriber(resolve_run(sys.argv[1])) as sub:
    print("attached", flush=True)
    while True:
        apply_events(store, sub.poll(100))
"""


def calibrate(target_ms: float) -> Loop:
    """The width whose bare step takes about `target_ms` here."""
    width = 32
    while True:
        loop = Loop(width)
        loop.block(20, traced=False)
        ms = statistics.median(loop.block(30, traced=False)) / 1000
        if ms >= target_ms * 0.8 or width >= 16384:
            return loop
        width = int(width * max(1.2, min(4.0, (target_ms / ms) ** 0.5)))


def measure(loop: Loop, session: Any, steps: int, rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"bare": [], "traced": []}
    for _ in range(rounds):
        session.hooks.remove()
        out["bare"] += loop.block(steps, traced=False)
        session.hooks.install_auto(loop.torch, h2d=False)
        session.last_model_id = 0
        out["traced"] += loop.block(steps, traced=True)
    return out


def start_viewer() -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", VIEWER, os.environ["TRACEML_RUN_ID"]],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    return proc


def per_step(sizes: list[tuple[float, int]], rounds: int) -> list[tuple[str, dict[str, Any]]]:
    import torch

    import traceml
    from traceml.api import current_session

    torch.set_num_threads(1)
    traceml.init(mode="auto", summary=RUNTIME / "bench_summary.json")
    session = current_session()
    assert session is not None
    rows = []
    for target_ms, steps in sizes:
        loop = calibrate(target_ms)
        for viewer in (False, True):
            proc = start_viewer() if viewer else None
            res = measure(loop, session, steps, rounds)
            if proc is not None:
                proc.kill()
                proc.wait()
            label = f"{target_ms:g} ms step" + (", viewer attached" if viewer else "")
            rows.append((label, res))
    traceml.shutdown()
    return rows


RUN_SCRIPT = """
import torch
torch.set_num_threads(1)
import traceml
m = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for _ in range(20):
    with traceml.trace_step(m):
        opt.zero_grad(); m(torch.randn(8, 16)).sum().backward(); opt.step()
"""


def per_run(rounds: int) -> dict[str, list[float]]:
    tmp = Path(tempfile.mkdtemp())
    script = tmp / "tiny_run.py"
    script.write_text(RUN_SCRIPT)
    bare_env = dict(os.environ, TRACEML_MODE="off")
    env = {k: v for k, v in os.environ.items() if k != "TRACEML_RUN_ID"}
    out: dict[str, list[float]] = {"python": [], "traceml run": []}
    for _ in range(rounds):
        for name, cmd, e in (
            ("python", [sys.executable, str(script)], bare_env),
            (
                "traceml run",
                [
                    sys.executable,
                    "-m",
                    "traceml",
                    "run",
                    "--no-live",
                    "--summary",
                    str(tmp / "s.json"),
                    str(script),
                ],
                env,
            ),
        ):
            t0 = time.perf_counter()
            subprocess.run(cmd, env=e, cwd=tmp, check=True, capture_output=True)
            out[name].append(time.perf_counter() - t0)
    return out


def print_steps(rows: list[tuple[str, dict[str, Any]]], rounds: int) -> None:
    print(f"per step: bare vs traced, {rounds} interleaved block pairs each (µs)")
    print(
        f"  {'':32} {'bare med':>9} {'traced med':>10} {'added':>7} {'ratio':>6}"
        f" {'bare p95':>9} {'traced p95':>10}"
    )
    for label, res in rows:
        b, t = res["bare"], res["traced"]
        bm, tm = statistics.median(b), statistics.median(t)
        print(
            f"  {label:32} {bm:9.0f} {tm:10.0f} {tm - bm:7.1f} {tm / bm:6.3f}"
            f" {pct(b, 0.95):9.0f} {pct(t, 0.95):10.0f}"
        )
    print("  target: <= 10 µs added per step at the median")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer steps (noisier)")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    scale = 0.25 if args.quick else 1.0
    sizes = [(1.0, int(1000 * scale)), (10.0, int(150 * scale)), (100.0, int(20 * scale))]
    print_steps(per_step(sizes, args.rounds), args.rounds)
    runs = per_run(2 if args.quick else 3)
    py, tr = statistics.median(runs["python"]), statistics.median(runs["traceml run"])
    print("per run: 20-step script, alternated")
    print(f"  python script.py          {py:6.2f} s")
    print(f"  traceml run --no-live     {tr:6.2f} s")
    print(f"  added                     {tr - py:6.2f} s   ratio {tr / py:.2f}   (target: < 1.5 s)")


if __name__ == "__main__":
    main()

"""What TraceML adds to a training step, and to a run, measured side by side in one process.

Run: make bench   (or .venv/bin/python benchmarks/overhead.py [--steps N] [--rounds R])

1. Per step: the same tiny-MLP loop (~1 ms a step on CPU) in alternating blocks, bare (no hooks,
   no trace_step) and traced (auto mode: DataLoader, forward, backward and optimizer hooks plus
   trace_step). Prints median and p95 per-step time of each and the added µs.
2. Per run: `python script.py` against `traceml run --no-live script.py` on a 20-step script,
   alternated, to show startup plus shutdown cost.
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

os.environ.setdefault("TRACEML_PUBLISH", "1")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def make_loop() -> tuple[Any, Any, Any, Any]:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 1),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(64 * 64, 64), torch.randn(64 * 64, 1))
    loader = DataLoader(data, batch_size=64)
    return torch, model, opt, loader


def block(torch: Any, model: Any, opt: Any, loader: Any, steps: int, traced: bool) -> list[float]:
    import traceml

    times: list[float] = []
    it = iter(loader)
    loss_fn = torch.nn.functional.mse_loss
    t_prev = time.perf_counter()
    while len(times) < steps:
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            continue
        if traced:
            with traceml.trace_step(model):
                opt.zero_grad(set_to_none=True)
                loss_fn(model(x), y).backward()
                opt.step()
        else:
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()
        now = time.perf_counter()
        times.append((now - t_prev) * 1e6)
        t_prev = now
    return times


def per_step(steps: int, rounds: int) -> dict[str, list[float]]:
    import traceml
    from traceml.api import current_session

    torch, model, opt, loader = make_loop()
    traceml.init(mode="auto", summary=Path(tempfile.mkdtemp()) / "bench_summary.json")
    session = current_session()
    assert session is not None
    out: dict[str, list[float]] = {"bare": [], "traced": []}
    block(torch, model, opt, loader, 200, traced=False)  # warm up torch itself
    for _ in range(rounds):
        session.hooks.remove()
        out["bare"] += block(torch, model, opt, loader, steps, traced=False)
        session.hooks.install_auto(torch, h2d=False)
        session.last_model_id = 0
        out["traced"] += block(torch, model, opt, loader, steps, traced=True)
    traceml.shutdown()
    return out


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
    env = dict(os.environ, TRACEML_RUNTIME_DIR=str(tmp / "rt"))
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000, help="steps per block")
    ap.add_argument("--rounds", type=int, default=6, help="bare/traced block pairs")
    ap.add_argument("--run-rounds", type=int, default=3)
    args = ap.parse_args()

    res = per_step(args.steps, args.rounds)
    b_med, t_med = statistics.median(res["bare"]), statistics.median(res["traced"])
    b_p95, t_p95 = pct(res["bare"], 0.95), pct(res["traced"], 0.95)
    print(f"per step ({args.rounds} x {args.steps} steps each, interleaved, tiny MLP on CPU)")
    print(f"  {'':8} {'median µs':>10} {'p95 µs':>10}")
    print(f"  {'bare':8} {b_med:10.1f} {b_p95:10.1f}")
    print(f"  {'traced':8} {t_med:10.1f} {t_p95:10.1f}")
    print(
        f"  added    {t_med - b_med:10.1f} {t_p95 - b_p95:10.1f}   "
        f"ratio {t_med / b_med:.3f}   (target: <= 10 µs added at the median)"
    )

    runs = per_run(args.run_rounds)
    py, tr = statistics.median(runs["python"]), statistics.median(runs["traceml run"])
    print(f"per run ({args.run_rounds} alternations, 20-step script)")
    print(f"  python script.py          {py:6.2f} s")
    print(f"  traceml run --no-live     {tr:6.2f} s")
    print(
        f"  added                     {tr - py:6.2f} s   ratio {tr / py:.2f}"
        "   (target: < 1.5 s added)"
    )


if __name__ == "__main__":
    main()

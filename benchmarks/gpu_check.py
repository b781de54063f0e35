"""GPU check: TraceML on CUDA adds no synchronisation, and its device phases match torch.profiler.

Run (on a machine with a CUDA GPU): .venv/bin/python benchmarks/gpu_check.py [--steps 200]

1. Trains a small MLP on CUDA under `traceml.init(mode="auto")` with
   `torch.cuda.set_sync_debug_mode("error")` around the traced steps: any synchronising CUDA call
   made by TraceML (or the loop) raises, so finishing at all is the proof. The loop itself keeps
   the loss on the GPU (no `.item()`).
2. Runs the same steps under torch.profiler with `record_function` marks around forward,
   backward and optimizer, and prints the profiler's device time per phase beside TraceML's
   (from CUDA events resolved on the tx thread), per step.
Exits 0 when both hold and the device phases agree within 25 % or 0.2 ms; 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

import traceml
from traceml.analysis.summary import load_summary

PHASES = ("forward", "backward", "optimizer")


def model_and_data(device: str) -> tuple[nn.Module, Any, Any, Any]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 4096), nn.GELU(), nn.Linear(4096, 1)
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    x = torch.randn(256, 1024, device=device)
    y = torch.randn(256, 1, device=device)
    return model, opt, x, y


def traced_steps(steps: int, summary: Path) -> None:
    model, opt, x, y = model_and_data("cuda")
    traceml.init(mode="auto", summary=summary)
    for _ in range(5):  # warm-up outside the debug mode: cuBLAS handles, allocator growth
        with traceml.trace_step(model):
            opt.zero_grad(set_to_none=True)
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(steps):
            with traceml.trace_step(model):
                opt.zero_grad(set_to_none=True)
                nn.functional.mse_loss(model(x), y).backward()
                opt.step()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    traceml.shutdown()


def profiled_steps(steps: int) -> dict[str, float]:
    from torch.profiler import ProfilerActivity, profile, record_function

    model, opt, x, y = model_and_data("cuda")
    for _ in range(5):
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            with record_function("forward"):
                loss = nn.functional.mse_loss(model(x), y)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                opt.step()
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for evt in prof.key_averages():
        if evt.key in PHASES:
            total_us = getattr(evt, "device_time_total", None) or evt.cuda_time_total
            out[evt.key] = total_us / 1000.0 / steps
    return out


def traceml_phases(summary: dict[str, Any]) -> dict[str, float]:
    st = summary["step_time"]
    mean = st.get("mean_ms") or st["median_ms"]
    return {p: (st[f"{p}_pct"] or 0.0) / 100.0 * mean for p in PHASES}


def agree(a: float, b: float) -> bool:
    return abs(a - b) <= max(0.2, 0.25 * max(a, b))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run it on a GPU machine", file=sys.stderr)
        return 2
    summary_path = Path(tempfile.mkdtemp()) / "gpu_summary.json"
    traced_steps(args.steps, summary_path)
    print(f"no synchronisation in {args.steps} traced steps (sync debug mode 'error')")
    summary = load_summary(summary_path)
    ours, theirs = traceml_phases(summary), profiled_steps(args.steps)
    print(f"device {summary['run']['device']}, torch {summary['run']['torch']}")
    print(f"{'phase':10} {'TraceML ms':>11} {'profiler ms':>12}  agree")
    ok = True
    for p in PHASES:
        good = agree(ours[p], theirs.get(p, 0.0))
        ok &= good
        print(f"{p:10} {ours[p]:11.3f} {theirs.get(p, 0.0):12.3f}  {'yes' if good else 'NO'}")
    print(
        f"step median {summary['step_time']['median_ms']:.3f} ms, "
        f"primary {summary['primary']['kind']}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

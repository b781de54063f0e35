"""A script whose process forks: a plain os.fork() child that calls trace_step, then a DataLoader
with two fork-started workers. Run under `traceml run`.

    python fork.py REPORT

Prints `steps <N>` (the parent's steps) at the end. The plain child writes REPORT (JSON): what
trace_step gave it, and whether TraceML's session and thread looked alive to it.
"""

from __future__ import annotations

import json
import os
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

import traceml
from traceml.api import current_session

CHILD_STEPS = 20


def step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> None:
    with traceml.trace_step(model):
        opt.zero_grad(set_to_none=True)
        model(x).pow(2).mean().backward()
        opt.step()


def child(model: torch.nn.Module, opt: torch.optim.Optimizer, report: str) -> None:
    ctx = traceml.trace_step(model)
    for _ in range(CHILD_STEPS):
        step(model, opt, torch.randn(8, 16))
    session = current_session()
    worker = None if session is None else session.worker
    with open(report, "w") as f:
        json.dump(
            {
                "pid": os.getpid(),
                "ctx": type(ctx).__name__,
                "closed": None if session is None else session.closed,
                "queued": None if session is None else len(session.raw),
                "tx_alive": None if worker is None else worker.is_alive(),
            },
            f,
        )


def main() -> int:
    traceml.init()
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    done = 0
    for _ in range(50):
        step(model, opt, torch.randn(8, 16))
        done += 1
    print(f"started {os.getpid()}", flush=True)
    pid = os.fork()
    if pid == 0:
        child(model, opt, sys.argv[1])
        sys.exit(0)  # a normal exit: atexit handlers run in the child too
    _, status = os.waitpid(pid, 0)
    print(f"child exit {os.waitstatus_to_exitcode(status)}", flush=True)
    data = TensorDataset(torch.randn(256, 16))
    loader = DataLoader(data, batch_size=8, num_workers=2, multiprocessing_context="fork")
    for _ in range(2):
        for (x,) in loader:
            step(model, opt, x)
            done += 1
    print(f"steps {done}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

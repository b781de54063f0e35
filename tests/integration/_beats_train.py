"""A small traced loop for test_beats_process.py: `python _beats_train.py STEPS [END] [WORKERS]`.

Prints `looping` after the first step, `threads N NAMES` (the training process's threads at the
loop's end; the kernel's names of them, then Python's) and `steps N`, then ends
as END says: ok, raise (RuntimeError), kill (SIGKILL to itself), term (SIGTERM to itself) or
hold (sleeps until killed, so a test can look at the live run).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

import traceml

steps = int(sys.argv[1])
end = sys.argv[2] if len(sys.argv) > 2 else "ok"
workers = int(sys.argv[3]) if len(sys.argv) > 3 else 0
traceml.init(mode="auto")
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = DataLoader(
    TensorDataset(torch.randn(256, 8), torch.randn(256, 1)), batch_size=8, num_workers=workers
)
done = 0
while done < steps:
    for x, y in data:
        with traceml.trace_step(model):
            opt.zero_grad()
            (model(x) - y).pow(2).mean().backward()
            opt.step()
        done += 1
        if done == 1:
            print("looping", flush=True)
        if done == steps:
            break


def task_name(task: str) -> str | None:
    try:
        with open(f"/proc/self/task/{task}/comm") as f:
            return f.read().strip()
    except FileNotFoundError:  # a thread of the DataLoader's queues that has just ended
        return None


names = [n for n in map(task_name, os.listdir("/proc/self/task")) if n is not None]
count = len(names)
names += [t.name for t in threading.enumerate()]
print(f"threads {count} {','.join(names)}", flush=True)
print(f"steps {done}", flush=True)
if end == "raise":
    raise RuntimeError("boom at the end")
if end == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if end == "term":
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
if end == "hold":
    time.sleep(120)

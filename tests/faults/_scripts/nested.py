"""A script that starts another Python process which calls traceml.init() itself, with the
script's own environment (as a preprocessing job or an evaluation subprocess would).

    python nested.py

Prints `child-summary <path>` (where the child's summary went, from its shutdown()), the child's
`child-run <id>`, and `steps <N>` for its own steps.
"""

from __future__ import annotations

import subprocess
import sys

import torch

import traceml

CHILD = """
import torch, traceml
from traceml.api import current_session
traceml.init()
m = torch.nn.Linear(4, 1)
for _ in range(30):
    with traceml.trace_step(m):
        m(torch.randn(2, 4)).sum().backward()
s = current_session()
print("child-run", s.info.run_id if s is not None and s.info is not None else None, flush=True)
print("child-summary", traceml.shutdown(), flush=True)
"""


def train(model: torch.nn.Module, steps: int) -> None:
    for _ in range(steps):
        with traceml.trace_step(model):
            model(torch.randn(8, 16)).sum().backward()


def main() -> int:
    traceml.init()
    model = torch.nn.Linear(16, 1)
    train(model, 50)
    print("started", flush=True)
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True)
    sys.stdout.write(out.stdout)
    sys.stderr.write(out.stderr)
    train(model, 50)
    print("steps 100", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

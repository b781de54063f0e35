"""A loop that spends its time between steps: `loss.item()` and a log write after every step.

Run: traceml run examples/slow_logging.py     (expected diagnosis: HOST_BOUND)
"""

from __future__ import annotations

import json
import os
import tempfile
import time

import torch
from _common import mlp, parse_steps, train


def main() -> None:
    steps = parse_steps(150)
    torch.manual_seed(0)
    model = mlp()
    batches = [(torch.randn(32, 32), torch.randn(32, 1)) for _ in range(16)]
    log_path = os.path.join(tempfile.mkdtemp(), "metrics.jsonl")

    def log(step: int, loss: torch.Tensor) -> None:
        with open(log_path, "a") as f:
            f.write(json.dumps({"step": step, "loss": loss.item(), "t": time.time()}) + "\n")
        time.sleep(0.003)  # stands for a metrics client flushing over the network

    train(model, batches, torch.optim.SGD(model.parameters(), lr=0.01), steps, after_step=log)


if __name__ == "__main__":
    main()

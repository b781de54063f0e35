"""A loop that crashes at step 30: the summary is still written, with run.exit = "error".

Run: traceml run examples/crash.py            (exit code 1, the traceback is shown)
"""

from __future__ import annotations

import torch
from _common import mlp, parse_steps, train


def main() -> None:
    steps = parse_steps(100)
    torch.manual_seed(0)
    model = mlp()
    batches = [(torch.randn(32, 32), torch.randn(32, 1)) for _ in range(16)]

    def explode(step: int, loss: torch.Tensor) -> None:
        if step == 30:
            raise RuntimeError("loss became NaN at step 30 (simulated)")

    train(model, batches, torch.optim.SGD(model.parameters(), lr=0.01), steps, after_step=explode)


if __name__ == "__main__":
    main()

"""A loop that keeps every step's activations alive by accident (a history list of tensors).

Run: traceml run examples/memory_leak.py      (expected memory diagnosis: GROWING)
"""

from __future__ import annotations

import torch
from _common import mlp, parse_steps, train


def main() -> None:
    steps = parse_steps(200)
    torch.manual_seed(0)
    model = mlp()
    batches = [(torch.randn(32, 32), torch.randn(32, 1)) for _ in range(16)]
    history: list[torch.Tensor] = []

    def keep(step: int, loss: torch.Tensor) -> None:
        history.append(torch.randn(256, 1024) + loss.detach())  # 1 MiB a step, never freed

    train(model, batches, torch.optim.SGD(model.parameters(), lr=0.01), steps, after_step=keep)


if __name__ == "__main__":
    main()

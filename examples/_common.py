"""Shared bits of the examples: a tiny MLP, synthetic data and the traced training loop."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

import traceml

# One intra-op thread: on a small shared CPU, torch's default pool spends more time spinning than
# computing, and the examples should show their bottleneck, not the machine's contention.
torch.set_num_threads(1)


def mlp(width: int = 64, depth: int = 2, d_in: int = 32) -> nn.Module:
    layers: list[nn.Module] = []
    d = d_in
    for _ in range(depth):
        layers += [nn.Linear(d, width), nn.ReLU()]
        d = width
    layers.append(nn.Linear(d, 1))
    return nn.Sequential(*layers)


def parse_steps(default: int) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=default)
    return int(parser.parse_args().steps)


def train(
    model: nn.Module,
    batches: Iterable[Any],
    optimizer: torch.optim.Optimizer,
    steps: int,
    after_step: Callable[[int, torch.Tensor], None] | None = None,
) -> None:
    """The loop every example shares: one trace_step per batch, `steps` steps in all."""
    traceml.init(mode="auto")
    step = 0
    while step < steps:
        for x, y in batches:
            with traceml.trace_step(model):
                optimizer.zero_grad(set_to_none=True)
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
                optimizer.step()
            if after_step is not None:
                after_step(step, loss)
            step += 1
            if step >= steps:
                return

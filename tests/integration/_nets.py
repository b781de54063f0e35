"""Small models that tests pickle, load in another process, or train side by side."""

from __future__ import annotations

import torch
from torch import nn


class Net(nn.Module):
    """A user's model class, importable by name (as a checkpoint reload needs)."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.body(x)
        return out


def mlp(n_in: int, width: int, n_out: int) -> nn.Sequential:
    """A three-layer MLP; wide enough that its forward outweighs the loop's Python."""
    return nn.Sequential(
        nn.Linear(n_in, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, n_out),
    )

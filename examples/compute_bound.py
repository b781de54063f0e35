"""A healthy loop: data is in memory, the model does the work.

Run: traceml run examples/compute_bound.py    (expected diagnosis: COMPUTE_BOUND)
"""

from __future__ import annotations

import torch
from _common import mlp, parse_steps, train
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    steps = parse_steps(120)
    torch.manual_seed(0)
    model = mlp(width=768, depth=3, d_in=256)
    data = TensorDataset(torch.randn(256 * 16, 256), torch.randn(256 * 16, 1))
    loader = DataLoader(data, batch_size=256, shuffle=False)
    train(model, loader, torch.optim.SGD(model.parameters(), lr=1e-3), steps)


if __name__ == "__main__":
    main()

"""A loop that waits on its data: each sample takes ~0.2 ms to "decode" in the main process.

Run: traceml run examples/input_bound.py      (expected diagnosis: INPUT_BOUND)
"""

from __future__ import annotations

import time

import torch
from _common import mlp, parse_steps, train
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, n: int = 4096) -> None:
        self.x = torch.randn(n, 32)
        self.y = torch.randn(n, 1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.0002)  # stands for JPEG decoding or a remote read
        return self.x[i], self.y[i]


def main() -> None:
    steps = parse_steps(150)
    torch.manual_seed(0)
    model = mlp()
    loader = DataLoader(SlowDataset(), batch_size=32, shuffle=True, num_workers=0)
    train(model, loader, torch.optim.SGD(model.parameters(), lr=0.01), steps)


if __name__ == "__main__":
    main()

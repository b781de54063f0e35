"""An exception in a DataLoader worker process (item 150 of 256, two workers)."""

import _common
import torch
from torch.utils.data import DataLoader, Dataset

import traceml


class Broken(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self) -> None:
        self.x, self.y = torch.randn(256, 64), torch.randn(256, 1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if i == 150:
            raise ValueError(f"corrupt record {i}")
        return self.x[i], self.y[i]


if __name__ == "__main__":
    _common.seed()
    model = _common.mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in DataLoader(Broken(), batch_size=16, num_workers=2):
        with traceml.trace_step(model):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
    print("unreachable")

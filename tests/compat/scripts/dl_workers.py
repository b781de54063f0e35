"""DataLoader with worker processes: num_workers=2, persistent_workers, prefetch_factor=4, two
epochs; items take a random augmentation drawn in the worker (its seed comes from the main RNG)."""

import _common
import torch
from torch.utils.data import DataLoader, Dataset

import traceml


class Noisy(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self) -> None:
        self.x, self.y = torch.randn(256, 64), torch.randn(256, 1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i] + 0.01 * torch.randn(64), self.y[i]


if __name__ == "__main__":
    _common.seed()
    model = _common.mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(
        Noisy(),
        batch_size=16,
        shuffle=True,
        num_workers=2,
        persistent_workers=True,
        prefetch_factor=4,
    )
    for _epoch in range(2):
        for x, y in loader:
            with traceml.trace_step(model):
                opt.zero_grad(set_to_none=True)
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
    _common.report(loss, model, opt)

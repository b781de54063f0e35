"""DataLoaders with worker processes, one after the other in one run: a map-style dataset with
num_workers=2, persistent_workers and prefetch_factor=4 for two epochs (items get a random
augmentation drawn in the worker, seeded from the main RNG), then an IterableDataset that two
workers split between them."""

from collections.abc import Iterator

import _common
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

import traceml


class Noisy(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, n: int) -> None:
        self.x, self.y = torch.randn(n, 64), torch.randn(n, 1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i] + 0.01 * torch.randn(64), self.y[i]


class Stream(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, n: int) -> None:
        self.x, self.y = torch.randn(n, 64), torch.randn(n, 1)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, len(self.x), step):
            yield self.x[i], self.y[i]


def train(model: torch.nn.Module, opt: torch.optim.Optimizer, loader: DataLoader) -> torch.Tensor:
    for x, y in loader:
        with traceml.trace_step(model):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
    return loss


if __name__ == "__main__":
    _common.seed()
    model = _common.mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    mapped = DataLoader(
        Noisy(128),
        batch_size=16,
        shuffle=True,
        num_workers=2,
        persistent_workers=True,
        prefetch_factor=4,
    )
    for _epoch in range(2):
        train(model, opt, mapped)
    loss = train(model, opt, DataLoader(Stream(16 * 16), batch_size=16, num_workers=2))
    _common.report(loss, model, opt)

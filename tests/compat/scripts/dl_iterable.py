"""An IterableDataset split across two DataLoader workers (each yields its own shard)."""

from collections.abc import Iterator

import _common
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

import traceml


class Stream(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, n: int) -> None:
        self.x, self.y = torch.randn(n, 64), torch.randn(n, 1)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, len(self.x), step):
            yield self.x[i], self.y[i]


if __name__ == "__main__":
    _common.seed()
    model = _common.mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Stream(16 * 40), batch_size=16, num_workers=2)
    for x, y in loader:
        with traceml.trace_step(model):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
    _common.report(loss, model, opt)

"""No DataLoader: 20 batches from a Python list, then 20 from a generator."""

from collections.abc import Iterator

import _common
import torch

import traceml

_common.seed()
model = _common.mlp()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
batches = [(torch.randn(32, 64), torch.randn(32, 1)) for _ in range(20)]


def generate() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    for x, y in batches:
        yield x * 2.0, y


for source in (batches, generate()):
    for x, y in source:
        with traceml.trace_step(model):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
_common.report(loss, model, opt)

"""Gradient accumulation: `trace_step` around each micro-batch, `optimizer.step()` every ACCUM.

A traced step is one micro-batch: three in four have no optimizer time, the fourth has all of it,
and the optimizer's share is its time over all micro-batches' time.
"""

import _common
import torch
from torch.utils.data import DataLoader, TensorDataset

import traceml

ACCUM = 4
_common.seed()
model = _common.mlp(width=512)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = TensorDataset(torch.randn(64 * 64, 64), torch.randn(64 * 64, 1))
loader = DataLoader(data, batch_size=64, shuffle=True)
for i, (x, y) in enumerate(loader):
    with traceml.trace_step(model):
        loss = torch.nn.functional.mse_loss(model(x), y) / ACCUM
        loss.backward()
        if (i + 1) % ACCUM == 0:
            opt.step()
            opt.zero_grad(set_to_none=True)
_common.report(loss, model, opt)

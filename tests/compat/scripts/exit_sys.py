"""`sys.exit(3)` inside a traced step, at step 10."""

import sys

import _common
import torch

import traceml

_common.seed()
model = _common.mlp()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randn(32, 1)
for step in range(30):
    with traceml.trace_step(model):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if step == 10:
            _common.report(loss, model)
            sys.exit(3)

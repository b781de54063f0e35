"""LBFGS with a closure (mirrors the time-sequence-prediction example): forward and backward run
inside `optimizer.step(closure)`, several times per step."""

import _common
import torch

import traceml

_common.seed()
model = _common.mlp(width=384)
opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4, history_size=4)
x, y = torch.randn(128, 64), torch.randn(128, 1)


def closure() -> torch.Tensor:
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


for _ in range(30):
    with traceml.trace_step(model):
        loss = opt.step(closure)
_common.report(loss, model)

"""The model changes under TraceML: `.to(torch.float64)` after the first step, `.double()`
once more, `.to("cpu")` (a no-op move), and training goes on in float64."""

import _common
import torch

import traceml

_common.seed()
model = _common.mlp()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randn(32, 1)
for step in range(30):
    if step == 1:
        model.to(torch.float64)
        x, y = x.double(), y.double()
    if step == 10:
        model.double().to("cpu")
    with traceml.trace_step(model):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
print(f"dtype={next(model.parameters()).dtype}")
_common.report(loss, model, opt)

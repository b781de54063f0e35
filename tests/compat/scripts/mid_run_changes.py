"""Models and optimizers change mid-run, as an LR finder and a restart do: model A trains with
SGD; at step 10 a second model B is created with its own Adam and traced from then on; at step
20 B's optimizer is replaced by a fresh AdamW (re-initialised after a restart)."""

import _common
import torch

import traceml

_common.seed()
a = _common.mlp()
opt: torch.optim.Optimizer = torch.optim.SGD(a.parameters(), lr=0.01)
model = a
x, y = torch.randn(32, 64), torch.randn(32, 1)
for step in range(36):
    if step == 10:
        model = _common.mlp(width=192)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    if step == 20:
        opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    with traceml.trace_step(model):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
_common.report(loss, a, model, opt)

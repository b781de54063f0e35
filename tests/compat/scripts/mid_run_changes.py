"""Models and optimizers change under TraceML, as dtype switches, an LR finder and a restart do:
model A trains in float32 for one step, then `.to(torch.float64)`, at step 5 `.double()` and a
no-op `.to("cpu")`; at step 10 a second model B is created with its own Adam and traced from
then on; at step 20 B's optimizer is replaced by a fresh AdamW."""

import _common
import torch

import traceml

_common.seed()
a = _common.mlp()
model, opt = a, torch.optim.SGD(a.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randn(32, 1)
for step in range(36):
    if step == 1:
        a.to(torch.float64)
        x, y = x.double(), y.double()
    if step == 5:
        a.double().to("cpu")
    if step == 10:
        model = _common.mlp(width=192)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        x, y = x.float(), y.float()
    if step == 20:
        opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    with traceml.trace_step(model):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
print(f"dtype_a={next(a.parameters()).dtype}")
_common.report(loss, a, model, opt)

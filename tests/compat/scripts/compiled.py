"""`torch.compile(model)` passed to trace_step (aot_eager: dynamo and AOTAutograd, the parts
that meet TraceML's wrappers, without inductor's minute of C++ compilation on two cores)."""

import _common
import torch

import traceml

_common.seed()
model = _common.mlp(width=768)
compiled = torch.compile(model, backend="aot_eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(80):
    x, y = torch.randn(128, 64), torch.randn(128, 1)
    with traceml.trace_step(compiled):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(compiled(x), y)
        loss.backward()
        opt.step()
counters = torch._dynamo.utils.counters
print(f"graphs={dict(counters['stats'])} breaks={dict(counters['graph_break'])}")
_common.report(loss, model)

"""AMP on CPU: bf16 autocast with a GradScaler stepping the optimizer; step 7's gradients are
made infinite, so the scaler skips that optimizer step and halves its scale."""

import _common
import torch

import traceml

_common.seed()
model = _common.mlp()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
scaler = torch.amp.GradScaler("cpu")
x, y = torch.randn(32, 64), torch.randn(32, 1)
for step in range(40):
    with traceml.trace_step(model):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        scaled = scaler.scale(loss * float("inf") if step == 7 else loss)
        scaled.backward()
        scaler.step(opt)
        scaler.update()
    if step in (6, 7, 8):
        print(f"step {step} scale={scaler.get_scale()!r}")
_common.report(loss, model, opt)

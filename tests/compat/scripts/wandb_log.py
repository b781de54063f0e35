"""`traceml.integrations.log_summary` into a real W&B run in offline mode, after training."""

import _common
import torch
import wandb

import traceml
from traceml.integrations import log_summary

_common.seed()
model = _common.mlp()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randn(32, 1)
for _ in range(30):
    with traceml.trace_step(model):
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
path = traceml.shutdown()
run = wandb.init(project="traceml-compat", mode="offline")
print(f"logged_to={log_summary(path)}")
print(f"run_dir={run.dir}")
run.finish()

"""Whole-model checkpoints mid-run (the official examples' `torch.save(model)` then
`torch.load(weights_only=True)` under `safe_globals`), an EMA copy by deepcopy, and a reload
from the state_dict: training goes on with the reloaded objects."""

import copy
import sys
from pathlib import Path

import _common
import torch

import traceml


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = _common.mlp(width=128)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


SAFE = [Net, torch.nn.Sequential, torch.nn.Linear, torch.nn.ReLU]
_common.seed()
model = Net()
ema = copy.deepcopy(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
path = Path(sys.argv[1] if len(sys.argv) > 1 else "model.pt")
for step in range(60):
    x, y = torch.randn(32, 64), torch.randn(32, 1)
    with traceml.trace_step(model):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters(), strict=True):
                e.lerp_(p, 0.1)
    if step % 20 == 19:
        torch.save(model, path)
        with torch.serialization.safe_globals(SAFE):
            model = torch.load(path, weights_only=True)
        torch.save({"model": model.state_dict(), "ema": copy.deepcopy(ema).state_dict()}, path)
        state = torch.load(path, weights_only=True)
        model.load_state_dict(state["model"])
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        opt.load_state_dict(opt.state_dict())
_common.report(loss, model, ema)

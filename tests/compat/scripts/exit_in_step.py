"""Leaving a traced step at step 10, the way the argument says:

- `sys`: `sys.exit(3)`;
- `os`: `os._exit(4)`: no atexit, no finally, no flush;
- `sigint`: print `ready` and sleep; the test sends SIGINT, so the KeyboardInterrupt lands on
  one known line.
"""

import os
import sys
import time

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
            if sys.argv[1] == "sys":
                sys.exit(3)
            if sys.argv[1] == "os":
                os._exit(4)
            print("ready", flush=True)
            time.sleep(60)

"""FSDP2 (`fully_shard`) on CPU with gloo: every rank holds a shard of a small MLP.

Run: traceml run --nproc-per-node 2 examples/fsdp_cpu.py
"""

from __future__ import annotations

import argparse
import gc

import torch
import torch.distributed as dist
from torch import nn

import traceml

torch.set_num_threads(1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    traceml.init(mode="auto")
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.Linear(256, 1))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        x, y = torch.randn(32, 64), torch.randn(32, 1)
        with traceml.trace_step(model):
            opt.zero_grad(set_to_none=True)
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    # FSDP's objects hold the process group in reference cycles: collected first, the group goes
    # at destroy_process_group and gloo's threads are joined there. Left for the interpreter's
    # exit, a gloo thread freeing a finished collective can abort the rank (torch 2.13: 1 bare
    # run in 10 here, "terminate called without an active exception").
    del model, opt
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

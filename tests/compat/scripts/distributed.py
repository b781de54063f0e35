"""Two gloo ranks; the model is wrapped after `traceml.init()`: DDP (`ddp`) or FSDP2's
`fully_shard` on each layer and the root (`fsdp2`). Each rank draws its own batches; rank 0
prints the loss and the hash of the full (all-gathered) parameters."""

import sys

import _common
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

import traceml

traceml.init()
dist.init_process_group("gloo")
rank = dist.get_rank()
_common.seed()
model = _common.mlp(width=128)
if sys.argv[1] == "ddp":
    wrapped: torch.nn.Module = DistributedDataParallel(model)
else:
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    wrapped = fully_shard(model)
opt = torch.optim.SGD(wrapped.parameters(), lr=0.01)
gen = torch.Generator().manual_seed(100 + rank)
for _ in range(30):
    x, y = torch.randn(32, 64, generator=gen), torch.randn(32, 1, generator=gen)
    with traceml.trace_step(wrapped):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(wrapped(x), y)
        loss.backward()
        opt.step()
state = {k: getattr(v, "full_tensor", lambda v=v: v)() for k, v in model.state_dict().items()}
losses = [torch.zeros(()) for _ in range(dist.get_world_size())]
dist.all_gather(losses, loss.detach())
if rank == 0:
    print(f"rank_losses={[t.item() for t in losses]!r}")
    _common.report(loss, state)
dist.destroy_process_group()

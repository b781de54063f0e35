"""Two gloo ranks; models are wrapped after `traceml.init()`: first one in DDP (15 steps), then
a second one sharded with FSDP2's `fully_shard` on each layer and the root (15 steps). Each rank
draws its own batches; rank 0 prints both losses and the hash of the full parameters."""

import gc

import _common
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

import traceml


def train(wrapped: torch.nn.Module, gen: torch.Generator) -> torch.Tensor:
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.01)
    for _ in range(15):
        x, y = torch.randn(32, 64, generator=gen), torch.randn(32, 1, generator=gen)
        with traceml.trace_step(wrapped):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(wrapped(x), y)
            loss.backward()
            opt.step()
    return loss.detach()


def gathered(value: torch.Tensor) -> list[float]:
    values = [torch.zeros(()) for _ in range(dist.get_world_size())]
    dist.all_gather(values, value)
    return [v.item() for v in values]


traceml.init()
dist.init_process_group("gloo")
gen = torch.Generator().manual_seed(100 + dist.get_rank())
_common.seed()
ddp_model = _common.mlp(width=128)
ddp_loss = train(DistributedDataParallel(ddp_model), gen)
fsdp_model = _common.mlp(width=128)
for layer in fsdp_model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer)
fsdp_loss = train(fully_shard(fsdp_model), gen)
full = {k: getattr(v, "full_tensor", lambda v=v: v)() for k, v in fsdp_model.state_dict().items()}
losses = gathered(ddp_loss), gathered(fsdp_loss)
if dist.get_rank() == 0:
    print(f"ddp_losses={losses[0]!r}")
    print(f"fsdp_losses={losses[1]!r}")
    _common.report(fsdp_loss, ddp_model, full)
# Gloo's worker threads must be joined before the interpreter finalizes. A thread that frees a
# finished collective's work (a moment after the call returned) takes the GIL to release its
# tensors; during finalization that exits the thread inside a C++ destructor and the rank aborts
# ("terminate called without an active exception", SIGABRT: 8 of 20 bare runs, two at once on 2
# cores, torch 2.13). destroy_process_group joins them only when it drops the last reference to
# the process group, and FSDP's and DDP's objects hold references in cycles: collect them first.
dist.barrier()
del ddp_model, fsdp_model, full
gc.collect()
dist.destroy_process_group()

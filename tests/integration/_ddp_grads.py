"""One rank of test_comm_wait's gradient check: the same DDP model with and without TraceML's
comm hook, fed the same rank-specific batches; every gradient must be bitwise equal.

Run by torchrun (gloo). Writes `rank-<r>.json` into the folder given as argv[1].
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import traceml
from traceml.instrument.comm import traced_allreduce

STEPS = 6


def model(seed: int, **ddp: Any) -> DistributedDataParallel:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(32, 300), nn.Tanh(), nn.Linear(300, 300), nn.Linear(300, 1))
    # A small bucket cap gives several buckets, so the hook runs more than once per backward.
    return DistributedDataParallel(net, bucket_cap_mb=0.1, **ddp)


def bits(t: torch.Tensor) -> list[int]:
    return t.detach().contiguous().view(torch.int32).flatten().tolist()


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    traceml.init(mode="auto")
    report: dict[str, Any] = {"rank": rank, "mismatches": [], "hooked": []}
    for ddp in ({}, {"gradient_as_bucket_view": True}):
        plain, traced = model(1, **ddp), model(1, **ddp)
        opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (plain, traced)]
        gen = torch.Generator().manual_seed(100 + rank)
        for step in range(STEPS):
            x, y = torch.randn(16, 32, generator=gen), torch.randn(16, 1, generator=gen)
            plain(x).sub(y).pow(2).mean().backward()
            with traceml.trace_step(traced):
                traced(x).sub(y).pow(2).mean().backward()
            for (name, a), b in zip(plain.named_parameters(), traced.parameters(), strict=True):
                assert a.grad is not None and b.grad is not None
                if bits(a.grad) != bits(b.grad):
                    report["mismatches"].append([str(ddp), step, name])
            for opt in opts:
                opt.step()
                opt.zero_grad(set_to_none=False)
        # Registered with DDP's reducer, and nothing of TraceML's left in the model's own lists.
        hook_name = traced._get_ddp_logging_data().get("comm_hook", "")  # type: ignore[no-untyped-call]
        report["hooked"].append(
            hook_name == traced_allreduce.__qualname__ and not traced._comm_hooks
        )
    traceml.shutdown()
    (out / f"rank-{rank}.json").write_text(json.dumps(report))
    del plain, traced, opts
    gc.collect()  # DDP's reference cycles: gloo's threads joined here, not at exit (README)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

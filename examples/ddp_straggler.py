"""DDP on CPU (gloo) with one slow rank: slow in its data loading, or in its forward.

Run: traceml run --nproc-per-node 2 examples/ddp_straggler.py --slow-rank 1 --slow data
     (expected: INPUT_STRAGGLER naming rank 1; with --slow forward: COMPUTE_STRAGGLER)
Also: torchrun --nproc-per-node 2 -m traceml run examples/ddp_straggler.py
"""

from __future__ import annotations

import argparse
import gc
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

import traceml

torch.set_num_threads(1)
BATCH = 16


class SlowForward(nn.Module):
    def __init__(self, inner: nn.Module, delay_s: float) -> None:
        super().__init__()
        self.inner = inner
        self.delay_s = delay_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.delay_s:
            time.sleep(self.delay_s)  # stands for a slower GPU or a thermally throttled one
        return self.inner(x)


class Samples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, n: int, delay_s: float) -> None:
        self.x, self.y, self.delay_s = torch.randn(n, 64), torch.randn(n, 1), delay_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay_s:
            time.sleep(self.delay_s)  # stands for a slow disk or a busy decode pool on this node
        return self.x[i], self.y[i]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--slow-rank", type=int, default=1)
    ap.add_argument("--slow", choices=("data", "forward", "none"), default="data")
    ap.add_argument("--delay-ms", type=float, default=8.0)
    ap.add_argument("--die-at", type=int, default=-1, help="rank --slow-rank exits hard here")
    ap.add_argument(
        "--die-once",
        action="store_true",
        help="die only in the first incarnation (run under torchrun --max-restarts 1)",
    )
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    traceml.init(mode="auto")
    slow_here = rank == args.slow_rank
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    die_at = -1 if args.die_once and restarted else args.die_at
    delay = args.delay_ms / 1000.0 if slow_here else 0.0
    torch.manual_seed(0)
    inner = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1))
    model = DistributedDataParallel(SlowForward(inner, delay if args.slow == "forward" else 0.0))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data_delay = delay / BATCH if args.slow == "data" else 0.0
    loader = DataLoader(Samples(args.steps * BATCH, data_delay), batch_size=BATCH)
    for step, (x, y) in enumerate(loader):
        if slow_here and step == die_at:
            os._exit(17)  # a rank dying mid-run, as an OOM kill or a segfault would
        with traceml.trace_step(model):
            opt.zero_grad(set_to_none=True)
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    # DDP's objects hold the process group in reference cycles: collected first, gloo's threads
    # are joined at destroy_process_group, not at the interpreter's exit, where one freeing a
    # finished collective can abort the rank (README, "Distributed runs").
    del model, opt
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

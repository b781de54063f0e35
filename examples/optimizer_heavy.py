"""A wide model trained on tiny batches with AdamW: the update costs more than the math.

Run: traceml run examples/optimizer_heavy.py  (expected diagnosis: OPTIMIZER_BOUND)
"""

from __future__ import annotations

import torch
from _common import parse_steps, train
from torch import nn


def main() -> None:
    steps = parse_steps(80)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 1536), nn.ReLU(), nn.Linear(1536, 1536), nn.Linear(1536, 1))
    batches = [(torch.randn(2, 64), torch.randn(2, 1)) for _ in range(8)]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    train(model, batches, opt, steps)


if __name__ == "__main__":
    main()

"""The cheapest possible training loop, for TraceML's resource bounds: N steps of one tiny op.

    python spin.py [N]

Prints `at <k>` every 10,000 steps and `steps <N>` at the end; keeps no state of its own, so
any growth of the process is TraceML's.
"""

from __future__ import annotations

import sys

import torch

import traceml


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    traceml.init()
    t = torch.zeros(4)
    for i in range(1, steps + 1):
        with traceml.trace_step(None):
            t.add_(1)
        if i % 10_000 == 0:
            print(f"at {i}", flush=True)
    print(f"steps {steps}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

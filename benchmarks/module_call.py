"""What the forward patch (`torch.nn.Module.__call__`, auto mode) adds to each module call.

    .venv/bin/python benchmarks/module_call.py [--rounds 9]

Interleaved rounds, in one process: bare, traced with the Python timer, traced with the C one
(the default when built), bare again (the two bare figures' difference is the noise). "root" is
one call of a leaf module inside a step (the timed path); "nested" is the per-module cost of a
101-module forward (the pass-through path every submodule takes). Prints the median and mean
over rounds, in ns per call. With torch 2.2 and later the patch is torch's own function running
TraceML's code (instrument/forward.py); `PYTHONPATH=<another checkout>` measures another tree's.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import deque
from collections.abc import Callable

import torch
from _common import c_step_timer

from traceml.instrument import forward
from traceml.instrument.timer import StepTimer, Timer, native

torch.set_num_threads(1)
LEAF = torch.nn.Identity()
DEEP = torch.nn.Sequential(*[torch.nn.Identity() for _ in range(100)])
X = torch.zeros(1)


def ns_per_call(module: torch.nn.Module, calls: int, per: int) -> float:
    t = time.perf_counter_ns()
    for _ in range(calls):
        module(X)
    return (time.perf_counter_ns() - t) / calls / per


def measure(root_calls: int = 20_000, deep_calls: int = 2_000) -> tuple[float, float]:
    return ns_per_call(LEAF, root_calls, 1), ns_per_call(DEEP, deep_calls, 101)


def traced(timer: Timer) -> tuple[float, float]:
    _, undo = forward.install(torch, timer, print)
    timer.enter()
    try:
        return measure()
    finally:
        timer.exit()
        undo()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    rounds = parser.parse_args().rounds
    py_timer: Timer = StepTimer(deque(maxlen=4))
    arms: dict[str, Callable[[], tuple[float, float]]] = {
        "bare": measure,
        "traced, Python": lambda: traced(py_timer),
    }
    c = native()
    if c is not None:  # the default: the C timer (root calls open and close in _native.Roots)
        c_timer: Timer = c_step_timer(c, deque(maxlen=4))
        arms["traced, C"] = lambda: traced(c_timer)
    arms["bare again"] = measure
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in arms}
    for _ in range(rounds):
        for name, arm in arms.items():
            got[name].append(arm())
    print(
        f"{'ns per module call':<20}{'root median':>12}{'root mean':>11}"
        f"{'nested median':>15}{'nested mean':>13}"
    )
    for name, rows in got.items():
        roots, nested = [r for r, _ in rows], [n for _, n in rows]
        print(
            f"{name:<20}{statistics.median(roots):>12.0f}{statistics.mean(roots):>11.0f}"
            f"{statistics.median(nested):>15.0f}{statistics.mean(nested):>13.0f}"
        )


if __name__ == "__main__":
    main()

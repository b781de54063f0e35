"""What the benchmarks share: the MLP training loop they time, a percentile, a standard error."""

from __future__ import annotations

import math
import os
import random
import statistics
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def c_step_timer(c: Any, out: Any, **kwargs: Any) -> Any:
    """The C module `c`'s StepTimer on `out`. A tree from before the C RawStep, put on
    PYTHONPATH to measure a change beside it, takes the RawStep tuple type second."""
    try:
        return c.StepTimer(out, **kwargs)
    except TypeError:
        from traceml.instrument.timer import RawStep

        return c.StepTimer(out, RawStep, **kwargs)


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of `values`, nearest rank below."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def stderr(diffs: list[float]) -> float:
    """The standard error of the mean of `diffs` (an arm's per-round differences from bare):
    their spread over the rounds, where one bare pair's difference is one draw of the noise.
    NaN for fewer than two."""
    if len(diffs) < 2:
        return math.nan
    return statistics.stdev(diffs) / math.sqrt(len(diffs))


TARGET_US = 10.0
"""Issue 12's target: at most this many µs added to the mean step, and of CPU a step."""


def verdict(added: float, se: float, target: float = TARGET_US, noise: float = math.nan) -> str:
    """Whether a figure (`added` µs, standard error `se` over the rounds) resolves `target`:
    "within" when added + 2 s <= target, "over" when added - 2 s > target, else "unresolved",
    where s is the larger of `se` and `noise`, the standard error of the same figure between two
    bare runs (bare A - bare B, or bare beside its twin). A run whose standard errors are a large
    part of the target cannot say which side of it an arm lies (one of 2026-12-07 read 16-21
    µs), and its table should say so rather than leave a mean of +17.7 or -3.0 to be read as a
    result. The noise counts because an arm's own spread over few rounds can come out small by
    chance: two rounds of DDP gave `trace_step` -342 ± 122 µs beside a bare pair's ± 1,120."""
    s = se if math.isnan(noise) else max(se, noise)
    if math.isnan(s):
        return "unresolved"
    if added + 2 * s <= target:
        return "within"
    if added - 2 * s > target:
        return "over"
    return "unresolved"


def round_order(arms: Sequence[T], r: int, seed: int = 0) -> list[T]:
    """The order the arms run in round `r`: a permutation drawn afresh each round (from `seed`
    and `r`, so a run can be repeated). With a fixed order reversed every other round, an arm's
    neighbours and place were the same in every other round, so whatever one arm leaves behind
    for the next (a hot cache, a process still exiting, the host's drift over a round) moved the
    same arms the same way round after round, and the standard error over the rounds, which
    takes them as independent draws, understated the spread."""
    return random.Random(seed * 100_003 + r).sample(list(arms), len(arms))


def round_differences(rounds: dict[str, list[float]]) -> dict[str, tuple[float, float]]:
    """From one figure of each arm round by round (its mean step, p99 or CPU slope; "bare A"
    and "bare B" among them): for every other arm, the mean and the standard error of its
    difference from its round's bare pair; for "bare A - bare B", those of their difference.
    One bare pair's difference is one draw of the noise; this is its spread over every round.
    Empty with fewer than two rounds; an arm with a round missing is left out."""
    bare_a, bare_b = rounds["bare A"], rounds["bare B"]
    if len(bare_a) < 2 or len(bare_a) != len(bare_b):
        return {}
    bare = [(x + y) / 2 for x, y in zip(bare_a, bare_b, strict=True)]
    diffs = {"bare A - bare B": [x - y for x, y in zip(bare_a, bare_b, strict=True)]}
    for name, values in rounds.items():
        if name not in ("bare A", "bare B") and len(values) == len(bare):
            diffs[name] = [v - b for v, b in zip(values, bare, strict=True)]
    return {name: (statistics.fmean(d), stderr(d)) for name, d in diffs.items()}


def round_stderrs(rounds: dict[str, list[float]]) -> dict[str, float]:
    """The standard errors of round_differences alone."""
    return {name: se for name, (_, se) in round_differences(rounds).items()}


class Loop:
    """A small MLP trained on in-memory batches through a DataLoader; `width` sets how long a
    step takes, `ddp` wraps the model in DistributedDataParallel (a process group must exist)."""

    def __init__(self, width: int, batch: int = 64, *, ddp: bool = False) -> None:
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        torch.manual_seed(0)
        self.torch: Any = torch
        self.width = width
        mlp = torch.nn.Sequential(
            torch.nn.Linear(64, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, 1),
        )
        self.model = torch.nn.parallel.DistributedDataParallel(mlp) if ddp else mlp
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        data = TensorDataset(torch.randn(batch * 32, 64), torch.randn(batch * 32, 1))
        self.loader = DataLoader(data, batch_size=batch)
        self.started = 0.0
        """perf_counter() at which the last block's first step began (its steps follow on)."""
        self.ring: deque[tuple[int, ...]] = deque(maxlen=4096)
        """Where floor_step keeps its timestamps."""

    def step(self, x: Any, y: Any) -> None:
        self.opt.zero_grad(set_to_none=True)
        self.torch.nn.functional.mse_loss(self.model(x), y).backward()
        self.opt.step()

    def floor_step(self, x: Any, y: Any, wait0: int, wait1: int) -> None:
        """`step` timed as cheaply as Python can, the floor under any tool that times its phases
        from Python: ten clock reads a step inline where TraceML's boundaries are (`wait0` and
        `wait1` were read around the batch's `next`), and one append of them to a bounded deque
        that nothing reads. The same torch calls as `step`, in the same order."""
        clock = time.perf_counter_ns
        s0 = clock()
        self.opt.zero_grad(set_to_none=True)
        f0 = clock()
        pred = self.model(x)
        f1 = clock()
        loss = self.torch.nn.functional.mse_loss(pred, y)
        b0 = clock()
        loss.backward()
        b1 = clock()
        o0 = clock()
        self.opt.step()
        o1 = clock()
        self.ring.append((wait0, wait1, s0, f0, f1, b0, b1, o0, o1, clock()))

    def block(self, steps: int, traced: bool = False, ctx: Any = None) -> list[float]:
        """Per-step wall times (µs), end of one step to end of the next, as TraceML cuts them.

        `traced`: each step in `traceml.trace_step(model)`; `ctx`: each step in this context
        manager instead (inloop.py's arms hold theirs)."""
        import traceml

        times: list[float] = []
        it = iter(self.loader)
        t_prev = self.started = time.perf_counter()
        while len(times) < steps:
            try:
                x, y = next(it)
            except StopIteration:
                it = iter(self.loader)
                continue
            if ctx is not None:
                with ctx:
                    self.step(x, y)
            elif traced:
                with traceml.trace_step(self.model):
                    self.step(x, y)
            else:
                self.step(x, y)
            now = time.perf_counter()
            times.append((now - t_prev) * 1e6)
            t_prev = now
        return times

    def floor_block(self, steps: int) -> list[float]:
        """`block` of floor_step's steps."""
        times: list[float] = []
        it = iter(self.loader)
        clock = time.perf_counter_ns
        t_prev = self.started = time.perf_counter()
        while len(times) < steps:
            wait0 = clock()
            try:
                x, y = next(it)
            except StopIteration:
                it = iter(self.loader)
                continue
            self.floor_step(x, y, wait0, clock())
            now = time.perf_counter()
            times.append((now - t_prev) * 1e6)
            t_prev = now
        return times


def byte_compile(tree: str | None = None) -> str:
    """Byte-compile TraceML's sources (this checkout's, or those of `tree`), as pip does when
    it installs a wheel.

    An editable install under PYTHONDONTWRITEBYTECODE (set in many containers) would otherwise
    compile every module from source at each start, tens of ms that no wheel user pays.
    """
    import compileall
    from pathlib import Path

    root = Path(tree) if tree is not None else Path(__file__).resolve().parent.parent
    ok = all(compileall.compile_dir(root / pkg, quiet=1) for pkg in ("traceml", "tui/traceml_tui"))
    return "byte-compiled (as a wheel install is)" if ok else "byte-compiling failed"


def quiet_shutdown() -> None:
    """End the session without its card on stderr (fd 2): it is not this benchmark's output."""
    import traceml

    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            traceml.shutdown()
        finally:
            os.dup2(saved, 2)
            os.close(saved)

"""DDP's gradient all-reduce, timed: how long a rank's backward sits waiting for the other ranks.

In DDP every rank's backward ends by waiting for the gradient all-reduce, so a fast rank waits
there for the slowest one. `traced_allreduce` is a DDP comm hook that performs exactly the
reduction DDP does when no hook is registered, and timestamps when each bucket became ready (its
gradients are computed) and when its all-reduce completed. It runs on autograd and communication
threads: it only appends integers to bounded lists and never raises anything of its own.

CPU (gloo) only. On CUDA the host times around async NCCL say nothing about the device, and a
host-clock number for device work would be a lie, so there the hook is not registered and the
comm wait stays None (not measured); timing it would need CUDA events recorded in the hook.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any

MAX_BUCKETS = 65536
"""Timestamps kept between two backward ends; a joined rank (DDP `join`) that shadows the
all-reduce of many steps without a backward of its own stops recording past this."""


class CommWait:
    """Bucket timestamps of the current backward, folded into one exposed wait per step.

    Exposed wait of one backward = (the last all-reduce completion, or the end of backward if
    earlier) - (the moment the last bucket became ready): after that moment backward has no
    gradient left to compute and only waits for communication. The step's value sums it over its
    backward calls and is clamped to the backward phase when the record is built.
    """

    __slots__ = ("clock", "done", "ready", "wait_ns")

    def __init__(self, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self.clock = clock
        self.ready: list[int] = []
        """When each bucket of the running backward became ready (the hook was called)."""
        self.done: list[int] = []
        """When each bucket's all-reduce future completed."""
        self.wait_ns = 0
        """Exposed wait of the current step so far."""

    def backward_done(self) -> None:
        """Training thread, after each backward: add its exposed wait to the step's."""
        ready = self.ready
        if not ready:
            return
        end = self.clock()
        done = self.done
        self.ready, self.done = [], []
        if done:
            end = min(end, max(done))
        self.wait_ns += max(0, end - max(ready))

    def take(self) -> int:
        """Step end: the step's exposed wait in ns (0 when nothing was all-reduced); resets."""
        wait, self.wait_ns = self.wait_ns, 0
        return wait


class CommLink:
    """The state DDP passes to the hook: the process group and where timestamps go.

    `comm` is None while TraceML is off (after shutdown): a comm hook cannot be unregistered, so
    the hook then only does DDP's all-reduce. Only DDP's C++ reducer holds it (see attach_ddp).
    """

    __slots__ = ("comm", "group", "scale", "size")

    def __init__(self, group: Any, comm: CommWait | None) -> None:
        self.group = group
        self.comm = comm
        self.size = group.size() if group is not None else 1
        self.scale = 1.0 / self.size

    def done(self, fut: Any) -> Any:
        """Communication thread: the all-reduce completed; its result is the bucket tensor."""
        comm = self.comm
        if comm is not None and len(comm.done) < MAX_BUCKETS:
            comm.done.append(comm.clock())
        return fut.value()[0]


def traced_allreduce(link: CommLink, bucket: Any) -> Any:
    """DDP's own gradient all-reduce, timestamped.

    Without a hook, DDP multiplies each dense gradient by 1 / world size while copying it into
    the bucket (a sparse one is divided by it), then sums the bucket over the process group. This
    does the same operations on the same bucket with the same group, so the gradients are bitwise
    the same.
    """
    comm = link.comm
    if comm is not None and len(comm.ready) < MAX_BUCKETS:
        comm.ready.append(comm.clock())
    tensor = bucket.buffer()
    if tensor.is_sparse:
        tensor.div_(link.size)
    else:
        tensor.mul_(link.scale)
    return link.group.allreduce([tensor]).get_future().then(link.done)


# DDP compares the hook's annotations with its own types, and ours are strings here.
traced_allreduce.__annotations__ = {}


_ATTACHED: weakref.WeakKeyDictionary[Any, CommLink] = weakref.WeakKeyDictionary()
"""DDP models our hook is registered on, weakly: a comm hook cannot be unregistered, so a second
install (init after shutdown) re-arms the link instead of registering again."""


def attach_ddp(model: Any, comm: CommWait) -> CommLink | None:
    """Register `traced_allreduce` on a CPU DDP model, or re-arm it if it is already there.

    Returns None (not measured) when the model is not DDP, has a comm hook of the user's, or is
    set up in a way the hook could not reproduce bit for bit. Raises whatever DDP raises on
    registration; the caller reports it once and goes on without.

    DDP also lists a registered hook in the model's `_comm_hooks`, which only its Python reducer
    (excluded by `_reproducible`) reads and which `torch.save` / `deepcopy` of the DDP model would
    carry along: our entry is taken out of that list, so the model holds nothing of TraceML's
    (the C++ reducer, never pickled, keeps the hook) and a copy of the model is never timed.
    """
    import torch

    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return None
    link = _ATTACHED.get(model)
    if link is not None:
        link.comm = comm
        return link
    hooks = getattr(model, "_comm_hooks", None)
    if not isinstance(hooks, list) or hooks or not _reproducible(model):
        return None
    link = CommLink(model.process_group, comm)
    try:
        model.register_comm_hook(link, traced_allreduce)
    finally:
        # DDP lists the hook before its reducer accepts (or refuses) it.
        if (traced_allreduce, link) in hooks:
            hooks.remove((traced_allreduce, link))
    _ATTACHED[model] = link
    return link


def _reproducible(model: Any) -> bool:
    """True for a plain CPU DDP whose built-in reduction the hook reproduces exactly."""
    if getattr(model, "mixed_precision", None) is not None:
        return False  # DDP registers its own upcasting hook
    if getattr(model, "_use_python_reducer", False) or getattr(
        model, "_delay_all_reduce_all_params", False
    ):
        return False
    if _builtin_hook(model):
        return False
    if any(p.device.type != "cpu" for p in model.parameters()):
        return False
    size = int(model.process_group.size())
    # With gradient_as_bucket_view DDP divides in place once grads alias the bucket: x / n and
    # x * (1 / n) agree bit for bit only when n is a power of two.
    return not model.gradient_as_bucket_view or size & (size - 1) == 0


def _builtin_hook(model: Any) -> bool:
    """A built-in C++ comm hook (`_register_builtin_comm_hook`) leaves no Python trace but this."""
    try:
        name = model._get_ddp_logging_data().get("comm_hook", "")
    except Exception:  # noqa: BLE001 - older or newer DDP: registration will tell
        return False
    return bool(name)

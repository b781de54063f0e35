"""test_comm's DDP check, in a process of its own: backward's wrapper ends the comm wait only
once a real (one-rank, gloo) DDP model is attached.

Run as `python -m tests.unit._ddp_backward {python|c} PG_FILE` from the repository's root;
prints "ok" when every check held (an AssertionError otherwise). A process of its own because
a gloo process group made and destroyed inside pytest's worker left its threads behind: one of
them aborted that worker minutes later, in another test ("Resource deadlock avoided").
"""

from __future__ import annotations

import sys
from collections import deque
from typing import Any

import torch
import torch.distributed as dist

from tests.unit._timers import make_c, make_python
from traceml.instrument.hooks import Hooks


def fail(error: BaseException) -> None:
    raise AssertionError(f"TraceML reported an error: {error!r}")


def after_of(wrapper: Any) -> Any:
    """A wrapper's `after`, read fresh each time (mypy would keep an assert's narrowing)."""
    return wrapper.after


def main(kind: str, pg_file: str) -> None:
    timer = (make_c if kind == "c" else make_python)(deque())
    hooks = Hooks(timer, on_error=fail)
    hooks.install_auto(torch, h2d=False)
    try:
        backward: Any = torch.autograd.backward
        assert getattr(backward, "__wrapped__", None) is not None, "the wrapper is in place"
        assert after_of(backward) is None
        hooks.watch_model(torch.nn.Linear(2, 1))
        assert after_of(backward) is None, "not DDP: still nothing after backward"
        dist.init_process_group("gloo", init_method=f"file://{pg_file}", rank=0, world_size=1)
        try:
            model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
            hooks.watch_model(model)
            assert after_of(backward) == hooks.comm.backward_done
            model(torch.ones(4, 2)).sum().backward()
            assert hooks.comm.ready == [], "backward's end took the bucket's ready stamp"
            assert hooks.comm.wait_ns > 0, "and added the wait up to the all-reduce's end"
        finally:
            dist.destroy_process_group()
    finally:
        hooks.remove()
    assert not hasattr(torch.autograd.backward, "after"), "the original is back"
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

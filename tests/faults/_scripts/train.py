"""A small CPU training loop for the fault tests; run by `traceml run` or directly (it inits).

    python train.py [--steps N] [--until FILE] [--sleep S] [--shutdown [--term-in-shutdown]]
                    [--term-in-import] [--term-holding-log-lock] [--device DEV]

Prints `started <pid>` once the first step is done, `progress <step> <epoch s>` about every
0.2 s, and `steps <N>` at the very end: the test compares N with the summary's step count.
With --until, it trains until FILE exists (at most --steps steps). With --shutdown it prints
`shutting down` and calls traceml.shutdown() itself before the last line; --term-in-shutdown
also sends itself SIGTERM twice from another thread the moment that shutdown has begun. With
--term-in-import, after its last line it gets SIGTERM while the main thread holds the import
lock (as when a TERM lands in one of torch's lazy imports at exit). With
--term-holding-log-lock, after its last line it gets SIGTERM while the main thread holds the root
logging handler's lock.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time

import torch

import traceml
from traceml.api import current_session


def term_when_closing() -> None:
    """SIGTERM this process twice, as a scheduler and a launcher would, once shutdown began."""
    session = current_session()
    if session is None:
        return

    def watch() -> None:
        while not session.closed:
            time.sleep(0.0005)
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True).start()


class TermDuringImport:
    """A meta path finder that signals this process from inside find_spec, where the import
    machinery holds its global lock; the Python handler runs right there."""

    def find_spec(self, name: str, path: object, target: object = None) -> None:
        if name == "traceml_fault_trigger":
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:  # the handler runs at one of these bytecodes
                pass


def term_during_import() -> None:
    sys.meta_path.insert(0, TermDuringImport())
    try:
        import traceml_fault_trigger  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        pass


def term_holding_log_lock() -> None:
    """SIGTERM this process while its main thread holds the root logging handler's lock, as a
    signal that lands in the middle of the script's own logging call does."""
    logging.basicConfig()
    logging.getLogger().handlers[0].acquire()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--until", default=None)
    p.add_argument("--sleep", type=float, default=0.005)
    p.add_argument("--shutdown", action="store_true")
    p.add_argument("--term-in-shutdown", action="store_true")
    p.add_argument("--term-in-import", action="store_true")
    p.add_argument("--term-holding-log-lock", action="store_true")
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    traceml.init()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    model = model.to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16, device=args.device), torch.randn(8, 1, device=args.device)
    done, next_report = 0, 0.0
    while done < args.steps:
        if args.until is not None and os.path.exists(args.until):
            break
        with traceml.trace_step(model):
            opt.zero_grad(set_to_none=True)
            (model(x) - y).pow(2).mean().backward()
            opt.step()
        done += 1
        now = time.time()
        if done == 1:
            print(f"started {os.getpid()}", flush=True)
        if now >= next_report:
            next_report = now + 0.2
            print(f"progress {done} {now:.3f}", flush=True)
        if args.sleep > 0:
            time.sleep(args.sleep)
    if args.term_holding_log_lock:
        print(f"steps {done}", flush=True)
        term_holding_log_lock()
    if args.shutdown:
        print("shutting down", flush=True)
        if args.term_in_shutdown:
            term_when_closing()
        traceml.shutdown()
    print(f"steps {done}", flush=True)
    if args.term_in_import:
        term_during_import()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The beats process (TRACEML_BEATS=process): a rank's tx worker, outside the training process.

Started by `ship.Ship` with a pipe on its stdin and the step ring's fd; never imports torch. It
reads HELLO, builds the same parts the tx thread is given (store, publisher, sampler of the
training process, summary) and runs a TxWorker on them, whose ticks first take the steps the
ring holds. The main thread waits on the pipe. On END it stops the worker as the training
process's shutdown would (final fold, summary, sinks closed) and answers the summary's path on
stdout; at the end of the pipe without END (the training process died: SIGKILL, the OOM killer)
it ends the rank as `killed`, from the steps in the ring, with its summary all the same.

Its stdout is the answer channel alone: anything else that prints goes to stderr. It ignores
SIGINT, SIGTERM and SIGHUP: those are for the training process, which then ends it by END; it
ends when that process is gone in any case.
"""

from __future__ import annotations

import mmap
import os
import signal
import sys
import time
from collections import deque
from typing import Any, BinaryIO

import msgpack

from traceml.instrument.resolve import host_records_for
from traceml.instrument.ship import END, HELLO, INFO, open_label, open_ring, read_frame
from traceml.instrument.timer import RawStep, native
from traceml.instrument.worker import TxWorker, WorkerParts
from traceml.records import PHASES, RankEnd, RankInfo

STOP_TIMEOUT_S = 10.0
"""The most the final fold and summary may take here. The training process waits its own
SHUTDOWN_TIMEOUT_S for the answer; a summary written after it gave up is still written."""


class RingReader:
    """Moves the ring's new steps into the worker's queue (its `pull`, on the worker's thread)."""

    def __init__(self, ring: mmap.mmap, raw: deque[RawStep]) -> None:
        c = native()
        if c is None:
            raise RuntimeError("the beats process needs TraceML's C parts")
        self._read, self._unpack = c.ring_read, c.raw_unpack
        self.ring = ring
        self.raw = raw
        self.next = 0

    def pull(self) -> None:
        data, self.next = self._read(self.ring, self.next)
        if data:
            self.raw.extend(self._unpack(data))


def parts(hello: dict[str, Any], optimizers: list[tuple[str, ...]]) -> WorkerParts:
    """The tx worker's parts for the rank HELLO names, as Session builds them in-process."""
    from traceml.config import settings_from_env
    from traceml.instrument.session import rank_parts
    from traceml.instrument.system import SystemSampler

    settings = settings_from_env(hello["mode"])
    info = RankInfo.from_wire(hello["info"])
    ring = open_ring(int(hello["ring_fd"]))
    raw: deque[RawStep] = deque(maxlen=settings.buffer_steps)
    return rank_parts(
        settings,
        info,
        raw=raw,
        page_mb=float(hello["page_mb"]),
        wall_offset_ns=int(hello["wall_offset_ns"]),
        sampler=SystemSampler(info.rank, None, pid=info.pid),
        phase=lambda: PHASES[open_label(ring)],
        optimizers=lambda: optimizers[0],
        host_records=host_records_for(native()),
        pull=RingReader(ring, raw).pull,
        own_gil=False,
    )


def serve(stream: BinaryIO, answer: int) -> int:
    """Read the training process's frames until END or the pipe's end; 0 when it ended well."""
    first = read_frame(stream)
    if first is None or first[0] != HELLO:
        return 2
    optimizers: list[tuple[str, ...]] = [()]
    p = parts(msgpack.unpackb(first[1]), optimizers)
    worker = TxWorker(p)
    worker.start()
    os.write(answer, b"ready\n")
    end: RankEnd | None = None
    while end is None:
        got = read_frame(stream)
        if got is None:
            end = RankEnd(p.info.rank, "killed", 0, time.time())
        elif got[0] == INFO:
            optimizers[0] = tuple(msgpack.unpackb(got[1]))
        elif got[0] == END:
            last = msgpack.unpackb(got[1])
            optimizers[0] = tuple(last["optimizers"])
            end = RankEnd.from_wire(last["end"])
    worker.stop(end, STOP_TIMEOUT_S)
    os.write(answer, f"{worker.summary_path or ''}\n".encode())
    return 0


def main() -> int:
    # Ctrl-C, a hang-up or a TERM sent to the whole process group reaches this process too: the
    # training process handles them and sends END, which must find this one alive to answer.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    answer = os.dup(1)
    os.dup2(2, 1)  # prints go to stderr; fd `answer` carries the answers alone
    return serve(sys.stdin.buffer, answer)


if __name__ == "__main__":
    sys.exit(main())

"""Beats in another process: the training process writes its steps to a ring, and runs no thread.

With TRACEML_BEATS=process, `init` starts a beats process (`beats_main.py`) and hands it what
the tx thread would have done: folding, publishing, heartbeats, run files, history for attach,
system samples and the summary. The training process keeps the step timer and its wrappers, and
the C timer writes each step's numbers (13 int64s) into a ring in shared memory, where it would
have queued a RawStep for the tx thread; the open phase goes into the ring's header at each
boundary, for the heartbeats of a stalled rank. So the training process has no thread and no
socket of TraceML's: glibc's malloc keeps its single-threaded paths, and nothing takes the GIL
from the loop (docs/performance.md, "What remains", items 0 and 1). The beats process reads the
ring at its ticks; a full ring overwrites its oldest steps, which that process counts dropped.

A pipe to the beats process's stdin carries the rest, as frames (a kind byte, a 4-byte length,
a payload): HELLO (the rank's info, its clocks, the ring's fd), INFO (the optimizers stepped so
far, when that grows: looked at once a second, at a step's end) and END (how the script ended).
After END the beats process answers one line on its stdout, the summary's path (empty when it
wrote none), and exits. A training process that dies without END closes the pipe; the beats
process then ends the rank as `killed` and still writes its summary, which a thread inside the
process cannot do.

What this mode does not do yet (the tx thread does; `init` falls back to it): CUDA steps (their
events can only be queried in the process that recorded them), more than one rank (the job
collector's link), `traceml.summary()` and the in-process trackers (they read the rank's store,
which lives in the beats process), the pure-Python timer (TRACEML_C_TIMER=0), and systems
without memfd (Linux only).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import selectors
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import msgpack

from traceml.instrument.timer import N_PHASES, RawStep
from traceml.probe import warn_once
from traceml.records import RankEnd, RankInfo

HELLO, INFO, END = b"H", b"I", b"E"
HEADER = struct.Struct(">cI")
RING_HEADER = 8
"""int64 words before the ring's slots: steps written, slots, open phase, spare (_native.c)."""
RING_WRITTEN, RING_SLOTS, RING_LABEL = 0, 1, 2
STEP_WORDS = 3 + N_PHASES + 3
"""int64s a step: step, start_ns, end_ns, the phases' ns, seen, rss_pages, comm_ns."""
_STEP = struct.Struct(f"<{STEP_WORDS}q")
_WORD = struct.Struct("<q")
INFO_EVERY_NS = 1_000_000_000
"""How often a step's end looks whether a new optimizer class was stepped (findings name it)."""
START_TIMEOUT_S = 10.0
"""How long `init` waits for the beats process to say it is ready."""


def frame(kind: bytes, payload: bytes) -> bytes:
    return HEADER.pack(kind, len(payload)) + payload


def read_frame(stream: BinaryIO) -> tuple[bytes, bytes] | None:
    """The next (kind, payload), or None at the end of the stream (or a cut frame)."""
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    kind, size = HEADER.unpack(head)
    payload = stream.read(size)
    return (kind, payload) if len(payload) == size else None


def ring_bytes(slots: int) -> int:
    return (RING_HEADER + slots * STEP_WORDS) * _WORD.size


def new_ring(slots: int) -> tuple[int, mmap.mmap]:
    """A ring of `slots` steps in shared memory: its fd (to pass on) and its mapping here."""
    fd = os.memfd_create("traceml-steps", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, ring_bytes(slots))
        ring = mmap.mmap(fd, ring_bytes(slots))
    except BaseException:
        os.close(fd)
        raise
    _WORD.pack_into(ring, RING_SLOTS * _WORD.size, slots)
    return fd, ring


def open_ring(fd: int) -> mmap.mmap:
    """The ring another process made, from its fd (the beats process's end)."""
    size = os.fstat(fd).st_size
    return mmap.mmap(fd, size)


def open_label(ring: mmap.mmap) -> int:
    """The phase the training thread is in now, as the C timer last wrote it."""
    value: int = _WORD.unpack_from(ring, RING_LABEL * _WORD.size)[0]
    return value


def unpack(data: bytes) -> list[RawStep]:
    """The reference of `_native.raw_unpack`: ring_read's bytes as RawSteps."""
    out = []
    for w in _STEP.iter_unpack(data):
        phases = tuple(w[3 : 3 + N_PHASES])
        out.append(RawStep(w[0], w[1], w[2], phases, w[-3], w[-2], None, None, w[-1]))
    return out


class Ship:
    """The training process's end of the beats process: starts it, tells it what changes,
    ends it. The steps go by the ring, written by the C timer itself."""

    def __init__(self, timer: Any, optimizers: Callable[[], tuple[str, ...]]) -> None:
        self.timer = timer
        self._optimizers = optimizers
        self.optimizers: tuple[str, ...] = ()
        self.proc: subprocess.Popen[bytes] | None = None
        self.ring: mmap.mmap | None = None
        self._fd = -1
        self.summary_path: Path | None = None

    def start(self, info: RankInfo, mode: str, slots: int, page_mb: float) -> bool:
        """Start the beats process, send it HELLO and turn the timer to the ring; False (with
        a warning) when any of it fails, the timer then still queueing for the tx thread."""
        ring_fd = -1
        try:
            ring_fd, self.ring = new_ring(slots)
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "traceml.instrument.beats_main"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                pass_fds=(ring_fd,),
            )
            assert self.proc.stdin is not None
            self._fd = self.proc.stdin.fileno()
            hello = {
                "mode": mode,
                "info": info.to_wire(),
                "page_mb": page_mb,
                "wall_offset_ns": time.time_ns() - time.perf_counter_ns(),
                "ring_fd": ring_fd,
            }
            self._send(HELLO, msgpack.packb(hello))
            if self._read_line(START_TIMEOUT_S) != "ready":
                raise OSError("the beats process did not start")
            self.timer.use_ring(self.ring)
            return True
        except Exception as e:  # noqa: BLE001 - the tx thread takes over
            warn_once("beats process", f"beats process not started, using a thread ({e})")
            self._kill()
            return False
        finally:
            if ring_fd >= 0:
                os.close(ring_fd)  # the beats process has its own; the mapping stays

    def beat(self, t_ns: int) -> int:
        """At a step's end once a second: tell the beats process of a new optimizer class, and
        warn once if it has ended (nothing is then folded, published or summarised: the loop
        goes on untouched). Never raises (a write the pipe cannot take now is left for END,
        which has them all)."""
        if self.proc is not None and self.proc.poll() is not None:
            warn_once("beats process", "beats process ended: no live view or summary for this run")
            return t_ns + (1 << 62)
        names = self._optimizers()
        if names != self.optimizers:
            self.optimizers = names
            with contextlib.suppress(Exception):
                os.set_blocking(self._fd, False)
                self._send(INFO, msgpack.packb(list(names)))
        return t_ns + INFO_EVERY_NS

    def stop(self, end: RankEnd, timeout: float) -> bool:
        """END, then wait up to `timeout` for the summary's path; the steps are in the ring.
        False when no answer came in time: the beats process is left to finish the summary on
        its own (it outlives this process), where a thread would have died with it."""
        if self.proc is None:
            return False
        try:
            os.set_blocking(self._fd, True)
            payload = msgpack.packb({"end": end.to_wire(), "optimizers": list(self._optimizers())})
            self._send(END, payload)
            line = self._read_line(timeout)
        except OSError:
            line = None
        if line is None:
            return False
        self.summary_path = Path(line) if line else None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(1.0)
        return True

    def close_in_child(self) -> None:
        """In a forked child (a DataLoader worker): stop writing to the parent's ring, and let go
        of the pipe without touching it, so the beats process sees its end when the training
        process goes."""
        with contextlib.suppress(Exception):
            self.timer.use_ring(None)
        if self.proc is not None:
            # Through the file objects, so that they know: one left thinking its fd open would
            # close that number again when collected, by then perhaps another file of the child.
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    with contextlib.suppress(Exception):
                        stream.close()
        self._fd = -1
        self.proc = None

    def _send(self, kind: bytes, payload: bytes) -> None:
        data = frame(kind, payload)
        while data:
            data = data[os.write(self._fd, data) :]

    def _read_line(self, timeout: float) -> str | None:
        """One line of the beats process's stdout within `timeout`, without its newline."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        got = b""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while not got.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    return None
                chunk = os.read(fd, 4096)
                if not chunk:
                    return None
                got += chunk
        return got[:-1].decode("utf-8", "replace")

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.kill()

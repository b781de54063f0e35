"""A forked child (a DataLoader worker) inherits the publisher but must never touch its sockets
or files: every entry point is a no-op there, and the parent's stream goes on intact."""

from __future__ import annotations

import gc
import multiprocessing
import os
import time
from pathlib import Path

from tests.integration._publisher_proc import TxLoop, make_info, make_step
from tests.integration._transport_helpers import Seen, attach, poll_until, wait_for
from traceml.config import Settings
from traceml.errors import TransportError
from traceml.records import RankEnd, SystemSample
from traceml.transport.publish.publisher import Publisher
from traceml.transport.runfiles.runfile import read_rank_file


def _use_in_child(pub: Publisher) -> int:
    """Every entry point, as a confused child would call them; 0 if all were harmless."""
    before = pub.stats_dict()
    pub.send_steps([make_step(99_999)])
    pub.send_system(SystemSample(rank=0, t=time.time()))
    pub.send_event("finding", {"kind": "X"})
    pub.service(time.monotonic(), last_step=99_999, dropped=0, primary=None)
    pub.close(RankEnd(0, "error", 0, time.time()), None)
    try:
        pub.open()
    except TransportError:
        pass
    else:
        return 3
    if pub.stats_dict() != before:
        return 4
    del pub
    gc.collect()
    return 0


def _raw_fork_child(pub: Publisher) -> None:
    code = 2
    try:
        code = _use_in_child(pub)
    finally:
        os._exit(code)


def _mp_child(pub: Publisher) -> None:
    raise SystemExit(_use_in_child(pub))


def test_forked_children_leave_the_parents_stream_intact(tmp_path: Path) -> None:
    with TxLoop(Publisher(make_info("fork-1"), Settings(), tmp_path)) as loop:
        loop.steps(100)
        loop.wait_published(100)
        seen = Seen()
        with attach(tmp_path, "fork-1") as sub:
            poll_until(sub, seen, lambda: seen.count() >= 100)
            published = loop.publisher.stats.records
            pid = os.fork()
            if pid == 0:
                _raw_fork_child(loop.publisher)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0
            worker = multiprocessing.get_context("fork").Process(
                target=_mp_child, args=(loop.publisher,)
            )
            worker.start()
            worker.join(10)
            assert worker.exitcode == 0
            run_dir = loop.publisher.run_dir
            assert run_dir is not None
            assert run_dir.socket_path(0, "pub").exists()
            assert read_rank_file(run_dir.rank_json(0)).end is None
            loop.steps(100)
            poll_until(sub, seen, lambda: seen.count() >= 200)
            # The tx thread counts a frame after sending it: the viewer may see it first.
            wait_for(lambda: loop.publisher.stats.records == published + 100, what="the count")
            assert loop.publisher.stats.errors == 0
    assert seen.steps[0] == list(range(200))

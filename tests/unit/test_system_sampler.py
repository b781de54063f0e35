"""TraceML's own CPU: the sampling thread's CPU time over wall time between two samples."""

from __future__ import annotations

import threading
import time

from traceml.instrument.system import SystemSampler


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_own_cpu_is_the_sampling_threads_busy_share() -> None:
    sampler = SystemSampler(0, None)
    assert sampler.sample().traceml_cpu_pct is None  # nothing to compare with yet
    time.sleep(0.3)
    idle = sampler.sample().traceml_cpu_pct
    _spin(0.3)
    busy = sampler.sample().traceml_cpu_pct
    assert idle is not None and busy is not None
    assert idle < 5.0 < busy <= 100.0 + 1.0  # sleeping costs nothing; spinning fills a core


def test_own_cpu_leaves_out_other_threads() -> None:
    """The training thread's work is not TraceML's: only the calling thread counts."""
    sampler = SystemSampler(0, None)
    sampler.own_cpu_pct()
    worker = threading.Thread(target=_spin, args=(0.3,))
    worker.start()
    worker.join()
    own = sampler.own_cpu_pct()
    assert own is not None and own < 5.0

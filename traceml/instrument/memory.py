"""Memory of this process: host RSS from a kept /proc/self/statm handle, CUDA allocator numbers.

`HostRss.pages()` runs on the training thread (one pread, ~2 µs); CUDA numbers are read on the
training thread at a step's end only when CUDA is already initialised. Neither synchronises.
"""

from __future__ import annotations

import os
from typing import Any

from traceml.probe import probe

MB = 1024.0 * 1024.0
DeviceMem = tuple[float | None, float | None, float | None]
NO_DEVICE_MEM: DeviceMem = (None, None, None)


class HostRss:
    """Resident set size of this process, read without allocating a file object each time."""

    def __init__(self) -> None:
        self._fd = -1
        try:
            self._fd = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self._fd = -1
        self.page_mb = os.sysconf("SC_PAGE_SIZE") / MB if hasattr(os, "sysconf") else 4096 / MB

    def pages(self) -> int:
        """Resident pages, or -1 when unreadable."""
        if self._fd < 0:
            return self._psutil_pages()
        try:
            return int(os.pread(self._fd, 96, 0).split()[1])
        except (OSError, ValueError, IndexError):
            return -1

    def _psutil_pages(self) -> int:
        import psutil

        rss = probe("psutil memory_info", lambda: int(psutil.Process().memory_info().rss), -1)
        return -1 if rss < 0 else int(rss / (self.page_mb * MB))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class CudaMemory:
    """Allocated, reserved and per-step peak CUDA memory of the current device, in MB."""

    def __init__(self, torch_mod: Any) -> None:
        self._cuda = torch_mod.cuda

    def read(self) -> DeviceMem:
        cuda = self._cuda
        if not cuda.is_initialized():
            return NO_DEVICE_MEM

        def read_all() -> DeviceMem:
            peak = cuda.max_memory_allocated() / MB
            cuda.reset_peak_memory_stats()
            return (cuda.memory_allocated() / MB, cuda.memory_reserved() / MB, peak)

        return probe("torch.cuda memory stats", read_all, NO_DEVICE_MEM)

    def capacity_mb(self) -> float | None:
        if not self._cuda.is_available():
            return None

        def total() -> float | None:
            props = self._cuda.get_device_properties(self._cuda.current_device())
            return float(props.total_memory) / MB

        return probe("torch.cuda device properties", total, None)

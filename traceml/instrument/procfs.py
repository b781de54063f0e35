"""Host CPU and host memory read straight from Linux's /proc, for the once-a-second sample.

psutil's `cpu_percent` and `virtual_memory` read the same two files and report the same numbers,
but parse every line of them in Python: with its process CPU, about 130 µs a sample warm and
0.42-0.50 ms inside a training loop, where the tx thread finds that code cold each second and
training waits for it on the GIL (27 µs and 0.13-0.15 ms this way). Here each read is one
`pread` on a file kept open and a split of the lines needed. Where /proc is not there (macOS,
Windows) or does not parse, `ProcFs.open()` says None and the sampler keeps psutil.
"""

from __future__ import annotations

import os

MB = 1024.0 * 1024.0
STAT_BYTES = 512
"""/proc/stat's first line ("cpu" and up to ten counters) fits in far less."""
MEMINFO_BYTES = 1024
"""MemTotal and MemAvailable are the first and third lines of /proc/meminfo."""


def busy_and_total(cpu_line: bytes) -> tuple[int, int]:
    """(busy, total) clock ticks of /proc/stat's aggregate "cpu" line, counted as psutil counts
    them: total leaves out guest and guest_nice (already inside user and nice), busy is total
    less idle and iowait."""
    fields = cpu_line.split()
    if not fields or fields[0] != b"cpu" or len(fields) < 5:
        raise ValueError("no aggregate cpu line")
    ticks = [int(f) for f in fields[1:]]
    total = sum(ticks[:8])  # user nice system idle iowait irq softirq steal
    idle = ticks[3] + ticks[4]
    return total - idle, total


def used_and_total_mb(meminfo: bytes) -> tuple[float, float]:
    """(total - available, total) in MB from /proc/meminfo (kB values), as psutil's
    virtual_memory gives them where the kernel reports MemAvailable (Linux 3.14 and later)."""
    values: dict[bytes, int] = {}
    for line in meminfo.split(b"\n"):
        key, _, rest = line.partition(b":")
        if key in (b"MemTotal", b"MemAvailable"):
            values[key] = int(rest.split()[0])
            if len(values) == 2:
                total, available = values[b"MemTotal"], values[b"MemAvailable"]
                return (total - available) * 1024 / MB, total * 1024 / MB
    raise ValueError("MemTotal or MemAvailable missing")


class ProcFs:
    """/proc/stat and /proc/meminfo held open; one thread at a time (the tx thread)."""

    def __init__(self, stat_fd: int, meminfo_fd: int) -> None:
        self._stat = stat_fd
        self._meminfo = meminfo_fd
        self._last: tuple[int, int] | None = None

    @classmethod
    def open(cls) -> ProcFs | None:
        """Both files open and readable as expected, else None (and nothing left open)."""
        fds: list[int] = []
        try:
            for path in ("/proc/stat", "/proc/meminfo"):
                fds.append(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
            fs = cls(*fds)
            fs.host_cpu_pct()  # the first call also checks both parse
            fs.memory_mb()
            return fs
        except (OSError, ValueError, IndexError):
            for fd in fds:
                os.close(fd)
            return None

    def host_cpu_pct(self) -> float | None:
        """Busy share of all CPUs since the previous call, 0-100 (psutil.cpu_percent(None)'s
        figure); None on the first call or when no tick has passed."""
        line = os.pread(self._stat, STAT_BYTES, 0).split(b"\n", 1)[0]
        now, last = busy_and_total(line), self._last
        self._last = now
        if last is None or now[1] <= last[1]:
            return None
        share = 100.0 * (now[0] - last[0]) / (now[1] - last[1])
        return min(100.0, max(0.0, share))

    def memory_mb(self) -> tuple[float, float]:
        """(used, total) host memory in MB, used being total less available."""
        return used_and_total_mb(os.pread(self._meminfo, MEMINFO_BYTES, 0))

    def close(self) -> None:
        for fd in (self._stat, self._meminfo):
            try:
                os.close(fd)
            except OSError:
                pass
        self._stat = self._meminfo = -1

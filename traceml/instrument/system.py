"""System signals at about 1 Hz, sampled in the tx worker's beats: process and host CPU, host
memory, GPU, and the CPU of those beats themselves (TraceML's own cost, measured on every run).

Every probe fails soft (probe.py): a missing or raising psutil or NVML leaves fields None. On
Linux the host's CPU and memory come from /proc directly (procfs.py, the same numbers as psutil's
at a fifth of the cost) and the process's CPU from os.times(); psutil serves the other systems.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from traceml.instrument.nvml import Nvml
from traceml.instrument.procfs import MB, ProcFs
from traceml.probe import probe
from traceml.records import SystemSample


def cpu_pct_since(last: tuple[float, float] | None, now: tuple[float, float]) -> float | None:
    """CPU over wall time between two (CPU seconds, monotonic seconds) readings, 100 = one
    core; None without an earlier reading or when no time passed."""
    if last is None or now[1] <= last[1]:
        return None
    return 100.0 * (now[0] - last[0]) / (now[1] - last[1])


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_s(stat_path: str) -> float:
    """User plus system CPU seconds of a process, from its /proc/<pid>/stat."""
    with open(stat_path, "rb") as f:
        text = f.read()
    # The command name may hold spaces and parentheses: the fields start after its last ")".
    fields = text[text.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


class SystemSampler:
    """Takes one SystemSample per call; CPU percentages are since the previous call."""

    def __init__(self, rank: int, gpu_index: int | None, pid: int | None = None) -> None:
        self._rank = rank
        self._stat_path = f"/proc/{pid}/stat" if pid is not None else None
        """Another process's CPU is sampled (the beats process samples the training one's)."""
        self._psutil: Any = None
        self._procfs = ProcFs.open()
        if self._procfs is None:
            try:
                import psutil

                self._psutil = psutil
                psutil.cpu_percent(None)
            except Exception:  # noqa: BLE001 - sampling is optional
                self._psutil = None
        self._nvml = Nvml.open(gpu_index, expect_gpu=True) if gpu_index is not None else None
        self.own_cpu: Callable[[], float] = time.thread_time
        """TraceML's own CPU seconds so far: the tx worker's beats, on whichever thread ran them
        (TxWorker.cpu_so_far); the sampling thread's CPU until a worker sets it."""
        self._own: tuple[float, float] | None = None
        """(own CPU, monotonic) seconds at the previous sample."""
        self._process: tuple[float, float] | None = None
        probe("process cpu", self.process_cpu_pct, None)

    def own_cpu_pct(self) -> float | None:
        """TraceML's own CPU (own_cpu) since the previous call, 100 = one core; None on the
        first call."""
        last, self._own = self._own, (self.own_cpu(), time.monotonic())
        return cpu_pct_since(last, self._own)

    def process_cpu_pct(self) -> float | None:
        """CPU of the whole process (every thread) since the previous call, 100 = one core, as
        psutil's Process.cpu_percent gives it; None on the first call."""
        if self._stat_path is not None:
            cpu = process_cpu_s(self._stat_path)
        else:
            times = os.times()
            cpu = times.user + times.system
        last, self._process = self._process, (cpu, time.monotonic())
        return cpu_pct_since(last, self._process)

    def sample(self) -> SystemSample:
        host_cpu = used = total = None
        if self._procfs is not None:
            fs = self._procfs
            host_cpu = probe("/proc/stat cpu", fs.host_cpu_pct, None)
            memory = probe("/proc/meminfo", fs.memory_mb, None)
            if memory is not None:
                used, total = memory
        elif self._psutil is not None:
            ps = self._psutil
            host_cpu = probe("psutil host cpu", lambda: float(ps.cpu_percent(None)), None)
            vm = probe("psutil virtual_memory", ps.virtual_memory, None)
            if vm is not None:
                used, total = (vm.total - vm.available) / MB, vm.total / MB
        gpu = self._nvml.read() if self._nvml is not None else None
        return SystemSample(
            rank=self._rank,
            t=time.time(),
            process_cpu_pct=probe("process cpu", self.process_cpu_pct, None),
            host_cpu_pct=host_cpu,
            host_mem_used_mb=used,
            host_mem_total_mb=total,
            gpu_util_pct=gpu.util_pct if gpu else None,
            gpu_mem_used_mb=gpu.mem_used_mb if gpu else None,
            gpu_mem_total_mb=gpu.mem_total_mb if gpu else None,
            gpu_power_w=gpu.power_w if gpu else None,
            gpu_temp_c=gpu.temp_c if gpu else None,
            traceml_cpu_pct=probe("thread cpu", self.own_cpu_pct, None),
        )

    def close(self) -> None:
        if self._procfs is not None:
            self._procfs.close()
        if self._nvml is not None:
            self._nvml.close()

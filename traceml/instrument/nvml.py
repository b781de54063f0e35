"""NVML access through nvidia-ml-py: every query answers None on failure and warns once.

Runs on the tx thread only. Without NVML (no driver, no GPU, CPU run) `Nvml.open()` returns None
after one warning if a GPU was expected, silently otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from traceml.probe import probe, warn_once

MB = 1024.0 * 1024.0


@dataclass(frozen=True, slots=True)
class GpuReading:
    util_pct: float | None
    mem_used_mb: float | None
    mem_total_mb: float | None
    power_w: float | None
    temp_c: float | None


class Nvml:
    """One GPU's NVML handle."""

    def __init__(self, lib: Any, handle: Any) -> None:
        self._lib = lib
        self._handle = handle

    @classmethod
    def open(cls, index: int, expect_gpu: bool) -> Nvml | None:
        try:
            import pynvml

            pynvml.nvmlInit()
            return cls(pynvml, pynvml.nvmlDeviceGetHandleByIndex(index))
        except Exception as e:  # noqa: BLE001 - NVML absence is normal on CPU hosts
            if expect_gpu:
                warn_once(
                    "nvml",
                    f"NVML unavailable ({e}); GPU utilisation, power and "
                    "temperature will be absent",
                )
            return None

    def read(self) -> GpuReading:
        lib, h = self._lib, self._handle
        util = probe(
            "nvml utilization", lambda: float(lib.nvmlDeviceGetUtilizationRates(h).gpu), None
        )
        mem = probe("nvml memory", lambda: lib.nvmlDeviceGetMemoryInfo(h), None)
        power = probe("nvml power", lambda: lib.nvmlDeviceGetPowerUsage(h) / 1000.0, None)
        temp = probe("nvml temperature", lambda: float(lib.nvmlDeviceGetTemperature(h, 0)), None)
        used = float(mem.used) / MB if mem is not None else None
        total = float(mem.total) / MB if mem is not None else None
        return GpuReading(util, used, total, power, temp)

    def close(self) -> None:
        probe("nvml shutdown", self._lib.nvmlShutdown, None)

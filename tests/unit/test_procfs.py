"""The once-a-second sample's host CPU and memory, read from /proc: psutil's figures, cheaper."""

from __future__ import annotations

import time

import psutil
import pytest

from traceml.instrument import procfs
from traceml.instrument.procfs import MB, ProcFs, busy_and_total, used_and_total_mb
from traceml.instrument.system import SystemSampler

STAT = b"cpu  100 5 50 1000 20 3 7 2 40 1\ncpu0 50 2 25 500 10 1 3 1 20 0\n"
MEMINFO = b"MemTotal:  2048000 kB\nMemFree:  100 kB\nMemAvailable:  1024000 kB\nBuffers: 1 kB\n"


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_the_cpu_line_is_counted_as_psutil_counts_it() -> None:
    """Guest time is already inside user and nice; idle and iowait are not busy."""
    busy, total = busy_and_total(STAT.split(b"\n")[0])
    assert total == 100 + 5 + 50 + 1000 + 20 + 3 + 7 + 2
    assert busy == total - 1000 - 20


def test_memory_is_total_less_available() -> None:
    used, total = used_and_total_mb(MEMINFO)
    assert total == pytest.approx(2048000 * 1024 / MB)
    assert used == pytest.approx((2048000 - 1024000) * 1024 / MB)


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (busy_and_total, b"cpu0 1 2 3 4 5"),  # a core's line, not the aggregate
        (busy_and_total, b"intr 1 2 3"),
        (used_and_total_mb, b"MemTotal: 10 kB\nMemFree: 5 kB\n"),  # a kernel before 3.14
    ],
)
def test_what_does_not_parse_is_refused(parse: object, text: bytes) -> None:
    with pytest.raises((ValueError, IndexError)):
        parse(text)  # type: ignore[operator]


def test_the_real_files_give_psutils_numbers() -> None:
    fs = ProcFs.open()
    assert fs is not None  # Linux: the test host has /proc
    try:
        psutil.cpu_percent(None)
        fs.host_cpu_pct()
        _spin(0.3)
        ours, theirs = fs.host_cpu_pct(), psutil.cpu_percent(None)
        assert ours is not None and abs(ours - theirs) <= 5.0
        used, total = fs.memory_mb()
        vm = psutil.virtual_memory()
        assert total == pytest.approx(vm.total / MB)
        assert abs(used - (vm.total - vm.available) / MB) < 256
    finally:
        fs.close()


def test_process_cpu_is_psutils_figure() -> None:
    sampler = SystemSampler(0, None)
    proc = psutil.Process()
    proc.cpu_percent(None)
    sampler.process_cpu_pct()
    _spin(0.3)
    ours, theirs = sampler.process_cpu_pct(), proc.cpu_percent(None)
    assert ours is not None and ours > 0.0  # this thread spun (what share: the host's load)
    assert abs(ours - theirs) <= 10.0
    sampler.close()


def test_without_proc_the_sampler_asks_psutil(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where /proc is not there (macOS, Windows) every field still comes, through psutil."""
    monkeypatch.setattr(procfs.ProcFs, "open", classmethod(lambda cls: None))
    sampler = SystemSampler(0, None)
    time.sleep(0.05)
    sample = sampler.sample()
    assert sample.host_cpu_pct is not None and sample.process_cpu_pct is not None
    assert sample.host_mem_total_mb == pytest.approx(psutil.virtual_memory().total / MB)
    sampler.close()

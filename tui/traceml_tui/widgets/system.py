"""System signals of the focused rank: process and host CPU, host memory, GPU util, power, temp.

Fed by `show(snapshot, rank)` from the screen with the rank's latest SystemSample from the
snapshot. A missing GPU, a missing sample and an old sample are said in words (-waiting, -stale).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from textual.content import Content
from textual.widget import Widget

from traceml.analysis.render import held_note, own_cpu_note
from traceml.records import SystemSample
from traceml_tui.format import mb, value
from traceml_tui.snapshot import Snapshot, is_over
from traceml_tui.widgets.redraw import Redraw

STALE_SAMPLE_S = 5.0
"""A sample older than this (the sampler runs at 1 Hz) is marked stale."""


def _used(used: float | None, total: float | None) -> str:
    if used is None:
        return "n/a"
    return mb(used) if total is None else f"{mb(used)} / {mb(total)}"


def sample_lines(sample: SystemSample) -> list[str]:
    """The sample as aligned lines; a GPU that is not there is said once."""
    cpu, host = value(sample.process_cpu_pct, "%"), value(sample.host_cpu_pct, "%")
    lines = [
        f"CPU  process {cpu}{own_cpu_note(sample.traceml_cpu_pct)} · host {host}",
        f"RAM  host {_used(sample.host_mem_used_mb, sample.host_mem_total_mb)}",
    ]
    if sample.gpu_util_pct is None and sample.gpu_mem_used_mb is None:
        lines.append("GPU  none seen (no GPU or no NVML)")
        return lines
    lines.append(
        f"GPU  util {value(sample.gpu_util_pct, '%')} · mem"
        f" {_used(sample.gpu_mem_used_mb, sample.gpu_mem_total_mb)}"
    )
    power, temp = value(sample.gpu_power_w, "W"), value(sample.gpu_temp_c, "°C")
    lines.append(f"GPU  power {power} · temp {temp}")
    return lines


def summary_lines(system: Mapping[str, Any]) -> list[str]:
    """Run averages from a summary's `system` section."""
    gpu = system.get("gpu_util_pct_avg")
    lines = [
        f"CPU  process {value(system.get('cpu_pct_avg'), '%')} avg"
        f"{own_cpu_note(system.get('traceml_cpu_pct_avg'))}"
        f" · host {value(system.get('host_cpu_pct_avg'), '%')} avg"
    ]
    if gpu is None:
        lines.append("GPU  none seen (no GPU or no NVML)")
    else:
        lines.append(
            f"GPU  util {value(gpu, '%')} avg · power {value(system.get('gpu_power_w_avg'), 'W')}"
            f" avg · temp max {value(system.get('gpu_temp_c_max'), '°C')}"
        )
    held = held_note(system)
    return [*lines, held] if held else lines


class SystemPanel(Widget, can_focus=True):
    """CPU, memory and GPU of the focused rank's process and host."""

    BORDER_TITLE = "System"

    def __init__(self) -> None:
        super().__init__()
        self._lines: list[str] = ["Waiting for the run…"]
        self._redraw = Redraw(self)

    def show(self, snap: Snapshot, rank: int | None) -> None:
        """Draw `rank`'s latest sample from `snap` (rank None: the run has no ranks yet)."""
        self.border_title = "System" if rank is None else f"System · rank {rank}"
        sample = snap.system.get(rank) if rank is not None else None
        age = snap.taken_at - sample.t if sample is not None else None
        # After the run is over, an old sample is expected: it is the last one, not a stale one.
        stale = age is not None and age > STALE_SAMPLE_S and snap.source == "live"
        stale = stale and not is_over(snap)
        self.set_class(sample is None and snap.summary is None, "-waiting")
        self.set_class(stale, "-stale")
        self._lines = self._text(snap, sample, age if stale else None)
        self._redraw.show(self.render())

    def _text(
        self, snap: Snapshot, sample: SystemSample | None, stale_s: float | None
    ) -> list[str]:
        if snap.summary is not None:
            return summary_lines(snap.summary["system"])
        if sample is None and snap.source == "files":
            return ["No system sample: the run died before this viewer could ask."]
        if sample is None:
            return ["Waiting for the first system sample…"]
        lines = sample_lines(sample)
        if is_over(snap):
            lines.append("(the last sample before the run ended)")
        elif stale_s is not None:
            lines.append(f"No system sample for {stale_s:.0f} s")
        return lines

    def render(self) -> Content:
        return Content("\n".join(self._lines))

"""Plain-text renderers: the summary card (`traceml show`, end of run) and the progress line.

Pure string building from a summary dict or a RunView: no colours, no terminal queries, no I/O,
never torch or textual. A null number renders as "n/a" or "not measured", never as 0.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

from traceml.analysis.diagnose import QUIET_KINDS, diagnose
from traceml.analysis.rules import mb, ms, pct
from traceml.config import DEFAULT_THRESHOLDS, Thresholds
from traceml.records import PHASES

if TYPE_CHECKING:
    from collections.abc import Mapping

    from traceml.analysis.view import RunView

MAX_RANK_ROWS = 16
"""Rank rows on the card; bigger jobs show their most lagging ranks."""
LABEL = 12
"""Width of the phase-name column."""


def duration(seconds: float) -> str:
    """12.3 s, 4m 05s, 2h 03m."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    return f"{minutes // 60}h {minutes % 60:02d}m"


def _wrap(text: str, width: int, indent: str = "  ") -> list[str]:
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + "  ")


def _header(run: Mapping[str, Any], steps: int, width: int) -> list[str]:
    ranks = run["world_size"]
    where = f"{ranks} rank{'s' if ranks != 1 else ''} on {run['hosts']} host"
    where += "s" if run["hosts"] != 1 else ""
    torch = f"torch {run['torch']}" if run["torch"] else "torch n/a"
    facts = [exit_words(run["exit"]), duration(run["duration_s"]), f"{steps} steps", where]
    if run.get("restarts"):
        facts.append(f"after {run['restarts']} restart{'s' if run['restarts'] != 1 else ''}")
    facts += [run["device"], torch]
    title = f"TraceML  {run['script'] or '?'}  run {run['id']}"
    error = run.get("error")
    crash = _wrap(f"error: {error['type']}: {error['message']}", width, "") if error else []
    return [*_wrap(title, width, ""), *_wrap(" · ".join(facts), width, ""), *crash, "─" * width]


EXIT_WORDS = {
    "ok": "finished (ok)",
    "error": "ended by an exception",
    "signal": "stopped by a signal",
    "running": "still running",
    "killed": "killed by SIGKILL (out of memory?)",
}


def exit_words(kind: str) -> str:
    """How a run ended, in words ("killed by SIGKILL (out of memory?)")."""
    return EXIT_WORDS.get(kind, f"exit {kind}")


def _finding(finding: Mapping[str, Any], width: int) -> list[str]:
    lines = [f"{finding['severity'].upper()}  {finding['kind']}"]
    lines += _wrap(finding["summary"], width)
    lines += _wrap(f"Next: {finding['action']}", width)
    return lines


def _bar(share: float, width: int) -> str:
    filled = max(0, min(width, round(share * width)))
    return "█" * filled + "░" * (width - filled)


def _phase_lines(step: Mapping[str, Any], width: int) -> list[str]:
    bar_width = max(10, width - LABEL - 24)
    mean = step.get("mean_ms")
    lines = []
    for name in PHASES:
        value = step[f"{name}_pct"]
        if value is None:
            lines.append(f"  {name:<{LABEL}}not measured")
            continue
        phase_ms = ms(value / 100 * mean) if mean is not None else "n/a"
        lines.append(
            f"  {name:<{LABEL}}{_bar(value / 100, bar_width)} {value:5.1f} % {phase_ms:>9}"
        )
        if name == "backward":
            lines += _comm_line(step, bar_width)
    return lines


def _comm_line(step: Mapping[str, Any], bar_width: int) -> list[str]:
    """The all-reduce wait inside backward, indented under it; nothing when not measured."""
    value, mean = step.get("comm_wait_pct"), step.get("mean_ms")
    if value is None:
        return []
    wait_ms = ms(value / 100 * mean) if mean is not None else "n/a"
    label = "↳ comm wait"
    return [f"  {label:<{LABEL}}{' ' * bar_width} {value:5.1f} % {wait_ms:>9}"]


def _step_section(step: Mapping[str, Any], width: int) -> list[str]:
    slowest = step.get("max_ms")
    top = f" · max {ms(slowest)}" if slowest is not None else ""
    numbers = (
        f"median {ms(step['median_ms'])} · p95 {ms(step['p95_ms'])}{top}"
        f" · trend {step['trend'].replace('_', ' ')} (after warm-up)"
    )
    return [
        f"Step time  {step['diagnosis']}",
        *_wrap(numbers, width),
        *(_wrap(_phases_basis(step), width) if step.get("mean_ms") is not None else []),
        *_phase_lines(step, width),
    ]


def _phases_basis(step: Mapping[str, Any]) -> str:
    """What the phase rows are: mean ms per step (adding up to the mean step), over which steps."""
    spikes = step.get("spike_steps") or 0
    over = (
        f"typical steps ({spikes} slow step{'s' if spikes != 1 else ''} left out: see STEP_SPIKES)"
        if step.get("phases_over") == "typical_steps"
        else "all steps"
    )
    return (
        f"phases: mean per step over {over}, adding up to the mean step {ms(step.get('mean_ms'))}"
    )


def _memory_section(memory: Mapping[str, Any]) -> list[str]:
    growth = memory["growth_mb_per_1k_steps"]
    growth_text = "n/a" if growth is None else f"{growth:+.1f} MB per 1k steps"
    if memory["diagnosis"] == "NOT_MEASURED":
        return ["Memory  not measured"]
    lines = [f"Memory  {memory['diagnosis']}"]
    if memory["device_peak_allocated_mb"] is not None:
        allocated, reserved = memory["device_peak_allocated_mb"], memory["device_peak_reserved_mb"]
        lines.append(
            f"  device peak allocated {mb(allocated)} · reserved {mb(reserved)}"
            f" · capacity {mb(memory['device_capacity_mb'])}"
        )
    lines.append(f"  host RSS peak {mb(memory['host_rss_peak_mb'])} · growth {growth_text}")
    return lines


def _opt(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def _rank_rows(ranks: list[Mapping[str, Any]]) -> list[str]:
    shown = ranks
    if len(ranks) > MAX_RANK_ROWS:
        shown = sorted(ranks, key=lambda r: -(r["lag_pct"] or 0.0))[:MAX_RANK_ROWS]
        shown.sort(key=lambda r: r["rank"])
    wait = any(r.get("comm_wait_pct") is not None for r in shown)
    head = "  rank  host          steps   median      p95  data %"
    rows = [head + (" wait %" if wait else "") + "  lag %  state     exit"]
    for r in shown:
        waits = f" {_opt(r.get('comm_wait_pct'), '6.1f'):>6}" if wait else ""
        rows.append(
            f"  {r['rank']:>4}  {r['host'][:12]:<12} {r['steps']:>6} {ms(r['median_ms']):>8}"
            f" {ms(r['p95_ms']):>8} {_opt(r['dataloader_pct'], '6.1f'):>7}{waits}"
            f" {_opt(r['lag_pct'], '+5.1f'):>6}  {r['state']:<9} {r['exit'] or '-'}"
        )
    if len(shown) < len(ranks):
        rows.append(f"  ... {len(ranks) - len(shown)} more ranks (traceml show --json lists all)")
    return rows


SYSTEM_FIELDS = (
    ("process CPU", "cpu_pct_avg"),
    ("host CPU", "host_cpu_pct_avg"),
    ("GPU util", "gpu_util_pct_avg"),
)


def own_cpu_note(pct: float | None) -> str:
    """TraceML's own work's share, said beside the process CPU (card and live view) only where
    it was measured: summaries written before it was have none."""
    return "" if pct is None else f" (TraceML {pct:.1f} %)"


def _system_line(system: Mapping[str, Any]) -> str:
    parts = [f"{label} {_opt(system.get(key), '.0f')} %" for label, key in SYSTEM_FIELDS]
    parts[0] += own_cpu_note(system.get("traceml_cpu_pct_avg"))
    return "System  " + " · ".join(p.replace("n/a %", "n/a") for p in parts)


def held_note(system: Mapping[str, Any]) -> str:
    """How many steps TraceML's own work (its beats) overlapped, when any did (card and live
    view): their extra time is TraceML's, so they are not called spikes. "" when none did, or
    for a summary written before this was measured."""
    steps, held = system.get("traceml_held_steps"), system.get("traceml_held_ms")
    if not steps or held is None:
        return ""
    return (
        f"TraceML's own work overlapped {steps} step{'s' if steps != 1 else ''}"
        f" ({ms(held)} in all; not counted as spikes)"
    )


def render_card(summary: Mapping[str, Any], width: int = 80) -> str:
    """The summary as a readable card, diagnosis first.

    Args:
        summary: A "traceml.summary/1" dict (from build_summary or load_summary).
        width: Target line width; long sentences wrap, bars shrink.
    """
    width = max(40, width)
    step = summary["step_time"]
    lines = _header(summary["run"], step["steps"], width)
    lines += [*_finding(summary["primary"], width), ""]
    lines += [*_step_section(step, width), ""]
    lines += [*_memory_section(summary["step_memory"]), ""]
    if len(summary["ranks"]) > 1:
        waits = any(r.get("comm_wait_pct") is not None for r in summary["ranks"])
        title = "Ranks  (lag vs the median rank, % of a step"
        title += "; wait: in the all-reduce)" if waits else ")"
        lines += [title, *_rank_rows(summary["ranks"]), ""]
    held = held_note(summary["system"])
    lines += [_system_line(summary["system"]), *(_wrap(held, width) if held else [])]
    others = [f for f in summary["findings"] if not _same(f, summary["primary"])]
    others = [f for f in others if f["kind"] not in QUIET_KINDS]
    if others:
        lines += ["", "Other findings"]
        for finding in others:
            lines += _finding(finding, width)
    return "\n".join(lines) + "\n"


def _same(finding: Mapping[str, Any], primary: Mapping[str, Any]) -> bool:
    return all(finding[k] == primary[k] for k in ("kind", "severity", "summary"))


def render_progress(view: RunView, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> str:
    """One compact line: step, median step ms, the top phases' shares, the current diagnosis."""
    if view.steps == 0:
        return "traceml: waiting for the first step"
    shares = [(share, name) for name in PHASES if (share := view.median_share(name)) is not None]
    ranked = sorted(shares, key=lambda sn: -sn[0])[:3]
    top = " ".join(f"{name} {pct(share)}" for share, name in ranked)
    primary = diagnose(view, thresholds).primary
    return (
        f"traceml: step {view.total_steps} · {ms(view.median_ms())} median · {top or 'no phases'}"
        f" · {primary.kind} ({primary.severity})"
    )

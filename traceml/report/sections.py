"""A summary's parts as HTML: header, verdict, phase split, memory, ranks, system, findings.

Shared by the standalone report and the notebook card. Reads a "traceml.summary/1" dict only; a
null number is "not measured", never 0. Phase ms are share x mean step time, as on the card.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from traceml.analysis.diagnose import QUIET_KINDS
from traceml.analysis.render import duration
from traceml.records import PHASES
from traceml.report.html import NA, esc, fmt_mb, fmt_ms, fmt_num, fmt_pct, table

Summary = Mapping[str, Any]
BAR_PX = 160
"""Width of a 100 % bar in the phase table."""


def run_facts(run: Mapping[str, Any], steps: int) -> list[str]:
    """Exit, duration, steps, ranks and hosts, device, versions: the line under the title."""
    ranks, hosts = run["world_size"], run["hosts"]
    facts = [
        f"exit {run['exit']}",
        duration(run["duration_s"]),
        f"{steps} steps",
        f"{ranks} rank{'s' if ranks != 1 else ''} on {hosts} host{'s' if hosts != 1 else ''}",
        run["device"],
        f"torch {run['torch'] or NA}",
        f"TraceML {run['traceml']}",
    ]
    if run.get("started"):
        facts.insert(0, f"started {run['started']}")
    return facts


def header(summary: Summary, tag: str = "h1") -> str:
    run = summary["run"]
    title = f"{run['script'] or '?'} · run {run['id']}"
    facts = " · ".join(esc(f) for f in run_facts(run, summary["step_time"]["steps"]))
    return f'<{tag}>{esc(title)}</{tag}><p class="facts">{facts}</p>'


def finding(item: Mapping[str, Any], primary: bool = False) -> str:
    """One finding: severity, kind, the sentence with its numbers, and the action to take."""
    severity = str(item["severity"])
    cls = f"card verdict {esc(severity)}" if primary else f"card {esc(severity)}"
    kind = f'<span class="kind">{esc(item["kind"])}</span>'
    return (
        f'<div class="{cls}"><div class="sev">{esc(severity)}</div>{kind}'
        f"<div>{esc(item['summary'])}</div>"
        f'<div class="action"><b>Next:</b> {esc(item["action"])}</div></div>'
    )


def verdict(summary: Summary) -> str:
    return finding(summary["primary"], primary=True)


def phase_ms(step: Mapping[str, Any], share_pct: float | None) -> float | None:
    """Mean ms per step of a phase: its share of the mean step; None when not measured."""
    mean = step.get("mean_ms")
    return None if share_pct is None or mean is None else share_pct / 100 * mean


def _bar(share_pct: float) -> str:
    width = round(max(0.0, min(100.0, share_pct)) / 100 * BAR_PX)
    return f'<span class="bar" style="width:{width}px"></span>'


def _phase_row(step: Mapping[str, Any], name: str) -> list[str]:
    share = step.get(f"{name}_pct")
    if share is None:
        return [esc(name), '<span class="muted">not measured</span>', "", ""]
    return [esc(name), _bar(share), fmt_pct(share), fmt_ms(phase_ms(step, share))]


def phase_table(step: Mapping[str, Any]) -> str:
    """Each phase's share of step time and its mean ms; the all-reduce wait under backward."""
    rows = []
    for name in PHASES:
        rows.append(_phase_row(step, name))
        wait = step.get("comm_wait_pct")
        if name == "backward" and wait is not None:
            rows.append(["↳ comm wait", _bar(wait), fmt_pct(wait), fmt_ms(phase_ms(step, wait))])
    return table(["phase", "", "% of step", "mean ms/step"], rows, align=("l", "l"))


def step_numbers(step: Mapping[str, Any]) -> str:
    parts = [
        f"<b>{esc(step['diagnosis'])}</b>",
        f"{esc(step['steps'])} steps",
        f"median {esc(fmt_ms(step['median_ms']))}",
        f"p95 {esc(fmt_ms(step['p95_ms']))}",
        f"mean {esc(fmt_ms(step.get('mean_ms')))}",
        f"trend {esc(str(step['trend']).replace('_', ' '))}",
    ]
    return f"<p>{' · '.join(parts)} <span class='muted'>(after warm-up)</span></p>"


def memory(mem: Mapping[str, Any]) -> str:
    growth = mem.get("growth_mb_per_1k_steps")
    rows = [
        ["device peak allocated", esc(fmt_mb(mem.get("device_peak_allocated_mb")))],
        ["device peak reserved", esc(fmt_mb(mem.get("device_peak_reserved_mb")))],
        ["device capacity", esc(fmt_mb(mem.get("device_capacity_mb")))],
        ["host RSS peak", esc(fmt_mb(mem.get("host_rss_peak_mb")))],
        ["growth per 1k steps", NA if growth is None else esc(f"{growth:+.1f} MB")],
    ]
    title = f"<p><b>{esc(mem['diagnosis'])}</b></p>"
    return title + table(["", "value"], rows, align=("l",))


RANK_HEADERS = ("rank", "host", "steps", "median", "p95", "data %", "wait %", "lag %", "state")


def _rank_row(r: Mapping[str, Any]) -> list[str]:
    state = str(r["state"]) + (f" ({r['exit']})" if r.get("exit") else "")
    return [
        esc(r["rank"]),
        esc(r["host"]),
        esc(r["steps"]),
        esc(fmt_ms(r["median_ms"])),
        esc(fmt_ms(r["p95_ms"])),
        esc(fmt_pct(r.get("dataloader_pct"))),
        esc(fmt_pct(r.get("comm_wait_pct"))),
        esc(fmt_pct(r.get("lag_pct"), signed=True)),
        esc(state),
    ]


def ranks(rows: Sequence[Mapping[str, Any]], limit: int | None = None) -> str:
    """The per-rank table, rank order; with `limit`, the most lagging ranks only."""
    shown = list(rows)
    if limit is not None and len(shown) > limit:
        shown = sorted(shown, key=lambda r: -(r.get("lag_pct") or 0.0))[:limit]
        shown.sort(key=lambda r: r["rank"])
    out = table(RANK_HEADERS, [_rank_row(r) for r in shown], align=("r", "l"), scroll=True)
    if len(shown) < len(rows):
        more = len(rows) - len(shown)
        out += f'<p class="muted">{more} more ranks (the most lagging are shown)</p>'
    return out


SYSTEM_ROWS = (
    ("process CPU avg", "cpu_pct_avg", "%"),
    ("TraceML's thread CPU avg", "traceml_cpu_pct_avg", "%"),
    ("steps TraceML's thread overlapped", "traceml_held_steps", ""),
    ("their overlap, in all", "traceml_held_ms", "ms"),
    ("host CPU avg", "host_cpu_pct_avg", "%"),
    ("GPU util avg", "gpu_util_pct_avg", "%"),
    ("GPU power avg", "gpu_power_w_avg", "W"),
    ("GPU temperature max", "gpu_temp_c_max", "°C"),
    ("host memory used peak", "host_mem_used_peak_mb", "MB"),
    ("GPU memory used peak", "gpu_mem_used_peak_mb", "MB"),
)


def system(sysinfo: Mapping[str, Any]) -> str:
    rows = []
    for label, key, unit in SYSTEM_ROWS:
        value = sysinfo.get(key)
        rows.append([label, NA if value is None else esc(f"{fmt_num(value)} {unit}".rstrip())])
    return table(["", "value"], rows, align=("l",))


def other_findings(summary: Summary) -> list[Mapping[str, Any]]:
    """Findings besides the primary one, without BALANCED or NOT_MEASURED."""
    primary = summary["primary"]
    keys = ("kind", "severity", "summary")
    return [
        f
        for f in summary["findings"]
        if f["kind"] not in QUIET_KINDS and any(f[k] != primary[k] for k in keys)
    ]


def findings(summary: Summary) -> str:
    items = other_findings(summary)
    if not items:
        return '<p class="muted">No other findings.</p>'
    return "".join(finding(f) for f in items)

"""final_summary.json: built from a RunStore, written atomically, read back with a schema check.

The summary is a few KB whatever the number of steps (README, "final_summary.json"); null means not
measured, never a fake 0. The ranks list is capped at MAX_RANKS entries (the most lagging ones are
kept, in rank order; `run.ranks_omitted` counts the rest). This module never imports torch, and
`write_summary` never leaves a half-written file behind.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from traceml._version import __version__
from traceml.analysis.diagnose import diagnose
from traceml.analysis.rules_memory import memory_growth
from traceml.analysis.rules_ranks import rank_lags, with_comm_wait
from traceml.analysis.schema import (
    SUMMARY_READS,
    SUMMARY_SCHEMA,
    check_sections,
    validate_summary,
)
from traceml.analysis.stats import SYSTEM_MEANS, SYSTEM_PEAKS, max_opt, median, series_slope
from traceml.analysis.timeline import SUMMARY_WINDOWS, coarsen
from traceml.analysis.timeline_json import timeline_columns
from traceml.config import DEFAULT_THRESHOLDS, Thresholds
from traceml.errors import ConfigError, SchemaError
from traceml.records import PHASES

if TYPE_CHECKING:
    from collections.abc import Sequence

    from traceml.analysis.comm import CommTotals
    from traceml.analysis.diagnose import Diagnosis
    from traceml.analysis.store import RunStore
    from traceml.analysis.view import RankWindow, RunView
    from traceml.records import ExitKind

Trend = Literal["stable", "slowing", "speeding_up"]
MAX_RANKS = 1024
"""Most entries in `ranks`; larger jobs keep their most lagging ranks."""
TREND_MIN_POINTS = 3
"""Fewest series points a trend is computed from."""
SLOWEST_IN_SUMMARY = 5
"""Slowest steps `step_time.slowest` lists."""


def _num(value: float | None, digits: int = 3) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(value, digits) + 0.0


def _pct(share: float | None) -> float | None:
    return None if share is None else _num(share * 100, 1)


def _iso(epoch: float) -> str | None:
    if epoch <= 0:
        return None
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="seconds")


def _relative_change(rank: RankWindow) -> float | None:
    series = rank.step_series
    base = median(y for _, y in series)
    if len(series) < TREND_MIN_POINTS or not base:
        return None
    slope = series_slope(series)
    return None if slope is None else slope * (series[-1][0] - series[0][0]) / base


def step_trend(view: RunView, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> Trend:
    """ "slowing" / "speeding_up" when the median rank's fitted step time moves by at least
    `compare_material` over the window; "stable" otherwise or with fewer than
    `min_steps_for_critical` steps."""
    if view.steps < thresholds.min_steps_for_critical:
        return "stable"
    change = median(_relative_change(r) for r in view.active)
    if change is None or abs(change) < thresholds.compare_material:
        return "stable"
    return "slowing" if change > 0 else "speeding_up"


def _phase_pcts(shares: Sequence[float | None]) -> dict[str, float | None]:
    return {f"{name}_pct": _pct(share) for name, share in zip(PHASES, shares, strict=True)}


def _comm_share(view: RunView, comm: dict[int, CommTotals]) -> float | None:
    """Median over ranks of the all-reduce wait's share of step time; None when not measured."""
    return median(comm[r.rank].share for r in view.active if r.rank in comm)


def _slowest(view: RunView) -> tuple[float | None, list[dict[str, Any]]]:
    """The slowest step of any rank, and that rank's slowest steps (each with its phase)."""
    ranks = [r for r in view.active if r.max_ms is not None]
    worst = max(ranks, key=lambda r: r.max_ms or 0.0, default=None)
    if worst is None:
        return None, []
    rows = [{"rank": worst.rank, **s.to_json()} for s in worst.slowest[:SLOWEST_IN_SUMMARY]]
    return _num(worst.max_ms), rows


def _typical_label(view: RunView) -> tuple[str, int]:
    """("typical_steps" | "all_steps", median over ranks of the spikes left out)."""
    left_out = [r.steps - r.typical_steps for r in view.active]
    spikes = median(float(n) for n in left_out)
    n = round(spikes) if spikes is not None else 0
    return ("typical_steps" if any(left_out) else "all_steps"), n


def _step_time(
    view: RunView, diag: Diagnosis, th: Thresholds, comm: dict[int, CommTotals]
) -> dict[str, Any]:
    max_ms, slowest = _slowest(view)
    over, spikes = _typical_label(view)
    return {
        "diagnosis": diag.step.kind,
        "steps": view.total_steps,
        "median_ms": _num(view.median_ms()),
        "p95_ms": _num(median(r.p95_ms for r in view.active)),
        "mean_ms": _num(view.median_mean_ms()),
        **_phase_pcts([view.median_share(p) for p in PHASES]),
        "comm_wait_pct": _pct(_comm_share(view, comm)),
        "trend": step_trend(view, th),
        "phases_over": over,
        "spike_steps": spikes,
        "max_ms": max_ms,
        "slowest": slowest,
    }


def timeline_json(view: RunView, limit: int = SUMMARY_WINDOWS) -> dict[str, Any] | None:
    """The median rank's whole-run timeline, coarsened to at most `limit` windows."""
    ranks = [r for r in view.active if r.timeline and r.mean_ms is not None]
    mid = median(r.mean_ms for r in ranks)
    rank = min(ranks, key=lambda r: abs((r.mean_ms or 0.0) - (mid or 0.0)), default=None)
    if rank is None:
        return None
    return {"rank": rank.rank, **timeline_columns(coarsen(rank.timeline, limit))}


def _growth_per_1k(view: RunView) -> float | None:
    growths = [g for g in (memory_growth(r) for r in view.active) if g is not None]
    best = max((g.slope_mb_per_step for g in growths), default=None)
    return None if best is None else _num(best * 1000, 1)


def _peak(view: RunView, attr: str) -> float | None:
    value: float | None = None
    for rank in view.active:
        value = max_opt(value, getattr(rank, attr))
    return _num(value, 1)


def _step_memory(view: RunView, diag: Diagnosis) -> dict[str, Any]:
    capacities = [r.device_capacity_mb for r in view.ranks if r.device_capacity_mb]
    return {
        "diagnosis": diag.memory.kind,
        "device_peak_allocated_mb": _peak(view, "device_peak_allocated_mb"),
        "device_peak_reserved_mb": _peak(view, "device_peak_reserved_mb"),
        "device_capacity_mb": _num(min(capacities), 1) if capacities else None,
        "host_rss_peak_mb": _peak(view, "host_rss_peak_mb"),
        "growth_mb_per_1k_steps": _growth_per_1k(view),
    }


def _rank_entry(rank: RankWindow, lag: float | None, comm: CommTotals | None) -> dict[str, Any]:
    return {
        "rank": rank.rank,
        "host": rank.host,
        "steps": rank.total_steps,
        "median_ms": _num(rank.median_ms),
        "p95_ms": _num(rank.p95_ms),
        **_phase_pcts(rank.phase_share),
        "comm_wait_pct": _pct(comm.share if comm is not None else None),
        "lag_pct": _pct(lag),
        "state": rank.state,
        "exit": rank.exit,
        "dropped": rank.dropped,
    }


def _ranks(
    view: RunView, th: Thresholds, comm: dict[int, CommTotals]
) -> tuple[list[dict[str, Any]], int]:
    lags = {lag.rank: lag.lag for lag in rank_lags(view, th)}
    kept = list(view.ranks)
    if len(kept) > MAX_RANKS:
        kept = sorted(kept, key=lambda r: -lags.get(r.rank, -math.inf))[:MAX_RANKS]
        kept.sort(key=lambda r: r.rank)
    rows = [_rank_entry(r, lags.get(r.rank), comm.get(r.rank)) for r in kept]
    return rows, len(view.ranks) - len(kept)


def _system(store: RunStore) -> dict[str, Any]:
    totals = store.system_totals()
    means = {name: _num(median(t.mean(name) for t in totals), 1) for name in SYSTEM_MEANS}
    peaks: dict[str, float | None] = dict.fromkeys(SYSTEM_PEAKS)
    for t in totals:
        peaks = {name: max_opt(peaks[name], t.peak(name)) for name in SYSTEM_PEAKS}
    held_steps, held_ms = store.held_totals()
    return {
        "cpu_pct_avg": means["process_cpu_pct"],
        "traceml_cpu_pct_avg": means["traceml_cpu_pct"],
        "traceml_held_steps": held_steps,
        "traceml_held_ms": _num(held_ms, 1),
        "host_cpu_pct_avg": means["host_cpu_pct"],
        "gpu_util_pct_avg": means["gpu_util_pct"],
        "gpu_power_w_avg": means["gpu_power_w"],
        "gpu_temp_c_max": _num(peaks["gpu_temp_c"], 1),
        "host_mem_used_peak_mb": _num(peaks["host_mem_used_mb"], 1),
        "gpu_mem_used_peak_mb": _num(peaks["gpu_mem_used_mb"], 1),
        "samples": sum(t.samples for t in totals),
    }


def _restarts(store: RunStore) -> int:
    """torchelastic restarts before the incarnation this summary describes."""
    infos = (store.info(rank) for rank in store.ranks())
    return max((info.incarnation for info in infos if info is not None), default=0)


def build_summary(
    store: RunStore,
    *,
    run_id: str,
    script: str,
    argv: Sequence[str],
    started: float,
    duration_s: float,
    exit: ExitKind,  # noqa: A002 (the summary's own field name)
    device: str,
    torch_version: str | None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    error: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The final_summary.json object of a run (README, "final_summary.json"), from its store.

    Args:
        store: Every rank's records; its summary view (after warm-up) is diagnosed.
        run_id, script, argv, started, duration_s, exit, device, torch_version: The `run`
            section; `started` is epoch seconds (0 = unknown), `torch_version` None = unknown.
        thresholds: The numbers the diagnosis compares against.
        error: (type, message) of the exception that ended the script; None takes the first
            one a rank's RankEnd carries (rank 0 first), if any.

    Returns:
        A JSON-native dict of schema "traceml.summary/1.1"; system means are medians over ranks.
    """
    view = store.summary_view()
    diag = diagnose(view, thresholds)
    comm = store.comm_totals("summary")
    ranks, omitted = _ranks(view, thresholds, comm)
    waits = {r: c.mean_ms for r, c in comm.items() if c.mean_ms is not None}
    findings = [with_comm_wait(f, waits) for f in diag.findings]
    run = {
        "id": run_id,
        "script": script,
        "argv": [str(a) for a in argv],
        "started": _iso(started),
        "duration_s": _num(max(0.0, duration_s)) or 0.0,
        "exit": exit,
        "world_size": view.world_size,
        "hosts": view.hosts,
        "device": device,
        "torch": torch_version or None,
        "traceml": __version__,
        "ranks_omitted": omitted,
        "restarts": _restarts(store),
        "optimizers": list(view.optimizers),
        "error": _error(store, error),
    }
    primary = with_comm_wait(diag.primary, waits).to_json()
    return {
        "schema": SUMMARY_SCHEMA,
        "run": run,
        "primary": {k: primary[k] for k in ("kind", "severity", "summary", "action")},
        "step_time": _step_time(view, diag, thresholds, comm),
        "step_memory": _step_memory(view, diag),
        "ranks": ranks,
        "system": _system(store),
        "findings": [f.to_json() for f in findings],
        **({"timeline": line} if (line := timeline_json(view)) is not None else {}),
    }


def _error(store: RunStore, given: tuple[str, str] | None) -> dict[str, str] | None:
    """The exception that ended the run: `given`, else the first rank end that carries one."""
    if given is None:
        given = next((e for e in store.end_errors()), None)
    return None if given is None else {"type": given[0], "message": given[1]}


_SCALAR_LIST = re.compile(r"\[\s*((?:-?[\d.eE+-]+|null)(?:,\s*(?:-?[\d.eE+-]+|null))*)\s*\]")
"""A JSON list of numbers and nulls as json.dumps(indent=2) writes it: one item a line."""


def _one_line(match: re.Match[str]) -> str:
    """The timeline's columns on one line each, so the file stays a few KB."""
    return "[" + ", ".join(item.strip() for item in match.group(1).split(",")) + "]"


def _write_error(path: Path, err: OSError) -> ConfigError:
    reason = "the disk is full" if err.errno == errno.ENOSPC else (err.strerror or str(err))
    return ConfigError(
        f"cannot write the summary to {path}: {reason}; pass --summary PATH or set"
        " TRACEML_SUMMARY to a writable place"
    )


def write_summary(summary: dict[str, Any], path: Path) -> Path:
    """Write `summary` as JSON to `path` atomically (temp file, fsync, os.replace).

    Creates missing parent folders. Returns the path written.

    Raises:
        ConfigError: the folder cannot be created or written, or the disk is full.
    """
    path = Path(path)
    text = _SCALAR_LIST.sub(_one_line, json.dumps(summary, indent=2, allow_nan=False)) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise _write_error(path, e) from e
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise _write_error(path, e) from e
    return path


def load_summary(path: Path, full_check: bool = True) -> dict[str, Any]:
    """Read and check a final_summary.json; `full_check=False` leaves out the JSON Schema
    validation (tens of ms to import jsonschema) for a summary this TraceML has just written
    (the launcher's card): version and sections are still checked.

    Raises:
        SchemaError: one line, for a missing or unreadable file, text that is not JSON, JSON that
            is not a TraceML summary, or a summary of another schema version.
    """
    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise SchemaError(
            f"no summary at {path}: check the path (default traceml-runs/<run-id>/)"
        ) from e
    except (OSError, UnicodeDecodeError) as e:
        raise SchemaError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from e
    except json.JSONDecodeError as e:
        raise SchemaError(f"{path} is not JSON (line {e.lineno}, column {e.colno}): {e.msg}") from e
    version = obj.get("schema") if isinstance(obj, dict) else None
    if not isinstance(version, str) or not version.startswith("traceml.summary/"):
        raise SchemaError(f'{path} is not a TraceML summary (no "schema": "{SUMMARY_SCHEMA}")')
    if version not in SUMMARY_READS:
        raise SchemaError(
            f"{path} is a {version} summary; this TraceML {__version__} reads {SUMMARY_SCHEMA}:"
            " use the TraceML version that wrote it"
        )
    try:
        if full_check:
            validate_summary(obj)
        else:
            check_sections(obj)
    except SchemaError as e:
        raise SchemaError(f"{path}: {e.msg}") from e
    result: dict[str, Any] = obj
    return result

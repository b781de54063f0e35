"""Settings from the environment and the diagnosis thresholds, each in one frozen dataclass.

Read once at `init`; nothing here touches torch or the network.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from traceml.errors import ConfigError

Mode = Literal["auto", "manual", "off"]
MODES: tuple[Mode, ...] = ("auto", "manual", "off")


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Every number the diagnosis compares against (README, "Diagnoses"), in one place."""

    input_warning: float = 0.10
    input_critical: float = 0.20
    host_warning: float = 0.10
    host_critical: float = 0.20
    h2d_warning: float = 0.10
    h2d_critical: float = 0.20
    optimizer_warning: float = 0.25
    optimizer_critical: float = 0.40
    compute_share: float = 0.80
    straggler_warning: float = 0.10
    straggler_critical: float = 0.20
    straggler_phase_explains: float = 0.80
    growth_fraction: float = 0.05
    growth_absolute_mb: float = 1024.0
    pressure_warning: float = 0.92
    pressure_critical: float = 0.97
    fragmented_ratio: float = 2.0
    fragmented_capacity: float = 0.30
    imbalance_skew: float = 0.20
    imbalance_pressure: float = 0.30
    min_steps_for_critical: int = 20
    min_steps: int = 2
    warmup_steps: int = 5
    warmup_fraction: float = 0.05
    live_window: int = 100
    compare_moderate: float = 0.03
    compare_material: float = 0.08
    spike_factor: float = 3.0
    """A step is a spike when it takes more than this times the rank's rolling median step."""
    spike_rare: float = 0.10
    """Spikes are left out of the typical step only while at most this fraction of steps;
    more than that is how the loop runs, not rare events."""
    spike_warning: float = 0.05
    """STEP_SPIKES fires when spikes take this share of the window's step time (warning) ..."""
    spike_critical: float = 0.25
    """... and is critical from this share on."""


DEFAULT_THRESHOLDS = Thresholds()


@dataclass(frozen=True, slots=True)
class Settings:
    """How TraceML runs in this process, from `init` arguments and TRACEML_* variables."""

    mode: Mode = "auto"
    summary_path: Path | None = None
    """Where final_summary.json goes; None means traceml-runs/<run-id>/final_summary.json."""
    runtime_dir: Path | None = None
    """Private dir for run files and sockets; None: $TRACEML_RUNTIME_DIR or /tmp/traceml-<uid>."""
    run_id: str | None = None
    """Forced run id; None derives one (transport.runfiles.runid)."""
    progress: bool = False
    """Print a compact progress line every few seconds (set by `traceml run --no-live`)."""
    publish: bool = True
    """Open the live transport; False keeps everything in-process."""
    listen: Literal["ipc", "tcp"] = "ipc"
    insecure: bool = False
    """Allow TCP without CURVE; must be asked for by name."""
    history_steps: int = 4096
    """Full-resolution step records kept per rank for attach snapshots."""
    buffer_steps: int = 16384
    """Records the training thread may queue before the oldest are dropped (and counted): at
    0.14 KB a RawStep of the C timer, 2.4 MB at most (5 MB with the Python timer's tuples of
    ~0.3 KB); 0.1 s of a 160,000 steps/s loop. The tx thread drains it every 0.25 s tick (once a
    second while no viewer listens, unless it is a quarter full)."""
    skip: frozenset[str] = frozenset()
    """Auto-mode patches left out (TRACEML_SKIP, names from PATCHES); their phase reads null."""
    c_timer: bool = True
    """Use the C step timer when it is built (TRACEML_C_TIMER=0: the pure-Python one)."""
    inline: bool = False
    """TRACEML_INLINE=1: the tx worker's beats (fold, publish, samples) run on the training
    thread at the end of the step that finds one due, the tx thread beating only when no step
    ends in time. Off by default: it saved about 2.6 µs a 0.4 ms step where the loop shares
    one core with everything, and showed no gain where a core is free for the tx thread, the
    usual case (13 µs slower in one set of alternated runs, even in a second;
    docs/performance.md, "Beats on the training thread")."""
    beats: Literal["thread", "process"] = "thread"
    """TRACEML_BEATS=process: the beats (fold, publish, samples, summary) run in a process of
    their own, and the C step timer writes the steps into a ring in shared memory that it
    reads (instrument/ship.py): no thread of TraceML's in the training process. CPU ranks of
    one-process runs only for now; anything else keeps the thread. Off by default until a
    quiet host has measured it."""


def c_enabled(env: Mapping[str, str] | None = None) -> bool:
    """TRACEML_C_TIMER (default on): whether TraceML's C parts, where built, may be used: the
    step timer and wrappers (Settings.c_timer) and the folds of statistics, timeline and spike
    baseline (analysis/native.py). Off, everything runs its Python reference, which gives the
    same records and the same floats."""
    return _flag(os.environ if env is None else env, "TRACEML_C_TIMER", True)


PATCHES: tuple[str, ...] = ("dataloader", "forward", "backward", "optimizer", "h2d", "comm")
"""What auto mode patches or hooks, by the name TRACEML_SKIP uses (README: What TraceML touches)."""


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in ("1", "true", "yes", "on")


def parse_mode(raw: str) -> Mode:
    """Validate a mode name; raise ConfigError naming the allowed values."""
    value = raw.strip().lower()
    for mode in MODES:
        if value == mode:
            return mode
    raise ConfigError(f"unknown TraceML mode {raw!r}: use one of {', '.join(MODES)}")


def settings_from_env(mode: str = "auto", env: Mapping[str, str] | None = None) -> Settings:
    """Build Settings from an `init` mode and the environment (TRACEML_MODE overrides `mode`)."""
    env = os.environ if env is None else env
    summary = env.get("TRACEML_SUMMARY")
    runtime = env.get("TRACEML_RUNTIME_DIR")
    listen = env.get("TRACEML_LISTEN", "ipc")
    if listen not in ("ipc", "tcp"):
        raise ConfigError(f"TRACEML_LISTEN={listen!r}: use ipc or tcp")
    return Settings(
        mode=parse_mode(env.get("TRACEML_MODE") or mode),
        summary_path=Path(summary) if summary else None,
        runtime_dir=Path(runtime) if runtime else None,
        run_id=env.get("TRACEML_RUN_ID") or None,
        progress=_flag(env, "TRACEML_PROGRESS", False),
        publish=_flag(env, "TRACEML_PUBLISH", True),
        listen="tcp" if listen == "tcp" else "ipc",
        insecure=_flag(env, "TRACEML_INSECURE", False),
        skip=parse_skip(env.get("TRACEML_SKIP", "")),
        inline=_flag(env, "TRACEML_INLINE", False),
        c_timer=c_enabled(env),
        beats=parse_beats(env.get("TRACEML_BEATS", "")),
    )


def parse_beats(raw: str) -> Literal["thread", "process"]:
    """TRACEML_BEATS: where the beats run (empty: thread); raise ConfigError otherwise."""
    value = raw.strip().lower() or "thread"
    if value == "thread":
        return "thread"
    if value == "process":
        return "process"
    raise ConfigError(f"TRACEML_BEATS={raw!r}: use thread or process")


def parse_skip(raw: str) -> frozenset[str]:
    """TRACEML_SKIP: comma-separated PATCHES names; raise ConfigError naming the allowed ones."""
    names = frozenset(n.strip().lower() for n in raw.split(",") if n.strip())
    unknown = sorted(names - set(PATCHES))
    if unknown:
        raise ConfigError(
            f"TRACEML_SKIP names {', '.join(unknown)}: use any of {', '.join(PATCHES)}"
        )
    return names


PHASES_MANUAL: tuple[str, ...] = ("dataloader", "forward", "backward", "optimizer", "h2d")
"""Phases a user may mark with `traceml.phase(name)`; between and other are what is left."""

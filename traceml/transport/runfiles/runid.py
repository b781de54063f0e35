"""Run ids: one id shared by every rank of a job, readable, and safe as a directory name.

Reads only the environment and the launcher's start time; never talks to the network.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path

MAX_RUN_ID = 96
"""Longest run id; keeps ipc socket paths under the 107-byte limit in the default runtime dir."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_VALID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def is_valid_run_id(run_id: str) -> bool:
    """True if `run_id` can name a run directory: [A-Za-z0-9._-], not hidden, not too long."""
    return len(run_id) <= MAX_RUN_ID and _VALID.fullmatch(run_id) is not None


def sanitize(text: str, limit: int = MAX_RUN_ID) -> str:
    """`text` with every run of unsafe characters replaced by '-', trimmed to `limit`."""
    return _UNSAFE.sub("-", text).strip(".-_")[:limit].rstrip(".-_")


def script_stem(script: str) -> str:
    """The readable head of a run id: the script's file name without `.py`."""
    name = Path(script).name
    if name.endswith(".py"):
        name = name[:-3]
    return sanitize(name, 40) or "python"


def derive_run_id(script: str, env: Mapping[str, str] | None = None) -> str:
    """The run id of this process's job, the same in every rank (README, "Distributed runs").

    Args:
        script: path or name of the training script, for the readable head of the id.
        env: environment to read; None means os.environ.

    Returns:
        `$TRACEML_RUN_ID` (made safe), else `<script>-slurm<job>[.<step>]`, else
        `<script>-<TORCHELASTIC_RUN_ID>` unless that is "none", else
        `<script>-<yyyymmdd-hhmmss>-<4 hex>` from MASTER_ADDR and the launcher's pid and start
        time (the torchrun agent's, so local ranks and restarted ranks agree).
    """
    env = os.environ if env is None else env
    stem = script_stem(script)
    explicit = sanitize(env.get("TRACEML_RUN_ID", ""))
    if explicit:
        return explicit
    slurm = sanitize(env.get("SLURM_JOB_ID", ""), 24)
    if slurm:
        step = sanitize(env.get("SLURM_STEP_ID", ""), 12)
        return f"{stem}-slurm{slurm}" + (f".{step}" if step else "")
    elastic = env.get("TORCHELASTIC_RUN_ID", "")
    if elastic and elastic.strip().lower() != "none" and sanitize(elastic, 24):
        return f"{stem}-{sanitize(elastic, 24)}"
    pid = launcher_pid(env)
    return derived_run_id(stem, env, pid, process_start(pid))


def under_torchrun(env: Mapping[str, str]) -> bool:
    """True when a torchelastic agent launched this process (it is then the launcher)."""
    return "TORCHELASTIC_RESTART_COUNT" in env or "TORCHELASTIC_RUN_ID" in env


def launcher_pid(env: Mapping[str, str]) -> int:
    """The pid whose start time names the job: the torchrun agent, else this process."""
    return os.getppid() if under_torchrun(env) else os.getpid()


def process_start(pid: int) -> float | None:
    """Start time of `pid` in epoch seconds, None if it cannot be read.

    On Linux read from /proc as psutil computes it (boot time plus the start tick), so the
    launcher and every rank agree with each other and with psutil's `create_time` (liveness):
    importing psutil costs a run's start-up tens of ms, and this is on it.
    """
    try:
        return _proc_start(pid)
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except Exception:  # noqa: BLE001 - a probe: a broken psutil must not stop a run
        return None


def _proc_start(pid: int, procfs: str = "/proc") -> float:
    with open(f"{procfs}/{pid}/stat", "rb") as f:
        stat = f.read()
    # Fields after the command name, which may hold spaces and parentheses: starttime is the
    # 22nd field of the line, the 20th after the name.
    start_ticks = int(stat[stat.rindex(b")") + 2 :].split()[19])
    with open(f"{procfs}/stat", "rb") as f:
        boot = next((float(line.split()[1]) for line in f if line.startswith(b"btime")), None)
    if boot is None:
        raise ValueError(f"no btime line in {procfs}/stat")
    return start_ticks / os.sysconf("SC_CLK_TCK") + boot


def derived_run_id(stem: str, env: Mapping[str, str], pid: int, start: float | None) -> str:
    """`<stem>-<yyyymmdd-hhmmss>-<4 hex>`: deterministic in its inputs, so ranks agree.

    With no start time (psutil denied it) the stamp is the current time, so the id still says
    when the run began; ranks then agree unless they derive it across a second boundary.
    """
    # Not MASTER_PORT: a torchelastic restart keeps the agent (the launcher) but may move the
    # job's store to a new port, and a restart is the same run (a new incarnation).
    master = env.get("MASTER_ADDR", "")
    key = f"{master}|{pid}|{start if start is None else round(start, 2)}"
    digest = hashlib.sha1(key.encode(), usedforsecurity=False).hexdigest()[:4]
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if start is None else start))
    return f"{stem}-{stamp}-{digest}"

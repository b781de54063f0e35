"""The summary of a script that died of SIGKILL before it could write its own.

A SIGKILL (most often the kernel's out-of-memory killer) ends the process at once: no atexit, no
summary, and its records die with it. The launcher still knows how the script ended and what the
rank's run file last said (steps reached, median step, last verdict), so it writes that, with
`run.exit = "killed"` and everything else null (not measured), never a guess. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from traceml.analysis.rules import ms
from traceml.analysis.store import RunStore
from traceml.analysis.summary import build_summary

KILLED_ACTION = (
    "Check the kernel log for the out-of-memory killer (`dmesg | grep -i oom`, `journalctl -k`)"
    " and the job's memory limit (cgroup, SLURM --mem); then lower the batch size or the"
    " DataLoader's num_workers, or watch memory grow live with `traceml run`."
)


def killed_finding(steps: int | None, median_ms: float | None, last: str | None) -> dict[str, Any]:
    """The KILLED finding: what the run file knew when the process vanished."""
    known = [f"after {steps} steps" if steps else "before its first step"]
    if median_ms is not None:
        known.append(f"median step {ms(median_ms)}")
    if last:
        known.append(f"last verdict {last}")
    return {
        "kind": "KILLED",
        "section": "step_memory",
        "severity": "critical",
        "summary": f"killed by SIGKILL (out of memory?) {', '.join(known)}; its records died"
        " with it, so nothing else was measured",
        "action": KILLED_ACTION,
        "evidence": {"steps": steps, "median_ms": median_ms, "last_primary": last},
    }


def killed_summary(
    *,
    run_id: str,
    script: str,
    argv: list[str],
    started: float,
    duration_s: float,
    device: str = "cpu",
    steps: int | None = None,
    median_ms: float | None = None,
    last_primary: str | None = None,
) -> dict[str, Any]:
    """A valid summary of a killed run from what its launcher knows.

    Args:
        run_id, script, argv, started, duration_s, device: The run section (started: epoch s).
        steps: Steps the rank reached (its run file's last step + 1); None = unknown.
        median_ms: The rank's median step from its run file; None = unknown.
        last_primary: The rank's last primary finding kind; None = none yet.
    """
    summary = build_summary(
        RunStore(),
        run_id=run_id,
        script=script,
        argv=argv,
        started=started,
        duration_s=duration_s,
        exit="killed",
        device=device,
        torch_version=None,
    )
    finding = killed_finding(steps, median_ms, last_primary)
    summary["primary"] = {k: finding[k] for k in ("kind", "severity", "summary", "action")}
    summary["findings"] = [finding]
    summary["step_time"] |= {"steps": steps or 0, "median_ms": median_ms, "diagnosis": "KILLED"}
    summary["step_memory"]["diagnosis"] = "KILLED"
    return summary

"""The job collector process: `python -m traceml.collect.collectord`, started by global rank 0.

Collecting a big job costs CPU: decoding and folding every rank's records (about 15 µs each)
and, across nodes, relaying them. Done in rank 0's tx thread that work would share rank 0's GIL
with its training loop, and a slow rank 0 slows every rank. So rank 0 starts this process on its
node, in a session of its own (a Ctrl-C or a process-group kill aimed at the job does not cut
the summary short), and feeds it like every other rank.

Protocol with rank 0, over the process's stdin and stdout, one JSON line each way:
- stdin: the config (run id, endpoint, CURVE, world size, runtime dir, summary path, settings);
- stdout: `{"ready": "<CollectorAddress>"}` once bound (or `{"error": "..."}`, exit 2), and
  at the end `{"summary": "<path>" | null, "trouble": "<line>" | null}`.

It ends when rank 0's end arrives (then it waits up to SETTLE_S for the other ranks' ends), or
when rank 0's process is gone (killed: its row says dead, the run's exit says "signal"); either
way it writes the job's final_summary.json from what it collected, then exits. It never imports
torch.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from traceml.config import Settings
from traceml.errors import TransportError
from traceml.records import RankEnd, RankInfo

TICK_S = 0.02
PROGRESS_EVERY_S = 5.0
SETTLE_S = 1.0
"""After rank 0's end, the other ranks' ends are waited for this long (rank 0's shutdown as a
whole has 2 s)."""


@dataclass(frozen=True)
class Config:
    """What rank 0 tells the collector process at start."""

    run_id: str
    endpoint: str
    curve: bool
    world_size: int
    relay: bool
    parent_pid: int
    summary_path: str
    runtime_dir: str | None
    listen: str = "ipc"
    insecure: bool = False
    history_steps: int = 4096
    progress: bool = False
    """Print the job's progress line on stderr every PROGRESS_EVERY_S (`traceml run --no-live`)."""

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, line: str) -> Config:
        return cls(**json.loads(line))

    def settings(self) -> Settings:
        return Settings(
            summary_path=Path(self.summary_path),
            runtime_dir=Path(self.runtime_dir) if self.runtime_dir else None,
            listen="tcp" if self.listen == "tcp" else "ipc",
            insecure=self.insecure,
            history_steps=self.history_steps,
        )


def _say(out: TextIO, message: dict[str, Any]) -> None:
    """One line to rank 0; it may be gone (killed): then nobody is listening."""
    try:
        out.write(json.dumps(message) + "\n")
        out.flush()
    except (OSError, ValueError):
        pass


def serve(config: Config, out: TextIO) -> int:
    from traceml.analysis.store import RunStore
    from traceml.collect.jobcollector import JobCollector

    settings = config.settings()
    store = RunStore()
    job = JobCollector(
        config.run_id,
        config.endpoint,
        curve=config.curve,
        world_size=config.world_size,
        settings=settings,
        store=store,
        relay=config.relay,
    )
    try:
        address = job.open()
    except TransportError as e:
        _say(out, {"error": str(e)})
        return 2
    _say(out, {"ready": address.encode()})
    next_progress = time.monotonic() + PROGRESS_EVERY_S
    try:
        while not job.ended(0) and _alive(config.parent_pid):
            job.tick(time.time())
            if config.progress and time.monotonic() >= next_progress:
                next_progress += PROGRESS_EVERY_S
                _progress(store)
            time.sleep(TICK_S)
        job.settle(range(config.world_size), SETTLE_S if job.ended(0) else 2 * SETTLE_S)
        path, trouble = write_job_summary(settings, config.run_id, store, job.end(0))
        _say(out, {"summary": None if path is None else str(path), "trouble": trouble})
    finally:
        job.close()
    return 0


def _progress(store: Any) -> None:
    from traceml.analysis.render import render_progress

    view = store.live_view()
    if view.steps:
        try:
            print(render_progress(view), file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass


def _alive(pid: int) -> bool:
    """Rank 0 is still our parent (a dead parent's children are re-parented)."""
    return os.getppid() == pid


def write_job_summary(
    settings: Settings, run_id: str, store: Any, end: RankEnd | None
) -> tuple[Path | None, str | None]:
    """Build the job's summary from the collected store and write it (with the fallbacks of
    instrument.finish). Rank 0's info and end describe the run; a rank 0 that never said its
    end was killed (SIGKILL: nothing else ends a rank without its end), and the run's exit says
    "killed"."""
    from traceml.analysis.summary import build_summary
    from traceml.collect.finish import write_somewhere

    info = store.info(0) or RankInfo(run_id, 0)
    t_end = end.t if end is not None else time.time()
    summary = build_summary(
        store,
        run_id=run_id,
        script=info.script,
        argv=list(info.argv),
        started=info.started,
        duration_s=max(0.0, t_end - info.started) if info.started else 0.0,
        exit=end.exit if end is not None else "killed",
        device=info.device,
        torch_version=info.torch_version,
    )
    return write_somewhere(settings, run_id, summary)


def main() -> int:
    line = sys.stdin.readline()
    try:
        config = Config.from_json(line)
    except (ValueError, TypeError) as e:
        _say(sys.stdout, {"error": f"bad collector config: {e}"})
        return 2
    return serve(config, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())

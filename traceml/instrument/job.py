"""The whole job, for multi-rank runs: every rank feeds one collector, which writes the summary.

Global rank 0 starts the job collector as a process of its own on its node
(transport/collectord.py: it binds ipc on one node, TCP with CURVE on the training interface when
the job spans nodes) and announces it in the job's own c10d TCPStore (MASTER_ADDR:MASTER_PORT).
Every rank, rank 0 included, looks the address up and pushes its records through a
CollectorFeed in 250 ms batches. At the end rank 0 sends its end and waits briefly for the
collector's word that the job's final_summary.json is written.

If the process cannot start (or TRACEML_COLLECTOR=thread asks for it), rank 0 collects in its
own tx thread instead (a JobCollector folding into rank 0's store, the summary then built by
rank 0 as for one process): the job's summary is never lost to a failed spawn, it only costs
rank 0 more. All of this is a Sink of the tx thread;
the calls that can wait (store lookups, the process start) run in a short-lived helper thread.
Nothing here can block or fail the training thread.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from collections import deque
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

from traceml.collect.collectord import Config
from traceml.collect.jobcollector import JobCollector, collector_endpoint
from traceml.config import Settings
from traceml.errors import TransportError
from traceml.probe import warn_once
from traceml.records import RankEnd, RankInfo, StepRecord, SystemSample
from traceml.transport.publish.feed import CollectorFeed
from traceml.transport.wire.address import CollectorAddress

STORE_TIMEOUT_S = 10.0
LOOKUP_EVERY_S = 0.5
HEARTBEAT_S = 1.0
SETTLE_S = 1.0
"""At the end, the other ranks' last records and ends are waited for at most this long (a rank
on this host whose process is gone is not waited for). Shutdown as a whole has 2 s."""
ANSWER_S = SETTLE_S + 0.6
"""Rank 0 waits this long for the collector process to say the job's summary is written."""
START_S = 10.0
"""The collector process must be bound and say so within this (it imports no torch: ~0.3 s)."""
PENDING_MAX = 20_000
"""Records a rank keeps for the collector (while it is not found yet, and between flushes);
older ones are dropped."""
FLUSH_S = 0.25
"""Records go to the collector in batches this far apart: it decodes frames, not records."""


def store_key(incarnation: int) -> str:
    """One collector per job incarnation: the c10d store is the job's own, so no run id is
    needed (ranks on other nodes may even have derived another one), and a torchelastic
    restart announces a fresh collector under a fresh key."""
    return f"traceml/collector/{incarnation}"


def is_multi_node(env: dict[str, str] | os._Environ[str]) -> bool:
    try:
        return int(env.get("WORLD_SIZE", "1")) > int(env.get("LOCAL_WORLD_SIZE", "0") or 0) > 0
    except ValueError:
        return False


class StoreCall(threading.Thread):
    """One slow operation off the tx thread; `result` is set when it finished."""

    def __init__(self, fn: Any) -> None:
        super().__init__(name="traceml-store", daemon=True)
        self._fn = fn
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self._fn()
        except Exception as e:  # noqa: BLE001 - reported by the caller, once
            self.error = e


def _client() -> Any:
    import torch.distributed as dist

    return dist.TCPStore(  # type: ignore[attr-defined]
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=False,
        timeout=timedelta(seconds=STORE_TIMEOUT_S),
        wait_for_workers=False,
    )


def _announce(incarnation: int, address: CollectorAddress) -> CollectorAddress:
    _client().set(store_key(incarnation), address.encode())
    return address


def _lookup(incarnation: int) -> CollectorAddress | None:
    store = _client()
    key = store_key(incarnation)
    deadline = time.monotonic() + STORE_TIMEOUT_S
    while time.monotonic() < deadline:
        if store.check([key]):
            return CollectorAddress.decode(store.get(key).decode())
        time.sleep(LOOKUP_EVERY_S)
    return None


def _read_line(stream: IO[bytes], timeout_s: float) -> dict[str, Any] | None:
    """One JSON line from the collector process, or None if none came in time."""
    deadline = time.monotonic() + timeout_s
    buf = b""
    fd = stream.fileno()
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        buf += chunk
    try:
        message = json.loads(buf.split(b"\n", 1)[0])
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """Wait for the collector to exit, then close its pipe."""
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


class CollectorProcess:
    """Rank 0's handle on the collector process."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> CollectorAddress:
        """Spawn, send the config, wait for "ready". Raises TransportError (process killed)."""
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "traceml.collect.collectord"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write((self.config.to_json() + "\n").encode())
        self.proc.stdin.close()
        message = _read_line(self.proc.stdout, START_S)
        if message is None or "ready" not in message:
            self.stop()
            why = "no answer" if message is None else message.get("error", "bad answer")
            raise TransportError(f"the job collector process did not start ({why})")
        return CollectorAddress.decode(str(message["ready"]))

    def summary(self, timeout_s: float) -> dict[str, Any] | None:
        """The process's last word: {"summary": path | None, "trouble": line | None}."""
        if self.proc is None or self.proc.stdout is None:
            return None
        message = _read_line(self.proc.stdout, timeout_s)
        return message if message is not None and "summary" in message else None

    def reap(self) -> None:
        """Collect the exit status; a process still writing finishes on its own and is reaped
        by a daemon thread, so a rank that trains on after shutdown keeps no zombie."""
        proc = self.proc
        if proc is None:
            return
        try:
            proc.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            threading.Thread(target=_reap, args=(proc,), name="traceml-reap", daemon=True).start()
            return
        _reap(proc)  # exited: returns at once

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class JobLink:
    """A Sink of the tx thread that joins this rank to the job's collector."""

    def __init__(
        self, info: RankInfo, settings: Settings, store: Any, run_dir: Path | None
    ) -> None:
        self.info = info
        self._settings = settings
        self._store = store
        self._run_dir = run_dir
        self._job: JobCollector | None = None
        """Set when rank 0 collects in its own thread (the process could not start)."""
        self._process: CollectorProcess | None = None
        self._feed: CollectorFeed | None = None
        self._call: StoreCall | None = None
        self._pending: deque[StepRecord] = deque(maxlen=PENDING_MAX)
        self._last_hb = 0.0
        self._last_flush = 0.0
        self._gave_up = False
        self._end_sent = False
        self.job_summary: Path | None = None
        """Rank 0: where the collector process wrote the job's summary (then rank 0 writes
        none of its own); None otherwise."""

    @property
    def is_collector(self) -> bool:
        return self.info.rank == 0

    @property
    def progress_elsewhere(self) -> bool:
        """The collector process prints the job's progress lines (it has every rank)."""
        return self._process is not None and self._settings.progress

    @property
    def inline(self) -> bool:
        """Whether the beats may run on the training thread: not while this process collects
        the job itself (the collector process could not start), whose service decodes and folds
        every rank's records: that stays on the tx thread, as the collector's docstring says."""
        return self._job is None

    # -- Sink --------------------------------------------------------------------------------
    def open(self) -> None:
        if self.is_collector and os.environ.get("TRACEML_COLLECTOR") == "thread":
            self._gave_up = True
            self._collect_here(None)
        elif self.is_collector:
            self._call = StoreCall(self._start_process)
            self._call.start()
        else:
            self._start_lookup()

    def send_steps(self, records: list[StepRecord]) -> None:
        if self._job is None:
            self._pending.extend(records)

    def send_system(self, sample: SystemSample) -> None:
        if self._feed is not None:
            self._feed.send_system(sample)

    def send_info(self, info: RankInfo) -> None:
        if self._feed is not None:
            self._feed.send_info(info)

    def service(
        self, now: float, *, last_step: int, dropped: int, primary: str | None, phase: str | None
    ) -> None:
        if self._job is not None:
            self._job.tick(now)
            return
        if self._feed is None:
            self._try_connect()
            return
        if now - self._last_flush >= FLUSH_S:
            self._flush(now)
        if now - self._last_hb >= HEARTBEAT_S:
            self._last_hb = now
            body = {"last_step": last_step, "dropped": dropped, "primary": primary, "phase": phase}
            self._feed.heartbeat(body | {"pid": os.getpid()})

    def _flush(self, now: float) -> None:
        """Push what accumulated as a few big frames: the collector's cost is per frame."""
        self._last_flush = now
        if self._feed is not None and self._pending:
            self._feed.send_steps(list(self._pending))
            self._pending.clear()

    def settle(self, end: RankEnd | None = None) -> None:
        """Rank 0, before its summary: the whole job's summary, one way or the other."""
        if self._job is not None:
            self._job.settle(range(1, self.info.world_size), SETTLE_S)
            return
        if not self.is_collector or self._process is None or self._feed is None or end is None:
            return
        self._flush(time.time())
        self._feed.send_end(end)
        self._end_sent = True
        answer = self._process.summary(ANSWER_S)
        path = answer.get("summary") if answer is not None else None
        if answer is None or not isinstance(path, str):
            why = "did not answer" if answer is None else answer.get("trouble")
            warn_once(
                "job summary",
                f"the job collector {why}: the summary has rank 0's records only",
            )
            return
        self.job_summary = Path(path)
        self._announce_summary(self.job_summary, answer.get("trouble"))

    def _announce_summary(self, path: Path, trouble: Any) -> None:
        from traceml.collect.finish import announce

        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            warn_once("job summary", f"cannot read the job's summary back ({e})")
            return
        announce(summary, path, trouble if isinstance(trouble, str) else None)

    def close(self, end: RankEnd, summary_path: Any) -> None:
        if self._feed is not None:
            self._flush(time.time())
            if not self._end_sent:
                self._feed.send_end(end)
            self._feed.close()
            self._feed = None
        if self._job is not None:
            self._job.close()
            self._job = None
        if self._process is not None:
            self._process.reap()

    # -- rank 0 --------------------------------------------------------------------------------
    def _config(self) -> Config:
        from traceml.collect.finish import summary_path_for
        from traceml.transport.runfiles.rundir import RunDir, resolve_runtime_dir

        multi = is_multi_node(os.environ)
        master = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])) if multi else None
        s = self._settings
        runtime_dir = resolve_runtime_dir(s.runtime_dir)
        run_dir = RunDir(runtime_dir, self.info.run_id).create().path
        return Config(
            run_id=self.info.run_id,
            endpoint=collector_endpoint(multi, run_dir, master),
            curve=multi and not s.insecure,
            world_size=self.info.world_size,
            relay=multi,
            parent_pid=os.getpid(),
            summary_path=str(summary_path_for(s, self.info.run_id).absolute()),
            runtime_dir=str(runtime_dir),
            listen=s.listen,
            insecure=s.insecure,
            history_steps=s.history_steps,
            progress=s.progress,
        )

    def _start_process(self) -> tuple[CollectorProcess, CollectorAddress]:
        process = CollectorProcess(self._config())
        address = process.start()
        try:
            return process, _announce(self.info.incarnation, address)
        except BaseException:
            process.stop()
            raise

    def _collect_here(self, why: BaseException | None) -> None:
        """Collect in this thread (rank 0 then pays for it): the process could not start
        (`why`), or TRACEML_COLLECTOR=thread asked for it."""
        if why is not None:
            warn_once(
                "job collector process",
                f"{why}; collecting the other ranks in rank 0's own thread instead",
            )
        try:
            self._job = self._open_here()
        except (TransportError, OSError) as e:
            warn_once("job collector", f"no job collector ({e}): the summary has rank 0 only")

    def _open_here(self) -> JobCollector:
        config = self._config()
        job = JobCollector(
            config.run_id,
            config.endpoint,
            curve=config.curve,
            world_size=config.world_size,
            settings=self._settings,
            store=self._store,
            relay=config.relay,
        )
        address = job.open()
        self._pending.clear()
        self._call = StoreCall(lambda: _announce(self.info.incarnation, address))
        self._call.start()
        return job

    # -- every rank ----------------------------------------------------------------------------
    def _start_lookup(self) -> None:
        if not os.environ.get("MASTER_ADDR") or not os.environ.get("MASTER_PORT"):
            self._gave_up = True
            return
        self._call = StoreCall(lambda: _lookup(self.info.incarnation))
        self._call.start()

    def _try_connect(self) -> None:
        call = self._call
        if self._gave_up or call is None or call.is_alive():
            return
        self._call = None
        address: CollectorAddress | None
        if self.is_collector:
            if call.error is not None:
                self._gave_up = True  # one try: a second failure would only repeat the warning
                self._collect_here(call.error)
                return
            self._process, address = call.result
        else:
            address = call.result
            if call.error is not None or address is None:
                warn_once(
                    "job collector",
                    "rank 0's collector was not found: the job summary will "
                    f"lack rank {self.info.rank} ({call.error or 'not announced in time'})",
                )
                self._gave_up = True
                return
        feed = CollectorFeed(address, self.info)
        feed.open()
        feed.hello()
        self._feed = feed
        self._flush(time.time())

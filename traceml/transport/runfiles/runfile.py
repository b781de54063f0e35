"""run.json and rank-<N>.json: what a run tells `traceml ls` and viewers about itself.

Files are written atomically (temp file + rename, 0600, O_EXCL|O_NOFOLLOW) and read without ever
following a symlink, blocking on a FIFO, or reading more than MAX_FILE_BYTES. A file that is not
what it should be raises TransportError or SchemaError, never anything else.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceml.errors import SchemaError, TransportError
from traceml.records import RankEnd, RankInfo

RUN_SCHEMA = "traceml.run/1"
RANK_SCHEMA = "traceml.rank/1"
MAX_FILE_BYTES = 256 * 1024


def write_json_atomic(path: Path, obj: Mapping[str, Any]) -> None:
    """Replace `path` with `obj` as JSON in one rename; readers see the old or the new file.

    Raises:
        TransportError: the file cannot be written.
    """
    try:
        data = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as e:
        raise TransportError(f"cannot write {path}: {e}") from e
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        fd = os.open(tmp, flags, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        raise TransportError(f"cannot write {path}: {e.strerror}") from e


def read_json(path: Path, max_bytes: int = MAX_FILE_BYTES) -> dict[str, Any]:
    """Read a JSON object from a regular file of ours, never following a symlink.

    Raises:
        FileNotFoundError: the file does not exist.
        TransportError: a symlink, not a regular file, not ours, too big, or unreadable.
        SchemaError: not a JSON object.
    """
    data = _read_bytes(path, max_bytes)
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise SchemaError(f"{path.name} is not valid JSON ({type(e).__name__})") from e
    if not isinstance(obj, dict):
        raise SchemaError(f"{path.name} does not hold a JSON object")
    return obj


def _read_bytes(path: Path, max_bytes: int) -> bytes:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as e:
        why = "is a symlink" if e.errno == errno.ELOOP else f"cannot be read ({e.strerror})"
        raise TransportError(f"{path.name} {why}") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TransportError(f"{path.name} is not a regular file")
        if st.st_uid != os.getuid():
            raise TransportError(f"{path.name} belongs to uid {st.st_uid}, not to you")
        if st.st_size > max_bytes:
            raise TransportError(f"{path.name} is {st.st_size} bytes, over {max_bytes}")
        return os.read(fd, max_bytes + 1)
    except OSError as e:
        raise TransportError(f"{path.name} cannot be read ({e.strerror})") from e
    finally:
        os.close(fd)


def _get(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = obj.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise SchemaError(f"field {key!r} is missing or not {getattr(kind, '__name__', kind)}")
    return value


def _opt(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    return None if obj.get(key) is None else _get(obj, key, kind)


def _check_schema(obj: Mapping[str, Any], schema: str) -> None:
    if obj.get("schema") != schema:
        raise SchemaError(
            f"schema {obj.get('schema')!r}, this TraceML reads {schema}:"
            " use the same TraceML version for the run and the viewer"
        )


def _end_from(obj: Mapping[str, Any]) -> RankEnd | None:
    raw = obj.get("end")
    return None if raw is None else RankEnd.from_wire(raw)


@dataclass(frozen=True, slots=True)
class RankFile:
    """rank-<N>.json: who the rank is, where its sockets are, and how far it has got."""

    info: RankInfo
    pid_start: float | None
    """psutil create_time of the rank's process, to tell a reused pid from a live one."""
    endpoints: Mapping[str, str]
    """{"pub": XPUB endpoint, "ctl": ROUTER endpoint}."""
    curve_key: str | None = None
    """Z85 CURVE public key of the rank's sockets; None when they are not encrypted (ipc)."""
    updated: float = 0.0
    """Epoch seconds of the last write; the rank's beats rewrite the file every few seconds."""
    last_step: int | None = None
    """Highest step index the rank has reached; None before its first step."""
    last_step_ms: float | None = None
    median_step_ms: float | None = None
    """Median of the rank's recent step times, for the stalled rule; None before any step."""
    last_step_t: float | None = None
    """Epoch seconds at which the last step record was published."""
    primary: str | None = None
    """Kind of the rank's current primary finding, e.g. INPUT_BOUND; None before any."""
    phase: str | None = None
    """The phase the rank's training thread was in at the last write (`between` outside a
    step); where a stalled rank is stuck. None when not known (older TraceML)."""
    dropped: int = 0
    """Records the rank lost for every viewer (as HeartbeatEvent.dropped)."""
    end: RankEnd | None = None
    """Set when the rank shut TraceML down; None while it runs."""
    summary_path: str | None = None
    relayed_by: int | None = None
    """Pid of the process on this node that serves the rank for it (the job collector relaying
    a rank of another node); None when the rank serves itself."""
    path: Path | None = field(default=None, compare=False)
    """Where the file was read from; not stored."""

    @property
    def rank(self) -> int:
        return self.info.rank

    @property
    def pid(self) -> int:
        return self.info.pid

    @property
    def serving_pid(self) -> int:
        """The process whose sockets the file names (and whose start time `pid_start` is)."""
        return self.relayed_by if self.relayed_by is not None else self.info.pid

    @property
    def host(self) -> str:
        return self.info.host

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": RANK_SCHEMA,
            "info": self.info.to_wire(),
            "pid_start": self.pid_start,
            "endpoints": dict(self.endpoints),
            "curve_key": self.curve_key,
            "updated": self.updated,
            "last_step": self.last_step,
            "last_step_ms": self.last_step_ms,
            "median_step_ms": self.median_step_ms,
            "last_step_t": self.last_step_t,
            "primary": self.primary,
            "phase": self.phase,
            "dropped": self.dropped,
            "end": None if self.end is None else self.end.to_wire(),
            "summary_path": self.summary_path,
            "relayed_by": self.relayed_by,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], path: Path | None = None) -> RankFile:
        """Parse a rank file; SchemaError on anything unexpected."""
        _check_schema(obj, RANK_SCHEMA)
        endpoints = _get(obj, "endpoints", dict)
        if not all(isinstance(endpoints.get(k), str) for k in ("pub", "ctl")):
            raise SchemaError("field 'endpoints' must give the 'pub' and 'ctl' addresses")
        return cls(
            info=RankInfo.from_wire(obj.get("info")),
            pid_start=_opt(obj, "pid_start", (int, float)),
            endpoints={str(k): v for k, v in endpoints.items()},
            curve_key=_opt(obj, "curve_key", str),
            updated=float(_get(obj, "updated", (int, float))),
            last_step=_opt(obj, "last_step", int),
            last_step_ms=_opt(obj, "last_step_ms", (int, float)),
            median_step_ms=_opt(obj, "median_step_ms", (int, float)),
            last_step_t=_opt(obj, "last_step_t", (int, float)),
            primary=_opt(obj, "primary", str),
            phase=_opt(obj, "phase", str),
            dropped=int(_opt(obj, "dropped", int) or 0),
            end=_end_from(obj),
            summary_path=_opt(obj, "summary_path", str),
            relayed_by=_opt(obj, "relayed_by", int),
            path=path,
        )


@dataclass(frozen=True, slots=True)
class RunFile:
    """run.json, written by local rank 0: the run as a whole, and where its summary went."""

    run_id: str
    script: str
    argv: tuple[str, ...]
    host: str
    pid: int
    pid_start: float | None
    started: float
    world_size: int
    updated: float = 0.0
    """Epoch seconds of the last change: the file is rewritten only when its content changes
    (at start and at the end); each rank file's own `updated` says whether the run is alive."""
    summary_path: str | None = None
    """Absolute path of final_summary.json once the run has ended; None before."""
    end: RankEnd | None = None
    """Local rank 0's end, set when it shut TraceML down."""

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": RUN_SCHEMA,
            "run_id": self.run_id,
            "script": self.script,
            "argv": list(self.argv),
            "host": self.host,
            "pid": self.pid,
            "pid_start": self.pid_start,
            "started": self.started,
            "world_size": self.world_size,
            "updated": self.updated,
            "summary_path": self.summary_path,
            "end": None if self.end is None else self.end.to_wire(),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> RunFile:
        """Parse run.json; SchemaError on anything unexpected."""
        _check_schema(obj, RUN_SCHEMA)
        argv = _get(obj, "argv", list)
        return cls(
            run_id=_get(obj, "run_id", str),
            script=_get(obj, "script", str),
            argv=tuple(str(a) for a in argv),
            host=_get(obj, "host", str),
            pid=_get(obj, "pid", int),
            pid_start=_opt(obj, "pid_start", (int, float)),
            started=float(_get(obj, "started", (int, float))),
            world_size=_get(obj, "world_size", int),
            updated=float(_get(obj, "updated", (int, float))),
            summary_path=_opt(obj, "summary_path", str),
            end=_end_from(obj),
        )


def read_rank_file(path: Path) -> RankFile:
    """Read and parse a rank file (FileNotFoundError, TransportError or SchemaError)."""
    return RankFile.from_json(read_json(path), path)


def read_run_file(path: Path) -> RunFile:
    """Read and parse run.json (FileNotFoundError, TransportError or SchemaError)."""
    return RunFile.from_json(read_json(path))

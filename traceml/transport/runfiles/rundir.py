"""The private runtime directory and one run's directory inside it, verified before any use.

Never follows a symlink for a directory or file of ours, never uses a directory that another user
owns or that others can enter, and never touches files that are not ours.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from traceml.errors import TransportError
from traceml.transport.runfiles.runid import is_valid_run_id

RUNTIME_ENV = "TRACEML_RUNTIME_DIR"
MAX_IPC_PATH = 107
"""Longest ipc socket path in bytes (sun_path is 108 with its NUL); longer ones fall back to tcp."""


def default_runtime_dir(env: Mapping[str, str] | None = None) -> Path:
    """`$TRACEML_RUNTIME_DIR`, else `/tmp/traceml-<uid>` (never XDG_RUNTIME_DIR, never NFS)."""
    env = os.environ if env is None else env
    raw = env.get(RUNTIME_ENV)
    return Path(raw) if raw else Path(f"/tmp/traceml-{os.getuid()}")


def resolve_runtime_dir(explicit: Path | None = None) -> Path:
    """`explicit` if given, else the default runtime dir."""
    return explicit if explicit is not None else default_runtime_dir()


def verify_private_dir(path: Path) -> None:
    """Raise TransportError unless `path` is a real directory, ours, with mode 0700 or stricter.

    Raises:
        FileNotFoundError: `path` does not exist (the caller decides whether to create it).
        TransportError: a symlink, not a directory, another user's, or open to others.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise TransportError(f"cannot inspect {path}: {e.strerror}") from e
    if stat.S_ISLNK(st.st_mode):
        raise TransportError(f"{path} is a symlink; TraceML never follows one: remove it")
    if not stat.S_ISDIR(st.st_mode):
        raise TransportError(f"{path} is not a directory: remove it or set {RUNTIME_ENV}")
    if st.st_uid != os.getuid():
        raise TransportError(
            f"{path} belongs to uid {st.st_uid}, not to you: set {RUNTIME_ENV} to a dir of yours"
        )
    if st.st_mode & 0o077:
        mode = oct(stat.S_IMODE(st.st_mode))
        raise TransportError(f"{path} has mode {mode}; TraceML needs 0700: chmod 700 {path}")


def ensure_private_dir(path: Path) -> Path:
    """Create `path` with mode 0700 if missing, then verify it (TransportError if unusable)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise TransportError(f"cannot create {path}: {e.strerror}") from e
    verify_private_dir(path)
    return path


@dataclass(frozen=True, slots=True)
class RunDir:
    """Paths of one run's files: `<runtime dir>/<run id>/`."""

    root: Path
    """The runtime dir that holds every run of this user."""
    run_id: str

    def __post_init__(self) -> None:
        if not is_valid_run_id(self.run_id):
            raise TransportError(
                f"run id {self.run_id!r} cannot name a directory:"
                " use letters, digits, '.', '_' and '-'"
            )

    @property
    def path(self) -> Path:
        return self.root / self.run_id

    @property
    def run_json(self) -> Path:
        return self.path / "run.json"

    @property
    def log_path(self) -> Path:
        """Where `traceml run` tees the script's output."""
        return self.path / "output.log"

    @property
    def summary_link(self) -> Path:
        return self.path / "final_summary.json"

    def rank_json(self, rank: int) -> Path:
        return self.path / f"rank-{rank}.json"

    def lock_path(self, rank: int) -> Path:
        return self.path / f"rank-{rank}.lock"

    def socket_path(self, rank: int, name: str) -> Path:
        return self.path / f"rank-{rank}.{name}.sock"

    def ipc_endpoint(self, rank: int, name: str) -> str | None:
        """`ipc://` endpoint for a socket of `rank`, None when its path would pass 107 bytes."""
        path = self.socket_path(rank, name)
        if len(os.fsencode(path)) > MAX_IPC_PATH:
            return None
        return f"ipc://{path}"

    def create(self) -> RunDir:
        """Create (or verify) the runtime dir and this run's dir, both 0700 and ours."""
        ensure_private_dir(self.root)
        ensure_private_dir(self.path)
        return self

    def link_summary(self, target: Path) -> None:
        """Point `<run dir>/final_summary.json` at `target`, replacing an older link atomically."""
        tmp = self.path / f".final_summary.{os.getpid()}.tmp"
        try:
            if os.path.lexists(tmp):
                os.unlink(tmp)
            os.symlink(os.path.abspath(target), tmp)
            os.replace(tmp, self.summary_link)
        except OSError as e:
            raise TransportError(f"cannot link the summary into {self.path}: {e.strerror}") from e

    def remove_sockets(self, rank: int) -> None:
        """Remove this rank's ipc socket files; files already gone are fine."""
        for name in ("pub", "ctl"):
            try:
                os.unlink(self.socket_path(rank, name))
            except FileNotFoundError:
                pass
            except OSError:
                continue

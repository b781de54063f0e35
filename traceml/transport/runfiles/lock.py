"""An exclusive lock per run rank, so a live run's sockets are never bound over.

libzmq silently unlinks and rebinds an existing ipc path, so the lock, not the socket, says who
owns a rank. The kernel drops the lock when its process dies, even under kill -9.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from traceml.errors import TransportError


class RankLock:
    """A held `flock` on `<run dir>/rank-<N>.lock`; `release()` is idempotent."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def acquire(cls, path: Path) -> RankLock:
        """Take the lock without waiting.

        Raises:
            TransportError: another live process holds it, or the file cannot be opened.
        """
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as e:
            raise TransportError(f"cannot open lock {path}: {e.strerror}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise TransportError(f"{path.stem} is held by a live process") from e
            raise TransportError(f"cannot lock {path}: {e.strerror}") from e
        return cls(fd, path)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

"""Probes that can fail (psutil, NVML, torch memory stats) go through here: a default, no raise.

Each distinct failure is logged once, as one warning, and then the probe answers its default.
Once shutdown begins, warnings bypass `logging` and go straight to fd 2: a SIGTERM handler may
run shutdown while the thread it interrupted holds a logging handler's lock.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
log = logging.getLogger("traceml")
_warned: set[str] = set()
_direct = False


def warn_directly(on: bool) -> None:
    """Route warnings to fd 2 with os.write (on, at shutdown) or through `logging` (off)."""
    global _direct
    _direct = on


def write_stderr(text: str) -> None:
    """`text` and a newline on fd 2 with os.write, taking no Python lock (neither logging's nor
    sys.stderr's, either of which a thread interrupted by a signal may hold). Never raises."""
    data = (text + "\n").encode("utf-8", "backslashreplace")
    try:
        while data:
            data = data[os.write(2, data) :]
    except OSError:
        return


def warn_once(key: str, message: str) -> None:
    """Log `message` as a warning the first time `key` is seen in this process."""
    if key in _warned:
        return
    _warned.add(key)
    if _direct:
        write_stderr(f"traceml: {message}")
    else:
        log.warning("traceml: %s", message)


def probe(key: str, fn: Callable[[], T], default: T) -> T:
    """Call `fn`; on any exception, warn once under `key` and return `default`."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - a probe must never raise into training
        warn_once(key, f"{key} unavailable ({type(e).__name__}: {e}); continuing without it")
        return default

"""Probes that can fail (psutil, NVML, torch memory stats) go through here: a default, no raise.

Each distinct failure is logged once, as one warning, and then the probe answers its default.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
log = logging.getLogger("traceml")
_warned: set[str] = set()


def warn_once(key: str, message: str) -> None:
    """Log `message` as a warning the first time `key` is seen in this process."""
    if key in _warned:
        return
    _warned.add(key)
    log.warning("traceml: %s", message)


def probe(key: str, fn: Callable[[], T], default: T) -> T:
    """Call `fn`; on any exception, warn once under `key` and return `default`."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - a probe must never raise into training
        warn_once(key, f"{key} unavailable ({type(e).__name__}: {e}); continuing without it")
        return default

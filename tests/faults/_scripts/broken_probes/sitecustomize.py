"""Loaded at interpreter start when this folder is on PYTHONPATH: psutil and NVML break.

`psutil.Process`, `psutil.cpu_percent`, `psutil.virtual_memory` and `pynvml.nvmlInit` raise the
exception named by TRACEML_FAULT_RAISE: `AccessDenied` (what a locked-down /proc gives) or
`RuntimeError` (anything at all). With "procfs", opening /proc/stat or /proc/meminfo (which the
system sample reads itself on Linux) fails with EACCES. TRACEML_FAULT_BREAK picks what breaks
(default "psutil,nvml"). Every process of the job gets it, the launcher included.
"""

from __future__ import annotations

import errno
import os
from typing import Any, NoReturn

import psutil

_KIND = os.environ.get("TRACEML_FAULT_RAISE", "RuntimeError")
_BREAK = os.environ.get("TRACEML_FAULT_BREAK", "psutil,nvml").split(",")


def _raise(*_args: Any, **_kwargs: Any) -> NoReturn:
    if _KIND == "AccessDenied":
        raise psutil.AccessDenied(os.getpid(), "injected")
    raise RuntimeError("injected probe failure")


if "psutil" in _BREAK:
    psutil.Process = _raise
    psutil.cpu_percent = _raise
    psutil.virtual_memory = _raise

if "nvml" in _BREAK:
    try:
        import pynvml
    except ImportError:
        pass
    else:
        pynvml.nvmlInit = _raise

if "procfs" in _BREAK:
    _os_open = os.open

    def _open(path: Any, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path) in ("/proc/stat", "/proc/meminfo"):
            raise PermissionError(errno.EACCES, "injected", path)
        return _os_open(path, *args, **kwargs)

    os.open = _open

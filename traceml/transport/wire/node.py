"""Which node a process runs on, as the job collector tells its own node's ranks from others'."""

from __future__ import annotations

import os
import socket


def node_key(env: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """The host, and torchrun's node rank (GROUP_RANK): two agents on one host (a test, a
    laptop) are two nodes, as they are for torchrun."""
    return f"{socket.gethostname()}/{env.get('GROUP_RANK', '')}"

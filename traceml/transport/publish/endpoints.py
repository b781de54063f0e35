"""Where a rank's two sockets listen: ipc under the private run dir, or tcp on 127.0.0.1.

tcp is used when asked for (Settings.listen == "tcp") or when an ipc path would pass 107 bytes;
tcp is CURVE-encrypted unless Settings.insecure says otherwise. Binding errors become
TransportError.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import zmq

from traceml.config import Settings
from traceml.errors import TransportError
from traceml.transport.runfiles.rundir import RunDir

LOOPBACK = "127.0.0.1"
SOCKET_NAMES: tuple[str, str] = ("pub", "ctl")


@dataclass(frozen=True, slots=True)
class EndpointPlan:
    """What to bind for one rank, before binding (tcp ports are still 0)."""

    kind: Literal["ipc", "tcp"]
    pub: str
    ctl: str
    curve: bool
    """Encrypt with CURVE: tcp without Settings.insecure."""


def plan_endpoints(run_dir: RunDir, rank: int, settings: Settings) -> EndpointPlan:
    """ipc paths in the run dir when they fit and ipc is wanted, else tcp on the loopback."""
    if settings.listen == "ipc":
        pub = run_dir.ipc_endpoint(rank, "pub")
        ctl = run_dir.ipc_endpoint(rank, "ctl")
        if pub is not None and ctl is not None:
            return EndpointPlan("ipc", pub, ctl, curve=False)
    tcp = f"tcp://{LOOPBACK}:0"
    return EndpointPlan("tcp", tcp, tcp, curve=not settings.insecure)


def bind(sock: zmq.Socket[bytes], endpoint: str) -> str:
    """Bind `sock` and return the endpoint actually bound (the real port for tcp port 0)."""
    try:
        sock.bind(endpoint)
        bound = sock.getsockopt(zmq.LAST_ENDPOINT)
    except zmq.ZMQError as e:
        raise TransportError(f"cannot listen on {endpoint}: {e.strerror}") from e
    return bound.decode() if isinstance(bound, bytes) else str(bound)

"""Where a rank finds the job collector: an endpoint, its CURVE key and the job's run id.

Rank 0 announces it in the job's c10d store; every rank's push link reads it back. Plain text on
the store, parsed here with a clear error for anything else.
"""

from __future__ import annotations

from dataclasses import dataclass

from traceml.errors import TransportError


@dataclass(frozen=True, slots=True)
class CollectorAddress:
    """What ranks need to reach the collector: announced in the job's c10d store."""

    endpoint: str
    server_key: str | None
    """Z85 CURVE public key of the collector; None for ipc or an --insecure TCP run."""
    run_id: str
    """Rank 0's run id: ranks on other nodes may have derived another one, and adopt this."""

    def encode(self) -> str:
        return f"{self.endpoint} {self.server_key or '-'} {self.run_id}"

    @classmethod
    def decode(cls, text: str) -> CollectorAddress:
        parts = text.strip().split(" ")
        if len(parts) != 3 or not parts[0].startswith(("tcp://", "ipc://")):
            raise TransportError(f"collector address {text[:80]!r} is not an endpoint")
        endpoint, key, run_id = parts
        return cls(endpoint, None if key == "-" else key, run_id)

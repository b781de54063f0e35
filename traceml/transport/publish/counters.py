"""The counters of one publisher: plain integers, changed only in its beats (one at a time).

Any thread may read them (tests, benchmarks, logs); nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class PublisherStats:
    """What a publisher did and what it refused, since open()."""

    records: int = 0
    """Step records published (each once, whatever the number of viewers)."""
    dropped: int = 0
    """Step records some viewer missed because its queue was full, counted from the first
    refusal until a viewer re-syncs or leaves. That viewer re-fetches them from the history, so
    they are not lost; other viewers got them."""
    unpackable: int = 0
    """Step records that could not be packed (not plain numbers): lost for every viewer."""
    dropped_frames: int = 0
    """Other frames (heartbeats, samples, events) a full viewer queue refused."""
    subscriptions: int = 0
    """Subscribe messages received: one per viewer that attached."""
    rejected: int = 0
    """Inbound frames dropped as malformed, oversized, or of an unknown verb."""
    oversized: int = 0
    """Requests over the size limit (also counted in `rejected`)."""
    snapshots: int = 0
    """Snapshots (and pings) answered to the end."""
    abandoned: int = 0
    """Snapshots given up: the viewer went away or stalled."""
    busy: int = 0
    """Requests answered "busy" because MAX_JOBS snapshots were in progress (the viewer asks
    again soon)."""
    resets: int = 0
    """Times the XPUB was rebuilt because its peers held too many subscriptions (a flood)."""
    errors: int = 0
    """Unexpected failures swallowed to keep training going (each kind logged once)."""

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

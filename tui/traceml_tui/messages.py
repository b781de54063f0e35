"""App-wide messages: what the feed and the child watcher tell the screen (messages up).

Messages carry frozen values only; nothing here touches widgets, sockets or stores.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from traceml_tui.snapshot import Snapshot


@dataclass
class SnapshotReady(Message):
    """The feed built a new complete snapshot of the run."""

    snapshot: Snapshot

    def can_replace(self, message: Message) -> bool:
        # Safe only because every snapshot is complete: a newer one makes an older one useless.
        return isinstance(message, SnapshotReady)


@dataclass
class FeedFailed(Message):
    """The feed could not reach the run, or lost it for good."""

    reason: str


@dataclass
class ChildExited(Message):
    """The script started by `traceml run` exited with this status."""

    status: int

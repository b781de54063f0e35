"""The bounded history a rank keeps for attach snapshots: items keyed by a running sequence number.

Runs in the tx thread. Memory is O(capacity): the oldest items fall out, and a snapshot that asks
for them starts at the oldest one still held (the viewer sees the gap).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class History(Generic[T]):
    """A ring of the last `capacity` items; item i has seq `first_seq + i`."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"history capacity must be at least 1, got {capacity}")
        self._items: deque[T] = deque(maxlen=capacity)
        self._next = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def next_seq(self) -> int:
        """Seq the next appended item gets; also the number of items ever appended."""
        return self._next

    @property
    def first_seq(self) -> int:
        """Seq of the oldest item held (== next_seq when empty)."""
        return self._next - len(self._items)

    def append(self, item: T) -> int:
        """Keep `item`, dropping the oldest if full; return its seq."""
        self._items.append(item)
        self._next += 1
        return self._next - 1

    def extend(self, items: Sequence[T]) -> None:
        """`append` of each item (their seqs run on from `next_seq`)."""
        self._items.extend(items)
        self._next += len(items)

    def since(self, seq: int) -> tuple[int, list[T]]:
        """(seq of the first item returned, items from `seq` on, or from the oldest held)."""
        start = max(seq, self.first_seq)
        skip = start - self.first_seq
        if skip >= len(self._items):
            return self._next, []
        if skip == 0:
            return start, list(self._items)
        items = list(self._items)
        return start, items[skip:]

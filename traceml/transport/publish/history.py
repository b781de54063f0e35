"""The bounded history a rank keeps for attach snapshots: items keyed by a running sequence number.

Runs in the rank's beats. Memory is O(capacity): the oldest items fall out, and a snapshot that asks
for them starts at the oldest one still held (the viewer sees the gap).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

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


MAX_UNPACKED = 8192
"""Records a RecordHistory keeps unpacked at most (about 5 MB of StepRecords, 1 MB packed): with
the default 4,096 of `history_steps` the cap is never reached, and a larger history is packed
this many records at a time while nobody listens."""


class RecordHistory(History[bytes]):
    """The history of a rank's packed step records, whose newest ones may wait unpacked.

    The rank keeps every step record for attach snapshots, packed. While no viewer listens,
    nothing reads them, and only the last `capacity` records can ever be asked for: most fall
    out unread. So the newest records may be kept as they came (`extend_unpacked`) and packed
    only when something reads them (`since`), when packed ones follow (`extend`), or once
    MAX_UNPACKED wait: the unpacked items are always the newest. `pack` returns the bytes of
    the records that pack, in order; a record that does not is left out (its packer counts
    it) and the seqs after it close up, as they would have had it been packed at once: no
    viewer has seen them, since nobody listened.

    Records kept unpacked were published to nobody. A viewer whose snapshot was taken before
    its subscription was read has not got those that came after the snapshot, so the
    publisher publishes those once someone listens (`take_unpublished`); what a snapshot
    carried is not published again. (Two viewers attaching at once, the first one's
    subscription read only after the second one's snapshot, would leave the first a hole:
    its next heartbeat makes it ask for a snapshot again.)
    """

    def __init__(self, capacity: int, pack: Callable[[list[Any]], list[bytes]]) -> None:
        super().__init__(capacity)
        self._pack = pack
        self._unpacked = 0
        self._unpublished = 0
        """How many of the newest items were kept while nobody listened (unpacked ones among
        them) since the last snapshot: publish them before any packed item added after them."""

    @property
    def unpacked(self) -> int:
        """How many of the newest items wait unpacked."""
        return min(self._unpacked, len(self._items))

    def extend_unpacked(self, records: Sequence[Any]) -> None:
        """Keep `records` (the newest, seqs running on from `next_seq`) unpacked for now."""
        self._items.extend(records)
        self._next += len(records)
        self._unpacked = min(self._unpacked + len(records), len(self._items))
        self._unpublished = min(self._unpublished + len(records), len(self._items))
        if self._unpacked > MAX_UNPACKED:
            self.pack_pending()

    @property
    def unpublished(self) -> int:
        """How many of the newest items were kept while nobody listened, since the last
        snapshot."""
        return min(self._unpublished, len(self._items))

    def take_unpublished(self) -> list[bytes]:
        """The items kept while nobody listened, packed, oldest first; from now on they count
        as published."""
        self.pack_pending()
        n = self.unpublished
        self._unpublished = 0
        if n == 0:
            return []
        return list(itertools.islice(self._items, len(self._items) - n, None))

    def pack_pending(self) -> None:
        """Pack the items that wait unpacked, in place."""
        n = self.unpacked
        self._unpacked = 0
        if n == 0:
            return
        records = list(map(deque.pop, itertools.repeat(self._items, n)))
        records.reverse()
        packed = self._pack(records)
        self._items.extend(packed)
        self._next -= n - len(packed)
        # The unpacked items are among the unpublished ones: those left out were too.
        self._unpublished = max(0, self._unpublished - (n - len(packed)))

    def extend(self, items: Sequence[bytes]) -> None:
        self.pack_pending()
        super().extend(items)

    def append(self, item: bytes) -> int:
        self.pack_pending()
        return super().append(item)

    def since(self, seq: int) -> tuple[int, list[bytes]]:
        """As History.since; a snapshot's viewer then has every item: none is unpublished."""
        self.pack_pending()
        self._unpublished = 0
        return super().since(seq)

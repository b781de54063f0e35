"""The bounded history: seqs keep counting while the oldest items fall out."""

from __future__ import annotations

import pytest

from traceml.transport.publish import history as history_module
from traceml.transport.publish.history import History, RecordHistory


def _filled(capacity: int, n: int) -> History[int]:
    history: History[int] = History(capacity)
    for i in range(n):
        assert history.append(i * 10) == i
    return history


@pytest.mark.parametrize(
    ("capacity", "n", "since", "expected"),
    [
        (5, 3, 0, (0, [0, 10, 20])),
        (5, 3, 2, (2, [20])),
        (5, 3, 3, (3, [])),
        (5, 3, 99, (3, [])),
        (3, 10, 0, (7, [70, 80, 90])),
        (3, 10, 8, (8, [80, 90])),
        (1, 0, 0, (0, [])),
    ],
)
def test_since(capacity: int, n: int, since: int, expected: tuple[int, list[int]]) -> None:
    assert _filled(capacity, n).since(since) == expected


def test_memory_stays_bounded() -> None:
    history = _filled(4, 1000)
    assert len(history) == 4
    assert (history.first_seq, history.next_seq) == (996, 1000)


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        History(0)


class _Packer:
    """Packs ints as b"p<n>", leaves out the ones in `refuse`, and notes every batch it got."""

    def __init__(self, refuse: frozenset[int] = frozenset()) -> None:
        self.refuse = refuse
        self.batches: list[list[int]] = []

    def __call__(self, records: list[int]) -> list[bytes]:
        self.batches.append(records)
        return [f"p{r}".encode() for r in records if r not in self.refuse]


def test_unpacked_records_are_packed_when_read_and_not_before() -> None:
    packer = _Packer()
    history = RecordHistory(8, packer)
    history.extend_unpacked([1, 2, 3])
    assert (history.unpacked, history.next_seq, packer.batches) == (3, 3, [])
    assert history.since(1) == (1, [b"p2", b"p3"])
    assert (history.unpacked, packer.batches) == (0, [[1, 2, 3]])
    assert history.since(0) == (0, [b"p1", b"p2", b"p3"])
    assert packer.batches == [[1, 2, 3]]


def test_packed_items_after_unpacked_ones_keep_their_order() -> None:
    history = RecordHistory(8, _Packer())
    history.extend([b"a"])
    history.extend_unpacked([1, 2])
    history.extend([b"b"])
    history.extend_unpacked([3])
    assert history.append(b"c") == 5
    assert history.since(0) == (0, [b"a", b"p1", b"p2", b"b", b"p3", b"c"])


def test_records_that_fell_out_unread_are_never_packed() -> None:
    packer = _Packer()
    history = RecordHistory(3, packer)
    history.extend_unpacked(list(range(10)))
    assert history.unpacked == 3
    assert history.since(0) == (7, [b"p7", b"p8", b"p9"])
    assert packer.batches == [[7, 8, 9]]


def test_a_record_that_does_not_pack_is_left_out_and_the_seqs_close_up() -> None:
    history = RecordHistory(8, _Packer(refuse=frozenset({2})))
    history.extend_unpacked([1, 2, 3])
    assert history.since(0) == (0, [b"p1", b"p3"])
    assert history.next_seq == 2
    assert history.append(b"x") == 2


def test_at_most_max_unpacked_records_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history_module, "MAX_UNPACKED", 4)
    packer = _Packer()
    history = RecordHistory(100, packer)
    history.extend_unpacked([1, 2, 3, 4])
    assert (history.unpacked, packer.batches) == (4, [])
    history.extend_unpacked([5])
    assert (history.unpacked, packer.batches) == (0, [[1, 2, 3, 4, 5]])


def test_the_records_kept_while_nobody_listened_are_taken_once_packed() -> None:
    packer = _Packer(refuse=frozenset({3}))
    history = RecordHistory(8, packer)
    history.extend([b"a"])
    history.extend_unpacked([1, 2, 3, 4])
    assert history.unpublished == 4
    assert history.take_unpublished() == [b"p1", b"p2", b"p4"]
    assert (history.unpublished, history.take_unpublished()) == (0, [])
    history.extend_unpacked([5, 6])
    assert history.since(0)[1][-2:] == [b"p5", b"p6"]
    assert history.unpublished == 0  # the snapshot's viewer has them: not published again
    history.extend_unpacked(list(range(10, 20)))
    assert history.unpublished == 8  # no more than the history holds
    assert history.take_unpublished() == [f"p{i}".encode() for i in range(12, 20)]
